"""``ConsumerProtocolMember``: membership in a consumer group under KIP-848 (Kafka 4.0+).

The broker assigns; the member heartbeats and reconciles. Two tasks, owned by the member's
:class:`~aiostream_kafka.concurrency.TaskScope` and stopped by :meth:`stop`:

* the **heartbeat task** sends ConsumerGroupHeartbeat (key 68): the joining request
  (member epoch 0) carries everything (instance id, rack, rebalance timeout =
  ``max_poll_interval_ms``, subscribed names or regex, server assignor, an empty owned
  list); later ones carry only what changed since the last accepted one (the owned
  partitions after a reconciliation: that is the acknowledgement). It runs every
  ``heartbeat_interval_ms`` the broker gives, at once when woken (an acknowledgement is
  due, the subscription changed), and never waits for the application. It also watches
  poll liveness (``max_poll_interval_ms``), as the classic member does.
* the **reconciler task** makes the owned partitions match the latest assignment the
  broker sent (topic ids, resolved to names through metadata): it runs ``on_revoked``'s
  path for partitions leaving (their pending commits land first), then adds the new ones
  (committed offsets, ``on_assigned``), then wakes the heartbeat to acknowledge. A newer
  assignment arriving meanwhile is reconciled next. Partitions lost (fenced, unknown
  member, a poll timeout) go through ``on_lost`` here too, so the listener is never
  called from two tasks at once.

Errors (the protocol's rules): FENCED_MEMBER_EPOCH keeps the member id and rejoins at
epoch 0 after ``on_lost``; UNKNOWN_MEMBER_ID does the same with a fresh id; coordinator
moves and network errors rediscover and retry (the next request carries every field);
GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR,
UNRELEASED_INSTANCE_ID, INVALID_REGULAR_EXPRESSION, FENCED_INSTANCE_ID and
GROUP_ID_NOT_FOUND (a classic group the broker will not convert) end the member with a
typed error that every iterator raises.

Leaving: member epoch -1, or -2 for a static member (``group_instance_id``) that closes
without ``leave=True`` (the broker keeps its assignment for the session timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Collection

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import (
    CommitFailedError,
    ConfigError,
    FencedMemberError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    UnsupportedVersionError,
)
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.membership import AssignmentListener, GroupState, MemberBase
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.retry import Backoff
from aiostream_kafka.structs import TopicPartition

__all__ = ["ConsumerProtocolMember"]

log = logging.getLogger(__name__)

_HEARTBEAT_KEY = ConsumerGroupHeartbeatRequest.API_KEY
_JOIN = 0
_LEAVE = -1
_LEAVE_STATIC = -2
# Until the broker tells the interval (the first answer): its default.
_DEFAULT_INTERVAL_S = 5.0
MISSING_TOPIC_CHECK_S = 5.0
MISSING_TOPIC_WARN_S = 30.0

_COORDINATOR_MOVED = (14, 15, 16)  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_UNKNOWN_MEMBER_ID = 25
_FENCED_INSTANCE_ID = 82
_FENCED_MEMBER_EPOCH = 110
_STALE_MEMBER_EPOCH = 113
_GROUP_ID_NOT_FOUND = 69
# The errors that end the member, each with what to do about it.
_FATAL = {
    30: "grant the principal READ on the group (ACL)",
    42: "a bug in the request; please report it",
    81: "the group is at the broker's group.consumer.max.size; raise it or use fewer members",
    111: (
        "a static member with this group_instance_id is still in the group (it left with "
        "epoch -2 and its session has not ended): wait for consumer.session.timeout.ms or "
        "give this instance another id"
    ),
    112: (
        'group_remote_assignor names an assignor the broker lacks: use "uniform" or '
        '"range" (the broker offers those of group.consumer.assignors)'
    ),
    128: (
        "the broker evaluates subscribe(pattern=...) with RE2/J, which lacks some of "
        "Python's re syntax (look-arounds, backreferences): write the pattern in RE2 syntax"
    ),
    35: 'the broker does not speak this version; use group_protocol="classic"',
}


class _Retry(Exception):
    """Internal: this heartbeat must be sent again (with every field) after a back-off."""


class ConsumerProtocolMember(MemberBase):
    """Membership of one consumer in group ``config.group_id`` under KIP-848.

    The same interface as the classic :class:`~aiostream_kafka.group.coordinator.
    GroupCoordinator` (:class:`~aiostream_kafka.group.membership.GroupMembership`):
    :meth:`subscribe`, :meth:`start`, :meth:`close`.
    """

    _log = log

    def __init__(self, cluster: Cluster, config: GroupConfig, listener: AssignmentListener) -> None:
        self.cluster = cluster
        self.config = config
        self.listener = listener
        self.state = GroupState.UNJOINED
        self.error: KafkaError | None = None
        # KIP-848 v1: the client makes the member id and keeps it for the member's life
        # (a fresh one only after UNKNOWN_MEMBER_ID).
        self.member_id = _new_member_id()
        self._epoch = _JOIN
        self.owned: frozenset[TopicPartition] = frozenset()
        self.last_heartbeat_at: float | None = None
        self.left_reason: str | None = None
        self.missing_topics: frozenset[str] = frozenset()
        self.rebalances = 0
        self.poll_timeouts = 0
        self.heartbeat_interval_s = _DEFAULT_INTERVAL_S
        self.offsets = GroupOffsets(cluster, config, self)
        self._topics: frozenset[str] = frozenset()
        self._pattern: str | None = None
        # What the last accepted heartbeat carried (None: send it again).
        self._sent_subscription: tuple[frozenset[str], str | None] | None = None
        self._sent_owned: frozenset[TopicPartition] | None = None
        # The latest assignment the broker sent (topic id -> partitions), until reconciled
        # into ``owned``; the ids of what we own, for the acknowledgements.
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        self._ids: dict[str, uuid.UUID] = {}
        # Why the member's partitions are lost (set by the heartbeat task, acted on by the
        # reconciler); each loss starts a new incarnation, so a reconciliation that was in a
        # callback meanwhile does not apply its stale assignment.
        self._lost: str | None = None
        self._incarnation = 0
        self._full = True  # the next heartbeat carries every field
        self._full_asks = 0  # request_rejoin() calls: one made while a request is out stays
        self._joined = False  # a joining request was sent: close() sends a leave
        # Set (and replaced) whenever the member epoch changes: commits waiting out a
        # STALE_MEMBER_EPOCH wake on it.
        self._epoch_event = asyncio.Event()
        # Held by whoever calls the listener for assignment changes: the reconciler, and
        # close() (which revokes while the heartbeat task still runs).
        self._listener_lock = asyncio.Lock()
        self._reconciling_stopped = False
        self._wake_heartbeat = asyncio.Event()
        self._wake_reconciler = asyncio.Event()
        self._changed = asyncio.Condition()
        self._coordinator_id: int | None = None
        self._scope: TaskScope | None = None
        self._closing = False
        self._missing_checked_at = 0.0
        self._missing_warned_at = 0.0

    # -- identity ---------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The member epoch (what OffsetCommit and TxnOffsetCommit carry under KIP-848)."""
        return self._epoch

    @property
    def member_epoch(self) -> int | None:
        """The member epoch the broker gave last (0: joining)."""
        return self._epoch

    @property
    def subscription(self) -> frozenset[str]:
        """The topics subscribed to: those given, or under a pattern (which the broker
        evaluates) the topics of the partitions owned now."""
        if self._pattern is None:
            return self._topics
        return frozenset(tp.topic for tp in self.owned)

    def subscribe(
        self, topics: Collection[str] = (), pattern: str | re.Pattern[str] | None = None
    ) -> None:
        """Subscribe to ``topics``, or to the topics whose whole name matches ``pattern``
        (a regular expression the broker evaluates, with RE2/J). A started member sends the
        change with its next heartbeat (at once)."""
        if bool(topics) == (pattern is not None):
            raise ConfigError("subscribe to a list of topics or to a pattern, not both or none")
        if isinstance(pattern, re.Pattern):
            if pattern.flags & ~re.UNICODE:
                raise ConfigError(
                    "subscribe(pattern=...) under the consumer group protocol is evaluated by "
                    "the broker (RE2/J), which gets the expression only: write flags inline "
                    "(e.g. '(?i)orders') instead of re.compile flags"
                )
            pattern = pattern.pattern
        if pattern is not None and not pattern:
            raise ConfigError("subscribe(pattern=...) needs a non-empty regular expression")
        self._topics = frozenset(topics)
        self._pattern = pattern
        if self._topics:
            self.cluster.track(self._topics)
        if self.running:
            self._wake_heartbeat.set()

    def request_rejoin(self, reason: str) -> None:
        """Heartbeat now with every field (the broker's answer carries the assignment)."""
        log.info("group %s: heartbeat now: %s", self.config.group_id, reason)
        self._full = True
        self._full_asks += 1
        self._wake_heartbeat.set()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the heartbeat and reconciler tasks (joining happens in the background)."""
        if self.running:
            raise RuntimeError("the group membership is already started")
        if not self._topics and self._pattern is None:
            raise ConfigError("subscribe() before starting the group membership")
        group = self.config.group_id
        scope = self._scope = TaskScope(f"group {group} member", on_fail=self._crashed)
        scope.spawn(self._heartbeat_loop, name=f"group {group} heartbeat", crash=Crash.FAIL_OWNER)
        scope.spawn(self._reconcile_loop, name=f"group {group} reconciler", crash=Crash.FAIL_OWNER)

    async def epoch_moved(self, stale: int, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until the member epoch is no longer ``stale``: a
        commit answered STALE_MEMBER_EPOCH goes again once the heartbeat brought the new
        epoch. Wakes the heartbeat so that it comes soon."""
        self._wake_heartbeat.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._epoch == stale and self.final_error() is None:
                    if self._lost is not None:
                        break
                    await self._epoch_event.wait()
        if self._lost is not None:
            raise CommitFailedError(
                f"group {self.config.group_id!r}: the membership ended while a commit waited "
                f"for a new member epoch ({self._lost}); the partitions are lost to this "
                "member and their new owner continues from the last committed offset"
            )

    async def close(self, *, leave: bool | None = None) -> None:
        """Stop both tasks, give up the partitions (``partitions_revoked``: pending commits
        land) and leave the group: epoch -1, or for a static member -2 (the broker keeps
        its assignment for the session timeout) unless ``leave=True``; ``leave=False``
        sends nothing (the session expires)."""
        # Give the partitions up while the heartbeat task still runs (a long revoke must not
        # cost the session), after any reconciliation in progress, and with no new one.
        async with self._listener_lock:
            self._reconciling_stopped = True
            if self.owned and self.final_error() is None:
                owned, lost = self.owned, self._lost
                try:
                    if lost is None:
                        await self._call_listener("partitions_revoked", owned)
                    else:  # the membership had ended: nothing of it may be committed
                        await self._call_listener("partitions_lost", owned)
                finally:
                    self.owned = frozenset()
        await self.stop()
        if leave is not False and self._joined and self.final_error() is None:
            static = self.config.group_instance_id is not None and leave is not True
            with contextlib.suppress(KafkaError):
                await self._leave(_LEAVE_STATIC if static else _LEAVE)
        await self._set_state(GroupState.CLOSED)

    # -- the coordinator --------------------------------------------------------------------

    async def _connection(self) -> tuple[BrokerConnection, int]:
        node = await self.coordinator_node()
        conn = await self.cluster.connection(node)
        table = conn.api_versions
        if table is not None and not table.supports(_HEARTBEAT_KEY):
            raise UnsupportedVersionError(
                f"group {self.config.group_id!r}: broker {node} does not offer the "
                "consumer group protocol (no ConsumerGroupHeartbeat, API key 68, in its "
                f"ApiVersions: {_release_hint(table)}, or its group.coordinator.rebalance."
                'protocols leaves out "consumer"); use group_protocol="classic"'
            )
        version = conn.version_for(ConsumerGroupHeartbeatRequest)
        if self._pattern is not None and version < 1:
            raise UnsupportedVersionError(
                f"group {self.config.group_id!r}: subscribe(pattern=...) under the consumer "
                "group protocol needs ConsumerGroupHeartbeat v1 (Kafka 4.0+); this broker "
                'has v0 only: subscribe to topic names or use group_protocol="classic"'
            )
        return conn, version

    # -- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = Backoff.of(self.config)
        while not self._closing:
            wait_s = self.heartbeat_interval_s
            if self.left_reason is None and self._lost is None:
                try:
                    await self._heartbeat()
                    backoff = Backoff.of(self.config)
                    wait_s = self.heartbeat_interval_s  # as the answer says
                except _Retry:
                    self._full = True
                    wait_s = backoff.next_delay()
                except KafkaError as exc:
                    if not isinstance(exc, (NetworkError, KafkaTimeoutError)) and not (
                        exc.retriable
                    ):
                        await self._fail(exc, GroupState.FAILED)
                        return
                    # The coordinator moved, is loading or unreachable: find it again.
                    log.info("group %s: heartbeat failed: %s; retrying", self.config.group_id,
                             exc)  # fmt: skip
                    self.coordinator_lost(exc)
                    self._full = True
                    wait_s = backoff.next_delay()
            if self._closing:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake_heartbeat.wait()
            self._wake_heartbeat.clear()
            await self._check_liveness()
            await self._check_missing_topics()

    def _request(self, epoch: int) -> ConsumerGroupHeartbeatRequest:
        full = self._full or epoch == _JOIN
        subscription = (self._topics, self._pattern)
        send_subscription = full or subscription != self._sent_subscription
        names: list[str] | None = None
        regex: str | None = None
        if send_subscription:
            if self._pattern is not None:
                regex = self._pattern
                # Switching from names to a pattern: an empty list clears the names.
                names = [] if self._sent_subscription and self._sent_subscription[0] else None
            else:
                names = sorted(self._topics)
                if self._sent_subscription and self._sent_subscription[1]:
                    regex = ""  # switching from a pattern to names clears the pattern
        owned: list[ConsumerGroupHeartbeatRequest.TopicPartitions] | None = None
        if epoch == _JOIN:
            owned = []  # the joining request owns nothing
        elif full or self.owned != self._sent_owned:
            by_id: dict[uuid.UUID, list[int]] = {}
            for tp in sorted(self.owned):
                by_id.setdefault(self._ids[tp.topic], []).append(tp.partition)
            owned = [
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=i, partitions=p)
                for i, p in by_id.items()
            ]
        return ConsumerGroupHeartbeatRequest(
            group_id=self.config.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.config.group_instance_id if full else None,
            rack_id=self.config.rack_id if full else None,
            rebalance_timeout_ms=self.config.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=names,
            subscribed_topic_regex=regex,
            server_assignor=self.config.remote_assignor if full else None,
            topic_partitions=owned,
        )

    async def _heartbeat(self) -> None:
        conn, version = await self._connection()
        epoch = self._epoch
        request = self._request(epoch)
        sent_subscription = (self._topics, self._pattern)
        sent_owned = self.owned if request.topic_partitions is not None else self._sent_owned
        full_asks = self._full_asks
        if epoch == _JOIN:
            self._joined = True
            await self._set_state(GroupState.REBALANCING)
        response = await conn.request(request, version=version)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        if self._closing or self._lost is not None or self.left_reason is not None:
            return  # answered for a membership this member has already given up
        code = response.error_code
        log.debug(
            "group %s: heartbeat epoch %d -> error %d epoch %d interval %d ms assignment %s",
            self.config.group_id, epoch, code, response.member_epoch,
            response.heartbeat_interval_ms,
            None if response.assignment is None else {
                str(t.topic_id)[:8]: t.partitions for t in response.assignment.topic_partitions},
        )  # fmt: skip
        if code:
            await self._heartbeat_error(code, response.error_message)
            return
        if full_asks == self._full_asks:  # no request_rejoin() while it was out
            self._full = False
        self._sent_subscription = sent_subscription
        self._sent_owned = frozenset() if epoch == _JOIN else sent_owned
        self.last_heartbeat_at = time.time()
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_s = response.heartbeat_interval_ms / 1000
        if response.member_id:
            self.member_id = response.member_id
        if response.member_epoch != self._epoch:
            log.debug("group %s: member %s epoch %d -> %d", self.config.group_id,
                      self.member_id, self._epoch, response.member_epoch)  # fmt: skip
            self._set_epoch(response.member_epoch)
            async with self._changed:
                self._changed.notify_all()
        if response.assignment is not None:
            self._target = {
                tp.topic_id: frozenset(tp.partitions) for tp in response.assignment.topic_partitions
            }
            self._wake_reconciler.set()
        elif self.state is not GroupState.STABLE and self._target is not None:
            self._wake_reconciler.set()  # let the reconciler say whether it is done

    async def _heartbeat_error(self, code: int, message: str | None) -> None:
        group = self.config.group_id
        name = ec.ERRORS_BY_CODE[code].name if code in ec.ERRORS_BY_CODE else str(code)
        detail = f" ({message})" if message else ""
        if code in _COORDINATOR_MOVED:
            self.coordinator_lost(name)
            raise _Retry(name)
        if code == _FENCED_MEMBER_EPOCH or code == _STALE_MEMBER_EPOCH:
            self._lose(f"heartbeat: {name}{detail}")
            return
        if code == _UNKNOWN_MEMBER_ID:
            self._lose(f"heartbeat: {name}{detail}")
            self.member_id = _new_member_id()
            return
        if code == _FENCED_INSTANCE_ID:
            await self._fail(
                FencedMemberError(
                    f"group {group!r}: another consumer joined with group_instance_id="
                    f"{self.config.group_instance_id!r}; this one is fenced{detail}"
                ),
                GroupState.FENCED,
            )
            return
        if code == _GROUP_ID_NOT_FOUND:
            error = broker_error(
                code,
                f"group {group!r}: the broker refused to convert the classic group to the "
                "consumer group protocol (a group is converted only if its protocol type is "
                '"consumer", its members send no assignor user data, it is within '
                "group.consumer.max.size, and group.consumer.migration.policy allows it)"
                f"{detail}",
            )
            await self._fail(error, GroupState.FAILED)
            return
        hint = _FATAL.get(code)
        if hint is not None:
            error = broker_error(code, f"group {group!r}: heartbeat refused{detail}: {hint}")
            await self._fail(error, GroupState.FAILED)
            return
        error = broker_error(code, f"group {group!r}: heartbeat refused{detail}")
        if not error.retriable:
            await self._fail(error, GroupState.FAILED)
            return
        log.warning("group %s: heartbeat error %s%s; retrying", group, name, detail)
        raise _Retry(name)

    def _set_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        self._epoch_event.set()
        self._epoch_event = asyncio.Event()

    def _lose(self, reason: str) -> None:
        """The membership ended under us: what we own may be someone else's already. The
        reconciler drops it (``on_lost``); then the member joins again at epoch 0."""
        log.warning("group %s: member %s lost its partitions: %s; joining again",
                    self.config.group_id, self.member_id, reason)  # fmt: skip
        self._set_epoch(_JOIN)
        self._target = None
        self._full = True
        self._incarnation += 1
        self._lost = reason
        self._wake_reconciler.set()

    async def _fail(self, error: KafkaError, state: GroupState) -> None:
        self._incarnation += 1  # a reconciliation in a callback now applies nothing more
        self._closing = True
        self.listener.member_failed(error)  # the iterators raise it at once
        async with self._listener_lock:  # on_lost after any callback in progress, not beside it
            await super()._fail(error, state)

    async def _leave(self, epoch: int) -> None:
        conn, version = await self._connection()
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.config.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.config.group_instance_id,
            rebalance_timeout_ms=-1,
        )
        response = await conn.request(request, version=version)
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        log.info("group %s: member %s left with epoch %d (error %d)", self.config.group_id,
                 self.member_id, epoch, response.error_code)  # fmt: skip
        self._set_epoch(_JOIN)
        self._sent_subscription = self._sent_owned = None

    async def _check_liveness(self) -> None:
        """Poll liveness (``max_poll_interval_ms``), checked at every tick."""
        stalled_s, what = self.listener.stalled()
        if self.left_reason is not None:
            if stalled_s < 2 * self.heartbeat_interval_s and self._lost is None:
                log.info("group %s: the application asks for records again: joining",
                         self.config.group_id)  # fmt: skip
                self.left_reason = None
                self._full = True
                self._wake_heartbeat.set()
            return
        limit_s = self.config.rebalance_timeout_ms / 1000
        if stalled_s <= limit_s or self._epoch <= 0:
            return
        reason = self._poll_timeout(stalled_s, what)
        static = self.config.group_instance_id is not None
        try:
            await self._leave(_LEAVE_STATIC if static else _LEAVE)
        except KafkaError as exc:
            log.info("group %s: leaving failed: %s", self.config.group_id, exc)
        self.left_reason = reason
        self._lose(f"left the group: {reason}")
        await self._set_state(GroupState.UNJOINED)

    async def _check_missing_topics(self) -> None:
        if self._pattern is not None or not self._topics:
            return
        now = time.monotonic()
        if now - self._missing_checked_at < MISSING_TOPIC_CHECK_S:
            return
        self._missing_checked_at = now
        known = self.cluster.snapshot.topics
        if any(t not in known or known[t].error_code for t in self._topics):
            with contextlib.suppress(KafkaError):
                await self.cluster.refresh(self._topics)
            known = self.cluster.snapshot.topics
        missing = frozenset(t for t in self._topics if t not in known or known[t].error_code)
        self.missing_topics = missing
        if missing and now - self._missing_warned_at >= MISSING_TOPIC_WARN_S:
            self._missing_warned_at = now
            log.warning("group %s: subscribed topics not in the cluster (a typo, or not "
                        "created yet): %s", self.config.group_id, sorted(missing))  # fmt: skip

    # -- reconciliation -----------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        backoff = Backoff.of(self.config)
        while not self._closing:
            await self._wake_reconciler.wait()
            self._wake_reconciler.clear()
            async with self._listener_lock:
                if self._reconciling_stopped:
                    return  # close() gives the partitions up itself
                if self._lost is not None:
                    await self._drop_lost()
                    continue
                target = self._target
                if target is None:
                    continue
                incarnation = self._incarnation
                wanted, complete = await self._resolve(target)
                if incarnation != self._incarnation or self._target is not target:
                    self._wake_reconciler.set()  # lost, or a newer assignment: start over
                    continue
                if wanted != self.owned:
                    await self._reconcile(wanted, incarnation, complete)
                elif complete and self._epoch > 0:
                    await self._set_state(GroupState.STABLE)
                if self._target is not target or self._lost is not None:
                    self._wake_reconciler.set()  # something newer came meanwhile
            if not complete:
                # A topic id the metadata does not know yet: what is known was reconciled
                # (revocations never wait for it); look again after a back-off.
                await asyncio.sleep(backoff.next_delay())
                self._wake_reconciler.set()
            else:
                backoff = Backoff.of(self.config)

    async def _resolve(
        self, target: dict[uuid.UUID, frozenset[int]]
    ) -> tuple[frozenset[TopicPartition], bool]:
        """The assigned partitions by name, and whether every topic id was known."""
        snapshot = self.cluster.snapshot
        if any(snapshot.topic_name(i) is None for i in target):
            with contextlib.suppress(KafkaError):
                if self._pattern is None:
                    snapshot = await self.cluster.refresh(self._topics)
                else:
                    snapshot = await self.cluster.refresh(all_topics=True)
        names = {topic: topic_id for topic, topic_id in self._ids.items()}
        out: set[TopicPartition] = set()
        complete = True
        for topic_id, partitions in target.items():
            name = snapshot.topic_name(topic_id) or next(
                (t for t, i in names.items() if i == topic_id), None
            )
            if name is None:
                log.info("group %s: assigned topic id %s not in the metadata yet",
                         self.config.group_id, topic_id)  # fmt: skip
                complete = False
                continue
            self._ids[name] = topic_id
            out.update(TopicPartition(name, p) for p in partitions)
        return frozenset(out), complete

    async def _reconcile(
        self, wanted: frozenset[TopicPartition], incarnation: int, complete: bool
    ) -> None:
        await self._set_state(GroupState.REBALANCING)
        revoked = self.owned - wanted
        if revoked:
            try:
                await self._call_listener("partitions_revoked", revoked)
            finally:
                if incarnation == self._incarnation:
                    self.owned = self.owned - revoked
        if incarnation != self._incarnation:
            return  # lost meanwhile: the reconciler's next turn drops what is owned
        added = wanted - self.owned
        if added:
            self.owned = self.owned | added
            self.cluster.track({tp.topic for tp in added})
            await self._call_listener("partitions_assigned", added)
        if incarnation != self._incarnation:
            return
        self.rebalances += 1
        log.info(
            "group %s epoch %d: member %s owns %d partitions (-%d +%d)",
            self.config.group_id, self._epoch, self.member_id, len(self.owned),
            len(revoked), len(added),
        )  # fmt: skip
        self._wake_heartbeat.set()  # acknowledge at once
        if self._epoch > 0 and complete:
            await self._set_state(GroupState.STABLE)

    async def _drop_lost(self) -> None:
        lost, self.owned = self.owned, frozenset()
        try:
            if lost:
                await self._call_listener("partitions_lost", lost)
        finally:
            self._lost = None
            self._sent_owned = None
            if self.left_reason is None:
                await self._set_state(GroupState.UNJOINED)
            self._wake_heartbeat.set()  # join again (unless the member left on a poll timeout)


def _new_member_id() -> str:
    return str(uuid.uuid4())


def _release_hint(table: object) -> str:
    """What the broker's API keys say of its release (the wire does not name it)."""
    supports = getattr(table, "supports", None)
    if supports is None:
        return "an older broker"
    if supports(68) or supports(69):
        return "a Kafka 3.7-3.9 broker without the consumer protocol enabled"
    if supports(65):  # DescribeTransactions: 3.0+
        return "a broker older than Kafka 3.7 (3.0-3.6)"
    return "a broker older than Kafka 3.0 (2.8 or so)"
