"""``ConsumerGroup``: a consumer's group membership, commits and health.

It connects the membership (a :class:`~aiostream_kafka.group.membership.GroupMembership`:
the classic :class:`~aiostream_kafka.group.coordinator.GroupCoordinator`, or with
``group_protocol="consumer"`` the KIP-848
:class:`~aiostream_kafka.group.consumer_protocol.ConsumerProtocolMember`) to the
:class:`~aiostream_kafka.consumer.engine.FetchEngine` (fetching):

* **assigned** partitions get their committed offsets (else ``auto_offset_reset``) and are
  added to the engine, then the user's ``on_assigned`` runs;
* **revoked** partitions, all before the membership goes on (so the next owner starts
  exactly where this one stopped), in this order:

  1. no record of them is handed out any more, nor fetched (the engine holds them: a
     ``resume()`` does not undo it);
  2. the records of them that :meth:`Consumer.committing` loops hold (handed out, the loop
     has not asked for the next one) are waited for, so that they count as processed --
     revocation happens between records, as in Java's and librdkafka's clients -- up to
     half the rebalance timeout (``max_poll_interval_ms``; half of ``close``'s timeout
     when closing; a loop's own records are not waited for by a ``close()`` it calls);
  3. ``on_revoked`` runs while they are still owned and their delivered positions known,
     so ``await consumer.commit()`` inside it commits them (bounded by what is left of
     the rebalance timeout: one still running then is cancelled and fails the consumer);
  4. what is still pending for them is committed (staged by :meth:`Consumer.committing`,
     or delivered positions with ``enable_auto_commit``), unless ``on_revoked`` committed
     it already;
  5. they leave the engine (their ``partitioned_stream`` iterator ends, prefetched records
     are dropped), even when a step above failed or was cancelled;
* **lost** partitions (the membership expired, or the member left on a poll timeout)
  leave the engine without committing, then ``on_lost`` runs.

Never an owned partition that nobody reads: a committed-offset lookup that fails during
an assignment is retried while the error is retriable (``health()`` shows it meanwhile)
and otherwise fails the consumer, as an ``on_assigned``/``on_revoked``/``on_lost`` that
raises does (``RebalanceCallbackError``): the iterators raise it, ``health()`` is unhealthy.

Poll liveness: :meth:`stalled` tells the coordinator how long the application has not
asked for records (no iterator waiting and none handed out a record since the last
sample) or one of its callbacks has been running; past ``max_poll_interval_ms`` the
member leaves the group until the application asks again.

One committer task, owned here, commits on ``auto_commit_interval_ms`` and when
:meth:`Consumer.committing` asks. Commits are serialized by a lock, so they are never
reordered: a later commit always carries offsets at least as new as an earlier one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import CommitFailedError, ConfigError, KafkaError
from aiostream_kafka.group.assignors import assignor_for
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.consumer_protocol import ConsumerProtocolMember
from aiostream_kafka.group.coordinator import GroupCoordinator
from aiostream_kafka.group.membership import GroupMembership, GroupState
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.structs import TopicPartition

from .config import GroupOptions
from .engine import FetchEngine
from .errors import RebalanceCallbackError
from .processing.health import ProcessHealth

log = logging.getLogger(__name__)

Callback = Callable[[frozenset[TopicPartition]], Awaitable[None]]


class Hand:
    """What one :meth:`Consumer.committing` loop holds: the partition of the record it
    handed out and has not finished (None: none), and the task running the loop."""

    __slots__ = ("task", "tp")

    def __init__(self) -> None:
        self.tp: TopicPartition | None = None
        self.task: asyncio.Task[object] | None = None


class PartitionWatcher(Protocol):
    """What a :meth:`Consumer.process` run is told of its group's partitions (registered
    with :meth:`ConsumerGroup.watch`); each call is synchronous, so nothing happens
    between it and the step of the rebalance it belongs to."""

    def assigned(self, committed: Mapping[TopicPartition, OffsetAndMetadata | None]) -> None:
        """Partitions were assigned, with their committed offsets (and metadata), before
        any record of them is fetched."""

    def revoking(self, partitions: frozenset[TopicPartition]) -> None:
        """``partitions`` are being revoked: they are held (no record handed out) and the
        revocation now waits for the hands holding their records."""

    def forgotten(self, partitions: frozenset[TopicPartition]) -> None:
        """``partitions`` left (after the revocation's commit, or lost without one)."""

    def oldest_handler_s(self) -> float:
        """How long its longest-running handler has run (0.0: none runs); poll liveness
        counts that as the application not asking for records."""


GROUP_OPTIONS = tuple(GroupOptions.__dataclass_fields__)
GROUP_PROTOCOLS = ("classic", "consumer")
#: Options of the classic protocol that the consumer protocol (KIP-848) moved to the
#: broker, each with what replaces it.
CLASSIC_ONLY_OPTIONS = {
    "session_timeout_ms": (
        "the session timeout is the group config consumer.session.timeout.ms (broker default "
        "group.consumer.session.timeout.ms, 45 s), set with Admin.incremental_alter_configs on "
        "ConfigResource(ConfigResourceType.GROUP, group_id)"
    ),
    "heartbeat_interval_ms": (
        "the broker tells each member its heartbeat interval: the group config "
        "consumer.heartbeat.interval.ms (broker default group.consumer.heartbeat.interval.ms, "
        "5 s), set with Admin.incremental_alter_configs on ConfigResource(ConfigResourceType."
        "GROUP, group_id)"
    ),
    "partition_assignment_strategy": (
        "the broker assigns the partitions: choose its assignor with group_remote_assignor "
        '("uniform" or "range"; the broker offers those of group.consumer.assignors)'
    ),
}


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    """A consumer's liveness, for a service's health probe.

    ``state`` is ``"stable"``, ``"rebalancing"``, ``"unjoined"``, ``"fenced"``, ``"failed"``
    or ``"closed"`` for a group member, ``"assigned"`` for a consumer without a group.
    Times are ``time.time()`` values (None: never). ``assignment`` is what the member
    owns, ``fetching`` what the engine fetches (owned partitions missing from it are not
    read yet: an assignment in progress, or a ``reason``); ``idle_s`` is how long the
    application has not asked for records (sampled every heartbeat interval; None
    without a group); ``last_progress_at`` the last Fetch that returned records or found
    a partition read up to its high watermark; ``reason`` says what keeps the member
    from consuming in a way a restart may cure (it left its group on a poll timeout, its
    committed offsets cannot be read); ``broker_errors`` the brokers failing the fetches
    of their partitions right now (their partitions are not read meanwhile; a restart
    would not help, so they do not make the member unhealthy); ``missing_topics`` the
    subscribed topics the cluster does not have (a typo, or not created yet: nothing is
    read from them, and a WARNING names them every 30 s; a restart would not help either).
    ``member_epoch`` is the KIP-848 member epoch under ``group_protocol="consumer"`` (None
    under the classic protocol; ``generation`` then carries the same number).
    ``processing`` describes a running :meth:`Consumer.process` (None when none runs):
    handlers in flight, records waiting, the oldest handler's age, the gaps between
    committable and finished offsets (:class:`~.processing.runner.ProcessHealth`).
    ``problem`` is the old name of ``reason`` (deprecated: reading it warns).
    """

    state: str
    last_heartbeat_at: float | None
    last_fetch_at: float | None
    error: BaseException | None
    generation: int | None = None
    member_id: str | None = None
    assignment: frozenset[TopicPartition] = frozenset()
    fetching: frozenset[TopicPartition] = frozenset()
    idle_s: float | None = None
    reason: str | None = None
    last_progress_at: float | None = None
    broker_errors: tuple[str, ...] = ()
    missing_topics: frozenset[str] = frozenset()
    member_epoch: int | None = None
    processing: ProcessHealth | None = None

    @property
    def healthy(self) -> bool:
        """False once the member is fenced or failed, the engine stopped on an error, or
        something keeps it from consuming (``reason``: it left the group on a poll
        timeout, or its committed offsets cannot be read)."""
        return (
            self.error is None
            and self.reason is None
            and self.state not in ("fenced", "failed", "closed")
        )

    @property
    def problem(self) -> str | None:
        """Deprecated: the old name of :attr:`reason` (emits ``DeprecationWarning``)."""
        warnings.warn(
            "ConsumerHealth.problem is deprecated: use ConsumerHealth.reason",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.reason


def broker_errors(engine: FetchEngine) -> tuple[str, ...]:
    """The brokers failing the fetches of their partitions now (a version or decoding
    error, not a passing network error), each with its error."""
    return tuple(
        f"broker {node}: {fetcher.broker_error}"
        for node, fetcher in sorted(engine.fetchers.items())
        if fetcher.broker_error is not None
    )


def group_config(
    group_id: str, options: GroupOptions, metadata_max_age_ms: int, default_api_timeout_ms: int
) -> tuple[GroupConfig, list[str], int]:
    """Check the group options and build the group settings from them; return them, the
    assignor names and ``auto_commit_interval_ms``.

    Raises:
        ConfigError: an unknown assignor, or an invalid value.
    """
    protocol = options.group_protocol
    if protocol not in GROUP_PROTOCOLS:
        raise ConfigError(
            f'group_protocol must be "classic" or "consumer" (KIP-848, Kafka 4.0+), '
            f"got {protocol!r}"
        )
    remote = options.group_remote_assignor
    if protocol == "consumer":
        changed = set(options.changed())
        for name, replacement in CLASSIC_ONLY_OPTIONS.items():
            if name in changed:
                raise ConfigError(
                    f'{name} does not apply with group_protocol="consumer": {replacement}'
                )
        if remote is not None and (not isinstance(remote, str) or not remote):
            raise ConfigError(
                'group_remote_assignor must be a broker-side assignor name ("uniform", "range") '
                f"or None (the broker's default), got {remote!r}"
            )
    elif remote is not None:
        raise ConfigError(
            "group_remote_assignor is the broker-side assignor of the consumer group protocol: "
            'it needs group_protocol="consumer" (the classic protocol assigns in the client: '
            "partition_assignment_strategy)"
        )
    strategy = options.partition_assignment_strategy
    names = [strategy] if isinstance(strategy, str) else list(strategy)
    for name in names:
        assignor_for(name)  # ConfigError for an unknown one
    interval = options.auto_commit_interval_ms
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
        raise ConfigError(f"auto_commit_interval_ms must be a positive int, got {interval!r}")
    config = GroupConfig(
        group_id=group_id,
        group_instance_id=options.group_instance_id,
        session_timeout_ms=options.session_timeout_ms,
        heartbeat_interval_ms=options.heartbeat_interval_ms,
        rebalance_timeout_ms=options.max_poll_interval_ms,
        metadata_check_interval_ms=metadata_max_age_ms,
        default_api_timeout_ms=default_api_timeout_ms,
        protocol=protocol,
        remote_assignor=remote,
    )
    return config, names, interval


class ConsumerGroup:
    """Group membership of one consumer; see the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        engine: FetchEngine,
        config: GroupConfig,
        assignor_names: Sequence[str],
        *,
        auto_commit: bool,
        auto_commit_interval_ms: int,
    ) -> None:
        self.engine = engine
        self.coordinator: GroupMembership
        if config.protocol == "consumer":
            self.coordinator = ConsumerProtocolMember(cluster, config, self)
        else:
            self.coordinator = GroupCoordinator(
                cluster, config, [assignor_for(n) for n in assignor_names], self
            )
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.on_assigned: Callback | None = None
        self.on_revoked: Callback | None = None
        self.on_lost: Callback | None = None
        self.committed_offsets: dict[TopicPartition, int] = {}
        # The metadata of committed offsets (read on assignment, or of our last commit).
        self.committed_metadata: dict[TopicPartition, str | None] = {}
        self.staged: dict[TopicPartition, int] = {}
        # Metadata staged with an offset (Consumer.process: the completed offsets beyond it).
        self.staged_metadata: dict[TopicPartition, str] = {}
        self._watchers: list[PartitionWatcher] = []
        self._commit_lock = asyncio.Lock()
        self._commit_now = asyncio.Event()
        # The committer task (auto-commit and staged commits); a crash (a bug) fails the
        # consumer rather than silently ending auto-commit.
        self._scope = TaskScope(f"group {config.group_id} committer", on_fail=engine.fail)
        self.subscribed = False
        # Poll liveness samples (see stalled()).
        self._last_demand = time.monotonic()
        self._progress: dict[TopicPartition, tuple[int, int]] = {}
        self._callback_since: float | None = None
        self._callback_name = ""
        # Why owned partitions are not being read (a failing committed-offset lookup).
        self.assign_problem: str | None = None
        # The records committing() loops hold (see partitions_revoked); revocations in
        # progress wait on _handed_back while _revoking.
        self._hands: set[Hand] = set()
        self._handed_back = asyncio.Event()
        self._revoking = 0
        # Set by close(): how long its revocation waits for records held (seconds).
        self._close_hand_back_s: float | None = None

    # -- subscription and lifecycle --------------------------------------------------------

    def subscribe(
        self,
        topics: Collection[str],
        pattern: str | None,
        on_assigned: Callback | None,
        on_revoked: Callback | None,
        on_lost: Callback | None,
    ) -> None:
        self.coordinator.subscribe(topics, pattern=pattern)
        self.on_assigned, self.on_revoked, self.on_lost = on_assigned, on_revoked, on_lost
        if not self.subscribed:
            self.subscribed = True
            self.coordinator.start()
            self._scope.spawn(
                self._commit_loop,
                name=f"group {self.coordinator.config.group_id} committer",
                crash=Crash.FAIL_OWNER,
            )

    async def stop(self) -> None:
        """Stop the committer and the membership tasks without committing or leaving
        (what :meth:`close` does when its time ran out). Idempotent."""
        await self._scope.aclose()
        await self.coordinator.stop()

    async def close(self, leave: bool | None = None, *, hand_back_s: float | None = None) -> None:
        """Commit what is pending, give up the partitions and leave the group.
        ``hand_back_s`` bounds the wait for records :meth:`Consumer.committing` loops hold
        (default: half the rebalance timeout)."""
        await self._scope.aclose()
        if self.subscribed:
            self._close_hand_back_s = hand_back_s
            await self.coordinator.close(leave=leave)  # revokes: pending commits are flushed

    # -- the AssignmentListener side --------------------------------------------------------

    async def partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        committed = await self._committed_for(partitions)
        positions = {tp: om.offset for tp, om in committed.items() if om is not None}
        for tp, offset in positions.items():
            self.committed_offsets[tp] = offset
        for tp, om in committed.items():
            if om is not None:
                self.committed_metadata[tp] = om.metadata
        for watcher in list(self._watchers):
            watcher.assigned(committed)
        self.engine.add_partitions(sorted(partitions), positions)
        await self._user_callback("on_assigned", self.on_assigned, partitions)

    async def _committed_for(
        self, partitions: frozenset[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets of newly assigned ``partitions``: retried (heartbeats go
        on meanwhile) while the error is retriable; otherwise the consumer fails with it."""
        group = self.coordinator.config.group_id

        async def note(error: Exception) -> None:
            self.assign_problem = f"committed offsets not available yet, retrying: {error}"
            log.warning("group %s: %s", group, self.assign_problem)

        try:
            committed = await retry_until(
                f"group {group!r}: committed offsets of {len(partitions)} assigned partitions",
                lambda: self.coordinator.offsets.committed(partitions),
                deadline=None,  # each look-up has its own (default_api_timeout_ms)
                backoff=Backoff.of(self.coordinator.config),
                retriable=lambda error: isinstance(error, KafkaError) and error.retriable,
                between=note,
            )
        except KafkaError as exc:
            log.error("group %s: cannot read the committed offsets of %d assigned "
                      "partitions: %s", group, len(partitions), exc)  # fmt: skip
            self.assign_problem = f"committed offsets not readable: {exc}"
            self.engine.fail(exc)
            raise
        self.assign_problem = None
        return committed

    async def partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        """Give ``partitions`` up in the order of the module docstring: hold, wait for
        the records held of them, ``on_revoked``, commit, drop. Bounded by the rebalance
        timeout (the commit by its own ``default_api_timeout_ms``); a failed commit is
        logged (the next owner starts from the last one that landed)."""
        budget_s = self.coordinator.config.rebalance_timeout_ms / 1000
        deadline = time.monotonic() + budget_s
        wait_s = budget_s / 2 if self._close_hand_back_s is None else self._close_hand_back_s
        self.engine.hold(partitions)
        try:
            for watcher in list(self._watchers):
                watcher.revoking(partitions)
            await self._await_hand_back(partitions, time.monotonic() + min(wait_s, budget_s / 2))
            await self._user_callback(
                "on_revoked", self.on_revoked, partitions, deadline - time.monotonic()
            )
            try:
                await self._commit(lambda: self._pending_offsets(partitions))
            except KafkaError as exc:
                log.warning("group %s: commit before revoking %s failed: %s",
                            self.coordinator.config.group_id, sorted(partitions), exc)  # fmt: skip
        finally:
            self._forget(partitions)

    def watch(self, watcher: PartitionWatcher) -> None:
        """Tell ``watcher`` of assignments and revocations from now on (until
        :meth:`unwatch`)."""
        self._watchers.append(watcher)

    def unwatch(self, watcher: PartitionWatcher) -> None:
        """Stop telling ``watcher`` (a no-op when it is not watching)."""
        with contextlib.suppress(ValueError):
            self._watchers.remove(watcher)

    def hand(self) -> Hand:
        """A :class:`Hand` for a new :meth:`Consumer.committing` loop (drop it with
        :meth:`drop_hand` when the loop ends)."""
        hand = Hand()
        self._hands.add(hand)
        return hand

    def handed_back(self, hand: Hand) -> None:
        """The loop of ``hand`` finished its record (already staged)."""
        hand.tp = None
        if self._revoking:
            self._handed_back.set()

    def drop_hand(self, hand: Hand) -> None:
        """The loop of ``hand`` ended: its record, if any, is no longer waited for."""
        self._hands.discard(hand)
        self.handed_back(hand)

    def _held(self, partitions: frozenset[TopicPartition]) -> list[Hand]:
        """The hands holding a record of ``partitions`` that a revocation run by this task
        can wait for (not its own: a close() called inside the loop; not a finished
        task's: an abandoned loop)."""
        me = asyncio.current_task()
        return [
            h
            for h in self._hands
            if h.tp in partitions and h.task is not me and (h.task is None or not h.task.done())
        ]

    async def _await_hand_back(self, partitions: frozenset[TopicPartition], until: float) -> None:
        """Wait until no committing() loop holds a record of ``partitions`` (each has
        asked for its next record, so its record is staged), up to monotonic ``until``,
        or until waiting is pointless (the consumer failed, the member left its group)."""
        held = self._held(partitions)
        if not held:
            return
        group = self.coordinator.config.group_id
        log.debug("group %s: revoking %s waits for %d record(s) in processing",
                  group, sorted(partitions), len(held))  # fmt: skip
        self._revoking += 1
        try:
            while held:
                left = until - time.monotonic()
                if left <= 0:
                    log.warning(
                        "group %s: revoking %s without waiting any longer for %d record(s) "
                        "handed out and not finished: they are not committed, their next "
                        "owner reads them again", group, sorted(partitions), len(held),
                    )  # fmt: skip
                    return
                if self.engine.fatal is not None or self.coordinator.left_reason is not None:
                    return
                self._handed_back.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, 0.5)):
                        await self._handed_back.wait()
                held = self._held(partitions)
        finally:
            self._revoking -= 1

    async def partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._forget(partitions)
        await self._user_callback("on_lost", self.on_lost, partitions)

    async def _user_callback(
        self,
        name: str,
        callback: Callback | None,
        partitions: frozenset[TopicPartition],
        limit_s: float | None = None,
    ) -> None:
        """Run the application's ``callback``, timed for poll liveness; one that raises,
        or is still running after ``limit_s`` seconds (then cancelled), fails the consumer
        (its iterators raise :class:`RebalanceCallbackError`; closing it leaves the group,
        and an application that does not close it stops asking for records, so poll
        liveness takes the member out of the group)."""
        if callback is None:
            return
        self._callback_since, self._callback_name = time.monotonic(), name
        limit = asyncio.timeout(None if limit_s is None else max(limit_s, 0.0))
        try:
            async with limit:
                await callback(partitions)
        except Exception as exc:
            what = (
                f"did not return within {limit_s:.1f} s (what was left of the rebalance "
                "timeout, max_poll_interval_ms) and was cancelled"
                if limit.expired() and limit_s is not None
                else f"raised {type(exc).__name__}: {exc}"
            )
            error = RebalanceCallbackError(f"{name}({len(partitions)} partitions) {what}")
            error.__cause__ = exc
            log.error("group %s: %s; the consumer stops", self.coordinator.config.group_id,
                      error, exc_info=exc)  # fmt: skip
            self.engine.fail(error)  # the iterators raise it; the membership goes on
        finally:
            self._callback_since = None

    def member_failed(self, error: KafkaError) -> None:
        self.engine.fail(error)

    def stalled(self) -> tuple[float, str]:
        """See :meth:`AssignmentListener.stalled`: sampled every heartbeat interval, the
        application asks for records when an iterator is waiting for them or one was
        handed out since the previous sample."""
        now = time.monotonic()
        engine = self.engine
        progress = {tp: (id(ps.head), ps.head_index) for tp, ps in engine.partitions.items()}
        previous = self._progress
        # Progress is a record handed out of a partition owned at both samples (partitions
        # coming and going are the group's doing, not the application's).
        if engine.waiting > 0 or any(
            previous.get(tp, mark) != mark for tp, mark in progress.items()
        ):
            self._last_demand = now
        self._progress = progress
        idle = now - self._last_demand
        for watcher in self._watchers:
            busy = watcher.oldest_handler_s()
            if busy > idle:
                idle = busy
                what = "a process() handler has run"
                break
        else:
            what = "the application has not asked for records"
        if self._callback_since is not None and now - self._callback_since > idle:
            return now - self._callback_since, f"its {self._callback_name} callback has run"
        return idle, what

    def idle_s(self) -> float:
        """Seconds since the last sample that saw the application asking for records."""
        return time.monotonic() - self._last_demand

    def _forget(self, partitions: frozenset[TopicPartition]) -> None:
        self.engine.revoke(partitions)
        for tp in partitions:
            self.staged.pop(tp, None)
            self.staged_metadata.pop(tp, None)
            self.committed_offsets.pop(tp, None)
            self.committed_metadata.pop(tp, None)
        for watcher in list(self._watchers):
            watcher.forgotten(partitions)

    # -- commits ---------------------------------------------------------------------------

    def delivered_offsets(
        self, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, int]:
        """The next offset after what the iterators handed out, per owned partition."""
        owned = self.coordinator.owned
        out = {}
        for tp, ps in self.engine.partitions.items():
            if tp not in owned or (partitions is not None and tp not in partitions):
                continue
            position = ps.delivered_position()
            if position is not None:
                out[tp] = position
        return out

    def _pending_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int | OffsetAndMetadata]:
        pending: dict[TopicPartition, int | OffsetAndMetadata] = {
            tp: self._staged_value(tp) for tp in self.staged if tp in partitions
        }
        if self.auto_commit:
            for tp, off in self.delivered_offsets(partitions).items():
                staged = self.staged.get(tp)
                if staged is None or off > staged:
                    pending[tp] = off
        return pending

    def _staged_value(self, tp: TopicPartition) -> int | OffsetAndMetadata:
        offset = self.staged[tp]
        metadata = self.staged_metadata.get(tp)
        return offset if metadata is None else OffsetAndMetadata(offset, metadata)

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit ``offsets`` now (see :meth:`Consumer.commit`)."""
        await self._commit(offsets, explicit=True)

    async def _commit(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
        | Callable[[], Mapping[TopicPartition, int | OffsetAndMetadata]],
        explicit: bool = False,
    ) -> None:
        """Commit ``offsets``, one commit at a time. Background commits pass a function
        that reads the pending progress under the lock: progress read before waiting for
        it could be older than a commit that lands meanwhile and move the group back."""
        async with self._commit_lock:
            if callable(offsets):
                offsets = offsets()
            wanted: dict[TopicPartition, OffsetAndMetadata] = {}
            for tp, value in offsets.items():
                om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
                if om.offset < 0:
                    raise ValueError(f"cannot commit a negative offset for {tp}: {om.offset}")
                if (
                    not explicit
                    and self.committed_offsets.get(tp) == om.offset
                    and (om.metadata is None or self.committed_metadata.get(tp) == om.metadata)
                ):
                    continue  # nothing new for this partition
                wanted[tp] = om
            if not wanted:
                return
            await self.coordinator.offsets.commit(wanted)
            for tp, om in wanted.items():
                self.committed_offsets[tp] = om.offset
                self.committed_metadata[tp] = om.metadata
                staged = self.staged.get(tp, -1)
                if staged < om.offset or (
                    staged == om.offset and self.staged_metadata.get(tp, om.metadata) == om.metadata
                ):
                    self.staged.pop(tp, None)
                    self.staged_metadata.pop(tp, None)

    def stage(self, tp: TopicPartition, next_offset: int, metadata: str | None = None) -> None:
        """Record that everything of ``tp`` before ``next_offset`` is processed (with
        ``metadata``: to be committed with it, replacing what was staged at that offset)."""
        staged = self.staged.get(tp, -1)
        if next_offset > staged or (metadata is not None and next_offset == staged):
            self.staged[tp] = next_offset
            if metadata is None:
                self.staged_metadata.pop(tp, None)
            else:
                self.staged_metadata[tp] = metadata

    def request_commit(self) -> None:
        """Ask the committer task to commit what is staged, soon."""
        self._commit_now.set()

    async def flush_staged(self) -> None:
        """Commit what is staged now (for partitions still owned)."""
        owned = self.coordinator.owned
        await self._commit(
            lambda: {tp: self._staged_value(tp) for tp in self.staged if tp in owned}
        )

    async def _commit_loop(self) -> None:
        while True:
            timeout = self.auto_commit_interval_s if self.auto_commit else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._commit_now.wait()
            self._commit_now.clear()
            if self.coordinator.state is not GroupState.STABLE:
                continue
            try:
                await self._commit(lambda: self._pending_offsets(self.coordinator.owned))
            except CommitFailedError as exc:
                log.info("group %s: commit skipped: %s", self.coordinator.config.group_id, exc)
            except KafkaError as exc:
                log.warning("group %s: commit failed: %s", self.coordinator.config.group_id, exc)

    # -- health ----------------------------------------------------------------------------

    def health(self) -> ConsumerHealth:
        c = self.coordinator
        last_fetch = self.engine.buffer.metrics.last_fetch_at or None
        error: BaseException | None = c.error if c.state in (
            GroupState.FENCED, GroupState.FAILED) else None  # fmt: skip
        if error is None and self.engine.fatal is not None:
            error = self.engine.fatal
        reason = None
        if c.left_reason is not None:
            reason = f"left the group: {c.left_reason}"
        elif self.assign_problem is not None:
            reason = self.assign_problem
        return ConsumerHealth(
            state=c.state.value,
            last_heartbeat_at=c.last_heartbeat_at,
            last_fetch_at=last_fetch,
            error=error,
            generation=c.generation,
            member_id=c.member_id or None,
            assignment=c.owned,
            fetching=frozenset(tp for tp, ps in self.engine.partitions.items() if ps.assigned),
            idle_s=self.idle_s(),
            reason=reason,
            last_progress_at=self.engine.buffer.metrics.last_progress_at or None,
            broker_errors=broker_errors(self.engine),
            missing_topics=c.missing_topics,
            member_epoch=c.member_epoch,
        )
