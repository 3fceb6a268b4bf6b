"""The asyncio side of ``Consumer.process()``: pulling, worker tasks, commits.

A :class:`ProcessRun` drives one ``process()`` call over a :class:`.ProcessScheduler`:

* a *puller* task takes records from the consumer's ``stream()`` and offers them. Records
  that cannot start yet (behind a busy key, a busy partition, or the metadata bound) wait
  in the scheduler, at most ``max_waiting`` of them: past that, while every handler slot
  is taken the puller stops taking (the stream's bounded prefetch fills and fetching
  pauses); while slots are free, what waits is blocked, so the partition of each record
  taken then is *throttled* (:class:`FetchControl`: not fetched nor handed out) and the
  puller goes on with the other partitions, up to twice ``max_waiting``. A throttled
  partition is let go once an eighth of ``max_waiting`` or fewer of its records wait;
* *workers*, tasks of the run's :class:`~aiostream_kafka.concurrency.TaskScope` (at most
  ``concurrency``, started as records become ready, ending after ``_WORKER_IDLE_S``
  without one), run ``await handler(record)`` for the records the scheduler lets start:
  a worker whose record ended takes the next ready one itself, idle workers are handed
  records by the puller; no task is created per record (a handler that sets a
  contextvar leaves it set for the later records of its worker);
* with a group, each worker holds a group :class:`~..group.Hand` naming the partition of
  the record in hand, so a revocation (and ``close()``) waits for it exactly as for a
  record held by ``committing()``; the run watches the group
  (:class:`~..group.PartitionWatcher`): on assignment it restores the committed offsets
  and the completed offsets kept in their metadata, on revocation it drops the revoked
  partitions' waiting records and stages their commit, and once they are forgotten it
  cancels the workers still running their records (past the revocation's wait: those
  records are not committed);
* commits go through the group's staging (``stage`` with the metadata, then
  ``request_commit``: the group's committer task commits): per partition the scheduler's
  committable offset with the completed offsets beyond it
  (:func:`.offsets.encode_completed`), every ``every`` finished records or ``within_s``
  seconds, and before a revocation's commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.concurrency import Crash, TaskScope, shielded
from aiostream_kafka.consumer.processing.health import ProcessHealth
from aiostream_kafka.consumer.processing.offsets import decode_completed, encode_completed
from aiostream_kafka.consumer.processing.scheduler import ProcessScheduler
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.structs import Record, TopicPartition

if TYPE_CHECKING:
    from aiostream_kafka.consumer.group import ConsumerGroup, Hand

__all__ = [
    "ON_ERROR", "DeadLetterSender", "FetchControl", "Handler", "ProcessHealth", "ProcessRun",
]  # fmt: skip

log = logging.getLogger(__name__)

Handler = Callable[[Record], Awaitable[object]]

# How often a wait re-checks its condition (no wait here is without a deadline).
_POLL_S = 0.5
_RETRY_MAX_S = 5.0  # the back-off between attempts doubles up to this
_WORKER_IDLE_S = 1.0  # a worker with no record to take for this long ends

#: What ``process()`` does with a record whose handler failed every attempt.
ON_ERROR = ("raise", "skip", "dead_letter")


class FetchControl(Protocol):
    """What a run asks of the consumer's fetching (its engine): pause a partition whose
    records pile up (independent of the user's ``pause``/``resume``), and at the end
    hand out again what was taken and not finished, carrying what finished beyond it to
    the next run."""

    def throttle(self, partitions: Iterable[TopicPartition]) -> None: ...
    def unthrottle(self, partitions: Iterable[TopicPartition]) -> None: ...
    def assigned_partitions(self) -> frozenset[TopicPartition]: ...
    def delivered(self, tp: TopicPartition) -> int | None: ...
    def rewind(self, tp: TopicPartition, offset: int, completed: frozenset[int]) -> None: ...
    def carried(self, tp: TopicPartition) -> tuple[int, frozenset[int]] | None: ...


class DeadLetterSender(Protocol):
    """What ``on_error="dead_letter"`` sends with: a :class:`~aiostream_kafka.Producer`."""

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any: ...


def dead_letter_headers(
    record: Record, error: BaseException, attempts: int
) -> list[tuple[str, bytes | None]]:
    """The record's own headers, then ones naming where it came from and why it failed."""
    own = [(h[0], h[1]) for h in record.headers]
    return [
        *own,
        ("dlq.error.type", type(error).__qualname__.encode()),
        ("dlq.error.message", str(error).encode(errors="replace")[:4096]),
        ("dlq.source.topic", record.topic.encode()),
        ("dlq.source.partition", str(record.partition).encode()),
        ("dlq.source.offset", str(record.offset).encode()),
        ("dlq.attempts", str(attempts).encode()),
    ]


class _Worker:
    """A task of the run handling records one after another; ``record`` is the one in
    hand (None: idle), ``hand`` its group hand (names the record's partition, so that a
    revocation waits for it)."""

    __slots__ = ("abandoned", "hand", "record", "started", "task", "wake")

    def __init__(self, hand: Hand | None) -> None:
        self.hand = hand
        self.record: Record | None = None
        self.started = 0.0  # time.monotonic() when the record in hand was handed
        self.task: asyncio.Task[None] | None = None
        self.wake: asyncio.Future[None] | None = None  # set while idle
        self.abandoned = False  # cancelled: its record's partition was forgotten


class ProcessRun:
    """One ``Consumer.process()`` call; see the module docstring. ``group`` None: an
    assigned consumer (nothing is committed). ``stop_wait_s`` bounds the wait for running
    handlers when the run stops (an error, the stream's end); ``commit_timeout_s`` the
    final commit after an error or a cancellation."""

    def __init__(
        self,
        records: AsyncIterator[Record],
        handler: Handler,
        scheduler: ProcessScheduler,
        group: ConsumerGroup | None,
        *,
        every: int,
        within_s: float,
        handler_timeout_s: float | None,
        max_waiting: int,
        stop_wait_s: float,
        commit_timeout_s: float,
        on_error: str = "raise",
        retries: int = 0,
        retry_backoff_s: float = 0.1,
        dead_letter_topic: str | None = None,
        dead_letter_producer: DeadLetterSender | None = None,
        fetch: FetchControl | None = None,
    ) -> None:
        self._records = records
        self._fetch = fetch
        self._throttled: set[TopicPartition] = set()
        self._release_at = max(max_waiting // 8, 1)
        self._resume_gap = max(max_waiting // 4, 1)
        self._handler = handler
        self._sched = scheduler
        self._group = group
        self._every = every
        self._within_s = within_s
        self._handler_timeout_s = handler_timeout_s
        self._max_waiting = max_waiting
        self._stop_wait_s = stop_wait_s
        self._commit_timeout_s = commit_timeout_s
        self._on_error = on_error
        self._retries = retries
        self._retry_backoff_s = retry_backoff_s
        self._dead_letter_topic = dead_letter_topic
        self._dead_letter_producer = dead_letter_producer
        # Records whose handler failed every attempt: skipped, or sent to the dead letters.
        self.skipped = 0
        self.dead_lettered = 0
        self._scope = TaskScope("consumer process()")
        self._workers: set[_Worker] = set()
        self._idle_workers: dict[_Worker, None] = {}  # waiting for a record, oldest first
        self._in_hand = 0  # records handed to workers and not ended
        self._stopping = False
        self._error: BaseException | None = None
        self._ended = asyncio.Event()  # the puller ended, or a handler failed
        self._room = asyncio.Event()  # a record started or was dropped, a handler ended
        self._idle = asyncio.Event()  # no worker holds a record
        self._idle.set()
        self._dirty: set[TopicPartition] = set()  # finished records not staged yet
        self._revoking: set[TopicPartition] = set()  # staged at once until forgotten
        self._since = 0  # records finished since the last commit request

    # -- the group's side (PartitionWatcher) ---------------------------------------------

    def assigned(self, committed: Mapping[TopicPartition, OffsetAndMetadata | None]) -> None:
        """Restore each newly assigned partition's committed offset and the completed
        offsets its metadata names, so those records are not handled again."""
        for tp, om in committed.items():
            if om is None:
                continue
            self._restore(tp, om.offset, om.metadata)

    def _restore_owned(self) -> None:
        """At the start: restore the partitions owned already. Where an earlier run of
        this consumer rewound a partition (:meth:`_rewind`), from what it left; else from
        the group's commit where the consumer hands out from the committed offset (where
        the application read past it with ``stream()``, from the first record taken)."""
        fetch = self._fetch
        group = self._group
        tps = set(group.coordinator.owned) if group is not None else set()
        if fetch is not None:
            tps |= fetch.assigned_partitions()
        for tp in tps:
            carried = fetch.carried(tp) if fetch is not None else None
            if carried is not None:
                self._restore_completed(tp, carried[0], carried[1])
            elif group is not None and tp in group.committed_offsets:
                committed = group.committed_offsets[tp]
                position = fetch.delivered(tp) if fetch is not None else None
                if position is None or position == committed:
                    self._restore(tp, committed, group.committed_metadata.get(tp))

    def _rewind(self) -> None:
        """At the end (every handler ended): the consumer hands out again, from each
        partition's committable offset, the records taken and not finished, so that a
        later ``process()`` (or ``stream()``) of this consumer does not go past them."""
        fetch = self._fetch
        if fetch is None:
            return
        sched = self._sched
        for tp in sched.unfinished():
            offset = sched.committable(tp)
            if offset is not None:
                fetch.rewind(tp, offset, sched.completed_beyond(tp))

    def _restore(self, tp: TopicPartition, offset: int, metadata: str | None) -> None:
        completed = decode_completed(metadata, offset) if metadata else set()
        self._restore_completed(tp, offset, completed)

    def _restore_completed(self, tp: TopicPartition, offset: int, completed: Iterable[int]) -> None:
        try:
            self._sched.restore(tp, offset, completed)
        except ValueError:  # records of it were offered already: keep what is known
            log.debug("process(): %s not restored: records of it were taken already", tp)

    def revoking(self, partitions: frozenset[TopicPartition]) -> None:
        """Take no more records of ``partitions``; what finished of them is staged now and
        as each of their running handlers ends (the revocation then commits it)."""
        self._sched.revoke(partitions)
        self._revoking |= partitions
        for tp in partitions:
            self._stage(tp)
        self._room.set()

    def forgotten(self, partitions: frozenset[TopicPartition]) -> None:
        """``partitions`` are gone: drop their bookkeeping and cancel their handlers still
        running (their records were not committed; the next owner handles them)."""
        self._sched.forget(partitions)
        self._revoking -= partitions
        self._dirty -= partitions
        self._throttled -= partitions
        for worker in self._workers:
            record = worker.record
            if (
                record is not None
                and TopicPartition(record.topic, record.partition) in partitions
                and worker.task is not None
                and not worker.task.done()
            ):
                log.warning("process(): the handler of %s[%d]@%d still runs after its "
                            "partition was revoked: cancelled, not committed",
                            record.topic, record.partition, record.offset)  # fmt: skip
                worker.abandoned = True
                worker.task.cancel()
        self._room.set()

    def oldest_handler_s(self) -> float:
        """How long the longest-running handler has run (0.0 when none runs): the group's
        poll liveness counts it as the application not asking for records."""
        started = [w.started for w in self._workers if w.record is not None]
        return time.monotonic() - min(started) if started else 0.0

    def health(self) -> ProcessHealth:
        """A snapshot for :meth:`Consumer.health` (see :class:`ProcessHealth`)."""
        sched = self._sched
        return ProcessHealth(
            in_flight=self._in_hand,
            waiting=sched.total_waiting,
            oldest_handler_s=self.oldest_handler_s(),
            gaps=sched.gaps(),
            throttled=frozenset(self._throttled),
            skipped=self.skipped,
            dead_lettered=self.dead_lettered,
        )

    # -- running -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until the stream ends (the consumer closed) or a handler fails; raise the
        handler's (or the stream's) error after the running handlers ended and what is
        safe was committed. Cancelled: cancel the handlers, commit what is safe, re-raise."""
        group = self._group
        self._restore_owned()
        if group is not None:
            group.watch(self)
        try:
            self._scope.spawn(self._pull(), name="consumer process(): puller", crash=Crash.LOG)
            deadline = time.monotonic() + self._within_s
            while not self._ended.is_set():
                left = deadline - time.monotonic()
                if left > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(left):
                            await self._ended.wait()
                if time.monotonic() >= deadline:
                    self._request_commit()
                    deadline = time.monotonic() + self._within_s
            self._stopping = True
            await self._wait_idle(self._stop_wait_s)
        except BaseException:
            self._stopping = True
            await self._scope.aclose()
            await shielded(self._commit_safe(), timeout=self._commit_timeout_s,
                           what="process(): the commit after a cancellation")  # fmt: skip
            self._rewind()
            raise
        finally:
            if group is not None:
                group.unwatch(self)
            if self._throttled and self._fetch is not None:
                self._fetch.unthrottle(self._throttled)
                self._throttled.clear()
        await self._scope.aclose()  # the puller; handlers past the wait (logged)
        await shielded(self._commit_safe(), timeout=self._commit_timeout_s,
                       what="process(): the final commit")  # fmt: skip
        self._rewind()
        if self._error is not None:
            raise self._error

    async def _pull(self) -> None:
        sched = self._sched
        try:
            async for record in self._records:
                if self._stopping:
                    break
                sched.offer((record,))
                self._dispatch()
                if sched.total_waiting >= self._max_waiting:
                    self._throttle_blocked(record)
                while not self._may_take() and not self._stopping:
                    self._room.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_POLL_S):
                            await self._room.wait()
        except Exception as exc:  # the consumer failed: process() raises it
            if self._error is None:
                self._error = exc
        finally:
            self._ended.set()

    def _may_take(self) -> bool:
        """Whether the puller may take another record: fewer than ``max_waiting`` wait,
        or (with a throttle) handler slots are free (so what waits is blocked and its
        partitions are throttled) and fewer than twice that wait."""
        sched = self._sched
        waiting = sched.total_waiting
        if waiting < self._max_waiting:
            return True
        return (
            self._fetch is not None
            and sched.running < sched.concurrency
            and waiting < 2 * self._max_waiting
        )

    def _may_resume(self) -> bool:
        """Whether a waiting puller should wake: a quarter of ``max_waiting`` is free (so
        it takes records in runs, not one per ended handler), or it may take anyway."""
        sched = self._sched
        if sched.total_waiting <= self._max_waiting - self._resume_gap:
            return True
        return self._may_take() and sched.total_waiting >= self._max_waiting

    def _throttle_blocked(self, record: Record) -> None:
        """Past ``max_waiting`` with handler slots free: pause ``record``'s partition if
        records of it wait (they are blocked: the free slots would have started them)."""
        fetch = self._fetch
        if fetch is None or self._sched.running >= self._sched.concurrency:
            return
        tp = TopicPartition(record.topic, record.partition)
        if tp not in self._throttled and self._sched.waiting(tp) > 0:
            self._throttled.add(tp)
            fetch.throttle((tp,))
            log.debug("process(): %s throttled: %d of its records wait", tp,
                      self._sched.waiting(tp))  # fmt: skip

    def _release_throttled(self) -> None:
        sched = self._sched
        free = [tp for tp in self._throttled if sched.waiting(tp) <= self._release_at]
        if free and self._fetch is not None:
            self._throttled.difference_update(free)
            self._fetch.unthrottle(free)

    # -- workers ---------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Hand the records that may start now to idle workers, and start workers (up to
        ``concurrency``) for the rest."""
        sched = self._sched
        idle = self._idle_workers
        while not self._stopping:
            if not idle and len(self._workers) >= sched.concurrency:
                return
            record = cast("Record | None", sched.next_ready())
            if record is None:
                return
            if idle:
                worker = next(iter(idle))
                del idle[worker]
                self._begin(worker, record)
                wake, worker.wake = worker.wake, None
                if wake is not None and not wake.done():
                    wake.set_result(None)
            else:
                group = self._group
                worker = _Worker(group.hand() if group is not None else None)
                self._begin(worker, record)
                self._workers.add(worker)
                worker.task = self._scope.spawn(
                    self._work(worker), name="process() worker", crash=Crash.LOG
                )
                if worker.hand is not None:
                    worker.hand.task = worker.task

    def _begin(self, worker: _Worker, record: Record) -> None:
        worker.record = record
        worker.started = time.monotonic()
        if worker.hand is not None:
            worker.hand.tp = TopicPartition(record.topic, record.partition)
        self._in_hand += 1
        self._idle.clear()

    async def _work(self, worker: _Worker) -> None:
        """A worker: handle the record in hand, then the next one that may start, until
        none is ready for ``_WORKER_IDLE_S`` (or the run stops, or it is cancelled)."""
        try:
            while True:
                record = worker.record
                if record is None:
                    if not await self._wait_for_record(worker):
                        return
                    continue
                try:
                    finished = await self._handle(record)
                except BaseException:
                    self._end(worker, record, finished=False, more=False)
                    raise
                self._end(worker, record, finished=finished, more=True)
        finally:
            if worker.record is not None:  # handed one, cancelled before it started
                self._end(worker, worker.record, finished=False, more=False)
            self._retire(worker)

    async def _wait_for_record(self, worker: _Worker) -> bool:
        """Wait (idle) until :meth:`_dispatch` hands ``worker`` a record: True; False
        when none came within ``_WORKER_IDLE_S`` or the run stops (the worker ends)."""
        if self._stopping:
            return False
        wake = asyncio.get_running_loop().create_future()
        worker.wake = wake
        self._idle_workers[worker] = None
        try:
            async with asyncio.timeout(_WORKER_IDLE_S):
                await wake
        except TimeoutError:
            pass
        finally:
            if worker.wake is wake:  # not handed a record
                worker.wake = None
                self._idle_workers.pop(worker, None)
        return worker.record is not None

    def _retire(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        self._idle_workers.pop(worker, None)
        if worker.hand is not None and self._group is not None:
            self._group.drop_hand(worker.hand)
        if not self._stopping:
            self._dispatch()  # a cancelled worker's place, if records wait

    async def _handle(self, record: Record) -> bool:
        """Run the handler for ``record`` with its retries and ``on_error``; True when the
        record counts as finished (handled, skipped or dead-lettered)."""
        attempts = 0
        while True:
            attempts += 1
            try:
                await self._attempt(record)
                return True
            except Exception as exc:
                if attempts <= self._retries and not self._stopping:
                    delay = min(self._retry_backoff_s * 2 ** (attempts - 1), _RETRY_MAX_S)
                    log.info("process(): the handler of %s[%d]@%d failed (attempt %d of "
                             "%d): %r; again in %.2f s", record.topic, record.partition,
                             record.offset, attempts, self._retries + 1, exc,
                             delay)  # fmt: skip
                    await asyncio.sleep(delay)
                    continue
                return await self._failed(record, exc, attempts)

    async def _attempt(self, record: Record) -> None:
        if self._handler_timeout_s is None:
            await self._handler(record)
            return
        try:
            async with asyncio.timeout(self._handler_timeout_s):
                await self._handler(record)
        except TimeoutError as exc:
            raise TimeoutError(
                f"the handler of {record.topic}[{record.partition}]@{record.offset} "
                f"ran past handler_timeout_s={self._handler_timeout_s}"
            ) from exc

    async def _failed(self, record: Record, exc: Exception, attempts: int) -> bool:
        """The handler of ``record`` failed ``attempts`` times: apply ``on_error``.
        Returns True when the record counts as finished (skipped, or dead-lettered)."""
        where = f"{record.topic}[{record.partition}]@{record.offset}"
        if self._on_error == "skip":
            log.error("process(): the handler of %s failed %d time(s); skipped (committed "
                      "past)", where, attempts, exc_info=exc)  # fmt: skip
            self.skipped += 1
            return True
        if self._on_error == "dead_letter":
            producer, topic = self._dead_letter_producer, self._dead_letter_topic
            assert producer is not None and topic is not None  # checked by process()
            try:
                await producer.send(
                    topic, value=record.value, key=record.key,
                    headers=dead_letter_headers(record, exc, attempts),
                )  # fmt: skip
            except Exception as send_exc:
                send_exc.__context__ = exc
                log.error("process(): %s could not be sent to the dead-letter topic %r: %r",
                          where, topic, send_exc)  # fmt: skip
                self._fail(send_exc)
                return False
            log.warning("process(): the handler of %s failed %d time(s); sent to %r",
                        where, attempts, topic, exc_info=exc)  # fmt: skip
            self.dead_lettered += 1
            return True
        self._fail(exc)  # "raise": stop; its record stays unfinished
        return False

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._stopping = True
        self._ended.set()

    def _end(self, worker: _Worker, record: Record, *, finished: bool, more: bool) -> None:
        """``record``'s handling ended (``finished``: it counts as done). With ``more``,
        the worker takes the next record that may start, if any."""
        worker.record = None
        self._in_hand -= 1
        tp = TopicPartition(record.topic, record.partition)
        if finished:
            self._sched.done(record)
            if tp in self._revoking:
                self._stage(tp)
            else:
                self._dirty.add(tp)
                self._since += 1
                if self._since >= self._every:
                    self._request_commit()
        elif worker.abandoned:
            # Cancelled after its partition was forgotten: free its slot (its partition's
            # bookkeeping is gone, so nothing is committed for it).
            self._sched.done(record)
        if worker.hand is not None and self._group is not None:
            self._group.handed_back(worker.hand)
        if more and not self._stopping and not worker.abandoned:
            following = cast("Record | None", self._sched.next_ready())
            if following is not None:
                self._begin(worker, following)
        self._dispatch()
        if self._throttled:
            self._release_throttled()
        if self._in_hand == 0:
            self._idle.set()
        if not self._room.is_set() and self._may_resume():
            self._room.set()  # the puller waits for this (a wake-up per end would cost)

    async def _wait_idle(self, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while self._in_hand:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("process(): %d handler(s) still running %.1f s after it stopped: "
                            "cancelled, their records not committed", self._in_hand,
                            limit_s)  # fmt: skip
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, _POLL_S)):
                    await self._idle.wait()

    # -- commits -----------------------------------------------------------------------------

    def _stage(self, tp: TopicPartition) -> None:
        group = self._group
        if group is None:
            return
        offset = self._sched.committable(tp)
        if offset is None:
            return
        metadata = encode_completed(offset, self._sched.completed_beyond(tp))
        group.stage(tp, offset, metadata)

    def _stage_dirty(self) -> None:
        dirty, self._dirty = self._dirty, set()
        for tp in dirty:
            self._stage(tp)

    def _request_commit(self) -> None:
        if self._group is None or not (self._dirty or self._since):
            return
        self._stage_dirty()
        self._since = 0
        self._group.request_commit()

    async def _commit_safe(self) -> None:
        """Commit what finished (never past an unfinished or failed record) now."""
        group = self._group
        if group is None:
            return
        self._stage_dirty()
        try:
            await group.flush_staged()
        except KafkaError as exc:
            log.warning("process(): the final commit failed: %s", exc)
