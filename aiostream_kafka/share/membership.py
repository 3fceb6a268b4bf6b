"""``ShareMembership``: one member of a share group (KIP-932), its heartbeat task.

Simpler than a consumer group member (``group/consumer_protocol.py``): the broker assigns
partitions to *fetch from*, not to own -- several members share a partition and the broker
hands each record to one of them under a lock -- so there is nothing to revoke or commit
before an assignment changes. The member id is made here (a UUID kept for the member's
life); ShareGroupHeartbeat (key 76) joins at epoch 0 with the subscribed topic names, then
heartbeats every ``heartbeat_interval_ms`` the broker gives with the epoch it gave, sending
the names again only when they changed; epoch -1 leaves.

Errors: a coordinator move (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS)
or a lost connection finds the coordinator again and retries; UNKNOWN_MEMBER_ID and
FENCED_MEMBER_EPOCH join again at epoch 0 (the assignment is dropped meanwhile); any
other non-retriable error ends the member (``error``), which the consumer then raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Collection

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.retry import Backoff
from aiostream_kafka.structs import TopicPartition

__all__ = ["ShareMembership"]

log = logging.getLogger(__name__)

_JOIN = 0
_LEAVE = -1
_DEFAULT_INTERVAL_S = 5.0  # the broker's default, until its first answer
_COORDINATOR_MOVED = (14, 15, 16)  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_REJOIN = (25, 110)  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
_HINTS = {
    30: "grant the principal READ on the group (ACL)",
    23: (
        "the group id is in use by a group of another type (a consumer or classic group); "
        "a share group needs a group id of its own"
    ),
    35: "the broker does not offer share groups (Kafka 4.2+, ShareGroupHeartbeat v1)",
}


class _Retry(Exception):
    """Internal: heartbeat again after a back-off."""


class ShareMembership:
    """Membership of one share consumer in share group ``group_id``.

    ``assignment`` is what to fetch from; ``on_change`` is called (synchronously) whenever
    it changes or the member fails.
    """

    def __init__(
        self,
        cluster: Cluster,
        client: ClientConfig,
        group_id: str,
        rack_id: str | None,
        on_change: Callable[[], None],
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.group_id = group_id
        self.rack_id = rack_id
        self.member_id = str(uuid.uuid4())
        self.epoch = _JOIN
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.error: KafkaError | None = None
        self.heartbeat_interval_s = _DEFAULT_INTERVAL_S
        self.heartbeats = 0
        self._on_change = on_change
        self._topics: frozenset[str] = frozenset()
        self._sent_topics: frozenset[str] | None = None
        self._target: dict[uuid.UUID, frozenset[int]] | None = None
        self._coordinator: int | None = None
        self._joined = False
        self._closing = False
        self._wake = asyncio.Event()
        self._scope: TaskScope | None = None

    def subscribe(self, topics: Collection[str]) -> None:
        """Set the topics to take records of; a running member tells the broker at once."""
        self._topics = frozenset(topics)
        self.cluster.track(self._topics)
        self._wake.set()

    @property
    def subscription(self) -> frozenset[str]:
        """The topics subscribed to."""
        return self._topics

    def start(self) -> None:
        """Start the heartbeat task (joining happens in the background)."""
        if self._scope is not None:
            raise RuntimeError("the share group membership is already started")
        self._scope = TaskScope(f"share group {self.group_id} member", on_fail=self._crashed)
        self._scope.spawn(
            self._heartbeat_loop, name=f"share group {self.group_id} heartbeat",
            crash=Crash.FAIL_OWNER,
        )  # fmt: skip

    async def close(self) -> None:
        """Stop heartbeating and leave the group (epoch -1) if a join was sent. Errors of
        the leave request are logged, not raised."""
        self._closing = True
        if self._scope is not None:
            await self._scope.aclose()
        if self._joined and self.error is None:
            self._joined = False  # once: close() may be called again
            try:
                await self._send(_LEAVE)
            except KafkaError as exc:
                log.info("share group %s: leaving failed: %s", self.group_id, exc)
        self._set_assignment(frozenset())

    # -- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = Backoff.of(self.client)
        while not self._closing:
            wait_s = self.heartbeat_interval_s
            if self._topics:
                try:
                    await self._heartbeat()
                    backoff.reset()
                    wait_s = self.heartbeat_interval_s
                except _Retry:
                    wait_s = backoff.next_delay()
                except KafkaError as exc:
                    if not isinstance(exc, (NetworkError, KafkaTimeoutError)) and not (
                        exc.retriable
                    ):
                        self._fail(exc)
                        return
                    log.info("share group %s: heartbeat failed: %s; retrying",
                             self.group_id, exc)  # fmt: skip
                    self._coordinator = None
                    wait_s = backoff.next_delay()
            if self.error is not None:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._wake.wait()
            self._wake.clear()
            if self._target is not None:
                await self._resolve()

    async def _send(self, epoch: int) -> ShareGroupHeartbeatResponse:
        if self._coordinator is None:
            self._coordinator = await self.cluster.find_coordinator(self.group_id, 0)
        conn = await self.cluster.connection(self._coordinator)
        topics = self._topics
        send_topics = epoch == _JOIN or topics != self._sent_topics
        request = ShareGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            rack_id=self.rack_id if epoch == _JOIN else None,
            subscribed_topic_names=sorted(topics) if send_topics and epoch != _LEAVE else None,
        )
        if epoch == _JOIN:
            self._joined = True
        response = await conn.request(request)
        assert isinstance(response, ShareGroupHeartbeatResponse)
        if not response.error_code and send_topics:
            self._sent_topics = topics
        return response

    async def _heartbeat(self) -> None:
        response = await self._send(self.epoch)
        if self._closing:
            return
        code = response.error_code
        if code:
            self._error(code, response.error_message)
            return
        self.heartbeats += 1
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_s = response.heartbeat_interval_ms / 1000
        if response.member_epoch != self.epoch:
            log.debug("share group %s: member %s epoch %d -> %d", self.group_id,
                      self.member_id, self.epoch, response.member_epoch)  # fmt: skip
            self.epoch = response.member_epoch
        if response.assignment is not None:
            self._target = {
                t.topic_id: frozenset(t.partitions) for t in response.assignment.topic_partitions
            }
            await self._resolve()

    def _error(self, code: int, message: str | None) -> None:
        detail = f" ({message})" if message else ""
        if code in _COORDINATOR_MOVED:
            self._coordinator = None
            raise _Retry(code)
        if code in _REJOIN:
            log.warning("share group %s: member %s must join again (error %d%s)",
                        self.group_id, self.member_id, code, detail)  # fmt: skip
            self.epoch = _JOIN
            self._target = None
            self._sent_topics = None
            self._set_assignment(frozenset())
            raise _Retry(code)
        hint = _HINTS.get(code, "")
        context = f"share group {self.group_id!r}: heartbeat refused{detail}"
        error = broker_error(code, f"{context}: {hint}" if hint else context)
        if error.retriable:
            log.warning("share group %s: heartbeat error %s; retrying", self.group_id, error)
            raise _Retry(code)
        self._fail(error)

    async def _resolve(self) -> None:
        """Turn the assignment's topic ids into names (refreshing the metadata for ids it
        does not know yet; those wait for a later heartbeat tick)."""
        target = self._target
        if target is None:
            return
        snapshot = self.cluster.snapshot
        if any(snapshot.topic_name(i) is None for i in target):
            with contextlib.suppress(KafkaError):
                snapshot = await self.cluster.refresh(self._topics)
        out: set[TopicPartition] = set()
        for topic_id, partitions in target.items():
            name = snapshot.topic_name(topic_id)
            if name is None:
                log.info("share group %s: assigned topic id %s not in the metadata yet",
                         self.group_id, topic_id)  # fmt: skip
                continue
            out.update(TopicPartition(name, p) for p in partitions)
        self._set_assignment(frozenset(out))

    def _set_assignment(self, assignment: frozenset[TopicPartition]) -> None:
        if assignment != self.assignment:
            log.info("share group %s: member %s fetches from %d partitions", self.group_id,
                     self.member_id, len(assignment))  # fmt: skip
            self.assignment = assignment
            self._on_change()

    def _fail(self, error: KafkaError) -> None:
        log.error("share group %s: member %s stops: %s", self.group_id, self.member_id, error)
        self.error = error
        self._closing = True
        self._set_assignment(frozenset())
        self._on_change()

    async def _crashed(self, exc: Exception) -> None:
        error = exc if isinstance(exc, KafkaError) else KafkaError(
            f"share group {self.group_id!r}: the heartbeat task failed: {exc!r}")  # fmt: skip
        if error is not exc:
            error.__cause__ = exc
        self._fail(error)
