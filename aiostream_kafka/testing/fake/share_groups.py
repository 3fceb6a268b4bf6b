"""Share groups (KIP-932) of the fake cluster: the group coordinator's part
(ShareGroupHeartbeat: member epochs, the ``simple`` assignment, sessions) and the
partition leaders' part (share partitions: which records are acquired by whom, with what
delivery count, until when; share sessions).

The group: a member joins with epoch 0 and a member id it generated, and gets the group
epoch; every change of the members or of their subscribed topics bumps the group epoch and
computes a new assignment at once (members may share a partition, so there is nothing to
revoke first). A member not heard from within ``share.session.timeout.ms`` is removed;
epoch -1 leaves. A member that leaves or is removed gives its acquired records back.

A share partition (one per group and partition, made by the first ShareFetch) has a start
offset (from ``share.auto.offset.reset``: latest by default, earliest, or
``by_duration:<ISO-8601>``) and, past it, the records in flight: AVAILABLE (released,
with their delivery count) or ACQUIRED (by one member, under a lock of
``share.record.lock.duration.ms``). An offset below the next never-delivered offset that
is not in flight is done (ACKNOWLEDGED or ARCHIVED); the start offset moves up over them.
A release, a lock expiry or the end of the holder's session makes a record AVAILABLE
again, or ARCHIVED once it was delivered ``share.delivery.count.limit`` times. With
``share.isolation.level`` read_committed (Kafka's default is read_uncommitted) records are
acquired only below the last stable offset and those of aborted transactions are archived.
Control batches are never acquired.

Every timer and timestamp reads the cluster's clock (``state.clock``). No task is started
here: waiting ShareFetches register listeners.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.clock import Timer
from aiostream_kafka.testing.fake.consumer_groups import (
    Assignment,
    ConsumerGroupCoordinator,
    HeartbeatResult,
)

if TYPE_CHECKING:
    from aiostream_kafka.testing.fake.clock import Clock
    from aiostream_kafka.testing.fake.log import PartitionLog, StoredBatch


class _Topic(Protocol):
    @property
    def topic_id(self) -> UUID: ...
    @property
    def partitions(self) -> Sized: ...
    @property
    def internal(self) -> bool: ...


class ClusterState(Protocol):
    """What the share coordinator uses of the cluster's state (``state.ClusterState``,
    which owns it: an interface, not an import of it)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def topics(self) -> Mapping[str, _Topic]: ...
    @property
    def consumer_groups(self) -> ConsumerGroupCoordinator: ...


log = logging.getLogger(__name__)

__all__ = [
    "SHARE_GROUP_DEFAULTS",
    "AckResult",
    "ShareCoordinator",
    "ShareGroup",
    "ShareMember",
    "SharePartition",
    "ShareSession",
]

#: The group configs of share groups and Kafka 4.x's broker defaults for them.
SHARE_GROUP_DEFAULTS: dict[str, str] = {
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "share.renew.acknowledge.enable": "true",
}

GAP, ACCEPT, RELEASE, REJECT, RENEW = range(5)
AVAILABLE, ACQUIRED = "AVAILABLE", "ACQUIRED"
ASSIGNOR = "simple"

#: (node id, group id, member id)
SessionKey = tuple[int, str, str]
#: (topic id, partition)
PartitionKey = tuple[UUID, int]

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def duration_ms(text: str) -> int | None:
    """Milliseconds of an ISO-8601 duration ``PnDTnHnMn.nS`` (None: not one)."""
    match = _DURATION.match(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT"):
        return None
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    seconds = (
        parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60
    ) + parts.get("s", 0)
    return int(seconds * 1000)


def check_share_config(name: str, value: str) -> str | None:
    """Why a share group config cannot take ``value`` (None: it can), with the bounds of
    Kafka 4.3's group configs and of the broker settings the project's test broker uses
    (locks of 1 s up, heartbeats of 100 ms up)."""
    ints = {
        "share.session.timeout.ms": (1, 2**31 - 1),
        "share.heartbeat.interval.ms": (100, 2**31 - 1),
        "share.record.lock.duration.ms": (1000, 3_600_000),
        "share.delivery.count.limit": (2, 10),
        "share.partition.max.record.locks": (100, 10_000),
    }
    if name in ints:
        low, high = ints[name]
        try:
            number = int(value)
        except ValueError:
            return f"Invalid value {value} for configuration {name}: Not a number of type INT"
        if not low <= number <= high:
            return f"Invalid value {value} for configuration {name}: must be in [{low}, {high}]"
        return None
    if name == "share.auto.offset.reset":
        lowered = value.strip().lower()
        if lowered in ("earliest", "latest"):
            return None
        if lowered.startswith("by_duration:") and duration_ms(value.split(":", 1)[1]) is not None:
            return None
        return f"Invalid value {value} for configuration {name}"
    if name == "share.isolation.level":
        if value in ("read_committed", "read_uncommitted"):
            return None
        return f"Invalid value {value} for configuration {name}"
    if name == "share.renew.acknowledge.enable":
        return None if value.lower() in ("true", "false") else f"Invalid value {value}"
    return f"Unknown group config name: {name}"


# -- the group ---------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class ShareMember:
    """A member of a share group."""

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: list[str] = field(default_factory=list)
    member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    sent: Assignment | None = None
    session_timer: Timer | None = None


@dataclass(slots=True, eq=False)
class ShareGroup:
    """One share group."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    #: ``(name, id, partition count)`` of the subscribed topics at the last epoch.
    subscribed: tuple[tuple[str, UUID, int], ...] = ()

    @property
    def state(self) -> str:
        """``Empty`` or ``Stable`` (a share group never waits for a revocation)."""
        return "Stable" if self.members else "Empty"


# -- the partitions ----------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Acquisition:
    """Records acquired together: one lock, one holder."""

    member_id: str
    session: SessionKey
    offsets: set[int]
    timer: Timer | None = None


@dataclass(slots=True)
class InFlight:
    """A record past the start offset that is not done."""

    state: str
    delivery_count: int
    holder: Acquisition | None = None


@dataclass(slots=True, eq=False)
class SharePartition:
    """The delivery state of one partition for one share group."""

    group_id: str
    topic_id: UUID
    partition: int
    start_offset: int
    #: The first offset never delivered (everything from here on is AVAILABLE, count 0).
    next_offset: int
    inflight: dict[int, InFlight] = field(default_factory=dict)
    #: The start offset DescribeShareGroupOffsets answers: where the state began (its
    #: initialisation or AlterShareGroupOffsets), caught up with the real one when a
    #: share session of the group ends. As Kafka 4.3.1 is seen to answer (the project's
    #: tests/test_admin_share_groups.py and test_share_faults.py): it stays put while a
    #: member accepts records, and has moved once the member closed; the lag tells the
    #: progress meanwhile.
    reported_start: int = -1
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def advance(self) -> None:
        """Move the start offset over the done records."""
        while self.start_offset < self.next_offset and self.start_offset not in self.inflight:
            self.start_offset += 1

    def notify(self) -> None:
        """Wake the ShareFetches waiting for available records."""
        for listener in list(self.listeners):
            listener()

    @property
    def acquired_count(self) -> int:
        return sum(1 for r in self.inflight.values() if r.state == ACQUIRED)

    def lag(self, high_watermark: int) -> int:
        """Records below ``high_watermark`` that are not done (-1: the start offset is
        past it, as Kafka gives no lag there)."""
        if max(self.start_offset, self.reported_start) > high_watermark:
            return -1
        pending = sum(1 for o in self.inflight if o < high_watermark)
        return pending + max(0, high_watermark - self.next_offset)


@dataclass(slots=True, eq=False)
class ShareSession:
    """A share session (KIP-932) on one broker: the partitions it fetches and the epoch
    its next request must carry."""

    key: SessionKey
    next_epoch: int = 1
    partitions: set[PartitionKey] = field(default_factory=set)
    #: Called to unhook from the connection once the session ends.
    detach: Callable[[], None] | None = None


@dataclass(slots=True)
class AckResult:
    """The error code of one partition's acknowledgements (0: all applied)."""

    error_code: int
    message: str | None = None


@dataclass(slots=True)
class Acquired:
    """What one acquisition round got from one partition."""

    ranges: list[tuple[int, int, int]]
    batches: list[StoredBatch]
    count: int


class ShareCoordinator:
    """Every share group of the cluster, their share partitions and share sessions."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self.groups: dict[str, ShareGroup] = {}
        #: group id -> (topic id, partition) -> its delivery state
        self.partitions: dict[str, dict[PartitionKey, SharePartition]] = {}
        self.sessions: dict[SessionKey, ShareSession] = {}

    # -- configs -------------------------------------------------------------------------

    def config(self, group_id: str, name: str) -> str:
        """A share group config: the group's own (IncrementalAlterConfigs on a GROUP
        resource), else Kafka's default."""
        own = self._state.consumer_groups.group_configs.get(group_id, {})
        return own.get(name, SHARE_GROUP_DEFAULTS[name])

    def lock_ms(self, group_id: str) -> int:
        """The acquisition lock duration of a group's records."""
        return int(self.config(group_id, "share.record.lock.duration.ms"))

    def renew_enabled(self, group_id: str) -> bool:
        return self.config(group_id, "share.renew.acknowledge.enable").lower() == "true"

    # -- the heartbeat -------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        rack_id: str | None,
        subscribed: list[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        """Handle one ShareGroupHeartbeat (see the module docstring)."""
        if not group_id:
            return HeartbeatResult(errors.INVALID_GROUP_ID, error_message="GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(errors.INVALID_REQUEST, error_message="MemberId can't be empty.")
        group = self.groups.get(group_id)
        interval = int(self.config(group_id, "share.heartbeat.interval.ms"))
        if member_epoch == -1:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(errors.UNKNOWN_MEMBER_ID, member_id)
            self.remove_member(group, member, "left")
            return HeartbeatResult(errors.NONE, member_id, -1, interval)
        if member_epoch < -1:
            return HeartbeatResult(
                errors.INVALID_REQUEST, member_id, error_message="MemberEpoch is invalid."
            )
        changed = False
        if member_epoch == 0:
            if not subscribed:
                return HeartbeatResult(
                    errors.INVALID_REQUEST,
                    member_id,
                    error_message="SubscribedTopicNames must be set in first request.",
                )
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = group.members.get(member_id)
            if member is None:
                member = ShareMember(member_id, client_id, client_host, rack_id)
                group.members[member_id] = member
                changed = True
            member.sent = None
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(errors.UNKNOWN_MEMBER_ID, member_id)
            if member_epoch != member.member_epoch:
                return HeartbeatResult(errors.FENCED_MEMBER_EPOCH, member_id)
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and sorted(subscribed) != sorted(member.subscribed):
            member.subscribed = sorted(set(subscribed))
            changed = True
        self._session(group, member)
        self._refresh(group, changed)
        member.member_epoch = group.assignment_epoch
        assignment: Assignment | None = None
        if member.sent is None or member.sent != member.assigned:
            assignment = {t: set(ps) for t, ps in member.assigned.items()}
            member.sent = {t: set(ps) for t, ps in member.assigned.items()}
        return HeartbeatResult(errors.NONE, member_id, member.member_epoch, interval, assignment)

    def _session(self, group: ShareGroup, member: ShareMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout_s = int(self.config(group.group_id, "share.session.timeout.ms")) / 1000
        member.session_timer = self._state.clock.call_later(timeout_s, self._expired, group, member)

    def _expired(self, group: ShareGroup, member: ShareMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is member:
            self.remove_member(group, member, "session timed out")

    def expire_member(self, group_id: str, member_id: str) -> None:
        """Remove a member as if its session had timed out (for tests).

        Raises ``KeyError`` for an unknown group or member."""
        group = self.groups[group_id]
        self.remove_member(group, group.members[member_id], "expired by the test")

    def remove_member(self, group: ShareGroup, member: ShareMember, why: str) -> None:
        """Take a member out of its group (new epoch and assignment for the others) and
        give back the records it holds; its share sessions end."""
        log.info("share group %s: member %s removed (%s)", group.group_id, member.member_id, why)
        group.members.pop(member.member_id, None)
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None
        group.group_epoch += 1
        self._refresh(group)
        for key in [k for k in self.sessions if k[1:] == (group.group_id, member.member_id)]:
            self.close_session(key)
        for sp in self.partitions.get(group.group_id, {}).values():
            holders = {r.holder for r in sp.inflight.values() if r.holder is not None}
            for acquisition in holders:
                if acquisition.member_id == member.member_id:
                    self._release_acquisition(sp, acquisition)

    def _topic_table(self) -> dict[str, tuple[UUID, int]]:
        return {
            name: (topic.topic_id, len(topic.partitions))
            for name, topic in self._state.topics.items()
            if not topic.internal
        }

    def _refresh(self, group: ShareGroup, changed: bool = False) -> None:
        """Bump the epoch when the subscribed topics changed; assign a new epoch."""
        table = self._topic_table()
        wanted = {n for m in group.members.values() for n in m.subscribed if n in table}
        subscribed = tuple(sorted((n, table[n][0], table[n][1]) for n in wanted))
        if subscribed != group.subscribed:
            group.subscribed = subscribed
            changed = True
        if changed:
            group.group_epoch += 1
        if group.assignment_epoch == group.group_epoch:
            return
        targets: dict[str, Assignment] = {m: {} for m in group.members}
        for name, topic_id, count in group.subscribed:
            takers = sorted(m.member_id for m in group.members.values() if name in m.subscribed)
            if not takers:
                continue
            if len(takers) <= count:
                for p in range(count):
                    targets[takers[p % len(takers)]].setdefault(topic_id, set()).add(p)
            else:  # more members than partitions: partitions are shared
                for i, member_id in enumerate(takers):
                    targets[member_id].setdefault(topic_id, set()).add(i % count)
        for member_id, member in group.members.items():
            member.assigned = targets[member_id]
        group.assignment_epoch = group.group_epoch

    def refresh_all(self) -> None:
        """Re-check every group's subscribed topics (a topic appeared or grew)."""
        for group in self.groups.values():
            self._refresh(group)

    # -- share partitions ----------------------------------------------------------------

    def share_partition(
        self, group_id: str, topic_id: UUID, index: int, log_: PartitionLog
    ) -> SharePartition:
        """The group's state of a partition, made (its start offset from
        ``share.auto.offset.reset``) on first use."""
        by_key = self.partitions.setdefault(group_id, {})
        sp = by_key.get((topic_id, index))
        if sp is None:
            start = self._initial_offset(group_id, log_)
            sp = by_key[(topic_id, index)] = SharePartition(
                group_id, topic_id, index, start, start, reported_start=start
            )
        return sp

    def _initial_offset(self, group_id: str, log_: PartitionLog) -> int:
        reset = self.config(group_id, "share.auto.offset.reset").strip()
        if reset.lower() == "earliest":
            return log_.log_start_offset
        if reset.lower().startswith("by_duration:"):
            ms = duration_ms(reset.split(":", 1)[1]) or 0
            found = log_.offset_for_timestamp(self._state.clock.wall_ms() - ms)
            return found[0] if found is not None else log_.high_watermark
        return log_.high_watermark

    def set_start_offset(self, group_id: str, topic_id: UUID, index: int, offset: int) -> None:
        """AlterShareGroupOffsets: the partition's state starts afresh at ``offset``."""
        by_key = self.partitions.setdefault(group_id, {})
        old = by_key.get((topic_id, index))
        if old is not None:
            self._drop(old)
        by_key[(topic_id, index)] = SharePartition(
            group_id, topic_id, index, offset, offset, reported_start=offset
        )

    def delete_state(self, group_id: str, topic_id: UUID) -> None:
        """DeleteShareGroupOffsets: forget the group's state of a topic's partitions."""
        by_key = self.partitions.get(group_id, {})
        for key in [k for k in by_key if k[0] == topic_id]:
            self._drop(by_key.pop(key))

    def delete_group(self, group_id: str) -> None:
        """DeleteGroups of an empty share group: it and its state go."""
        self.groups.pop(group_id, None)
        for sp in self.partitions.pop(group_id, {}).values():
            self._drop(sp)

    def _drop(self, sp: SharePartition) -> None:
        for record in sp.inflight.values():
            if record.holder is not None and record.holder.timer is not None:
                record.holder.timer.cancel()
        sp.inflight.clear()
        sp.notify()

    def _is_committed_out(self, log_: PartitionLog, stored: StoredBatch) -> bool:
        """A batch of an aborted transaction (not delivered under read_committed)."""
        if not stored.is_transactional:
            return False
        return any(
            a.producer_id == stored.producer_id
            and a.first_offset <= stored.base_offset <= a.last_offset
            for a in log_.aborted
        )

    def acquire(
        self,
        sp: SharePartition,
        log_: PartitionLog,
        member_id: str,
        session: SessionKey,
        max_records: int,
        max_bytes: int,
        *,
        record_limit: bool,
    ) -> Acquired:
        """Acquire up to ``max_records`` AVAILABLE records for ``member_id`` (whole batches
        unless ``record_limit``, Kafka's batch-optimized mode), at most about ``max_bytes``
        of batches (the first batch whole). Returns the acquired ranges with their
        delivery counts and the batches holding them."""
        group_id = sp.group_id
        committed = self.config(group_id, "share.isolation.level") == "read_committed"
        limit = log_.last_stable_offset if committed else log_.high_watermark
        if sp.start_offset < log_.log_start_offset:  # records deleted under the group
            for offset in [o for o in sp.inflight if o < log_.log_start_offset]:
                self._finish(sp, offset)
            sp.start_offset = log_.log_start_offset
            sp.next_offset = max(sp.next_offset, sp.start_offset)
        room = int(self.config(group_id, "share.partition.max.record.locks")) - sp.acquired_count
        want = min(max_records, room)
        taken: dict[int, int] = {}  # offset -> delivery count
        batches: dict[int, StoredBatch] = {}
        size = 0

        def batch_of(offset: int) -> StoredBatch | None:
            i = log_.batch_index(offset)
            return log_.batches[i] if i < len(log_.batches) else None

        def room_for(stored: StoredBatch) -> bool:
            return (
                stored.base_offset in batches or not batches or size + len(stored.data) <= max_bytes
            )

        # Released records first, in offset order.
        for offset in sorted(o for o, r in sp.inflight.items() if r.state == AVAILABLE):
            if len(taken) >= want or offset >= limit:
                break
            stored = batch_of(offset)
            if stored is None or stored.base_offset > offset:
                self._finish(sp, offset)  # gone from the log
                continue
            if not room_for(stored):
                break
            if stored.base_offset not in batches:
                batches[stored.base_offset] = stored
                size += len(stored.data)
            taken[offset] = sp.inflight[offset].delivery_count + 1
        # Then records never delivered.
        index = log_.batch_index(sp.next_offset)
        while len(taken) < want and index < len(log_.batches):
            stored = log_.batches[index]
            index += 1
            if stored.base_offset >= limit:
                break
            if stored.last_offset < sp.next_offset:
                continue
            if stored.is_control or (committed and self._is_committed_out(log_, stored)):
                sp.next_offset = stored.last_offset + 1  # archived, never acquired
                continue
            if not room_for(stored):
                break
            first = max(stored.base_offset, sp.next_offset)
            last = stored.last_offset
            if record_limit:
                last = min(last, first + (want - len(taken)) - 1)
            for offset in range(first, last + 1):
                taken[offset] = 1
            sp.next_offset = last + 1
            batches[stored.base_offset] = stored
            size += len(stored.data)
        sp.advance()
        if not taken:
            return Acquired([], [], 0)
        acquisition = Acquisition(member_id, session, set(taken))
        for offset, count in taken.items():
            sp.inflight[offset] = InFlight(ACQUIRED, count, acquisition)
        self._lock(sp, acquisition)
        ranges: list[tuple[int, int, int]] = []
        for offset in sorted(taken):
            count = taken[offset]
            if ranges and ranges[-1][1] == offset - 1 and ranges[-1][2] == count:
                ranges[-1] = (ranges[-1][0], offset, count)
            else:
                ranges.append((offset, offset, count))
        return Acquired(ranges, [batches[b] for b in sorted(batches)], len(taken))

    def _lock(self, sp: SharePartition, acquisition: Acquisition) -> None:
        if acquisition.timer is not None:
            acquisition.timer.cancel()
        acquisition.timer = self._state.clock.call_later(
            self.lock_ms(sp.group_id) / 1000, self._lock_expired, sp, acquisition
        )

    def _lock_expired(self, sp: SharePartition, acquisition: Acquisition) -> None:
        acquisition.timer = None
        self._release_acquisition(sp, acquisition)

    def _release_acquisition(self, sp: SharePartition, acquisition: Acquisition) -> None:
        if acquisition.timer is not None:
            acquisition.timer.cancel()
            acquisition.timer = None
        released = False
        for offset in sorted(acquisition.offsets):
            record = sp.inflight.get(offset)
            if record is not None and record.holder is acquisition:
                released |= self._release(sp, offset)
        acquisition.offsets.clear()
        sp.advance()
        if released:
            sp.notify()

    def _release(self, sp: SharePartition, offset: int) -> bool:
        """An acquired record back to AVAILABLE (True), or ARCHIVED at the delivery limit."""
        record = sp.inflight[offset]
        if record.holder is not None:
            record.holder.offsets.discard(offset)
        record.holder = None
        if record.delivery_count >= int(self.config(sp.group_id, "share.delivery.count.limit")):
            self._finish(sp, offset)
            return False
        record.state = AVAILABLE
        return True

    def _finish(self, sp: SharePartition, offset: int) -> None:
        """ACKNOWLEDGED or ARCHIVED: no longer in flight."""
        record = sp.inflight.pop(offset, None)
        if record is not None and record.holder is not None:
            record.holder.offsets.discard(offset)
            if not record.holder.offsets and record.holder.timer is not None:
                record.holder.timer.cancel()
                record.holder.timer = None

    def acknowledge(
        self,
        sp: SharePartition,
        member_id: str,
        batches: Iterable[tuple[int, int, list[int]]],
        *,
        renew_allowed: bool,
    ) -> AckResult:
        """Apply one partition's acknowledgement batches ``(first, last, types)`` (one
        type for the range, or one per offset) from ``member_id``; all or nothing:
        ``INVALID_RECORD_STATE`` when an offset is not acquired by that member,
        ``INVALID_REQUEST`` for a malformed batch or a type not allowed."""
        plan: list[tuple[int, int]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                return AckResult(errors.INVALID_REQUEST, "malformed acknowledgement batch")
            for i, offset in enumerate(range(first, last + 1)):
                kind = types[0] if len(types) == 1 else types[i]
                if kind not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) or (
                    kind == RENEW and not renew_allowed
                ):
                    return AckResult(errors.INVALID_REQUEST, f"acknowledge type {kind}")
                record = sp.inflight.get(offset)
                if (
                    record is None
                    or record.state != ACQUIRED
                    or record.holder is None
                    or record.holder.member_id != member_id
                ):
                    return AckResult(
                        errors.INVALID_RECORD_STATE,
                        f"offset {offset} is not acquired by member {member_id}",
                    )
                plan.append((offset, kind))
        released = False
        renewed: Acquisition | None = None
        for offset, kind in plan:
            if kind == RELEASE:
                released |= self._release(sp, offset)
            elif kind == RENEW:
                record = sp.inflight[offset]
                assert record.holder is not None
                if renewed is None:
                    renewed = Acquisition(member_id, record.holder.session, set())
                old = record.holder
                old.offsets.discard(offset)
                if not old.offsets and old.timer is not None:
                    old.timer.cancel()
                    old.timer = None
                record.holder = renewed
                renewed.offsets.add(offset)
            else:  # GAP, ACCEPT, REJECT: done
                self._finish(sp, offset)
        if renewed is not None:
            self._lock(sp, renewed)
        sp.advance()
        if released:
            sp.notify()
        return AckResult(errors.NONE)

    # -- share sessions ------------------------------------------------------------------

    def close_session(self, key: SessionKey) -> None:
        """End a share session, releasing what its member acquired through it."""
        session = self.sessions.pop(key, None)
        if session is None:
            return
        if session.detach is not None:
            session.detach()
            session.detach = None
        for sp in self.partitions.get(key[1], {}).values():
            holders = {r.holder for r in sp.inflight.values() if r.holder is not None}
            for acquisition in holders:
                if acquisition.session == key:
                    self._release_acquisition(sp, acquisition)
            sp.reported_start = max(sp.reported_start, sp.start_offset)

    def close(self) -> None:
        """Cancel every timer (the cluster stops)."""
        for group in self.groups.values():
            for member in group.members.values():
                if member.session_timer is not None:
                    member.session_timer.cancel()
                    member.session_timer = None
        for by_key in self.partitions.values():
            for sp in by_key.values():
                for record in sp.inflight.values():
                    if record.holder is not None and record.holder.timer is not None:
                        record.holder.timer.cancel()
                        record.holder.timer = None


def new_member_id() -> str:
    """A member id as a client makes one (for raw-protocol tests)."""
    return str(uuid.uuid4())
