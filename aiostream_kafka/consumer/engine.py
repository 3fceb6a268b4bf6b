"""``FetchEngine``: the consumer's moving parts, wired together and owned in one place.

Tasks (all spawned into the engine's :class:`~aiostream_kafka.concurrency.TaskScope` by
:meth:`FetchEngine.spawn` under ``Crash.FAIL_OWNER``, stopped by :meth:`FetchEngine.stop`):

* the poll scheduler (``scheduler.py``, one task) decides when each broker gets its next
  fetch round and with which partitions;
* one fetcher per broker leading an assigned partition (``fetcher.py``), created when a
  broker first leads one, each with its own fetch session;
* the offset resolver (``positions.py``, one task): metadata refreshes, offset resets and
  KIP-320 validation after leader changes.

A task that fails unexpectedly stores its exception as ``fatal``; every iterator then
raises it. Expected failures (lost connections, leader moves, broker errors) are handled
inside the tasks and never reach this point.

The assignment is changed only through :meth:`assign`, :meth:`add_partitions` and
:meth:`revoke` -- the entry points a group coordinator (issue 7) uses: revoking a partition
drops its buffered data, ends its iterator, and any fetch in flight for it is ignored;
:meth:`hold`, called when a revocation starts, stops handing its records out meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from aiostream_kafka.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope, gather_settled
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import KafkaError, NothingToConsumeError, reraisable
from aiostream_kafka.structs import TopicPartition

from .config import ConsumerConfig
from .errors import ConsumerStateError
from .fetcher import Fetcher
from .partition import PartitionState, PendingError
from .positions import OffsetResolver
from .prefetch import PrefetchBuffer
from .scheduler import PollScheduler

__all__ = ["FetchEngine"]

log = logging.getLogger(__name__)

# A partition's fetch size never goes below this (unless max_partition_fetch_bytes is
# smaller): below a typical producer batch (16 KiB) most fetches would return a truncated
# batch and make no progress (brokers return an oversized batch only for the first
# partition of a response, KIP-74).
_MIN_PARTITION_FETCH_BYTES = 64 * 1024
_SESSION_CLOSE_TIMEOUT_MS = 1_000
# An iterator that has waited this long (seconds) for records logs it: INFO the first time
# in a quiet period, DEBUG after that (docs/concepts/backpressure.md, "An idle consumer").
IDLE_LOG_S = 30.0


class FetchEngine:
    """The consumer's engine: partition states, buffers, and the tasks that fill them."""

    def __init__(self, cluster: Cluster, client: ClientConfig, config: ConsumerConfig) -> None:
        self.cluster = cluster
        self.client = client
        self.config = config
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.scheduler = PollScheduler(self)
        self.resolver = OffsetResolver(self)
        self.buffer = PrefetchBuffer(
            config.max_prefetch_bytes, config.max_prefetch_batches, self.scheduler.wake
        )
        self.fetchers: dict[int, Fetcher] = {}
        self.assignment_event = asyncio.Event()
        self.fatal: BaseException | None = None
        self.started = False
        self.closed = False
        self.mode: str | None = None
        # Set by Consumer.subscribe(): partitions will come from the group.
        self.subscribed = False
        # Set by Consumer.drain(): no more Fetch rounds; what is fetched is still handed out.
        self.draining = False
        self.partition_fetch_bytes = config.max_partition_fetch_bytes
        # Iterators waiting for records right now: the application is asking (poll
        # liveness, see ConsumerGroup.stalled).
        self.waiting = 0
        # Partitions being revoked (hold()): not fetched nor handed out, whatever resume()
        # says, until revoke() drops them.
        self.held: set[TopicPartition] = set()
        self._idle_logged = False  # the INFO line of this quiet period was written
        self._scope = TaskScope("consumer", on_fail=self.fail)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler and the resolver (fetchers start as brokers are needed)."""
        if self.started:
            return
        self.started = True
        self.spawn(self.scheduler.run, "aiostream-kafka poll scheduler")
        self.spawn(self.resolver.run, "aiostream-kafka offset resolver")

    def spawn(self, body: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run ``body()`` as a task of the engine's scope; a crash becomes ``fatal``
        (:meth:`fail`: every iterator raises it). Nothing starts once the engine stopped.

        The coroutine is created inside the task, so a task cancelled before it first runs
        leaves no never-awaited coroutine behind."""
        if not self._scope.closed:
            self._scope.spawn(body, name=name, crash=Crash.FAIL_OWNER)

    def fail(self, exc: BaseException) -> None:
        """Record a fatal error and wake every iterator so that it raises it."""
        if self.fatal is None:
            self.fatal = exc
        self._wake_iterators()

    def _wake_iterators(self) -> None:
        self.buffer.wake_all()
        self.assignment_event.set()
        for ps in self.partitions.values():
            ps.wake()

    async def stop(self) -> None:
        """Stop every task and end every iterator (idempotent)."""
        if not self.closed:
            self.closed = True
            # Revoking everything ends every iterator, even one in the middle of a chunk.
            self.revoke(list(self.partitions))
            self._wake_iterators()
        await self._scope.aclose()

    async def close(self) -> None:
        """:meth:`stop`, then close the fetch sessions (best effort)."""
        if self.closed:
            await self.stop()
            return
        await self.stop()
        await self._close_sessions()

    async def _close_sessions(self) -> None:
        # Brokers keep a bounded cache of sessions (KIP-227); closing ours frees the slot
        # now rather than at eviction.
        closers = [f.close_session(_SESSION_CLOSE_TIMEOUT_MS) for f in self.fetchers.values()]
        if closers:
            await gather_settled(*closers)

    def check_usable(self) -> None:
        """Raise the fatal error, or ConsumerStateError if never started."""
        if self.fatal is not None:
            raise reraisable(self.fatal)
        if not self.started:
            raise ConsumerStateError(
                "the consumer is not started: use 'async with Consumer(...)' or await start()"
            )

    def check_source(self) -> None:
        """Called when an iterator first asks for records: raise rather than wait forever
        when nothing is assigned and nothing subscribed (a closed consumer's iterators just
        end).

        Raises:
            NothingToConsumeError: nothing assigned, nothing subscribed.
        """
        if not self.partitions and not self.subscribed and not self.closed:
            raise NothingToConsumeError(
                "nothing to consume: no partition is assigned and no topic subscribed. Call "
                "consumer.subscribe([topic, ...]) (with a group_id) or "
                "consumer.assign([TopicPartition(topic, partition), ...]) before iterating, "
                'or give the topics to the constructor: Consumer("topic", '
                "bootstrap_servers=..., group_id=...)"
            )

    def set_mode(self, mode: str) -> None:
        """Fix which kind of iterator hands out records: ``merged`` (stream, batches) or
        ``partitioned`` (partitioned_stream). Mixing them would split a partition's
        records between two consumers of them."""
        if self.mode is None:
            self.mode = mode
            self.buffer.merged = mode == "merged"
            if mode == "merged":
                for ps in self.partitions.values():
                    if ps.has_data():
                        self.buffer.resumed(ps)
        elif self.mode != mode:
            raise ConsumerStateError(
                "partitioned_stream() and stream()/batches() cannot be used on the same "
                "consumer: each record is handed out once, to one kind of iterator"
            )

    # -- fetchers ----------------------------------------------------------------------------

    def fetcher(self, node_id: int) -> Fetcher:
        """The fetcher of broker ``node_id``, started on first use."""
        fetcher = self.fetchers.get(node_id)
        if fetcher is None:
            fetcher = self.fetchers[node_id] = Fetcher(self, node_id)
            self.spawn(fetcher.run, f"aiostream-kafka fetcher broker {node_id}")
        return fetcher

    # -- assignment --------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Make the assignment exactly ``partitions`` (revoking the others)."""
        wanted = list(dict.fromkeys(_check_partition(tp) for tp in partitions))
        keep = set(wanted)
        self.revoke([tp for tp in self.partitions if tp not in keep])
        self.add_partitions([tp for tp in wanted if tp not in self.partitions])

    def add_partitions(
        self,
        partitions: Iterable[TopicPartition],
        positions: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        """Assign more partitions, at ``positions`` where given, else per
        ``auto_offset_reset``. Already assigned partitions are left alone."""
        added = []
        for tp in partitions:
            tp = _check_partition(tp)
            if tp in self.partitions:
                continue
            start = None if positions is None else positions.get(tp)
            ps = PartitionState(tp, None if start is not None else self.config.auto_offset_reset)
            ps.fetch_position = start
            self.partitions[tp] = ps
            added.append(tp)
        if not added:
            return
        self.cluster.track({tp.topic for tp in added})
        self._assignment_changed()

    def revoke(self, partitions: Iterable[TopicPartition]) -> None:
        """Unassign ``partitions``: their buffered data is dropped and their iterators end."""
        removed = []
        for tp in partitions:
            self.held.discard(tp)
            ps = self.partitions.pop(tp, None)
            if ps is None:
                continue
            ps.assigned = False
            ps.generation += 1
            self.buffer.discard(ps)
            ps.wake()
            removed.append(tp)
        if not removed:
            return
        still = {tp.topic for tp in self.partitions}
        self.cluster.untrack({tp.topic for tp in removed} - still)
        self._assignment_changed()

    def _assignment_changed(self) -> None:
        count = max(1, len(self.partitions))
        fair = self.config.max_prefetch_bytes // (self.config.max_prefetch_batches * count)
        cap = self.config.max_partition_fetch_bytes
        self.partition_fetch_bytes = min(cap, max(fair, min(cap, _MIN_PARTITION_FETCH_BYTES)))
        self.assignment_event.set()
        self.buffer.wake_all()
        self.resolver.wake()
        self.scheduler.wake()

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of an assigned partition.

        Raises:
            ConsumerStateError: ``tp`` is not assigned.
        """
        ps = self.partitions.get(tp)
        if ps is None:
            raise ConsumerStateError(f"{tp.topic}[{tp.partition}] is not assigned to this consumer")
        return ps

    # -- positions ---------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int | None = None) -> None:
        """Fetch ``tp`` from ``offset`` next; buffered data of ``tp`` is dropped."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self.reposition(self.state(tp), offset, leader_epoch)

    def reposition(self, ps: PartitionState, offset: int, leader_epoch: int | None) -> None:
        """Move ``ps`` to ``offset`` (seek, reset result, truncation)."""
        self.buffer.discard(ps)
        ps.carry = None
        ps.generation += 1
        ps.fetch_position = offset
        ps.fetch_epoch = leader_epoch
        ps.fetched_through = -1
        ps.reset_strategy = None
        ps.validating = False
        ps.retry_at = 0.0
        if not ps.failed:
            ps.blocked = False
        ps.wake()
        self.scheduler.wake()

    def request_reset(self, ps: PartitionState, strategy: str) -> None:
        """Forget the position of ``ps`` and look one up per ``strategy``."""
        self.buffer.discard(ps)
        ps.carry = None
        ps.generation += 1
        ps.fetch_position = None
        ps.fetch_epoch = None
        ps.fetched_through = -1
        ps.reset_strategy = strategy
        ps.validating = False
        ps.retry_at = 0.0
        if not ps.failed:
            ps.blocked = False
        self.resolver.wake()

    def out_of_range(
        self, ps: PartitionState, offset: int, log_start: int, high_watermark: int
    ) -> None:
        """The broker said ``offset`` is outside ``ps``'s log: reset, or queue the error."""
        from aiostream_kafka.protocol.error_codes import OffsetOutOfRangeError

        policy = self.config.auto_offset_reset
        if policy == "none":
            error = OffsetOutOfRangeError(
                f"{ps.tp.topic}[{ps.tp.partition}]: fetch offset {offset} is out of range "
                f"(log start {log_start}, high watermark {high_watermark}) and "
                "auto_offset_reset='none'; seek to a valid offset"
            )
            self.buffer.add_error(ps, PendingError(error, offset))
            return
        log.info(
            "%s[%d]: fetch offset %d out of range (log start %d, high watermark %d); "
            "resetting to %s",
            ps.tp.topic,
            ps.tp.partition,
            offset,
            log_start,
            high_watermark,
            policy,
        )
        self.request_reset(ps, policy)

    def fail_partition(self, ps: PartitionState, error: KafkaError) -> None:
        """Stop fetching ``ps`` for good and queue ``error`` for its iterators."""
        if ps.failed:
            return
        self.buffer.add_error(ps, PendingError(error, ps.delivered_position(), fatal=True))

    def stop_fetching(self) -> None:
        """Send no more Fetch requests; records already fetched are still handed out."""
        self.draining = True

    def has_undelivered(self) -> bool:
        """Whether any assigned partition still holds fetched records not handed out."""
        return any(ps.has_data() for ps in self.partitions.values())

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching and handing out ``partitions``; what is buffered stays."""
        for tp in partitions:
            ps = self.state(tp)
            ps.user_paused = True
            ps.paused = True

    def hold(self, partitions: Iterable[TopicPartition]) -> None:
        """A revocation of ``partitions`` starts: stop fetching and handing them out now
        (as :meth:`pause`, which the iterators' hot path checks), and let no
        :meth:`resume` undo it until :meth:`revoke` drops them. Unassigned ones are
        skipped."""
        for tp in partitions:
            ps = self.partitions.get(tp)
            if ps is not None:
                ps.paused = True
                self.held.add(tp)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        """Undo :meth:`pause` (not for partitions being revoked: see :meth:`hold`, nor
        throttled ones: see :meth:`throttle`)."""
        for tp in partitions:
            ps = self.state(tp)
            ps.user_paused = False
            self._unpause(ps)

    def throttle(self, partitions: Iterable[TopicPartition]) -> None:
        """``process()``'s backpressure: stop fetching and handing out ``partitions`` (as
        :meth:`pause`) until :meth:`unthrottle`; unassigned ones are skipped. Independent
        of the user's :meth:`pause`/:meth:`resume`."""
        for tp in partitions:
            ps = self.partitions.get(tp)
            if ps is not None:
                ps.throttled = True
                ps.paused = True

    def unthrottle(self, partitions: Iterable[TopicPartition]) -> None:
        """Undo :meth:`throttle` (a partition the user paused stays paused)."""
        for tp in partitions:
            ps = self.partitions.get(tp)
            if ps is not None and ps.throttled:
                ps.throttled = False
                self._unpause(ps)

    # -- for Consumer.process() (runner.FetchControl) --------------------------------------

    def assigned_partitions(self) -> frozenset[TopicPartition]:
        """The partitions the engine fetches for now."""
        return frozenset(self.partitions)

    def delivered(self, tp: TopicPartition) -> int | None:
        """The offset after the last record of ``tp`` handed out (None: unassigned, or
        no position yet)."""
        ps = self.partitions.get(tp)
        return None if ps is None else ps.delivered_position()

    def rewind(self, tp: TopicPartition, offset: int, completed: frozenset[int]) -> None:
        """A ``process()`` run ends with records of ``tp`` from ``offset`` on taken and
        not all finished: hand them out again from ``offset`` (a seek, when the position
        is past it) and keep ``completed`` (the offsets beyond it already finished) for
        the next run (:meth:`carried`). Unassigned partitions are skipped."""
        ps = self.partitions.get(tp)
        if ps is None:
            return
        position = ps.delivered_position()
        if position is not None and position > offset:
            self.reposition(ps, offset, None)
        ps.carry = (offset, completed)

    def carried(self, tp: TopicPartition) -> tuple[int, frozenset[int]] | None:
        """What :meth:`rewind` left for ``tp``, while its position is still there."""
        ps = self.partitions.get(tp)
        if ps is None or ps.carry is None:
            return None
        position = ps.delivered_position()
        return ps.carry if position is None or position == ps.carry[0] else None

    def _unpause(self, ps: PartitionState) -> None:
        if ps.paused and not ps.user_paused and not ps.throttled and ps.tp not in self.held:
            ps.paused = False
            self.buffer.resumed(ps)
            ps.wake()

    async def next_partition(self) -> PartitionState | None:
        """For the merged iterators: the next partition with deliverable data, waiting for
        one; None once the consumer is closed.

        Raises:
            BaseException: the engine's fatal error.
        """
        buffer = self.buffer
        while True:
            if self.fatal is not None:
                raise reraisable(self.fatal)
            if self.closed:
                return None
            ps = buffer.next_ready()
            if ps is not None:
                self._idle_logged = False
                return ps
            self.waiting += 1
            try:
                async with asyncio.timeout(IDLE_LOG_S):
                    await buffer.wait_data()
            except TimeoutError:
                self._log_idle()
            finally:
                self.waiting -= 1

    def _log_idle(self) -> None:
        """Say that an iterator has waited ``IDLE_LOG_S`` for records, and why it may."""
        states = list(self.partitions.values())
        at_end = sum(
            1
            for ps in states
            if ps.high_watermark >= 0 and ps.delivered_position() == ps.high_watermark
        )
        paused = sum(1 for ps in states if ps.paused)
        level = logging.DEBUG if self._idle_logged else logging.INFO
        self._idle_logged = True
        log.log(
            level,
            "consumer idle: no records for %g s from %d assigned partition(s): %d read to "
            "their end (nothing new in them), %d paused%s",
            IDLE_LOG_S,
            len(states),
            at_end,
            paused,
            "; waiting for the group to assign some" if self.subscribed and not states else "",
        )


def _check_partition(tp: Any) -> TopicPartition:
    if (
        not isinstance(tp, tuple)
        or len(tp) != 2
        or not isinstance(tp[0], str)
        or not tp[0]
        or isinstance(tp[1], bool)
        or not isinstance(tp[1], int)
        or tp[1] < 0
    ):
        raise ValueError(f"expected TopicPartition(topic: str, partition: int >= 0), got {tp!r}")
    return tp if isinstance(tp, TopicPartition) else TopicPartition(tp[0], tp[1])
