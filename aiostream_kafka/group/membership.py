"""What a consumer group's membership is to the consumer, whichever protocol runs it.

Two implementations: :class:`~aiostream_kafka.group.coordinator.GroupCoordinator` (the
classic protocol: JoinGroup, SyncGroup, Heartbeat; the leader member assigns) and
:class:`~aiostream_kafka.group.consumer_protocol.ConsumerProtocolMember` (KIP-848:
ConsumerGroupHeartbeat; the broker assigns and the member reconciles). The consumer
(``consumer.group.ConsumerGroup``) holds a :class:`GroupMembership` and hands it an
:class:`AssignmentListener`; committing (``group.offsets``) needs the smaller
:class:`~aiostream_kafka.group.offsets.Membership`.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from collections.abc import Collection
from typing import ClassVar, Protocol

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import TaskScope
from aiostream_kafka.errors import KafkaError, reraisable
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.structs import TopicPartition

__all__ = ["AssignmentListener", "GroupMembership", "GroupState", "MemberBase"]

_GROUP_KEY_TYPE = 0


class GroupState(enum.Enum):
    """Where the member stands; ``FENCED`` and ``FAILED`` are final."""

    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FENCED = "fenced"
    FAILED = "failed"
    CLOSED = "closed"


class AssignmentListener(Protocol):
    """What the consumer does when its partitions change. Each call is awaited before the
    membership goes on, so ``partitions_revoked`` can flush commits first."""

    async def partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None: ...

    async def partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None: ...

    async def partitions_lost(self, partitions: frozenset[TopicPartition]) -> None: ...

    def member_failed(self, error: KafkaError) -> None:
        """The member stopped for good (fenced, not authorized, a fatal error): the
        consumer's iterators must raise ``error`` rather than wait for records."""

    def stalled(self) -> tuple[float, str]:
        """How long (seconds) the application has made no progress, and what: not asking
        for records, or a rebalance callback of its own still running. Sampled at every
        heartbeat tick; ``max_poll_interval_ms`` applies to it."""


class GroupMembership(Protocol):
    """A member of one consumer group, as the consumer drives and reads it."""

    config: GroupConfig
    #: Committing and reading the group's offsets as this member.
    offsets: GroupOffsets
    state: GroupState
    #: The error that failed the member (see ``state``), if any.
    error: KafkaError | None
    member_id: str
    #: The partitions this member owns now.
    owned: frozenset[TopicPartition]
    #: ``time.time()`` of the last heartbeat the coordinator accepted (None: none yet).
    last_heartbeat_at: float | None
    #: Why the member left the group on a poll timeout (None: it did not).
    left_reason: str | None
    missing_topics: frozenset[str]
    rebalances: int
    poll_timeouts: int

    @property
    def generation(self) -> int:
        """The classic generation, or the KIP-848 member epoch (-1: not a member now)."""

    @property
    def member_epoch(self) -> int | None:
        """The KIP-848 member epoch (None under the classic protocol)."""

    @property
    def subscription(self) -> frozenset[str]:
        """The topics subscribed to now."""

    @property
    def running(self) -> bool:
        """True from :meth:`start` to :meth:`stop`."""

    def subscribe(
        self, topics: Collection[str] = (), pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Subscribe to ``topics`` or ``pattern``; a started member updates its group."""

    def start(self) -> None:
        """Start the membership's tasks (joining happens in the background)."""

    async def wait_stable(self, timeout_s: float | None = None) -> None:
        """Wait until the member has joined and reconciled its assignment."""

    async def stop(self) -> None:
        """Stop the membership's tasks, nothing else (idempotent)."""

    async def close(self, *, leave: bool | None = None) -> None:
        """Stop, give up the partitions (revoke: pending commits land) and leave."""

    def final_error(self) -> KafkaError | None:
        """The error that ended the membership for good (fenced, failed), if any."""


class MemberBase:
    """What both memberships do alike: state changes and waiting for them, the coordinator
    look-up, calling the listener, failing, stopping the tasks, and the poll-timeout
    notice. A subclass sets the attributes below in its ``__init__``."""

    #: The logger of the protocol's module (a subclass names its own).
    _log: ClassVar[logging.Logger] = logging.getLogger(__name__)
    cluster: Cluster
    config: GroupConfig
    listener: AssignmentListener
    state: GroupState
    error: KafkaError | None
    member_id: str
    owned: frozenset[TopicPartition]
    poll_timeouts: int
    _changed: asyncio.Condition
    _coordinator_id: int | None
    _scope: TaskScope | None
    _closing: bool

    @property
    def running(self) -> bool:
        """True from :meth:`start` to :meth:`stop`."""
        return self._scope is not None and not self._scope.closed

    async def stop(self) -> None:
        """Stop the member's tasks, nothing else (idempotent)."""
        self._closing = True
        if self._scope is not None:
            await self._scope.aclose()

    async def _set_state(self, state: GroupState, error: KafkaError | None = None) -> None:
        self.state = state
        if error is not None:
            self.error = error
        async with self._changed:
            self._changed.notify_all()

    def final_error(self) -> KafkaError | None:
        """The error that ended the membership for good (fenced, failed), if any."""
        if self.state in (GroupState.FENCED, GroupState.FAILED):
            return self.error
        return None

    def _settled(self) -> bool:
        """Whether a STABLE member has nothing more to do (no rejoin pending)."""
        return True

    async def wait_stable(self, timeout_s: float | None = None) -> None:
        """Wait until the member has joined and has (reconciled) its assignment.

        Raises:
            FencedMemberError, KafkaError: the member failed for good (see ``error``).
            TimeoutError: not stable within ``timeout_s``.
        """
        async with asyncio.timeout(timeout_s):
            while True:
                final = self.final_error()
                if final is not None:
                    raise reraisable(final)
                if self.state is GroupState.STABLE and self._settled():
                    return
                async with self._changed:
                    await self._changed.wait()

    async def coordinator_node(self) -> int:
        """The group coordinator's broker id (looked up once, again after a loss)."""
        if self._coordinator_id is None:
            node = await self.cluster.find_coordinator(self.config.group_id, _GROUP_KEY_TYPE)
            self._coordinator_id = node
            self._log.debug("group %s: coordinator is broker %d", self.config.group_id, node)
            return node
        return self._coordinator_id

    def coordinator_lost(self, why: object) -> None:
        """Forget the coordinator: the next request looks it up again."""
        if self._coordinator_id is not None:
            self._log.info("group %s: coordinator %s lost: %s", self.config.group_id,
                     self._coordinator_id, why)  # fmt: skip
        self._coordinator_id = None

    async def _call_listener(self, method: str, partitions: frozenset[TopicPartition]) -> None:
        try:
            await getattr(self.listener, method)(partitions)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The membership must go on: a failing callback is the consumer's to report.
            self._log.exception("group %s: %s(%d partitions) failed", self.config.group_id,
                          method, len(partitions))  # fmt: skip

    async def _crashed(self, exc: Exception) -> None:
        """A task of the member crashed (a bug): the member fails with a KafkaError."""
        error = exc if isinstance(exc, KafkaError) else KafkaError(
            f"group {self.config.group_id!r}: a background task failed: {exc!r}")  # fmt: skip
        if error is not exc:
            error.__cause__ = exc
        await self._fail(error, GroupState.FAILED)

    async def _fail(self, error: KafkaError, state: GroupState) -> None:
        """End the member for good: its tasks stop, what it owns is lost (``on_lost``),
        and the consumer's iterators raise ``error``."""
        self._closing = True
        self._log.error("group %s: member %s stops: %s", self.config.group_id,
                        self.member_id, error)  # fmt: skip
        lost, self.owned = self.owned, frozenset()
        try:
            if lost:
                await self._call_listener("partitions_lost", lost)
        finally:
            await self._set_state(state, error)
            self.listener.member_failed(error)

    def _poll_timeout(self, stalled_s: float, what: str) -> str:
        """Note and log that the application stalled past ``max_poll_interval_ms``; return
        the reason (``left_reason``)."""
        reason = (
            f"{what} for {stalled_s:.0f} s, longer than max_poll_interval_ms="
            f"{self.config.rebalance_timeout_ms}"
        )
        self._log.warning(
            "group %s: member %s leaves the group: %s; its partitions go to the other "
            "members, and it joins again when the application asks for records",
            self.config.group_id, self.member_id, reason,
        )  # fmt: skip
        self.poll_timeouts += 1
        return reason
