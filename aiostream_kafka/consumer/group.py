"""``ConsumerGroup``: a consumer's group membership, commits and health.

It connects the :class:`~aiostream_kafka.group.coordinator.GroupCoordinator` (membership)
to the :class:`~aiostream_kafka.consumer.engine.FetchEngine` (fetching):

* **assigned** partitions get their committed offsets (else ``auto_offset_reset``) and are
  added to the engine, then the user's ``on_assigned`` runs;
* **revoked** partitions first have their pending commits flushed (staged by
  :meth:`Consumer.committing`, or delivered positions with ``enable_auto_commit``), then
  leave the engine (their ``partitioned_stream`` iterator ends, prefetched records are
  dropped), then ``on_revoked`` runs -- all before the membership goes on, so the next
  owner starts exactly where this one committed;
* **lost** partitions (the membership expired) leave the engine without committing, then
  ``on_lost`` runs.

One committer task, owned here, commits on ``auto_commit_interval_ms`` and when
:meth:`Consumer.committing` asks. Commits are serialized by a lock, so they are never
reordered: a later commit always carries offsets at least as new as an earlier one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import stop_tasks
from aiostream_kafka.errors import CommitFailedError, ConfigError, KafkaError
from aiostream_kafka.group.assignors import assignor_for
from aiostream_kafka.group.coordinator import GroupConfig, GroupCoordinator, GroupState
from aiostream_kafka.structs import TopicPartition

from .engine import FetchEngine

log = logging.getLogger(__name__)

Callback = Callable[[frozenset[TopicPartition]], Awaitable[None]]

GROUP_OPTIONS = (
    "group_instance_id",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "partition_assignment_strategy",
    "auto_commit_interval_ms",
)


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    """A consumer's liveness, for a service's health probe.

    ``state`` is ``"stable"``, ``"rebalancing"``, ``"unjoined"``, ``"fenced"``, ``"failed"``
    or ``"closed"`` for a group member, ``"assigned"`` for a consumer without a group.
    Times are ``time.time()`` values (None: never).
    """

    state: str
    last_heartbeat_at: float | None
    last_fetch_at: float | None
    error: BaseException | None
    generation: int | None = None
    member_id: str | None = None
    assignment: frozenset[TopicPartition] = frozenset()

    @property
    def healthy(self) -> bool:
        """False once the member is fenced or failed, or the engine stopped on an error."""
        return self.error is None and self.state not in ("fenced", "failed", "closed")


def group_config(
    group_id: str, options: dict[str, object], metadata_max_age_ms: int, default_api_timeout_ms: int
) -> tuple[GroupConfig, list[str], int]:
    """Build the group settings from the consumer's options (removing them from
    ``options``); return them, the assignor names and ``auto_commit_interval_ms``."""
    strategy = options.pop("partition_assignment_strategy", "cooperative-sticky")
    names = [strategy] if isinstance(strategy, str) else list(strategy)  # type: ignore[call-overload]
    for name in names:
        assignor_for(name)  # ConfigError for an unknown one
    interval = options.pop("auto_commit_interval_ms", 5_000)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
        raise ConfigError(f"auto_commit_interval_ms must be a positive int, got {interval!r}")
    config = GroupConfig(
        group_id=group_id,
        group_instance_id=options.pop("group_instance_id", None),  # type: ignore[arg-type]
        session_timeout_ms=options.pop("session_timeout_ms", 45_000),  # type: ignore[arg-type]
        heartbeat_interval_ms=options.pop("heartbeat_interval_ms", 3_000),  # type: ignore[arg-type]
        rebalance_timeout_ms=options.pop("max_poll_interval_ms", 300_000),  # type: ignore[arg-type]
        metadata_check_interval_ms=metadata_max_age_ms,
        default_api_timeout_ms=default_api_timeout_ms,
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
        self.coordinator = GroupCoordinator(
            cluster, config, [assignor_for(n) for n in assignor_names], self
        )
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.on_assigned: Callback | None = None
        self.on_revoked: Callback | None = None
        self.on_lost: Callback | None = None
        self.committed_offsets: dict[TopicPartition, int] = {}
        self.staged: dict[TopicPartition, int] = {}
        self._commit_lock = asyncio.Lock()
        self._commit_now = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self.subscribed = False

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
            self._committer = asyncio.create_task(
                self._commit_loop(), name=f"group {self.coordinator.config.group_id} committer"
            )

    async def stop(self) -> None:
        """Stop the committer and the membership tasks without committing or leaving
        (what :meth:`close` does when its time ran out). Idempotent."""
        committer, self._committer = self._committer, None
        await stop_tasks([committer])
        await self.coordinator.stop()

    async def close(self, leave: bool | None = None) -> None:
        """Commit what is pending, give up the partitions and leave the group."""
        committer, self._committer = self._committer, None
        await stop_tasks([committer])
        if self.subscribed:
            await self.coordinator.close(leave=leave)  # revokes: pending commits are flushed

    # -- the AssignmentListener side --------------------------------------------------------

    async def partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        committed = await self.coordinator.committed(partitions)
        positions = {tp: om.offset for tp, om in committed.items() if om is not None}
        for tp, offset in positions.items():
            self.committed_offsets[tp] = offset
        self.engine.add_partitions(sorted(partitions), positions)
        if self.on_assigned is not None:
            await self.on_assigned(partitions)

    async def partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        try:
            await self._commit(lambda: self._pending_offsets(partitions))
        except KafkaError as exc:
            log.warning("group %s: commit before revoking %s failed: %s",
                        self.coordinator.config.group_id, sorted(partitions), exc)  # fmt: skip
        self._forget(partitions)
        if self.on_revoked is not None:
            await self.on_revoked(partitions)

    async def partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._forget(partitions)
        if self.on_lost is not None:
            await self.on_lost(partitions)

    def member_failed(self, error: KafkaError) -> None:
        self.engine.fail(error)

    def _forget(self, partitions: frozenset[TopicPartition]) -> None:
        self.engine.revoke(partitions)
        for tp in partitions:
            self.staged.pop(tp, None)
            self.committed_offsets.pop(tp, None)

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

    def _pending_offsets(self, partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        pending = {tp: off for tp, off in self.staged.items() if tp in partitions}
        if self.auto_commit:
            for tp, off in self.delivered_offsets(partitions).items():
                pending[tp] = max(off, pending.get(tp, off))
        return pending

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
                if not explicit and self.committed_offsets.get(tp) == om.offset:
                    continue  # nothing new for this partition
                wanted[tp] = om
            if not wanted:
                return
            await self.coordinator.commit(wanted)
            for tp, om in wanted.items():
                self.committed_offsets[tp] = om.offset
                if self.staged.get(tp, -1) <= om.offset:
                    self.staged.pop(tp, None)

    def stage(self, tp: TopicPartition, next_offset: int) -> None:
        """Record that everything of ``tp`` before ``next_offset`` is processed."""
        if next_offset > self.staged.get(tp, -1):
            self.staged[tp] = next_offset

    def request_commit(self) -> None:
        """Ask the committer task to commit what is staged, soon."""
        self._commit_now.set()

    async def flush_staged(self) -> None:
        """Commit what is staged now (for partitions still owned)."""
        owned = self.coordinator.owned
        await self._commit(lambda: {tp: off for tp, off in self.staged.items() if tp in owned})

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
        return ConsumerHealth(
            state=c.state.value,
            last_heartbeat_at=c.last_heartbeat_at,
            last_fetch_at=last_fetch,
            error=error,
            generation=c.generation,
            member_id=c.member_id or None,
            assignment=c.owned,
        )
