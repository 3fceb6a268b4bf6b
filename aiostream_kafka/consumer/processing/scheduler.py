"""Which fetched record may start its handler next, and what may be committed (sans-IO).

:class:`ProcessScheduler` is the bookkeeping of ``consumer.process()``: the caller offers
fetched records, asks for the next one that may start, reports each handler's end, and
reads per partition the offset to commit and the completed offsets beyond it (for the
commit's metadata, :mod:`.offsets`). No asyncio here: the caller owns the tasks, the
fetching and the commits.

Ordering (what may run side by side):

* ``"key"``: the records of one key of a topic run one after another, in the order
  offered (offset order within a partition); different keys run in parallel, also within
  one partition. Records with a null key go by partition: one after another per partition.
* ``"partition"``: one record at a time per partition, in offset order.
* ``"none"``: any record, in offset order per partition as far as starts go.

Each of these is a *lane* (a key's, a partition's): a FIFO of records not started. Lanes
that may start a record wait in one FIFO of ready lanes, so picking the next record is
O(1) and the lanes take turns. Records of a revoked partition are dropped from their lanes
lazily (skipped when they reach a lane's head), so a revoke costs O(its partitions'
running records), not a scan of every lane.

Commits never skip a record: per partition, the committable offset is the lowest offered
offset whose handler has not finished. The finished ones above it are kept as a set
together with the count of its runs of consecutive offsets, updated in O(1) per record,
so that the size of their encoding is bounded cheaply: a record that is not its
partition's lowest unfinished one does not start while the runs that the partition's
running records and it could leave might not fit (:func:`.offsets.runs_that_fit`). The
lowest unfinished record always may start (finishing it never adds a run), so a partition
at the bound still makes progress.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Hashable, Iterable
from typing import Literal, Protocol

from aiostream_kafka.consumer.processing.offsets import MIN_RUNS_THAT_FIT, runs_that_fit
from aiostream_kafka.structs import TopicPartition

__all__ = ["Ordering", "ProcessScheduler", "SchedulableRecord"]

Ordering = Literal["key", "partition", "none"]

_ORDERINGS = ("key", "partition", "none")


class SchedulableRecord(Protocol):
    """What the scheduler reads of a record (``Record`` has it): ``key`` must be hashable
    (bytes or None as fetched)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> object: ...


class _Lane:
    """Records not started that must start one after another (or, with ordering "none", a
    partition's records in order, several running at once)."""

    __slots__ = ("entries", "id", "queued", "running")

    def __init__(self, lane_id: Hashable) -> None:
        self.id = lane_id
        self.entries: deque[_Entry] = deque()
        self.running = 0
        self.queued = False  # in the ready FIFO or parked in a partition's blocked lanes


class _Entry:
    __slots__ = ("lane", "offset", "part", "record")

    def __init__(self, record: SchedulableRecord, part: _Partition, lane: _Lane) -> None:
        self.record = record
        self.offset = record.offset
        self.part = part
        self.lane = lane


class _Partition:
    """One partition's offsets: offered and unfinished from the lowest, finished above it."""

    __slots__ = (
        "base", "blocked", "done", "last", "offered", "restored", "revoked", "running",
        "runs", "top", "waiting",
    )  # fmt: skip

    def __init__(self) -> None:
        # offered offsets from the lowest unfinished one on (finished ones are popped from
        # the front as soon as everything below them finished)
        self.offered: deque[int] = deque()
        self.done: set[int] = set()  # finished (or restored) offsets above the lowest unfinished
        self.runs = 0  # runs of consecutive offsets in ``done``
        self.last = -1  # the last offset offered
        self.top = -1  # the highest offset offered or in ``done``
        self.base: int | None = None  # the committable offset when ``offered`` is empty
        self.restored: deque[int] = deque()  # restored offsets not offered yet, ascending
        self.running = 0
        self.waiting = 0
        self.revoked = False
        self.blocked: dict[_Lane, None] = {}  # lanes whose head waits for metadata room

    def committable(self) -> int | None:
        return self.offered[0] if self.offered else self.base

    def add_done(self, offset: int) -> None:
        done = self.done
        done.add(offset)
        self.runs += 1 - ((offset - 1) in done) - ((offset + 1) in done)

    def discard_done(self, offset: int) -> None:
        done = self.done
        done.discard(offset)
        self.runs -= 1 - ((offset - 1) in done) - ((offset + 1) in done)

    def retire(self) -> None:
        """Pop the finished offsets at the front (everything below them finished)."""
        offered = self.offered
        done = self.done
        while offered and offered[0] in done:
            self.discard_done(offered.popleft())
        if not offered:
            self.base = self.last + 1

    def may_start(self, entry: _Entry) -> bool:
        """Whether ``entry`` may start without risking more runs than fit in metadata."""
        lowest = self.offered[0]
        if lowest == entry.offset:
            return True  # the lowest unfinished: finishing it adds no run
        runs = self.runs + self.running + 1  # at most one more per record running and it
        return runs <= MIN_RUNS_THAT_FIT or runs <= runs_that_fit(self.top - lowest + 1)


class ProcessScheduler:
    """Decides which offered record may start its handler, under an ``ordering`` ("key",
    "partition" or "none", see the module's docstring) and at most ``concurrency`` handlers
    running; tracks per partition the offset to commit and the completed offsets beyond it.

    ``limit_metadata`` (default True): a record does not start while the completed offsets
    its partition could then hold beyond the committable one might not fit in
    :data:`.offsets.MAX_METADATA_BYTES`.

    Every call is O(1) per record (amortized), apart from :meth:`restore`,
    :meth:`completed_beyond` (O(the offsets returned)) and :meth:`revoke` (O(running)).
    Raises ValueError for an unknown ``ordering`` or a ``concurrency`` below 1.
    """

    def __init__(
        self, ordering: Ordering = "key", concurrency: int = 64, *, limit_metadata: bool = True
    ) -> None:
        if ordering not in _ORDERINGS:
            raise ValueError(f"ordering must be one of {_ORDERINGS}, got {ordering!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.ordering: Ordering = ordering
        self.concurrency = concurrency
        self._limit_metadata = limit_metadata
        self._exclusive = ordering != "none"  # a lane runs one record at a time
        self._parts: dict[TopicPartition, _Partition] = {}
        self._lanes: dict[Hashable, _Lane] = {}
        self._ready: deque[_Lane] = deque()
        self._running: dict[tuple[str, int, int], _Entry] = {}
        self._waiting = 0  # records offered and not started, all partitions

    # -- the caller's side ---------------------------------------------------------------

    @property
    def running(self) -> int:
        """How many handlers run (started and not reported done)."""
        return len(self._running)

    @property
    def total_waiting(self) -> int:
        """How many records were offered and have not started, all partitions together
        (those of revoked or forgotten partitions excluded)."""
        return self._waiting

    def offer(self, records: Iterable[SchedulableRecord]) -> None:
        """Add fetched records, each partition's in increasing offset order (after the ones
        offered before). Records at offsets restored as completed (:meth:`restore`) are
        marked finished without running; records of a revoked partition not yet forgotten
        (:meth:`forget`) are dropped. Raises ValueError for a record at or below an offset
        already offered in its partition, and TypeError for an unhashable key."""
        parts = self._parts
        lanes = self._lanes
        ready = self._ready
        ordering = self.ordering
        tp: TopicPartition | None = None
        part: _Partition | None = None
        for record in records:
            topic = record.topic
            partition = record.partition
            offset = record.offset
            if part is None or tp is None or tp.partition != partition or tp.topic != topic:
                tp = TopicPartition(topic, partition)
                part = parts.get(tp)
                if part is None:
                    part = parts[tp] = _Partition()
            if part.revoked:
                continue
            if offset <= part.last:
                raise ValueError(f"{topic}[{partition}]: offset {offset} offered after {part.last}")
            part.last = offset
            if offset > part.top:
                part.top = offset
            part.offered.append(offset)
            restored = part.restored
            if restored:
                while restored and restored[0] < offset:  # no record there: forget it
                    part.discard_done(restored.popleft())
                if restored and restored[0] == offset:  # done before a restart: skip it
                    restored.popleft()
                    part.retire()
                    continue
            if ordering == "key":
                key = record.key
                lane_id: Hashable = (topic, key) if key is not None else (topic, partition, None)
            else:
                lane_id = tp
            lane = lanes.get(lane_id)
            if lane is None:
                lane = lanes[lane_id] = _Lane(lane_id)
            lane.entries.append(_Entry(record, part, lane))
            part.waiting += 1
            self._waiting += 1
            if not lane.queued and (lane.running == 0 or not self._exclusive):
                lane.queued = True
                ready.append(lane)

    def next_ready(self) -> SchedulableRecord | None:
        """A record whose handler may start now (it counts as running from here until
        :meth:`done`), or None when ``concurrency`` handlers run or no record may start."""
        if len(self._running) >= self.concurrency:
            return None
        ready = self._ready
        limit = self._limit_metadata
        while ready:
            lane = ready.popleft()
            lane.queued = False
            entries = lane.entries
            while entries and entries[0].part.revoked:
                entries.popleft()
            if not entries:
                if lane.running == 0 and self._lanes.get(lane.id) is lane:
                    del self._lanes[lane.id]
                continue
            entry = entries[0]
            part = entry.part
            if limit and not part.may_start(entry):
                lane.queued = True
                part.blocked[lane] = None
                continue
            entries.popleft()
            part.waiting -= 1
            self._waiting -= 1
            part.running += 1
            lane.running += 1
            record = entry.record
            self._running[(record.topic, record.partition, entry.offset)] = entry
            if entries and not self._exclusive:
                lane.queued = True
                ready.append(lane)
            return record
        return None

    def done(self, record: SchedulableRecord) -> None:
        """Note that ``record``'s handler finished (whatever its outcome: what to commit
        after a failure is the caller's policy). Raises ValueError when ``record`` is not
        running (never started, or reported twice)."""
        entry = self._running.pop((record.topic, record.partition, record.offset), None)
        if entry is None:
            raise ValueError(f"{record.topic}[{record.partition}]@{record.offset} is not running")
        part = entry.part
        lane = entry.lane
        part.running -= 1
        lane.running -= 1
        part.add_done(entry.offset)
        part.retire()
        if not lane.queued:
            if lane.entries:
                lane.queued = True
                self._ready.append(lane)
            elif lane.running == 0 and self._lanes.get(lane.id) is lane:
                del self._lanes[lane.id]
        if part.blocked:
            self._unblock(part)

    def _unblock(self, part: _Partition) -> None:
        """Move the lanes parked for metadata room back to the ready FIFO: as many as may
        start, and the lane holding the partition's lowest unfinished record."""
        blocked = part.blocked
        if part.revoked or not part.offered:
            lanes = list(blocked)
        else:
            lowest = part.offered[0]
            lanes = []
            for lane in blocked:  # first: what the committable offset waits for
                if lane.entries and lane.entries[0].offset == lowest:
                    lanes.append(lane)
                    break
            room = runs_that_fit(part.top - lowest + 1) - part.runs - part.running
            if room > 0:
                lanes.extend(itertools.islice(blocked, room))
        for lane in lanes:
            if blocked.pop(lane, 0) is None:
                self._ready.append(lane)  # still marked queued

    def committable(self, tp: TopicPartition) -> int | None:
        """The offset to commit for ``tp``: its lowest offered offset whose handler has not
        finished, or one past the last offered when all finished (the restored committed
        offset before any record was offered); None when nothing was offered or restored."""
        part = self._parts.get(tp)
        return None if part is None else part.committable()

    def completed_beyond(self, tp: TopicPartition) -> frozenset[int]:
        """The offsets of ``tp`` at or above :meth:`committable` whose handlers finished
        (and those restored as completed and not offered yet): what the commit's metadata
        keeps (:func:`.offsets.encode_completed`). Empty for an unknown partition."""
        part = self._parts.get(tp)
        return frozenset() if part is None else frozenset(part.done)

    def unfinished(self) -> list[TopicPartition]:
        """The partitions (not revoked) with records offered whose handler has not
        finished (waiting or running)."""
        return [tp for tp, part in self._parts.items() if part.offered and not part.revoked]

    def gaps(self) -> dict[TopicPartition, int]:
        """Per partition with finished records beyond its committable offset: the offsets
        from that offset to one past the highest finished one (O(the finished offsets))."""
        gaps: dict[TopicPartition, int] = {}
        for tp, part in self._parts.items():
            base = part.committable()
            if part.done and base is not None and not part.revoked:
                gaps[tp] = max(part.done) + 1 - base
        return gaps

    def waiting(self, tp: TopicPartition) -> int:
        """How many records of ``tp`` were offered and have not started (the caller counts
        them against its prefetch budget)."""
        part = self._parts.get(tp)
        return 0 if part is None else part.waiting

    def revoke(self, tps: Collection[TopicPartition]) -> list[SchedulableRecord]:
        """Drop the records of ``tps`` that have not started and return the running ones
        (the caller waits for them, reports them :meth:`done`, commits, then
        :meth:`forget`\\ s the partitions). Until then :meth:`committable` and
        :meth:`completed_beyond` keep answering for them and records offered for them are
        dropped."""
        revoked: set[int] = set()
        for tp in tps:
            part = self._parts.get(tp)
            if part is None:  # nothing offered yet: a fetch racing the revoke is dropped too
                part = self._parts[tp] = _Partition()
            if part.revoked:
                continue
            part.revoked = True
            self._waiting -= part.waiting
            part.waiting = 0
            revoked.add(id(part))
            self._unblock(part)  # their lanes may hold records of other partitions
        return [e.record for e in self._running.values() if id(e.part) in revoked]

    def forget(self, tps: Collection[TopicPartition]) -> None:
        """Drop all that is kept of ``tps`` (after a revoke's commit); records offered for
        them later start from scratch. Running records of them may still be reported
        :meth:`done`."""
        for tp in tps:
            part = self._parts.pop(tp, None)
            if part is not None and not part.revoked:
                part.revoked = True  # its records still in lanes are dropped lazily
                self._waiting -= part.waiting
                part.waiting = 0
                self._unblock(part)

    def restore(self, tp: TopicPartition, committed: int, completed: Iterable[int]) -> None:
        """Start ``tp``'s bookkeeping at ``committed`` (read from the group) with the offsets
        of ``completed`` (:func:`.offsets.decode_completed`) already done: records offered
        at those offsets are marked finished without running. Offsets below ``committed``
        are ignored. Raises ValueError when records of ``tp`` were offered already."""
        part = self._parts.get(tp)
        if part is not None and (part.offered or part.last >= 0 or part.running):
            raise ValueError(f"{tp}: records were offered already")
        part = self._parts[tp] = _Partition()
        part.base = committed
        part.last = committed - 1
        offsets = sorted(o for o in set(completed) if o >= committed)
        for offset in offsets:
            part.add_done(offset)
        part.restored.extend(offsets)
        if offsets:
            part.top = offsets[-1]
