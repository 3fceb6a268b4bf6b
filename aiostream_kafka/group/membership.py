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

import enum
import re
from collections.abc import Collection
from typing import Protocol

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.structs import TopicPartition

__all__ = ["AssignmentListener", "GroupMembership", "GroupState"]


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
