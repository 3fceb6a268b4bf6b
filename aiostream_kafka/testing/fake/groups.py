"""The classic group coordinator of the fake cluster (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and the groups' committed offsets.

The state machine is Kafka's (``GroupCoordinator`` / ``ClassicGroup``)::

    Empty --join--> PreparingRebalance --all joined or rebalance timeout-->
    CompletingRebalance --leader's SyncGroup--> Stable --join/leave/expiry--> Preparing...

* A rebalance waits until every known member has sent JoinGroup again (and members given
  an id by ``MEMBER_ID_REQUIRED`` have joined), or until the largest rebalance timeout
  of the members has passed; members that did not rejoin are removed. Then the
  generation goes up, the protocol is chosen among those every member supports (by the
  members' votes, each for its first choice), and the leader (the old one if still
  there, else the first member) gets the members' metadata.
* A member that neither heartbeats nor syncs within its session timeout is removed and
  the group rebalances.
* A static member (``group.instance.id``) that joins again with no member id replaces its
  old id (KIP-345), keeping its assignment; the old id is fenced. In a Stable group whose
  protocol the new metadata does not change, that is answered at once with the current
  generation and no rebalance: a follower syncs and gets its assignment back; a returning
  leader is told it leads with ``skip_assignment`` (JoinGroup v9+, KIP-814) or, before
  v9, is named a follower by the old leader id so that it assigns nothing. While the
  group completes a rebalance, the replacement starts a new one.
* Waiting is done with futures the handlers await and timers of the cluster's clock
  (``clock.py``: the loop's, or a test's ``ManualClock``); no task is started here.
  Commit timestamps are that clock's wall time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from dataclasses import dataclass, field

from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.clock import Clock, RealClock, Timer

__all__ = ["CommittedOffset", "Group", "GroupCoordinator", "JoinResult", "Member", "SyncResult"]

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

#: Longest commit metadata accepted (Kafka's ``offset.metadata.max.bytes``).
MAX_METADATA_BYTES = 4096


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup is answered with."""

    error_code: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    #: ``(member id, group instance id, metadata)``, for the leader only.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    #: The leader must not assign (a static leader's rejoin, JoinGroup v9+).
    skip_assignment: bool = False


@dataclass(slots=True)
class SyncResult:
    """What a SyncGroup is answered with."""

    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class CommittedOffset:
    """A committed offset of a group."""

    offset: int
    leader_epoch: int
    metadata: str | None
    commit_time_ms: int


@dataclass(slots=True, eq=False)
class Member:
    """A member of a classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    session_timer: Timer | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(slots=True, eq=False)
class Group:
    """A classic group and its committed offsets."""

    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: Member ids handed out by MEMBER_ID_REQUIRED, not joined yet, with their expiry.
    pending: dict[str, Timer] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    rebalance_timer: Timer | None = None
    #: When the rebalance may complete at the earliest (initial delay of an empty group),
    #: on the coordinator's clock.
    not_before: float = 0.0

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()


class GroupCoordinator:
    """Every classic group of the cluster (coordinator routing is the handlers' job)."""

    def __init__(
        self,
        *,
        min_session_timeout_ms: int,
        max_session_timeout_ms: int,
        initial_rebalance_delay_ms: int,
        clock: Clock | None = None,
    ) -> None:
        #: Session, rebalance and pending-member timers and commit timestamps (``clock.py``).
        self.clock: Clock = clock if clock is not None else RealClock()
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.groups: dict[str, Group] = {}

    # -- JoinGroup -------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
    ) -> JoinResult:
        """Handle a JoinGroup; waits until the rebalance it joins completes.

        ``require_known_member_id``: JoinGroup v4+ (KIP-394); ``supports_skip_assignment``:
        v9+ (KIP-814, how a static leader's rejoin is answered). Returns the answer; errors
        are its ``error_code``, nothing is raised."""
        if not group_id:
            return JoinResult(errors.INVALID_GROUP_ID, member_id)
        if not (self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms):
            return JoinResult(errors.INVALID_SESSION_TIMEOUT, member_id)
        if not protocol_type or not protocols:
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if group.members and (
            protocol_type != group.protocol_type
            or not group.candidate_protocols() & {name for name, _ in protocols}
        ):
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        loop = asyncio.get_running_loop()
        clock = self.clock
        replaced = False
        leader_before = group.leader_id
        if not member_id:
            if group_instance_id is not None and group_instance_id in group.static_members:
                member_id = self._replace_static(group, group_instance_id, client_id)
                replaced = True
            elif group_instance_id is None and require_known_member_id:
                new_id = f"{client_id}-{uuid.uuid4()}"
                group.pending[new_id] = clock.call_later(
                    session_timeout_ms / 1000, self._pending_expired, group, new_id
                )
                return JoinResult(errors.MEMBER_ID_REQUIRED, new_id)
            else:
                member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        elif self._fenced(group, member_id, group_instance_id):
            return JoinResult(errors.FENCED_INSTANCE_ID, member_id)
        elif member_id in group.pending:
            group.pending.pop(member_id).cancel()
        elif member_id not in group.members:
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id)
        member = group.members.get(member_id)
        is_new = member is None
        if member is None:
            member = Member(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                list(protocols),
            )
            group.members[member_id] = member
            if group_instance_id is not None:
                group.static_members[group_instance_id] = member_id
            if group.protocol_type is None:
                group.protocol_type = protocol_type
        changed = member.protocols != list(protocols)
        member.protocols = list(protocols)
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self._stop_session_timer(member)
        if (
            replaced
            and group.state == STABLE
            and self._choose_protocol(group) == group.protocol_name
        ):
            # KIP-345: the restarted static member takes its old place without a rebalance.
            self._start_session_timer(group, member)
            result = self._join_result(group, member)
            if member_id == group.leader_id:
                if supports_skip_assignment:
                    result.skip_assignment = True
                else:
                    # Before v9 the old leader id is named: the member sees itself a
                    # follower and does not assign (a Stable group would not pass it on).
                    result.leader = leader_before or ""
                    result.members = []
            return result
        if member.join_future is not None and not member.join_future.done():
            # A second JoinGroup from the same member: the first one is answered as stale.
            member.join_future.set_result(JoinResult(errors.UNKNOWN_MEMBER_ID, member_id))
        future: asyncio.Future[JoinResult] = loop.create_future()
        member.join_future = future
        if (
            group.state in (STABLE, COMPLETING)
            and not is_new
            and not replaced
            and not changed
            and (group.state == COMPLETING or member_id != group.leader_id)
        ):
            # The member lost the answer of the generation it is in: give it again.
            member.join_future = None
            self._start_session_timer(group, member)
            return self._join_result(group, member)
        if group.state != PREPARING:
            self._prepare_rebalance(group)
        else:
            self._try_complete_join(group)
        try:
            return await future
        finally:
            if member.join_future is future:
                member.join_future = None

    def _replace_static(self, group: Group, instance_id: str, client_id: str) -> str:
        """A static member rejoins with a new member id; the old id is fenced."""
        old_id = group.static_members[instance_id]
        old = group.members.pop(old_id, None)
        new_id = f"{instance_id}-{uuid.uuid4()}"
        group.static_members[instance_id] = new_id
        if old is not None:
            self._stop_session_timer(old)
            fenced = JoinResult(errors.FENCED_INSTANCE_ID, old_id)
            if old.join_future is not None and not old.join_future.done():
                old.join_future.set_result(fenced)
            if old.sync_future is not None and not old.sync_future.done():
                old.sync_future.set_result(SyncResult(errors.FENCED_INSTANCE_ID))
            old.member_id = new_id
            old.client_id = client_id
            old.join_future = old.sync_future = None
            group.members[new_id] = old
            if group.leader_id == old_id:
                group.leader_id = new_id
        return new_id

    def _pending_expired(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is not None and group.state == PREPARING:
            self._try_complete_join(group)

    def _prepare_rebalance(self, group: Group) -> None:
        clock = self.clock
        if group.state == COMPLETING:
            self._fail_syncs(group, errors.REBALANCE_IN_PROGRESS)
        was_empty = group.state == EMPTY
        group.state = PREPARING
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        delay_ms = self.initial_rebalance_delay_ms if was_empty else 0
        group.not_before = clock.monotonic() + delay_ms / 1000
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        group.rebalance_timer = clock.call_later(
            max(timeout_ms, delay_ms) / 1000, self._complete_join, group
        )
        if delay_ms:
            clock.call_later(delay_ms / 1000, self._try_complete_join, group)
        self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        if self.clock.monotonic() < group.not_before:
            return
        if group.pending:
            return
        if all(m.join_future is not None for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        for member in [m for m in group.members.values() if m.join_future is None]:
            self._remove(group, member)
        group.generation_id += 1
        if not group.members:
            group.state = EMPTY
            group.protocol_name = None
            group.protocol_type = None
            group.leader_id = None
            return
        group.protocol_name = self._choose_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = COMPLETING
        for member in group.members.values():
            member.assignment = b""
            future, member.join_future = member.join_future, None
            self._start_session_timer(group, member)
            if future is not None and not future.done():
                future.set_result(self._join_result(group, member))

    def _choose_protocol(self, group: Group) -> str:
        candidates = group.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in group.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        # Ties go to the first member's preference order.
        first = next(iter(group.members.values()))
        order = {name: i for i, (name, _) in enumerate(first.protocols)}
        return max(votes, key=lambda name: (votes[name], -order.get(name, 0)))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: list[tuple[str, str | None, bytes]] = []
        if member.member_id == group.leader_id:
            members = [
                (m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            ]
        return JoinResult(
            errors.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    # -- SyncGroup ---------------------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        """Handle a SyncGroup; a follower waits for the leader's assignments."""
        group = self.groups.get(group_id)
        if group is not None and self._fenced(group, member_id, group_instance_id):
            return SyncResult(errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return SyncResult(errors.UNKNOWN_MEMBER_ID)
        if generation_id != group.generation_id:
            return SyncResult(errors.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.state == PREPARING:
            return SyncResult(errors.REBALANCE_IN_PROGRESS)
        self._start_session_timer(group, member)
        if group.state == STABLE:
            return self._sync_result(group, member)
        if group.state != COMPLETING:
            return SyncResult(errors.UNKNOWN_MEMBER_ID)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(errors.REBALANCE_IN_PROGRESS))
        member.sync_future = future
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = STABLE
            for m in group.members.values():
                waiting, m.sync_future = m.sync_future, None
                if waiting is not None and not waiting.done():
                    waiting.set_result(self._sync_result(group, m))
        try:
            return await future
        finally:
            if member.sync_future is future:
                member.sync_future = None

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(errors.NONE, group.protocol_type, group.protocol_name, member.assignment)

    def _fail_syncs(self, group: Group, code: int) -> None:
        for member in group.members.values():
            waiting, member.sync_future = member.sync_future, None
            if waiting is not None and not waiting.done():
                waiting.set_result(SyncResult(code))

    def _fenced(self, group: Group, member_id: str, instance_id: str | None) -> bool:
        """Whether a static member's id was replaced by a newer join of its instance id."""
        if instance_id is None:
            return False
        current = group.static_members.get(instance_id)
        return current is not None and current != member_id

    # -- Heartbeat and LeaveGroup ----------------------------------------------------

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """Handle a Heartbeat; return its error code."""
        group = self.groups.get(group_id)
        if group is not None and self._fenced(group, member_id, group_instance_id):
            return errors.FENCED_INSTANCE_ID
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
        if group.state == PREPARING:
            # The member is told to rejoin; its session still counts.
            self._start_session_timer(group, member)
            return errors.REBALANCE_IN_PROGRESS
        self._start_session_timer(group, member)
        return errors.NONE

    def leave(self, group_id: str, member_id: str, group_instance_id: str | None) -> int:
        """Remove a member (by member id, or by instance id when the id is empty) and
        rebalance; return the error code for that member."""
        group = self.groups.get(group_id)
        if group is None:
            return errors.UNKNOWN_MEMBER_ID
        if not member_id and group_instance_id is not None:
            member_id = group.static_members.get(group_instance_id, "")
        elif self._fenced(group, member_id, group_instance_id):
            return errors.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                self._try_complete_join(group)
                return errors.NONE
            return errors.UNKNOWN_MEMBER_ID
        self._remove(group, member)
        self._membership_changed(group)
        return errors.NONE

    def _membership_changed(self, group: Group) -> None:
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group)
        elif group.state == PREPARING:
            self._try_complete_join(group)

    def _remove(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            if group.static_members.get(member.group_instance_id) == member.member_id:
                del group.static_members[member.group_instance_id]
        self._stop_session_timer(member)
        gone = JoinResult(errors.UNKNOWN_MEMBER_ID, member.member_id)
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(gone)
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(SyncResult(errors.UNKNOWN_MEMBER_ID))
        member.join_future = member.sync_future = None
        if group.leader_id == member.member_id:
            group.leader_id = None

    def _start_session_timer(self, group: Group, member: Member) -> None:
        self._stop_session_timer(member)
        member.session_timer = self.clock.call_later(
            member.session_timeout_ms / 1000, self._session_expired, group, member
        )

    def _stop_session_timer(self, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
            member.session_timer = None

    def _session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member or member.join_future is not None:
            return
        self._remove(group, member)
        self._membership_changed(group)

    def expire_member(self, group_id: str, member_id: str) -> None:
        """Remove a member as if its session had timed out (control API).

        Raises ``KeyError`` for an unknown group or member."""
        group = self.groups[group_id]
        member = group.members[member_id]
        self._remove(group, member)
        self._membership_changed(group)

    # -- offsets ---------------------------------------------------------------------

    def check_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """The error code of an OffsetCommit for the whole request (0: may commit)."""
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            # A commit from outside the group (manual assignment, admin tools).
            if group is None or group.state == EMPTY:
                return errors.NONE
            return errors.UNKNOWN_MEMBER_ID if group.members else errors.NONE
        if group is None:
            return errors.ILLEGAL_GENERATION if generation_id >= 0 else errors.UNKNOWN_MEMBER_ID
        if self._fenced(group, member_id, group_instance_id):
            return errors.FENCED_INSTANCE_ID
        if group.state == COMPLETING:
            return errors.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
        self._start_session_timer(group, member)
        return errors.NONE

    def check_member(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """Whether a member of this generation may commit offsets in a transaction
        (TxnOffsetCommit v3+); no side effect."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return errors.NONE if group is None else errors.ILLEGAL_GENERATION
        if self._fenced(group, member_id, group_instance_id):
            return errors.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return errors.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return errors.ILLEGAL_GENERATION
        return errors.NONE

    def commit(
        self,
        group_id: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int,
        metadata: str | None,
    ) -> int:
        """Store one committed offset; return its error code."""
        if metadata is not None and len(metadata.encode()) > MAX_METADATA_BYTES:
            return errors.OFFSET_METADATA_TOO_LARGE
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        group.offsets[(topic, partition)] = CommittedOffset(
            offset, leader_epoch, metadata, self.clock.wall_ms()
        )
        return errors.NONE

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """The committed offsets of a group (empty for an unknown one)."""
        group = self.groups.get(group_id)
        return group.offsets if group is not None else {}

    # -- listing and deleting ----------------------------------------------------------

    def delete(self, group_id: str) -> int:
        """Delete an empty group and its offsets; return the error code."""
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return errors.GROUP_ID_NOT_FOUND
        if group.state != EMPTY:
            return errors.NON_EMPTY_GROUP
        del self.groups[group_id]
        return errors.NONE

    def close(self) -> None:
        """Cancel every timer and answer every waiting member (the cluster stops)."""
        for group in self.groups.values():
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            for timer in group.pending.values():
                timer.cancel()
            for member in group.members.values():
                self._stop_session_timer(member)
                if member.join_future is not None and not member.join_future.done():
                    member.join_future.set_result(JoinResult(errors.COORDINATOR_NOT_AVAILABLE))
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncResult(errors.COORDINATOR_NOT_AVAILABLE))
