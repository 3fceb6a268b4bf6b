"""KIP-848 consumer groups of the fake cluster: ConsumerGroupHeartbeat's state machine,
the broker-side assignors and the members' sessions.

The group has an epoch, bumped whenever what the assignment depends on changes (a member
joins, leaves or changes its subscription; a subscribed topic appears or grows). A new
group epoch gets a new *target assignment* (the ``uniform`` or ``range`` assignor over the
members and the partitions of the topics each subscribes to; the assignment epoch becomes
the group epoch). Each member then moves to its target as Kafka's
``CurrentAssignmentBuilder`` moves it:

* partitions it owns that are no longer its own are revoked first: it is sent its
  assignment without them and keeps its epoch (state ``UNREVOKED_PARTITIONS``) until a
  heartbeat reports it no longer owns them (or its rebalance timeout passes: it is
  removed);
* then it gets the new epoch and the partitions of its target that no other member still
  owns; those still owned elsewhere come later (``UNRELEASED_PARTITIONS``), as soon as
  their owner releases them.

A member that does not heartbeat within the session timeout is removed. A static member
(instance id) leaving with epoch -2 keeps its place for the session timeout; another
process with the same instance id takes it over. Waiting is done with timers of the
cluster's clock (``clock.py``); no task is started here. Offsets live with the classic
groups' (``groups.py``) by group id.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.clock import Clock, RealClock, Timer

log = logging.getLogger(__name__)

__all__ = ["ConsumerGroup", "ConsumerGroupCoordinator", "ConsumerMember", "HeartbeatResult"]

STABLE = "STABLE"
UNREVOKED = "UNREVOKED_PARTITIONS"
UNRELEASED = "UNRELEASED_PARTITIONS"
ASSIGNORS = ("uniform", "range")

Assignment = dict[UUID, set[int]]


def _copy(assignment: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in assignment.items() if ps}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: ps - b.get(t, set()) for t, ps in a.items() if ps - b.get(t, set())}


def _and(a: Assignment, b: Assignment) -> Assignment:
    return {t: ps & b.get(t, set()) for t, ps in a.items() if ps & b.get(t, set())}


@dataclass(slots=True)
class HeartbeatResult:
    """What a ConsumerGroupHeartbeat (or a share group's ShareGroupHeartbeat) is answered
    with (``assignment`` None: unchanged)."""

    error_code: int
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    error_message: str | None = None


@dataclass(slots=True, eq=False)
class ConsumerMember:
    """A member of a consumer group, as the coordinator tracks it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    #: What it is told it owns now.
    assigned: Assignment = field(default_factory=dict)
    #: What it was told to give up and has not yet reported given up.
    revoking: Assignment = field(default_factory=dict)
    #: The assignment last sent (to send only changes).
    sent: Assignment | None = None
    left_static: bool = False
    session_timer: Timer | None = None
    rebalance_timer: Timer | None = None


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    """One KIP-848 group."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    #: ``(name, id, partition count)`` of the subscribed topics at the last epoch.
    subscribed: tuple[tuple[str, UUID, int], ...] = ()
    assignor: str = "uniform"

    @property
    def state(self) -> str:
        """``Empty``, ``Assigning``, ``Reconciling`` or ``Stable`` (DescribeGroups)."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.assignment_epoch or m.state != STABLE
            for m in self.members.values()
            if not m.left_static
        ):
            return "Reconciling"
        return "Stable"


class ConsumerGroupCoordinator:
    """Every KIP-848 group of the cluster (routing is the handlers' job).

    ``topics()`` gives ``{name: (topic id, partition count)}`` of the cluster's topics.
    """

    def __init__(
        self,
        topics: Callable[[], dict[str, tuple[UUID, int]]],
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        clock: Clock | None = None,
    ) -> None:
        #: The members' session and revocation timers (``clock.py``).
        self.clock: Clock = clock if clock is not None else RealClock()
        self._topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, ConsumerGroup] = {}
        #: Group configs set with IncrementalAlterConfigs (GROUP resources, KIP-848):
        #: ``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``.
        self.group_configs: dict[str, dict[str, str]] = {}

    def session_ms(self, group_id: str) -> int:
        """The session timeout of a group's members (its config, else the cluster's)."""
        value = self.group_configs.get(group_id, {}).get("consumer.session.timeout.ms")
        return int(value) if value is not None else self.session_timeout_ms

    def interval_ms(self, group_id: str) -> int:
        """The heartbeat interval given to a group's members."""
        value = self.group_configs.get(group_id, {}).get("consumer.heartbeat.interval.ms")
        return int(value) if value is not None else self.heartbeat_interval_ms

    def _topic_table(self) -> dict[str, tuple[UUID, int]]:
        return self._topics()

    # -- the heartbeat -----------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        instance_id: str | None,
        rack_id: str | None,
        rebalance_timeout_ms: int,
        subscribed_names: list[str] | None,
        subscribed_regex: str | None,
        server_assignor: str | None,
        owned: Assignment | None,
        client_id: str,
        client_host: str,
        generate_member_id: bool,
    ) -> HeartbeatResult:
        """Handle one ConsumerGroupHeartbeat (see the module docstring)."""
        if not group_id:
            return HeartbeatResult(errors.INVALID_GROUP_ID)
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            return HeartbeatResult(
                errors.UNSUPPORTED_ASSIGNOR,
                error_message=f"the fake serves the assignors {', '.join(ASSIGNORS)}",
            )
        if subscribed_regex is not None:
            try:
                re.compile(subscribed_regex)
            except re.error as exc:
                return HeartbeatResult(
                    errors.INVALID_REGULAR_EXPRESSION, error_message=f"{subscribed_regex}: {exc}"
                )
        group = self.groups.get(group_id)
        if member_epoch in (-1, -2):
            return self._leave(group, member_id, member_epoch)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        # Whatever changes in one heartbeat moves the group epoch by one.
        changed = False
        if member_epoch == 0:
            if not member_id:
                if not generate_member_id:
                    return HeartbeatResult(
                        errors.INVALID_REQUEST, error_message="MemberId can't be empty."
                    )
                member_id = str(uuid.uuid4())
            if subscribed_names is None and subscribed_regex is None:
                return HeartbeatResult(
                    errors.INVALID_REQUEST,
                    error_message="SubscribedTopicNames or SubscribedTopicRegex must be set "
                    "in first request.",
                )
            member = group.members.get(member_id)
            if member is None:
                found = self._join(
                    group, member_id, instance_id, rack_id, client_id, client_host,
                    rebalance_timeout_ms,
                )  # fmt: skip
                if isinstance(found, HeartbeatResult):
                    return found
                member, changed = found
            else:
                # Rejoining at epoch 0 with a known id: it lost what it had.
                member.assigned = {}
                member.revoking = {}
                member.member_epoch = 0
                member.state = STABLE
                changed = True
            member.sent = None
        else:
            member = group.members.get(member_id)
            if member is None or member.left_static:
                return HeartbeatResult(errors.UNKNOWN_MEMBER_ID, member_id)
            if member_epoch != member.member_epoch and not (
                member_epoch == member.previous_epoch
                and owned is not None
                and not _minus(owned, member.assigned)
            ):
                return HeartbeatResult(errors.FENCED_MEMBER_EPOCH, member_id)
        if rebalance_timeout_ms > 0:  # -1: unchanged (only a full request carries it)
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed_names is not None and sorted(subscribed_names) != sorted(
            member.subscribed_names
        ):
            member.subscribed_names = list(subscribed_names)
            changed = True
        if subscribed_regex is not None and subscribed_regex != member.subscribed_regex:
            member.subscribed_regex = subscribed_regex or None
            changed = True
        if server_assignor is not None and server_assignor != member.server_assignor:
            member.server_assignor = server_assignor
            changed = True
        if owned is not None:
            # What it reports owning releases what it was asked to give up.
            member.revoking = _and(member.revoking, owned)
        self._session(group, member)
        self._refresh(group, changed)
        self._reconcile(group, member, owned)
        assignment: Assignment | None = None
        if member.sent is None or member.sent != member.assigned:
            assignment = _copy(member.assigned)
            member.sent = _copy(member.assigned)
        return HeartbeatResult(
            errors.NONE,
            member.member_id,
            member.member_epoch,
            self.interval_ms(group.group_id),
            assignment,
        )

    def _join(
        self,
        group: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        rack_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
    ) -> tuple[ConsumerMember, bool] | HeartbeatResult:
        """The new member and whether the group epoch moves (not when a static member
        takes over the place, assignment and epoch of the one it replaces)."""
        member = ConsumerMember(
            member_id, instance_id, rack_id, client_id, client_host, rebalance_timeout_ms
        )
        if instance_id is not None:
            for other in list(group.members.values()):
                if other.instance_id == instance_id:
                    if not other.left_static:
                        return HeartbeatResult(
                            errors.UNRELEASED_INSTANCE_ID,
                            member_id,
                            error_message=f"instance id {instance_id} is used by another member",
                        )
                    target = group.target.get(other.member_id, {})
                    self._remove(group, other, bump=False, why="replaced (static)")
                    member.assigned = _copy(other.assigned)
                    member.member_epoch = other.previous_epoch
                    member.subscribed_names = list(other.subscribed_names)
                    member.subscribed_regex = other.subscribed_regex
                    member.server_assignor = other.server_assignor
                    group.target[member_id] = target
                    group.members[member_id] = member
                    return member, False
        group.members[member_id] = member
        return member, True

    def _leave(self, group: ConsumerGroup | None, member_id: str, epoch: int) -> HeartbeatResult:
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return HeartbeatResult(errors.UNKNOWN_MEMBER_ID, member_id)
        if epoch == -2 and member.instance_id is not None:
            # A static member stepping out: its place is kept for the session timeout,
            # at epoch -2 (what DescribeGroups shows).
            member.left_static = True
            member.previous_epoch = member.member_epoch
            member.member_epoch = -2
            self._session(group, member)
        else:
            self._remove(group, member, why="left")
        return HeartbeatResult(errors.NONE, member_id, epoch, self.interval_ms(group.group_id))

    def _remove(
        self, group: ConsumerGroup, member: ConsumerMember, *, bump: bool = True, why: str = ""
    ) -> None:
        log.info("group %s: member %s removed (%s)", group.group_id, member.member_id, why)
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        for timer in (member.session_timer, member.rebalance_timer):
            if timer is not None:
                timer.cancel()
        member.session_timer = member.rebalance_timer = None
        if bump:
            group.group_epoch += 1

    def _session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.clock.call_later(
            self.session_ms(group.group_id) / 1000, self._expired, group, member
        )

    def _expired(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is member:
            self._remove(group, member, why="session timed out")

    def expire_member(self, group_id: str, member_id: str) -> None:
        """Remove a member as if its session had timed out (control API).

        Raises ``KeyError`` for an unknown group or member."""
        group = self.groups[group_id]
        self._remove(group, group.members[member_id], why="expired by the control API")

    # -- the assignment ----------------------------------------------------------------

    def _subscribed_topics(self, member: ConsumerMember) -> set[str]:
        table = self._topic_table()
        names = {n for n in member.subscribed_names if n in table}
        if member.subscribed_regex:
            pattern = re.compile(member.subscribed_regex)
            names |= {n for n in table if pattern.fullmatch(n)}
        return names

    def _refresh(self, group: ConsumerGroup, changed: bool = False) -> None:
        """Bump the group epoch when the subscribed topics changed, and compute the target
        assignment of a new group epoch."""
        table = self._topic_table()
        wanted: set[str] = set()
        for member in group.members.values():
            if not member.left_static:
                wanted |= self._subscribed_topics(member)
        subscribed = tuple(sorted((n, table[n][0], table[n][1]) for n in wanted))
        if subscribed != group.subscribed:
            group.subscribed = subscribed
            changed = True
        if changed:
            group.group_epoch += 1
        if group.assignment_epoch == group.group_epoch:
            return
        assignors = [m.server_assignor for m in group.members.values() if m.server_assignor]
        group.assignor = assignors[0] if assignors else "uniform"
        group.target = self._assign(group, table)
        group.assignment_epoch = group.group_epoch

    def _assign(
        self, group: ConsumerGroup, table: dict[str, tuple[UUID, int]]
    ) -> dict[str, Assignment]:
        target: dict[str, Assignment] = {m: {} for m in group.members}
        for name in sorted({n for n, _, _ in group.subscribed}):
            topic_id, count = table[name]
            takers = sorted(
                m.member_id for m in group.members.values() if name in self._subscribed_topics(m)
            )
            if not takers:
                continue
            if group.assignor == "range":
                # Contiguous ranges; the first `extra` members take one more.
                per, extra = divmod(count, len(takers))
                start = 0
                for i, member_id in enumerate(takers):
                    size = per + (1 if i < extra else 0)
                    if size:
                        target[member_id][topic_id] = set(range(start, start + size))
                    start += size
            else:
                for p in range(count):
                    target[takers[p % len(takers)]].setdefault(topic_id, set()).add(p)
        return target

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None
    ) -> None:
        target = group.target.get(member.member_id, {})
        if member.state == UNREVOKED:
            if member.revoking:
                return  # still waiting for it to give partitions up
            member.state = STABLE
            if member.rebalance_timer is not None:
                member.rebalance_timer.cancel()
                member.rebalance_timer = None
        to_revoke = _minus(member.assigned, target)
        if to_revoke:
            for topic_id, ps in to_revoke.items():
                member.revoking.setdefault(topic_id, set()).update(ps)
            member.assigned = _and(member.assigned, target)
            member.state = UNREVOKED
            member.rebalance_timer = self.clock.call_later(
                member.rebalance_timeout_ms / 1000, self._revocation_timed_out, group, member
            )
            return
        held_elsewhere: Assignment = {}
        for other in group.members.values():
            if other is not member:
                for source in (other.assigned, other.revoking):
                    for topic_id, ps in source.items():
                        held_elsewhere.setdefault(topic_id, set()).update(ps)
        wanted = _minus(target, member.assigned)
        free = _minus(wanted, held_elsewhere)
        for topic_id, ps in free.items():
            member.assigned.setdefault(topic_id, set()).update(ps)
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        member.state = UNRELEASED if _minus(wanted, free) else STABLE

    def _revocation_timed_out(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.rebalance_timer = None
        if group.members.get(member.member_id) is member and member.state == UNREVOKED:
            self._remove(group, member, why="revocation outlived its rebalance timeout")

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the members of a group subscribe to now (empty: none, or no such
        KIP-848 group)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        out: set[str] = set()
        for member in group.members.values():
            out |= self._subscribed_topics(member)
        return out

    # -- offsets -----------------------------------------------------------------------

    def check_commit(
        self, group_id: str, member_epoch: int, member_id: str, *, transactional: bool = False
    ) -> int | None:
        """The error code of an OffsetCommit (v9+) or TxnOffsetCommit to a consumer group
        (None: not a consumer group with members; the classic rules apply). As Kafka:
        another epoch is ``FENCED_MEMBER_EPOCH`` (newer) or ``STALE_MEMBER_EPOCH``
        (older), and ``ILLEGAL_GENERATION`` in a transaction."""
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return None
        if member_epoch < 0 and not member_id:
            return errors.UNKNOWN_MEMBER_ID  # a commit from outside a non-empty group
        member = group.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if member_epoch == member.member_epoch:
            return errors.NONE
        if transactional:
            return errors.ILLEGAL_GENERATION
        if member_epoch > member.member_epoch:
            return errors.FENCED_MEMBER_EPOCH
        return errors.STALE_MEMBER_EPOCH

    def close(self) -> None:
        """Cancel every timer (the cluster stops)."""
        for group in self.groups.values():
            for member in group.members.values():
                for timer in (member.session_timer, member.rebalance_timer):
                    if timer is not None:
                        timer.cancel()
                member.session_timer = member.rebalance_timer = None
