"""``GroupCoordinator``: membership of one consumer in a classic consumer group.

Two tasks, both owned by the coordinator and awaited by :meth:`GroupCoordinator.close`:

* the **membership task** joins the group (JoinGroup, then SyncGroup; the leader runs the
  assignor), hands partition changes to the consumer through an
  :class:`AssignmentListener`, and rejoins when asked to (a heartbeat answered
  REBALANCE_IN_PROGRESS, a cooperative round that revoked partitions, a subscription or
  partition count that changed);
* the **heartbeat task** sends Heartbeat every ``heartbeat_interval_ms`` from the moment
  SyncGroup gave the member its generation until it sends its next JoinGroup: through the
  whole rebalance, commit-on-revoke, the committed-offset lookup and the application's
  callbacks included (as the Java client's heartbeat thread), so a slow callback never
  costs the member its session. It never waits on the consumer's processing.
  It also watches **poll liveness**: when the application has not asked for records for
  ``max_poll_interval_ms`` (``rebalance_timeout_ms`` here), or one of its rebalance
  callbacks has run that long, the member leaves the group (LeaveGroup; a static member
  only drops its generation, as Java's), its partitions are lost to it, ``left_reason``
  says why, and it joins again when the application asks for records again.

JoinGroup and SyncGroup travel on their own connection lane (``Lane.GROUP``): the
coordinator holds a JoinGroup until every member has joined, up to the rebalance timeout,
and commits or heartbeats queued behind it would wait that long.

Rebalance protocols: if every configured assignor is cooperative (``cooperative-sticky``),
partitions are revoked only when they move (KIP-429) and the others keep flowing through
the rebalance; otherwise (``range``, ``roundrobin``) everything is revoked before joining.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Collection, Sequence

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import (
    ConfigError,
    FencedMemberError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
)
from aiostream_kafka.group.assignors import Assignor, MemberSubscription
from aiostream_kafka.group.config import GroupConfig as GroupConfig  # re-exported: its old home
from aiostream_kafka.group.membership import AssignmentListener as AssignmentListener
from aiostream_kafka.group.membership import GroupState as GroupState
from aiostream_kafka.group.membership import MemberBase
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from aiostream_kafka.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from aiostream_kafka.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiostream_kafka.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from aiostream_kafka.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from aiostream_kafka.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.retry import Backoff
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)

_PROTOCOL_TYPE = "consumer"
# A subscribed topic missing from the cluster: looked for this often (seconds) while it is
# missing, and the WARNING naming it repeated this often while it stays missing.
MISSING_TOPIC_CHECK_S = 5.0
MISSING_TOPIC_WARN_S = 30.0
# Errors after which the coordinator must be looked up again.
_COORDINATOR_MOVED = (14, 15, 16)  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_UNKNOWN_MEMBER_ID = 25
_ILLEGAL_GENERATION = 22
_REBALANCE_IN_PROGRESS = 27
_MEMBER_ID_REQUIRED = 79
_FENCED_INSTANCE_ID = 82


class _Rejoin(Exception):
    """Internal: the current join attempt must start over (after ``delay`` seconds)."""

    def __init__(self, reason: str, delay: float = 0.0) -> None:
        super().__init__(reason)
        self.delay = delay


class GroupCoordinator(MemberBase):
    """Membership of one consumer in group ``config.group_id``.

    Call :meth:`subscribe`, then :meth:`start`; :meth:`close` leaves the group (dynamic
    members) and stops both tasks.
    """

    _log = log

    def __init__(
        self,
        cluster: Cluster,
        config: GroupConfig,
        assignors: Sequence[Assignor],
        listener: AssignmentListener,
    ) -> None:
        if not assignors:
            raise ConfigError("partition_assignment_strategy needs at least one assignor")
        self.cluster = cluster
        self.config = config
        self.assignors = list(assignors)
        self.cooperative = all(a.rebalance_protocol == "cooperative" for a in assignors)
        self.listener = listener
        self.state = GroupState.UNJOINED
        self.error: KafkaError | None = None
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.owned: frozenset[TopicPartition] = frozenset()
        self.last_heartbeat_at: float | None = None  # time.time() of the last success
        self.rebalances = 0
        self._topics: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        self._subscribed: frozenset[str] = frozenset()  # topics the subscription matches now
        self._group_topics: dict[str, int] = {}  # leader: partition counts it assigned from
        # Subscribed topics the cluster's metadata does not have (a typo, or not created
        # yet); shown by health(), logged at WARNING every MISSING_TOPIC_WARN_S.
        self.missing_topics: frozenset[str] = frozenset()
        self._missing_warned_at = 0.0
        self._coordinator_id: int | None = None
        self._rejoin = asyncio.Event()
        # Set from SyncGroup's answer until the next JoinGroup is sent: heartbeats flow.
        self._heartbeating = asyncio.Event()
        # Why the membership ended under us (heartbeat: expired/illegal generation, or a
        # poll timeout): the membership task drops the partitions before joining again.
        self._expired: str | None = None
        # Why the member left the group on a poll timeout (None: it did not); cleared
        # and ``_resume`` set when the application asks for records again.
        self.left_reason: str | None = None
        self._resume = asyncio.Event()
        self._resume.set()
        self.poll_timeouts = 0
        self._changed = asyncio.Condition()
        # Committing and reading the group's offsets, for this membership.
        self.offsets = GroupOffsets(cluster, config, self)
        # The membership and heartbeat tasks, from start() to stop().
        self._scope: TaskScope | None = None
        self._closing = False

    # -- subscription ----------------------------------------------------------------------

    def subscribe(
        self, topics: Collection[str] = (), pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Subscribe to ``topics``, or to every topic matching ``pattern`` (checked again
        every ``metadata_check_interval_ms``, so new matching topics are picked up).
        Changing the subscription of a started member makes it rejoin."""
        if bool(topics) == (pattern is not None):
            raise ConfigError("subscribe to a list of topics or to a pattern, not both or none")
        self._topics = frozenset(topics)
        self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self._subscribed = self._topics
        if self.running:
            self.request_rejoin("the subscription changed")

    @property
    def subscription(self) -> frozenset[str]:
        """The topics subscribed to: those given, or the existing ones the pattern
        matches now."""
        return self._subscribed

    def request_rejoin(self, reason: str) -> None:
        """Ask the membership task to rejoin the group."""
        log.info("group %s: rejoining: %s", self.config.group_id, reason)
        self._rejoin.set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the membership and heartbeat tasks (joining happens in the background;
        :meth:`wait_stable` waits for it)."""
        if self.running:
            raise RuntimeError("the group coordinator is already started")
        if not self._topics and self._pattern is None:
            raise ConfigError("subscribe() before starting the group membership")
        group = self.config.group_id
        # Neither task can be missing: a bug that ends one fails the member rather than
        # leaving it in the group without heartbeats or without a membership loop (a zombie).
        scope = self._scope = TaskScope(f"group {group} member", on_fail=self._crashed)
        scope.spawn(self._membership_loop, name=f"group {group} membership", crash=Crash.FAIL_OWNER)
        scope.spawn(self._heartbeat_loop, name=f"group {group} heartbeat", crash=Crash.FAIL_OWNER)

    @property
    def member_epoch(self) -> int | None:
        """None: the classic protocol has generations, not member epochs."""
        return None

    async def epoch_moved(self, stale: int, timeout_s: float) -> None:
        """Classic commits are never answered STALE_MEMBER_EPOCH: nothing to wait for."""

    def _settled(self) -> bool:
        return not self._rejoin.is_set()

    async def close(self, *, leave: bool | None = None) -> None:
        """Stop both tasks, give up the partitions (``partitions_revoked``) and leave the
        group. Static members (``group_instance_id``) do not leave unless ``leave=True``,
        so that a restart within the session timeout keeps their partitions."""
        await self.stop()
        if self.owned and self.state not in (GroupState.FENCED, GroupState.FAILED):
            # Ownership ends after the listener: it commits what is pending for them.
            try:
                await self._call_listener("partitions_revoked", self.owned)
            finally:
                self.owned = frozenset()
        should_leave = leave if leave is not None else self.config.group_instance_id is None
        if should_leave and self.member_id and self.state is not GroupState.FENCED:
            with contextlib.suppress(KafkaError):
                await self._leave()
        await self._set_state(GroupState.CLOSED)

    # -- coordinator discovery -------------------------------------------------------------

    async def _send(
        self, request: Request, lane: Lane = Lane.CONTROL, timeout_ms: float | None = None
    ) -> Response:
        node = await self.coordinator_node()
        return await self.cluster.send(node, request, lane=lane, timeout_ms=timeout_ms)

    # -- membership ------------------------------------------------------------------------

    async def _membership_loop(self) -> None:
        # Join retries: a state machine that runs as long as the member does, so the
        # back-off alone (not retry_until); it starts over after each join that succeeds.
        backoff = Backoff.of(self.config)
        interval = self.config.metadata_check_interval_ms / 1000
        while not self._closing and self._pattern is not None:
            try:
                await self._refresh_subscription()  # what the pattern matches now
                break
            except KafkaError as exc:
                log.debug("group %s: cannot match the pattern yet: %s", self.config.group_id, exc)
                await asyncio.sleep(backoff.initial_s)
        while not self._closing:
            if self.state is GroupState.STABLE and not self._rejoin.is_set():
                # A missing subscribed topic is looked for more often, so that it is
                # consumed soon after it is created (and the warning repeats).
                wait = min(interval, MISSING_TOPIC_CHECK_S) if self.missing_topics else interval
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._rejoin.wait()
                if not self._rejoin.is_set():
                    await self._check_metadata()
                continue
            # The rejoin request stays set until the member is marked REBALANCING (in
            # _join_and_sync): meanwhile it must not look settled to wait_stable() or to
            # anyone reading the state (a STABLE member with nothing pending).
            await self._drop_expired()
            if self.left_reason is not None:
                self._rejoin.clear()
                await self._resume.wait()  # until the application asks for records again
                continue
            if self._pattern is None:
                try:
                    await self._refresh_subscription()  # notes (and logs) missing topics
                except KafkaError as exc:
                    log.debug("group %s: metadata of the subscription: %s",
                              self.config.group_id, exc)  # fmt: skip
            try:
                await self._join_and_sync()
                backoff.reset()
            except _Rejoin as again:
                log.debug("group %s: join again: %s", self.config.group_id, again)
                self._rejoin.set()
                if again.delay:
                    await asyncio.sleep(again.delay)
            except (NetworkError, KafkaTimeoutError) as exc:
                self.coordinator_lost(exc)
                self._rejoin.set()
                await asyncio.sleep(backoff.next_delay())
            except (FencedMemberError, ConfigError) as exc:
                await self._fail(exc, GroupState.FENCED if isinstance(exc, FencedMemberError)
                                 else GroupState.FAILED)  # fmt: skip
                return
            except KafkaError as exc:
                if exc.retriable:
                    self._rejoin.set()
                    await asyncio.sleep(backoff.next_delay())
                    continue
                await self._fail(exc, GroupState.FAILED)
                return

    async def _drop_expired(self) -> None:
        """The membership ended under us: what we own may already be someone else's."""
        if self._expired is None:
            return
        reason, self._expired = self._expired, None
        lost, self.owned = self.owned, frozenset()
        if lost:
            log.info("group %s: %d partitions lost: %s", self.config.group_id, len(lost), reason)
            await self._call_listener("partitions_lost", lost)

    def _check_not_expired(self) -> None:
        """After a callback: stop applying an assignment whose membership ended meanwhile."""
        if self._expired is not None:
            raise _Rejoin(f"the membership ended during a callback: {self._expired}")

    async def _refresh_subscription(self) -> bool:
        """Re-evaluate the pattern against the cluster's topics; True if the set changed."""
        if self._pattern is None:
            snapshot = await self.cluster.refresh(self._topics)
            matched = self._topics
            missing = frozenset(
                t
                for t in self._topics
                if t not in snapshot.topics or snapshot.topics[t].error_code != 0
            )
            if self._note_missing(missing):
                return True  # a missing topic exists now: its partitions need assigning
        else:
            snapshot = await self.cluster.refresh(all_topics=True)
            matched = frozenset(
                name
                for name, topic in snapshot.topics.items()
                if not topic.is_internal and self._pattern.fullmatch(name)
            )
        changed = matched != self._subscribed
        self._subscribed = matched
        del snapshot
        return changed

    def _note_missing(self, missing: frozenset[str]) -> bool:
        """Record which subscribed topics the metadata lacks; log a WARNING naming them when
        that set changes and every ``MISSING_TOPIC_WARN_S`` while it persists. Return True
        when a topic missing before exists now."""
        now = time.monotonic()
        appeared = self.missing_topics - missing
        if missing and (
            missing != self.missing_topics or now - self._missing_warned_at >= MISSING_TOPIC_WARN_S
        ):
            log.warning(
                "group %s: subscribed topic(s) %s do not exist: nothing is consumed from them "
                "(a typo, or not created yet; looked for again every %g s)",
                self.config.group_id, ", ".join(sorted(missing)), MISSING_TOPIC_CHECK_S,
            )  # fmt: skip
            self._missing_warned_at = now
        if appeared:
            log.info("group %s: subscribed topic(s) %s exist now",
                     self.config.group_id, ", ".join(sorted(appeared)))  # fmt: skip
        self.missing_topics = missing
        return bool(appeared)

    async def _check_metadata(self) -> None:
        """Rejoin when this member's pattern matches other topics, or (leader) when a topic
        the group consumes has more partitions than were assigned."""
        try:
            if await self._refresh_subscription():
                self.request_rejoin(f"the subscription now matches {sorted(self._subscribed)}")
                return
            if self._group_topics:
                snapshot = await self.cluster.refresh(self._group_topics)
                for topic, count in self._group_topics.items():
                    known = snapshot.topics.get(topic)
                    if known is not None and len(known.partitions) != count:
                        self.request_rejoin(
                            f"topic {topic!r} now has {len(known.partitions)} partitions"
                        )
                        return
        except KafkaError as exc:
            log.debug("group %s: metadata check failed: %s", self.config.group_id, exc)

    def _subscription_bytes(self) -> bytes:
        owned: dict[str, list[int]] = {}
        if self.cooperative:
            for tp in sorted(self.owned):
                owned.setdefault(tp.topic, []).append(tp.partition)
        subscription = ConsumerProtocolSubscription(
            topics=sorted(self._subscribed),
            user_data=None,
            owned_partitions=[
                ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=p)
                for t, p in owned.items()
            ],
            generation_id=self.generation if self.cooperative else -1,
            rack_id=self.config.rack_id,
        )
        return subscription.encode_versioned(ConsumerProtocolSubscription.MAX_VERSION)

    def _group_error(self, code: int, what: str) -> None:
        """React to a JoinGroup/SyncGroup error code: raise _Rejoin or a final error."""
        if code in _COORDINATOR_MOVED:
            self.coordinator_lost(ec.ERRORS_BY_CODE[code].name)
            raise _Rejoin(f"{what}: coordinator moved", self.config.retry_backoff_ms / 1000)
        if code == _REBALANCE_IN_PROGRESS:
            raise _Rejoin(f"{what}: a new rebalance started")
        if code == _UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = -1
            raise _Rejoin(f"{what}: the coordinator does not know this member")
        if code == _ILLEGAL_GENERATION:
            self.generation = -1
            raise _Rejoin(f"{what}: stale generation")
        if code == _FENCED_INSTANCE_ID:
            raise FencedMemberError(
                f"group {self.config.group_id!r}: another consumer joined with "
                f"group_instance_id={self.config.group_instance_id!r}; this one is fenced"
            )
        raise broker_error(code, f"group {self.config.group_id!r}: {what}")

    async def _join_and_sync(self) -> None:
        if not self.cooperative and self.owned:
            # Eager protocol: give everything up before joining.
            try:
                await self._call_listener("partitions_revoked", self.owned)
            finally:
                self.owned = frozenset()
        await self._set_state(GroupState.REBALANCING)
        self._rejoin.clear()  # the JoinGroup we send now answers every request so far
        self._heartbeating.clear()  # the JoinGroup we send now stands for them
        join_timeout = self.config.rebalance_timeout_ms + 5_000
        while True:
            join = JoinGroupRequest(
                group_id=self.config.group_id,
                session_timeout_ms=self.config.session_timeout_ms,
                rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.config.group_instance_id,
                protocol_type=_PROTOCOL_TYPE,
                protocols=[
                    JoinGroupRequest.JoinGroupRequestProtocol(
                        name=a.name, metadata=self._subscription_bytes()
                    )
                    for a in self.assignors
                ],
            )
            response = await self._send(join, Lane.GROUP, timeout_ms=join_timeout)
            assert isinstance(response, JoinGroupResponse)
            if response.error_code == _MEMBER_ID_REQUIRED:
                # KIP-394: the coordinator hands out the member id, then we join with it.
                self.member_id = response.member_id
                continue
            if response.error_code == _UNKNOWN_MEMBER_ID and self.owned:
                lost, self.owned = self.owned, frozenset()
                await self._call_listener("partitions_lost", lost)
            if response.error_code:
                self._group_error(response.error_code, "JoinGroup")
            break
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader_id = response.leader
        assignments: list[SyncGroupRequest.SyncGroupRequestAssignment] = []
        if response.leader == self.member_id and not response.skip_assignment:
            assignments = await self._assign(response)
        sync = SyncGroupRequest(
            group_id=self.config.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=_PROTOCOL_TYPE,
            protocol_name=self.protocol_name,
            assignments=assignments,
        )
        synced = await self._send(sync, Lane.GROUP, timeout_ms=join_timeout)
        assert isinstance(synced, SyncGroupResponse)
        if synced.error_code:
            self._group_error(synced.error_code, "SyncGroup")
        assigned = _decode_assignment(synced.assignment)
        self.rebalances += 1
        self._heartbeating.set()
        await self._apply(assigned)

    async def _assign(
        self, response: JoinGroupResponse
    ) -> list[SyncGroupRequest.SyncGroupRequestAssignment]:
        """As the leader, run the chosen assignor over every member's subscription."""
        name = response.protocol_name
        assignor = next((a for a in self.assignors if a.name == name), None)
        if assignor is None:
            raise ConfigError(f"the group chose assignor {name!r}, which this member lacks")
        members: dict[str, MemberSubscription] = {}
        for member in response.members:
            subscription, _ = ConsumerProtocolSubscription.decode_versioned(member.metadata)
            members[member.member_id] = MemberSubscription(
                member_id=member.member_id,
                topics=frozenset(subscription.topics),
                owned=tuple(
                    TopicPartition(tp.topic, p)
                    for tp in subscription.owned_partitions
                    for p in tp.partitions
                ),
                generation=subscription.generation_id,
                group_instance_id=member.group_instance_id,
                rack=subscription.rack_id,
            )
        topics = sorted(set().union(*(m.topics for m in members.values())))
        snapshot = await self.cluster.refresh(topics)
        counts = {
            t: len(snapshot.topics[t].partitions)
            for t in topics
            if t in snapshot.topics and snapshot.topics[t].error_code == 0
        }
        self._group_topics = counts
        plan = assignor.assign(counts, members)
        log.info(
            "group %s generation %d: leader assigned %d partitions of %s to %d members (%s)",
            self.config.group_id, self.generation, sum(len(v) for v in plan.values()),
            sorted(counts), len(members), assignor.name,
        )  # fmt: skip
        out = []
        for member_id, partitions in plan.items():
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            assignment = ConsumerProtocolAssignment(
                assigned_partitions=[
                    ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=p)
                    for t, p in by_topic.items()
                ],
                user_data=None,
            )
            out.append(
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member_id,
                    assignment=assignment.encode_versioned(ConsumerProtocolAssignment.MAX_VERSION),
                )
            )
        return out

    async def _apply(self, assigned: frozenset[TopicPartition]) -> None:
        previous = self.owned
        if self.cooperative:
            revoked = previous - assigned
            added = assigned - previous
            if revoked:
                # KIP-429: give these up, then rejoin so that their new owner gets them.
                try:
                    await self._call_listener("partitions_revoked", frozenset(revoked))
                finally:
                    self.owned = previous - revoked
                self._rejoin.set()
                self._check_not_expired()
            self.owned = assigned
            if added:
                await self._call_listener("partitions_assigned", frozenset(added))
        else:
            self.owned = assigned
            await self._call_listener("partitions_assigned", assigned)
        self._check_not_expired()
        self.last_heartbeat_at = time.time()
        await self._set_state(GroupState.STABLE)
        log.info(
            "group %s generation %d: member %s owns %d partitions",
            self.config.group_id, self.generation, self.member_id, len(self.owned),
        )  # fmt: skip

    # -- heartbeats ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        while not self._closing:
            await asyncio.sleep(interval)
            await self._check_liveness()
            if not self._heartbeating.is_set():
                continue
            request = HeartbeatRequest(
                group_id=self.config.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.config.group_instance_id,
            )
            generation = self.generation
            try:
                response = await self._send(request, timeout_ms=self.config.session_timeout_ms)
            except (NetworkError, KafkaTimeoutError, ec.CoordinatorNotAvailableError) as exc:
                self.coordinator_lost(exc)
                continue
            except KafkaError as exc:
                log.warning("group %s: heartbeat failed: %s", self.config.group_id, exc)
                continue
            assert isinstance(response, HeartbeatResponse)
            code = response.error_code
            if generation != self.generation or not self._heartbeating.is_set():
                continue  # answered for a generation we already left
            if code == 0:
                self.last_heartbeat_at = time.time()
            elif code == _REBALANCE_IN_PROGRESS:
                # The session is alive (the coordinator counts this heartbeat); rejoin as
                # soon as the membership task is free.
                self.last_heartbeat_at = time.time()
                if not self._rejoin.is_set():
                    self.request_rejoin("the coordinator started a rebalance")
            elif code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
                # Our membership expired (e.g. the session timed out): what we own may
                # already belong to someone else. The membership task drops it (it may be
                # in a callback right now) and joins again.
                if code == _UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.generation = -1
                self._heartbeating.clear()
                self._expired = f"heartbeat: {ec.ERRORS_BY_CODE[code].name}"
                self.request_rejoin(self._expired)
            elif code == _FENCED_INSTANCE_ID:
                self._heartbeating.clear()
                await self._fail(
                    FencedMemberError(
                        f"group {self.config.group_id!r}: another consumer joined with "
                        f"group_instance_id={self.config.group_instance_id!r}"
                    ),
                    GroupState.FENCED,
                )
                self._rejoin.set()
                self._closing = True  # the membership loop ends too
                return
            elif code in _COORDINATOR_MOVED:
                self.coordinator_lost(ec.ERRORS_BY_CODE[code].name)
            else:
                log.warning("group %s: heartbeat error %d", self.config.group_id, code)

    async def _check_liveness(self) -> None:
        """Poll liveness (Java's ``max.poll.interval.ms``), checked at every tick."""
        stalled_s, what = self.listener.stalled()
        interval_s = self.config.heartbeat_interval_ms / 1000
        if self.left_reason is not None:
            if stalled_s < 2 * interval_s:  # the application asks for records again
                log.info("group %s: the application asks for records again: rejoining",
                         self.config.group_id)  # fmt: skip
                self.left_reason = None
                self._resume.set()
                self._rejoin.set()
            return
        limit_s = self.config.rebalance_timeout_ms / 1000
        if stalled_s <= limit_s or not self._heartbeating.is_set():
            return
        reason = self._poll_timeout(stalled_s, what)
        self.left_reason = reason
        self._resume.clear()
        self._heartbeating.clear()
        self._expired = f"left the group: {reason}"
        if self.config.group_instance_id is None and self.member_id:
            try:
                await self._leave()
            except KafkaError as exc:
                log.info("group %s: LeaveGroup failed: %s", self.config.group_id, exc)
                self.member_id = ""
                self.generation = -1
        else:
            self.generation = -1  # a static member keeps its place until the session ends
        await self._set_state(GroupState.UNJOINED)
        self._rejoin.set()  # wakes the membership task, which drops the partitions

    async def _leave(self) -> None:
        conn = await self.cluster.connection(await self.coordinator_node())
        version = conn.version_for(LeaveGroupRequest)
        if version >= 3:
            request = LeaveGroupRequest(
                group_id=self.config.group_id,
                members=[
                    LeaveGroupRequest.MemberIdentity(
                        member_id=self.member_id,
                        group_instance_id=self.config.group_instance_id,
                    )
                ],
            )
        else:
            request = LeaveGroupRequest(group_id=self.config.group_id, member_id=self.member_id)
        response = await conn.request(request, version=version)
        assert isinstance(response, LeaveGroupResponse)
        log.info("group %s: member %s left (error %d)", self.config.group_id, self.member_id,
                 response.error_code)  # fmt: skip
        self.member_id = ""
        self.generation = -1


def _decode_assignment(raw: bytes | memoryview) -> frozenset[TopicPartition]:
    if len(raw) == 0:
        return frozenset()
    assignment, _ = ConsumerProtocolAssignment.decode_versioned(raw)
    return frozenset(
        TopicPartition(tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions
    )
