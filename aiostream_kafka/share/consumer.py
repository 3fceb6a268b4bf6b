"""``ShareConsumer``: Kafka as a queue (share groups, KIP-932), with ``async for``.

::

    async with ShareConsumer(bootstrap_servers=bs, group_id="jobs") as sc:
        sc.subscribe(["jobs"])
        async for record in sc:       # accepted when the loop asks for the next one
            await handle(record)

    await sc.process(handle, concurrency=16, max_failures=3)   # or: handlers at once

Members of one share group take the records of the same partitions cooperatively: the
partition leader hands each record to one member under a time lock, and archives it once
that member acknowledges it (ACCEPT, or REJECT), or delivers it again after a RELEASE, a
lock expiry or the member leaving.

The parts, all owned by the consumer's :class:`~aiostream_kafka.concurrency.TaskScope`:

* **membership** (``membership.py``): ShareGroupHeartbeat in its own task; the assignment
  says which partitions to fetch from (several members may share one).
* **the fetch loop** (one task) runs one request at a time per partition leader, each in
  that leader's share session (epoch 0 opens it, each request increments it, -1 closes
  it), and never waits for one leader to answer before asking another. It acquires only
  as many records as the application takes in a quarter of the lock duration
  (:class:`~aiostream_kafka.share.acks.Demand`, at most ``max_prefetch_records`` /
  ``max_prefetch_bytes``); small asks go in ``share_acquire_mode`` record_limit (KIP-1206)
  so the broker does not round up to whole batches (a slow member holds few locks that a
  fast one could serve), large ones take whole batches (fewer, larger fetches). Pending
  acknowledgements ride on the ShareFetch requests; with no room, or with renewals due,
  they go alone (ShareAcknowledge).
* **the renewer** (one task): a record handed out and not acknowledged whose lock is half
  spent is renewed (RENEW, KIP-1222) where the broker allows it, so a slow handler keeps
  its record; ``record.lock_deadline`` moves with each renewal.
* **the iterator** hands out only records inside acquired ranges (``acks.py``) whose lock
  has not ended. In implicit mode a record is accepted when the loop asks for the next
  one; a loop that ends on the record instead (its body raised, or ``break``) releases it:
  it is delivered again, never silently accepted. :meth:`ShareConsumer.process` runs
  handlers concurrently and settles each record by how its handler ended.

Acknowledgements belong to the share session that acquired the records. When a session is
lost (the connection dropped, the leader moved, the broker answered
SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH) the broker has released its
records (a new leader loads them as available): the consumer drops those still buffered
and reports the acknowledgements that did not reach a live session (logged, and raised by
the next :meth:`ShareConsumer.commit` as :class:`ShareAcknowledgeError`). It also keeps
them (ACCEPT and REJECT, bounded): when a record this member finished comes back to it,
from any leader, it is settled at once as before and not handed out again; a record
still being processed when its session was lost is bound to the new session when it
comes back, not handed out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import functools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiostream_kafka import _args
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.concurrency import (
    DEFAULT_CLOSE_TIMEOUT_S,
    Crash,
    TaskScope,
    gather_all,
    retrieve,
    shared_task,
    shielded,
)
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer.errors import ConsumerStateError, RecordDeserializationError
from aiostream_kafka.errors import ConfigError, KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.otel.consumer import ConsumerTelemetry, Settling
from aiostream_kafka.otel.telemetry import telemetry_for
from aiostream_kafka.protocol.messages.share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from aiostream_kafka.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from aiostream_kafka.protocol.records.reader import iter_batches
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.retry import Backoff
from aiostream_kafka.serde import Deserializer
from aiostream_kafka.structs import Record, ShareRecord, TopicPartition
from aiostream_kafka.telemetry.clients import start_share_consumer_push
from aiostream_kafka.telemetry.push import TelemetryPusher

from .acks import GAP_TYPE, Demand, PendingAcks, ack_batches, acquired_records
from .config import ShareConsumerConfig
from .membership import ShareMembership
from .types import AcknowledgeType, ShareAcknowledgeError

__all__ = ["ShareConsumer"]

log = logging.getLogger(__name__)

_CLOSE_SESSION = -1
_SESSION_LOST = (122, 123)  # SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH
# Partition errors after which the leader is looked up again.
_STALE_METADATA = (3, 6, 74, 100)  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER, FENCED_EPOCH, ID
_CLIENT_OPTIONS = tuple(f.name for f in dataclasses.fields(ClientConfig) if f.init)
_RECORD_LIMIT = 1  # share_acquire_mode record_limit (KIP-1206, ShareFetch v2)
# From this many records asked, whole producer batches (batch_optimized, the broker's
# default): fewer, larger fetches for a fast application (measured: 1 partition of 100 B
# records, 125k vs 85k records/s); below it, exactly the count asked, so that a slow
# application holds no more locks than it can serve.
_WHOLE_BATCHES = 256
_RENEW = int(AcknowledgeType.RENEW)
_FINAL = (int(AcknowledgeType.ACCEPT), int(AcknowledgeType.REJECT))
_DEFAULT_LOCK_S = 30.0  # the broker's default, until its first answer says
_UNCONFIRMED_MAX = 100_000  # settlements kept for records that may come back
# How long acknowledgements wait for a ShareFetch to their leader to ride on before they
# go alone in a ShareAcknowledge (a separate request would hold the leader's one slot).
_ACK_LINGER_S = 0.1

Key = tuple[TopicPartition, int]
Handler = Callable[[ShareRecord], Awaitable[object]]


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True, eq=False)
class _Session:
    """This member's share session with one partition leader."""

    node: int
    epoch: int = 0  # 0: none open (the next ShareFetch opens one)
    partitions: set[TopicPartition] = field(default_factory=set)
    generation: int = 0  # bumped when the session is lost: its records are void
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True, eq=False)
class _Chunk:
    """Records of one partition acquired by one ShareFetch and not all handed out yet
    (``records[pos:]``); ``size``: their keys' and values' bytes, counted until the
    chunk is drained."""

    records: list[ShareRecord]
    tp: TopicPartition
    node: int
    generation: int
    deadline: float  # the lock's end, on the loop clock
    size: int
    pos: int = 0


@dataclass(slots=True)
class _Out:
    """A record handed out and not acknowledged yet, and the session that holds it."""

    record: ShareRecord
    key: Key
    node: int
    generation: int


class ShareConsumer:
    """A member of share group ``group_id`` (KIP-932, Kafka 4.2+).

    Use as ``async with ShareConsumer(bootstrap_servers=..., group_id=...) as sc``, then
    :meth:`subscribe` and ``async for record in sc`` (:class:`ShareRecord`: the
    :class:`Record` fields plus ``delivery_count`` and ``lock_deadline``), or
    :meth:`process` to run a handler on many records at once.

    Options: every client option of :class:`~aiostream_kafka.Consumer` (``client_id``,
    ``request_timeout_ms``, security, ...) and

    * ``acknowledgement_mode``: ``"implicit"`` (default): a record is accepted when the
      loop asks for the next one, released when the loop ends on it (an exception in its
      body, ``break``); ``"explicit"``: :meth:`acknowledge` each record (one left
      unacknowledged is released at close, or by the broker when its lock expires).
    * ``max_prefetch_records`` (2,000) and ``max_prefetch_bytes`` (16 MiB, keys and values):
      the most records acquired and not handed out yet. Within it the consumer holds
      what the application takes in a quarter of the lock duration, so a slow member
      holds few locks.
    * ``auto_renew_locks`` (True): renew the lock of a record handed out and not
      acknowledged once half of it is spent (RENEW, KIP-1222; where the broker allows
      it), so a slow handler keeps its record. False: a record not acknowledged within
      the lock is delivered again (to any member), as with the Java client.
    * ``fetch_max_wait_ms`` (500): how long a ShareFetch waits for records.
    * ``fetch_max_bytes`` (50 MiB), ``check_crcs`` (True), ``client_rack`` (None),
      ``key_deserializer`` / ``value_deserializer`` (None: bytes).

    Raises:
        ConfigError: an invalid or unknown option (before any network I/O).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str],
        group_id: str,
        acknowledgement_mode: str = "implicit",
        max_prefetch_records: int = 2000,
        max_prefetch_bytes: int = 16 * 1024 * 1024,
        auto_renew_locks: bool = True,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        check_crcs: bool = True,
        client_rack: str | None = None,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        **client_options: Any,
    ) -> None:
        unknown = [name for name in client_options if name not in _CLIENT_OPTIONS]
        if unknown:
            raise ConfigError("; ".join(_unknown_option(name) for name in unknown))
        self.client_config = ClientConfig(bootstrap_servers=bootstrap_servers, **client_options)
        self.config = ShareConsumerConfig(
            group_id=group_id,
            acknowledgement_mode=acknowledgement_mode,
            max_prefetch_records=max_prefetch_records,
            max_prefetch_bytes=max_prefetch_bytes,
            auto_renew_locks=auto_renew_locks,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            check_crcs=check_crcs,
            client_rack=client_rack,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
        )
        self._implicit = acknowledgement_mode == "implicit"
        self._cluster = Cluster(self.client_config)
        # Spans and metrics (aiostream_kafka.otel): set by start() when it emits.
        self._telemetry: ConsumerTelemetry | None = None
        self._membership = ShareMembership(
            self._cluster, self.client_config, group_id, client_rack, self._membership_changed
        )
        self._scope = TaskScope(f"share consumer {group_id}", on_fail=self._crashed)
        self._metrics_push: TelemetryPusher | None = None  # KIP-714 (enable_metrics_push)
        self._sessions: dict[int, _Session] = {}
        self._buffer: deque[_Chunk] = deque()
        self._buffer_bytes = 0
        self._held = 0  # records in the buffer not handed out
        self._asked = 0  # records asked for by ShareFetch requests in flight
        self._demand = Demand(max_prefetch_records)
        self._lock_s = _DEFAULT_LOCK_S
        # Handed out and not acknowledged yet, with the session holding each.
        self._delivered: dict[Key, _Out] = {}
        self._pending = PendingAcks(self._now)
        self._renews = PendingAcks(self._now)  # RENEW acknowledgements due (sent apart)
        self._renewing: set[Key] = set()
        # ACCEPT / REJECT made for records whose session was lost before the broker
        # confirmed them: applied at once if the record comes back to this member.
        self._unconfirmed: OrderedDict[Key, int] = OrderedDict()
        # To send again (_resend): per partition, units sent one per request.
        self._resends: dict[TopicPartition, list[dict[int, int]]] = {}
        # Acknowledgement failures since the last commit(), which raises them.
        self._ack_errors: dict[TopicPartition, KafkaError] = {}
        self._fatal: KafkaError | None = None
        self._started = False
        self._stopping = False  # the fetch loop ends after its current requests
        self._closed = False
        self._handlers: set[asyncio.Task[None]] = set()  # process()'s, running
        self._loop_time = time.monotonic  # the event loop's clock (set at start())
        self._close_task: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()  # the fetch loop: room, acknowledgements, assignment
        self._ready = asyncio.Event()  # the takers: records, close, a fatal error
        self._loop_done = asyncio.Event()
        self._loop_started = False
        self._refresh_metadata = False
        self._acquire_mode_ok = True
        self._renew_ok = auto_renew_locks
        # Counters (tests and health).
        self.records_acquired = 0
        self.records_delivered = 0
        self.records_expired = 0  # dropped from the buffer: their lock ended first
        self.records_resettled = 0  # came back after a lost session, settled from memory
        self.locks_renewed = 0
        self.acknowledgements_recovered = 0  # applied in a new session after a lost one
        self.fetches = 0
        self.acknowledgements_sent = 0
        self.handler_failures = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the cluster metadata and start the membership, the fetch loop and the
        lock renewer.

        Raises:
            BootstrapError: no bootstrap broker answered.
            ConsumerStateError: already started, or closed.
        """
        if self._started or self._closed:
            raise ConsumerStateError("the share consumer is already started (or closed)")
        self._started = True
        self._loop_time = asyncio.get_running_loop().time
        await self._cluster.bootstrap()
        self._membership.start()
        self._loop_started = True
        cc = self.client_config
        telemetry = telemetry_for(
            cc.opentelemetry, cc.tracer_provider, cc.meter_provider,
            client_id=cc.client_id, group=self.config.group_id,
        )  # fmt: skip
        if telemetry is not None:
            self._telemetry = ConsumerTelemetry(telemetry)
        name = f"share consumer {self.config.group_id}"
        self._scope.spawn(self._fetch_loop, name=f"{name} fetch", crash=Crash.FAIL_OWNER)
        self._scope.spawn(self._renew_loop, name=f"{name} renewer", crash=Crash.FAIL_OWNER)
        self._metrics_push = start_share_consumer_push(
            self._cluster, group_id=self.config.group_id, client_rack=self.config.client_rack
        )

    def subscribe(self, topics: Collection[str]) -> None:
        """Take records of ``topics`` (replacing any earlier subscription).

        Raises:
            TypeError: ``topics`` is a bare str.
            ConfigError: no topic given.
        """
        names = _args.names(topics, "subscribe")
        if not names:
            raise ConfigError("subscribe() needs at least one topic")
        self._membership.subscribe(names)

    @property
    def subscription(self) -> frozenset[str]:
        """The topics subscribed to."""
        return self._membership.subscription

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the share group assigned to this member to fetch from."""
        return self._membership.assignment

    @property
    def member_id(self) -> str:
        """This member's id in the share group (made by the client)."""
        return self._membership.member_id

    @property
    def unconfirmed_acknowledgements(self) -> int:
        """ACCEPTs and REJECTs this member made that no broker confirmed (their share
        session was lost first). Kept (up to 100,000): while this member runs, each of
        those records that comes back to it is settled again at once; once it closes, they
        are delivered again to any member. 0 in steady state."""
        return len(self._unconfirmed)

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- Kafka's close(timeout)
        """Send the pending acknowledgements, release what was acquired and not handed
        out (and what was handed out and not acknowledged), close the share sessions,
        leave the group and close the connections. Idempotent; concurrent calls share one
        close. ``timeout`` (seconds, default 30) bounds the graceful part; a cancelled
        caller does not cut the cleanup short (it is re-raised after). Acknowledgement
        errors at close are logged, not raised: :meth:`commit` first to see them."""
        if self._close_task is None:
            limit = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
            self._closed = True
            self._ready.set()
            self._close_task = shared_task(self._close(limit), name="closing the share consumer")
        await shielded(self._close_task, timeout=None, what="closing the share consumer")

    async def _close(self, timeout: float) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                self._stopping = True
                self._wake.set()
                if self._loop_started:
                    await self._loop_done.wait()  # the requests in flight are answered first
                if self._handlers:  # process()'s handlers running finish first
                    await asyncio.wait(set(self._handlers))
                self._release_everything()
                nodes = {n for n, s in self._sessions.items() if s.epoch > 0}
                nodes |= self._pending.nodes()
                await gather_all(*(self._acknowledge(n, final=True) for n in sorted(nodes)))
                if self._started:
                    await self._membership.close()
        except TimeoutError:
            log.warning("share consumer close: acknowledgements, session close and leaving "
                        "did not finish within %.1f s; stopping now", timeout)  # fmt: skip
        except KafkaError as exc:
            log.warning("share consumer close: %s", exc)
        finally:
            try:
                await self._scope.aclose()
                await self._membership.close()  # idempotent; stops the heartbeat task
            finally:
                if self._metrics_push is not None:  # the terminating push, bounded
                    await self._metrics_push.stop()
                await self._cluster.close()

    async def __aenter__(self) -> ShareConsumer:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- acknowledgements -------------------------------------------------------------------

    def acknowledge(self, record: Record, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge ``record`` (handed out by this consumer, not acknowledged yet) as
        ``type``: ACCEPT (done), RELEASE (deliver it again), REJECT (never again) or RENEW
        (keep the lock longer: ``record.lock_deadline`` moves when the broker confirms;
        the record stays to be acknowledged). Sent with the next request to its leader,
        or by :meth:`commit`. Also usable in implicit mode, for the record the loop is on
        (then not accepted implicitly).

        Raises:
            ValueError: the record was not handed out by this consumer or is acknowledged
                already; RENEW where the broker or the group does not allow it.
        """
        kind = AcknowledgeType(type)
        key = (TopicPartition(record.topic, record.partition), record.offset)
        out = self._delivered.get(key)
        if out is None:
            raise ValueError(
                f"{record.topic}[{record.partition}] offset {record.offset} is not a record "
                "this share consumer handed out, or it is acknowledged already"
            )
        if kind is AcknowledgeType.RENEW:
            if not self._renew_ok and not self.config.auto_renew_locks:
                self._renew_ok = True  # asked for explicitly: try it
            if not self._renew_ok:
                raise ValueError(
                    "RENEW is not available: the broker refused it (ShareAcknowledge v2 and "
                    "the group config share.renew.acknowledge.enable=true are needed)"
                )
            self._queue_renew(key, out)
            return
        self._settle(key, kind)

    def _settle(self, key: Key, kind: AcknowledgeType) -> None:
        out = self._delivered.pop(key, None)
        if out is None:
            return  # acknowledged explicitly meanwhile
        if self._renewing:
            self._renewing.discard(key)
        session = self._sessions.get(out.node)
        if session is not None and session.generation == out.generation:
            self._pending.add(out.node, key[0], key[1], int(kind))
            self._wake.set()
            return
        # Its session was lost: the broker released the record (a RELEASE has nothing
        # left to do); keep an ACCEPT / REJECT in case the record comes back to this
        # member, and report it meanwhile.
        if int(kind) in _FINAL:
            self._remember({key[0]: {key[1]: int(kind)}})
            self._report(key[0], _session_lost(out.node, "before the acknowledgement"), 1)

    def _now(self) -> float:
        return self._loop_time()

    def _live(self, node: int, generation: int) -> bool:
        session = self._sessions.get(node)
        return session is not None and session.generation == generation

    def _queue_renew(self, key: Key, out: _Out) -> None:
        if key in self._renewing or not self._live(out.node, out.generation):
            return
        self._renewing.add(key)
        self._renews.add(out.node, key[0], key[1], _RENEW)
        self._wake.set()

    async def commit(self) -> None:
        """Send every pending acknowledgement now and wait for the brokers' answers
        (those already on their way with a fetch included).

        In implicit mode the records the loop has moved past are accepted; the one it is
        on is not (it is accepted when the loop asks for the next one).

        Raises:
            ShareAcknowledgeError: acknowledgements the brokers refused, or that could not
                be delivered (a lost share session), since the last commit: per partition.
            ConsumerStateError: not started.
        """
        if not self._started:
            raise ConsumerStateError("start the share consumer before commit()")
        nodes = self._pending.nodes() | {n for n, s in self._sessions.items() if s.epoch > 0}
        await gather_all(*(self._acknowledge(n, final=False) for n in sorted(nodes)))
        if self._ack_errors:
            errors, self._ack_errors = self._ack_errors, {}
            raise ShareAcknowledgeError(errors)

    def _report(self, tp: TopicPartition, error: KafkaError, count: int) -> None:
        log.warning("share group %s: %d acknowledgements for %s[%d] not applied: %s",
                    self.config.group_id, count, tp.topic, tp.partition, error)  # fmt: skip
        self._ack_errors[tp] = error

    def _remember(self, acks: dict[TopicPartition, dict[int, int]], *, resend: bool = True) -> None:
        """Keep the ACCEPT / REJECT of ``acks`` (not confirmed by a live session) for
        records that may come back to this member (bounded: the oldest go first), and
        (``resend``) send them again in the leader's next session."""
        if resend:
            self._queue_resend(acks)
        for tp, offsets in acks.items():
            for offset, kind in offsets.items():
                if kind in _FINAL:
                    self._unconfirmed[(tp, offset)] = kind
                    self._unconfirmed.move_to_end((tp, offset))
        while len(self._unconfirmed) > _UNCONFIRMED_MAX:
            (tp, offset), _ = self._unconfirmed.popitem(last=False)
            for unit in self._resends.get(tp, ()):
                unit.pop(offset, None)

    def _lost(self, acks: dict[TopicPartition, dict[int, int]], node: int, why: str) -> None:
        """``acks`` did not reach (or were not confirmed by) ``node``'s session, which is
        gone: reported, and kept for the records' return."""
        self._remember(acks)
        for tp, offsets in acks.items():
            counted = sum(1 for k in offsets.values() if k != _RENEW)
            if counted:
                self._report(tp, _session_lost(node, why), counted)

    def _release_everything(self) -> None:
        """RELEASE what was acquired and not handed out, and what was handed out and not
        acknowledged (the loop did not finish it): delivered again, never accepted."""
        while self._buffer:
            chunk = self._buffer.popleft()
            if self._live(chunk.node, chunk.generation):
                for record in chunk.records[chunk.pos :]:
                    self._pending.add(
                        chunk.node, chunk.tp, record.offset, int(AcknowledgeType.RELEASE)
                    )
        self._buffer_bytes = self._held = 0
        for key in list(self._delivered):
            self._settle(key, AcknowledgeType.RELEASE)

    async def _acknowledge(self, node: int, *, final: bool) -> bool:
        """ShareAcknowledge to ``node`` with what is pending for it, renewals included
        (``final``: closing the session, epoch -1). Errors are reported, not raised;
        returns False after a network or broker error (the caller backs off)."""
        session = self._session(node)
        async with session.lock:
            renews = self._renews.take(node)
            acks = _merged(renews, self._pending.take(node))
            renewed = {(tp, o) for tp, offs in acks.items() for o, k in offs.items() if k == _RENEW}
            try:
                if session.epoch == 0:
                    if acks:
                        self._lost(acks, node, "no share session open")
                    return True
                if not acks and not final:
                    return True
                return await self._send_acks(node, session, acks, renewed, final=final)
            finally:
                self._renewing -= renewed

    async def _send_acks(
        self,
        node: int,
        session: _Session,
        acks: dict[TopicPartition, dict[int, int]],
        renewed: set[Key],
        *,
        final: bool,
    ) -> bool:
        epoch = _CLOSE_SESSION if final else session.epoch
        ids = self._topic_ids()
        for tp in [tp for tp in acks if tp.topic not in ids]:
            offsets = acks.pop(tp)
            self._report(tp, KafkaError(f"topic {tp.topic!r} has no known id"), len(offsets))
        loop = asyncio.get_running_loop()
        settle: Settling | None = None
        try:
            conn = await self._cluster.connection(node, Lane.FETCH)
            version = conn.version_for(ShareAcknowledgeRequest)
            if renewed and version < 2:
                self._renew_unavailable(f"broker {node} has ShareAcknowledge v{version} only")
                acks = _without_renewals(acks)
                renewed = set()
            request = self._ack_request(acks, ids, epoch, renew=bool(renewed))
            if self._telemetry is not None and acks:
                settle = self._telemetry.settling(acks, timed=True)
            sent_at = loop.time()
            response = await conn.request(request, version=version)
        except (NetworkError, KafkaTimeoutError) as exc:
            if settle is not None:
                settle.end(exc)
            return self._request_failed(session, "ShareAcknowledge", exc, acks)
        except BaseException as exc:  # cancelled: the span ends, the error goes on
            if settle is not None:
                settle.end(exc)
            raise
        assert isinstance(response, ShareAcknowledgeResponse)
        count = sum(1 for offs in acks.values() for k in offs.values() if k != _RENEW)
        log.debug("share group %s: ShareAcknowledge to %d epoch %d: %d acks, %d renewals -> %d",
                  self.config.group_id, node, epoch, count, len(renewed),
                  response.error_code)  # fmt: skip
        if response.error_code:
            error = broker_error(
                response.error_code, f"ShareAcknowledge to broker {node}", response.error_message
            )
            if settle is not None:
                settle.end(error)
            self._reset(session, str(error))
            self._lost(acks, node, str(error))
            if renewed and response.error_code == 42:  # INVALID_REQUEST
                self._renew_unavailable(str(error))
            return False
        self.acknowledgements_sent += count
        if final:
            self._reset(session, None)
        else:
            session.epoch = _next_epoch(session.epoch)
        failed = self._partition_errors(response.responses, ids, acks, node)
        if settle is not None:
            settle.end(next(iter(failed.values()), None), refused=len(failed))
        if renewed:
            lock_ms = response.acquisition_lock_timeout_ms
            deadline = sent_at + (lock_ms / 1000 if lock_ms > 0 else self._lock_s)
            for key in renewed:
                out = self._delivered.get(key)
                if key[0] in failed or out is None or out.node != node:
                    continue
                out.record.lock_deadline = deadline
                self.locks_renewed += 1
        return True

    def _ack_request(
        self,
        acks: dict[TopicPartition, dict[int, int]],
        ids: dict[str, Any],
        epoch: int,
        *,
        renew: bool = False,
    ) -> ShareAcknowledgeRequest:
        """A ShareAcknowledge of ``acks`` (their topics all in ``ids``) at ``epoch``."""
        topics: dict[str, list[ShareAcknowledgeRequest.AcknowledgePartition]] = {}
        for tp, offsets in sorted(acks.items()):
            topics.setdefault(tp.topic, []).append(
                ShareAcknowledgeRequest.AcknowledgePartition(
                    partition_index=tp.partition,
                    acknowledgement_batches=_ack_batches(ShareAcknowledgeRequest, offsets),
                )
            )
        return ShareAcknowledgeRequest(
            group_id=self.config.group_id,
            member_id=self._membership.member_id,
            share_session_epoch=epoch,
            is_renew_ack=renew,
            topics=[
                ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=ids[t], partitions=p)
                for t, p in topics.items()
            ],
        )  # fmt: skip

    async def _resend(self, node: int, acks: dict[TopicPartition, dict[int, int]]) -> bool:
        """Send again, in ``node``'s new session, the ACCEPT / REJECT whose session was
        lost before a broker confirmed them (alone: a partition's acknowledgements are
        applied all or none). Where this member still holds the records (a session lost
        to a timeout, the same leader) they apply now; where the broker answers that it
        does not (a new leader loaded them as available), they stay kept for the records'
        return. Returns False after a network or broker error (they are queued again)."""
        session = self._session(node)
        async with session.lock:
            ids = self._topic_ids()
            acks = {tp: offs for tp, offs in acks.items() if tp.topic in ids}
            if session.epoch == 0 or not acks:
                self._queue_resend(acks)
                return True
            settle: Settling | None = None
            try:
                conn = await self._cluster.connection(node, Lane.FETCH)
                request = self._ack_request(acks, ids, session.epoch)
                if self._telemetry is not None:
                    settle = self._telemetry.settling(acks, timed=True)
                response = await conn.request(request)
            except BaseException as exc:
                if settle is not None:
                    settle.end(exc)
                if not isinstance(exc, (NetworkError, KafkaTimeoutError)):
                    raise
                self._reset(session, f"ShareAcknowledge failed: {exc}")
                self._queue_resend(acks)
                return False
            assert isinstance(response, ShareAcknowledgeResponse)
            if response.error_code:
                if settle is not None:
                    settle.end(broker_error(response.error_code, "ShareAcknowledge (resent)"))
                self._reset(session, f"ShareAcknowledge: error {response.error_code}")
                self._queue_resend(acks)
                return False
            session.epoch = _next_epoch(session.epoch)
            names = {v: k for k, v in ids.items()}
            refused = {
                TopicPartition(names[t.topic_id], p.partition_index)
                for t in response.responses
                if t.topic_id in names
                for p in t.partitions
                if p.error_code
            }
            if settle is not None:  # refusals are expected here (halved and sent again)
                settle.end(refused=len(refused))
            for tp, offsets in acks.items():
                if tp in refused:
                    # All or none per partition: one record this member no longer holds
                    # refuses the rest. Halves go again until each refusal is one record
                    # (kept: settled at once if it comes back here).
                    if len(offsets) > 1:
                        ordered = sorted(offsets)
                        half = len(ordered) // 2
                        units = self._resends.setdefault(tp, [])
                        units.append({o: offsets[o] for o in ordered[:half]})
                        units.append({o: offsets[o] for o in ordered[half:]})
                    continue
                for offset in offsets:
                    self._unconfirmed.pop((tp, offset), None)
                self.acknowledgements_recovered += len(offsets)
            log.info("share group %s: %d acknowledgements of lost sessions applied in a new "
                     "session with broker %d (%d partitions refused them)", self.config.group_id,
                     sum(len(o) for tp, o in acks.items() if tp not in refused), node,
                     len(refused))  # fmt: skip
            return True

    def _queue_resend(self, acks: dict[TopicPartition, dict[int, int]]) -> None:
        for tp, offsets in acks.items():
            final = {o: k for o, k in offsets.items() if k in _FINAL}
            if final:
                self._resends.setdefault(tp, []).append(final)

    def _partition_errors(
        self,
        responses: Sequence[Any],
        ids: dict[str, Any],
        acks: dict[TopicPartition, dict[int, int]],
        node: int,
    ) -> dict[TopicPartition, KafkaError]:
        """Report (and keep for the records' return) the acknowledgements of the
        partitions a ShareFetch / ShareAcknowledge answer refused; returns those, with
        their errors."""
        names = {v: k for k, v in ids.items()}
        failed: dict[TopicPartition, KafkaError] = {}
        for answer in responses:
            name = names.get(answer.topic_id)
            if name is None:
                continue
            for part in answer.partitions:
                code = getattr(part, "acknowledge_error_code", None)
                if code is None:
                    code = part.error_code
                if not code:
                    continue
                tp = TopicPartition(name, part.partition_index)
                if tp not in acks:
                    continue
                message = getattr(part, "acknowledge_error_message", None) or part.error_message
                error = broker_error(code, f"acknowledge to broker {node}", message)
                failed[tp] = error
                offsets = acks[tp]
                # A moved leader: try again in its session; any other refusal (the
                # records are not this member's any more): keep them for their return.
                self._remember({tp: offsets}, resend=code in _STALE_METADATA)
                counted = sum(1 for k in offsets.values() if k != _RENEW)
                if counted:
                    self._report(tp, error, counted)
                else:
                    log.warning("share group %s: lock renewal for %s[%d] refused: %s",
                                self.config.group_id, tp.topic, tp.partition, error)  # fmt: skip
                if code in _STALE_METADATA:
                    self._refresh_metadata = True
        return failed

    def _request_failed(
        self,
        session: _Session,
        what: str,
        exc: KafkaError,
        acks: dict[TopicPartition, dict[int, int]],
    ) -> bool:
        """A request of ``session`` got no answer: the session is lost, the
        acknowledgements it carried are reported and kept, the leaders looked up again.
        Returns False (the loop backs off)."""
        self._reset(session, f"{what} failed: {exc}")
        self._lost(acks, session.node, str(exc))
        self._refresh_metadata = True
        return False

    def _renew_unavailable(self, why: str) -> None:
        if self._renew_ok:
            log.warning("share group %s: locks cannot be renewed (%s); records not "
                        "acknowledged within the lock are delivered again",
                        self.config.group_id, why)  # fmt: skip
        self._renew_ok = False

    # -- sessions and fetching ----------------------------------------------------------------

    def _session(self, node: int) -> _Session:
        session = self._sessions.get(node)
        if session is None:
            session = self._sessions[node] = _Session(node)
        return session

    def _reset(self, session: _Session, why: str | None) -> None:
        """The session is gone (closed, or lost: ``why``): the broker released what it
        acquired, so what is buffered of it is void and the next fetch opens a new one."""
        if why is not None and session.epoch > 0:
            log.warning("share group %s: share session with broker %d lost: %s",
                        self.config.group_id, session.node, why)  # fmt: skip
        session.epoch = 0
        session.partitions = set()
        session.generation += 1
        kept = deque(c for c in self._buffer if c.node != session.node)
        if len(kept) != len(self._buffer):
            self._buffer = kept
            self._buffer_bytes = sum(c.size for c in kept)
            self._held = sum(len(c.records) - c.pos for c in kept)
        # Records handed out and not acknowledged stay in _delivered: an ACCEPT / REJECT
        # of one is kept for its return (it is bound to the new session if it comes back
        # while still being processed).

    def _topic_ids(self) -> dict[str, Any]:
        return {name: t.topic_id for name, t in self._cluster.snapshot.topics.items()}

    def _membership_changed(self) -> None:
        error = self._membership.error
        if error is not None and self._fatal is None:
            self._fatal = error
            self._ready.set()
        self._wake.set()

    async def _crashed(self, exc: Exception) -> None:
        error = exc if isinstance(exc, KafkaError) else KafkaError(
            f"share consumer {self.config.group_id!r}: a task failed: {exc!r}")  # fmt: skip
        if error is not exc:
            error.__cause__ = exc
        log.error("share consumer %s stops: %s", self.config.group_id, error)
        if self._fatal is None:
            self._fatal = error
        self._ready.set()

    async def _fetch_loop(self) -> None:
        """One request at a time per partition leader, none waiting for another leader:
        ShareFetch while the demand leaves room, ShareAcknowledge for acknowledgements
        (and renewals) that cannot ride on a fetch."""
        loop = asyncio.get_running_loop()
        inflight: dict[int, asyncio.Task[bool]] = {}
        retry_at: dict[int, float] = {}
        backoffs: dict[int, Backoff] = {}
        metadata_backoff = Backoff.of(self.client_config)
        try:
            while not self._stopping and self._fatal is None:
                self._wake.clear()
                assigned = self._membership.assignment
                plan = await self._plan(assigned) if assigned else {}
                now = loop.time()
                ready = [n for n in sorted(plan) if n not in inflight and retry_at.get(n, 0) <= now]
                # Settlements of lost sessions go again once the leader's new session is
                # open (the first ShareFetch there opens it).
                for n, tps in plan.items():
                    if n in inflight or retry_at.get(n, 0) > now:
                        continue
                    if self._session(n).epoch == 0:
                        continue
                    due: dict[TopicPartition, dict[int, int]] = {}
                    for tp in tps & self._resends.keys():
                        units = self._resends[tp]
                        while units and not due.get(tp):
                            due[tp] = units.pop(0)
                        if not units:
                            del self._resends[tp]
                    due = {tp: offs for tp, offs in due.items() if offs}
                    if due:
                        inflight[n] = self._scope.spawn(
                            self._resend(n, due),
                            name=f"share consumer {self.config.group_id} resend {n}",
                            crash=Crash.AWAITED,
                        )  # fmt: skip
                renewing = self._renews.nodes()
                room = 0
                if self._buffer_bytes < self.config.max_prefetch_bytes:
                    room = self._demand.room(self._held + self._asked)
                fetching = [n for n in ready if n not in renewing and n not in inflight]
                if room <= 0:
                    fetching = []
                for n in fetching:
                    share = max(1, room // len(fetching))
                    room_bytes = self.config.max_prefetch_bytes - self._buffer_bytes
                    task = self._scope.spawn(
                        self._fetch(n, plan[n], share, room_bytes),
                        name=f"share consumer {self.config.group_id} ShareFetch {n}",
                        crash=Crash.AWAITED,
                    )  # fmt: skip
                    self._asked += share
                    task.add_done_callback(functools.partial(self._unask, share))
                    inflight[n] = task
                # Acknowledgements ride on the next ShareFetch to their leader; they go
                # alone when renewals are due, when no fetch goes there, or once they
                # waited _ACK_LINGER_S (a full buffer, a slow application).
                linger_until: list[float] = []
                for n in sorted((self._pending.nodes() | renewing) - set(inflight)):
                    since = self._pending.waiting_since(n)
                    if n not in renewing and n in plan and since is not None:
                        if now < since + _ACK_LINGER_S:
                            linger_until.append(since + _ACK_LINGER_S)
                            continue
                    if retry_at.get(n, 0) <= now:
                        inflight[n] = self._scope.spawn(
                            self._acknowledge(n, final=False),
                            name=f"share consumer {self.config.group_id} ShareAcknowledge {n}",
                            crash=Crash.AWAITED,
                        )  # fmt: skip
                unplanned = sum(len(tps) for tps in plan.values()) < len(assigned)
                delay: float | None = None
                if unplanned:  # some leader unknown: look again after a back-off
                    delay = metadata_backoff.next_delay()
                else:
                    metadata_backoff.reset()
                waits = [t - now for n, t in retry_at.items() if n not in inflight and t > now]
                waits += [t - now for t in linger_until]
                if waits:
                    delay = min([*waits, *([] if delay is None else [delay])])
                await self._wait(inflight, delay)
                for n, task in list(inflight.items()):
                    if not task.done():
                        continue
                    del inflight[n]
                    backoff = backoffs.setdefault(n, Backoff.of(self.client_config))
                    if task.result():
                        backoff.reset()
                        retry_at.pop(n, None)
                    else:
                        retry_at[n] = loop.time() + backoff.next_delay()
        except BaseException:
            for task in inflight.values():
                task.cancel()
            raise
        finally:
            # The requests in flight are answered first (each is bounded by its timeout);
            # after a cancellation they were cancelled above and end at once.
            if inflight:
                await asyncio.wait(inflight.values())
            for task in inflight.values():
                retrieve(task, f"share consumer {self.config.group_id}: a request")
            self._loop_done.set()

    def _unask(self, count: int, _task: asyncio.Task[bool]) -> None:
        self._asked -= count

    async def _wait(self, inflight: dict[int, asyncio.Task[bool]], delay: float | None) -> None:
        """Until a request in flight ends, the loop is woken, or ``delay`` passes."""
        waker = self._scope.spawn(
            self._wake.wait(),
            name=f"share consumer {self.config.group_id} wake",
            crash=Crash.AWAITED,
        )
        try:
            await asyncio.wait(
                [waker, *inflight.values()], timeout=delay, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waker

    async def _renew_loop(self) -> None:
        """Queue a RENEW for each record handed out and not acknowledged whose lock is
        half spent (or within a fetch wait and a second of its end)."""
        loop = asyncio.get_running_loop()
        fetch_wait_s = self.config.fetch_max_wait_ms / 1000
        while not self._stopping:
            if self._renew_ok and self._delivered:
                lock_s = self._lock_s
                margin = min(0.9 * lock_s, max(lock_s / 2, fetch_wait_s + 1.0))
                now = loop.time()
                for key, out in list(self._delivered.items()):
                    deadline = out.record.lock_deadline
                    if deadline and deadline - now < margin:
                        self._queue_renew(key, out)
            await asyncio.sleep(min(1.0, self._lock_s / 8))

    async def _plan(self, assigned: frozenset[TopicPartition]) -> dict[int, set[TopicPartition]]:
        """The assigned partitions by leader (refreshing the metadata when some leader is
        unknown or went stale)."""
        snapshot = self._cluster.snapshot
        topics = {tp.topic for tp in assigned}
        if self._refresh_metadata or any(
            snapshot.partition(tp) is None or snapshot.partition(tp).leader < 0  # type: ignore[union-attr]
            for tp in assigned
        ):
            self._refresh_metadata = False
            try:
                snapshot = await self._cluster.refresh(topics)
            except KafkaError as exc:
                log.info("share consumer %s: metadata refresh failed: %s",
                         self.config.group_id, exc)  # fmt: skip
        plan: dict[int, set[TopicPartition]] = {}
        for tp in assigned:
            meta = snapshot.partition(tp)
            if meta is not None and meta.leader >= 0:
                plan.setdefault(meta.leader, set()).add(tp)
        return plan

    async def _fetch(
        self, node: int, wanted: set[TopicPartition], max_records: int, max_bytes: int
    ) -> bool:
        """One ShareFetch to ``node`` in its share session: acquire up to ``max_records``
        of ``wanted``, carrying the acknowledgements pending for ``node`` (not renewals:
        those go in a ShareAcknowledge). ``max_records`` counts in ``_asked`` until the
        task ends (the loop adds it). Returns False after an error (the loop backs off);
        raises only for bugs."""
        session = self._session(node)
        async with session.lock:
            if self._stopping:
                return True
            acks = self._pending.take(node)
            if session.epoch == 0 and acks:
                # Acknowledgements of a session that is gone: the broker released those
                # records already (a session opening request carries none).
                self._lost(acks, node, "the session was reset")
                acks = {}
            ids = self._topic_ids()
            if session.epoch == 0:
                listed = set(wanted)
                forgotten: set[TopicPartition] = set()
            else:
                listed = (wanted - session.partitions) | set(acks)
                forgotten = session.partitions - wanted - set(acks)
            listed = {tp for tp in listed if tp.topic in ids}
            by_topic: dict[str, list[ShareFetchRequest.FetchPartition]] = {}
            for tp in sorted(listed):
                by_topic.setdefault(tp.topic, []).append(
                    ShareFetchRequest.FetchPartition(
                        partition_index=tp.partition,
                        acknowledgement_batches=_ack_batches(ShareFetchRequest, acks.get(tp, {})),
                    )
                )
            forgotten_by_topic: dict[str, list[int]] = {}
            for tp in sorted(forgotten):
                if tp.topic in ids:
                    forgotten_by_topic.setdefault(tp.topic, []).append(tp.partition)
            loop = asyncio.get_running_loop()
            settle: Settling | None = None
            try:
                conn = await self._cluster.connection(node, Lane.FETCH)
                version = conn.version_for(ShareFetchRequest)
                request = ShareFetchRequest(
                    group_id=self.config.group_id,
                    member_id=self._membership.member_id,
                    share_session_epoch=session.epoch,
                    max_wait_ms=self.config.fetch_max_wait_ms,
                    min_bytes=1,
                    max_bytes=min(self.config.fetch_max_bytes, max(max_bytes, 1)),
                    max_records=max_records,
                    batch_size=max_records,
                    share_acquire_mode=(
                        _RECORD_LIMIT
                        if version >= 2 and self._acquire_mode_ok and max_records < _WHOLE_BATCHES
                        else 0
                    ),
                    topics=[
                        ShareFetchRequest.FetchTopic(topic_id=ids[t], partitions=p)
                        for t, p in by_topic.items()
                    ],
                    forgotten_topics_data=[
                        ShareFetchRequest.ForgottenTopic(topic_id=ids[t], partitions=p)
                        for t, p in forgotten_by_topic.items()
                    ],
                )
                timeout_ms = self.client_config.request_timeout_ms + self.config.fetch_max_wait_ms
                if self._telemetry is not None and acks:
                    settle = self._telemetry.settling(acks, timed=False)
                sent_at = loop.time()
                response = await conn.request(request, version=version, timeout_ms=timeout_ms)
            except (NetworkError, KafkaTimeoutError) as exc:
                if settle is not None:
                    settle.end(exc)
                return self._request_failed(session, "ShareFetch", exc, acks)
            except BaseException as exc:  # cancelled: the span ends, the error goes on
                if settle is not None:
                    settle.end(exc)
                raise
            assert isinstance(response, ShareFetchResponse)
            self.fetches += 1
            if response.error_code:
                error = broker_error(
                    response.error_code, f"ShareFetch to broker {node}", response.error_message
                )
                if settle is not None:
                    settle.end(error)
                self._reset(session, str(error))
                self._lost(acks, node, str(error))
                if response.error_code not in _SESSION_LOST:
                    log.warning("share group %s: %s", self.config.group_id, error)
                    if response.error_code == 42 and self._acquire_mode_ok:
                        self._acquire_mode_ok = False  # INVALID_REQUEST: try without it
                return False
            session.epoch = _next_epoch(session.epoch)
            session.partitions = (session.partitions | listed) - forgotten
            self.acknowledgements_sent += sum(len(a) for a in acks.values())
            if response.acquisition_lock_timeout_ms > 0:
                self._lock_s = response.acquisition_lock_timeout_ms / 1000
            failed = self._partition_errors(response.responses, ids, acks, node)
            if settle is not None:
                settle.end(next(iter(failed.values()), None), refused=len(failed))
            got = self._file(node, session, response, ids, sent_at + self._lock_s)
            self._demand.fetched(max_records, got)
            return True

    def _file(
        self,
        node: int,
        session: _Session,
        response: ShareFetchResponse,
        ids: dict[str, Any],
        deadline: float,
    ) -> int:
        """Put the acquired records of a ShareFetch answer in the buffer, except those
        this member knows already: one still being processed (its session was lost) is
        bound to this session; one it settled whose acknowledgement was lost is settled
        again at once. Returns how many records were acquired."""
        names = {v: k for k, v in ids.items()}
        added = acquired_count = 0
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for part in topic.partitions:
                tp = TopicPartition(name, part.partition_index)
                if part.error_code:
                    if part.error_code in _STALE_METADATA:
                        self._refresh_metadata = True
                    fetch_error = broker_error(part.error_code, "fetch", part.error_message)
                    log.info("share group %s: ShareFetch %s from broker %d: %s",
                             self.config.group_id, tp, node, fetch_error)  # fmt: skip
                    continue
                if not part.acquired_records:
                    continue
                records: list[Record] = []
                if part.records:
                    for batch in iter_batches(part.records, verify_crc=self.config.check_crcs):
                        if not batch.is_control:
                            records += batch.records(name, tp.partition)
                ranges = [(a.first_offset, a.last_offset, a.delivery_count)
                          for a in part.acquired_records]  # fmt: skip
                acquired, gaps = acquired_records(records, ranges, deadline)
                acquired_count += len(acquired) + len(gaps)
                for offset in gaps:
                    self._pending.add(node, tp, offset, GAP_TYPE)
                known = self._known(tp)
                generation = session.generation
                if known:
                    acquired = [
                        r
                        for r in acquired
                        if r.offset not in known
                        or not self._rebind((tp, r.offset), r, node, generation)
                    ]
                if not acquired:
                    continue
                size = 0
                for record in acquired:
                    value, rkey = record.value, record.key
                    size += (len(value) if type(value) is bytes else _size(value)) + (
                        0 if rkey is None else _size(rkey)
                    )
                self._buffer.append(_Chunk(acquired, tp, node, generation, deadline, size))
                if self._telemetry is not None:
                    self._telemetry.received(tp, acquired)
                self._buffer_bytes += size
                self._held += len(acquired)
                added += len(acquired)
        if added:
            self.records_acquired += added
            self._ready.set()
        if self._pending.nodes():
            self._wake.set()
        return acquired_count

    def _known(self, tp: TopicPartition) -> set[int]:
        """Offsets of ``tp`` this member handed out and not settled, or settled without
        the broker's confirmation (usually none)."""
        known: set[int] = set()
        if self._delivered:
            known.update(o for (t, o) in self._delivered if t == tp)
        if self._unconfirmed:
            known.update(o for (t, o) in self._unconfirmed if t == tp)
        return known

    def _rebind(self, key: Key, record: ShareRecord, node: int, generation: int) -> bool:
        """``record`` (``key``), just acquired, is one this member knows: one still being
        processed (its session was lost, or its lock ended) is now held by this session;
        one it settled without confirmation is settled again at once. Returns True when
        so (then it is not handed out)."""
        out = self._delivered.get(key)
        if out is not None:
            out.node, out.generation = node, generation
            out.record.lock_deadline = record.lock_deadline
            out.record.delivery_count = record.delivery_count
            self._renewing.discard(key)
            return True
        kind = self._unconfirmed.pop(key, None)
        if kind is not None:
            for unit in self._resends.get(key[0], ()):
                unit.pop(key[1], None)
            self._pending.add(node, key[0], key[1], kind)
            self.records_resettled += 1
            return True
        return False

    # -- iteration ----------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        if self._telemetry is not None:  # a process span per record's turn in the loop
            return self._telemetry.around_each(self._records())
        return self._records()

    async def _take(self) -> _Out:
        """The next record to hand out (its lock not ended), waiting for one."""
        waited = False
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._closed:
                raise StopAsyncIteration
            if not self._started:
                raise ConsumerStateError("start the share consumer (async with) before iterating")
            out = self._pop(waited)
            if out is not None:
                return out
            waited = True
            self._ready.clear()
            await self._ready.wait()

    def _pop(self, waited: bool) -> _Out | None:
        """The next record held whose session is alive and whose lock has not ended,
        now handed out; None when none is held. (The iterator's fast path: no await.)"""
        buffer = self._buffer
        while buffer:
            chunk = buffer[0]
            left = len(chunk.records) - chunk.pos
            now = self._loop_time()
            session = self._sessions.get(chunk.node)
            if left <= 0 or session is None or session.generation != chunk.generation:
                # drained, or its session was lost (the broker released the records)
                buffer.popleft()
                self._buffer_bytes -= chunk.size
                self._held -= left
                self._wake.set()  # room: the fetch loop may acquire more
                continue
            if chunk.deadline <= now:  # the broker gave them back already
                buffer.popleft()
                self._buffer_bytes -= chunk.size
                self._held -= left
                self.records_expired += left
                self._wake.set()
                continue
            record = chunk.records[chunk.pos]
            chunk.pos += 1
            self._held -= 1
            if self._held * 2 <= self._demand.target:
                self._wake.set()  # room: the fetch loop may acquire more
            self._demand.took(now, waited=waited, lock_s=self._lock_s)
            key = (chunk.tp, record.offset)
            out = self._delivered[key] = _Out(record, key, chunk.node, chunk.generation)
            self.records_delivered += 1
            return out
        return None

    async def _records(self) -> AsyncIterator[ShareRecord]:
        """The records, one at a time (see the class docstring for acknowledgements)."""
        current: Key | None = None
        deserializing = bool(self.config.key_deserializer or self.config.value_deserializer)
        try:
            while True:
                out = None
                if self._fatal is None and not self._closed:
                    out = self._pop(False)  # a record held: no await
                if out is None:
                    try:
                        out = await self._take()
                    except StopAsyncIteration:
                        return

                record = out.record
                key = out.key
                if self._implicit:
                    current = key
                if deserializing:
                    try:
                        self._deserialize(record, key)
                    except RecordDeserializationError:
                        self._settle(key, AcknowledgeType.RELEASE)
                        raise
                yield record
                if current is not None:
                    # The loop asks for the next record: the one it was on is done.
                    self._settle(current, AcknowledgeType.ACCEPT)
                    current = None
        finally:
            # The loop ended on ``current`` (an exception in its body, break, close):
            # it was not finished, so it goes back, never accepted.
            if current is not None:
                self._settle(current, AcknowledgeType.RELEASE)

    async def process(
        self,
        handler: Handler,
        *,
        concurrency: int = 1,
        max_failures: int | None = None,
    ) -> None:
        """Run ``await handler(record)`` for each record, up to ``concurrency`` at once,
        until the consumer is closed (or cancelled). A handler that returns accepts its
        record; one that raises releases it (it is delivered again, with
        ``delivery_count`` one higher), or rejects it once ``delivery_count`` has reached
        ``max_failures`` (None: never; the group's ``share.delivery.count.limit`` archives
        it in the end). The exception is logged (``handler_failures`` counts them). A
        handler may :meth:`acknowledge` its record itself (then it is not settled again).
        Only ``concurrency`` records are handed out at a time, and locks of slow handlers
        are renewed (``auto_renew_locks``).

        :meth:`close` waits (within its timeout) for the handlers running, then releases
        what is left. Cancelling ``process()`` cancels the handlers; their records are
        released.

        Raises:
            ValueError: ``concurrency`` < 1 or ``max_failures`` < 1.
            ConsumerStateError: not started.
            KafkaError: the consumer failed (the handlers running are cancelled first,
                their records released).
        """
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if max_failures is not None and (
            isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1
        ):
            raise ValueError(f"max_failures must be an int >= 1 or None, got {max_failures!r}")
        if not self._started:
            raise ConsumerStateError("start the share consumer (async with) before process()")
        if self._telemetry is not None:
            handler = self._telemetry.wrap_handler(handler)
        slots = asyncio.Semaphore(concurrency)
        running: set[asyncio.Task[None]] = set()

        def ended(task: asyncio.Task[None]) -> None:
            running.discard(task)
            self._handlers.discard(task)
            slots.release()
            retrieve(task)

        try:
            while True:
                await slots.acquire()
                try:
                    out = await self._take()
                except StopAsyncIteration:
                    slots.release()
                    break
                except BaseException:
                    slots.release()
                    raise
                task = self._scope.spawn(
                    self._handle(handler, out, max_failures),
                    name=f"share consumer {self.config.group_id} handler",
                    crash=Crash.AWAITED,
                )  # fmt: skip
                running.add(task)
                self._handlers.add(task)
                task.add_done_callback(ended)
            if running:  # closed: the handlers running finish (close waits for them)
                await asyncio.wait(set(running))
        except BaseException:
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(set(running))
            raise

    async def _handle(self, handler: Handler, out: _Out, max_failures: int | None) -> None:
        record, key = out.record, out.key
        try:
            try:
                self._deserialize(record, key)
                await handler(record)
            except Exception as exc:
                self.handler_failures += 1
                reject = max_failures is not None and record.delivery_count >= max_failures
                kind = AcknowledgeType.REJECT if reject else AcknowledgeType.RELEASE
                log.warning("share group %s: the handler failed on %s[%d] offset %d "
                            "(delivery %d); %s", self.config.group_id, record.topic,
                            record.partition, record.offset, record.delivery_count,
                            "rejected" if reject else "released", exc_info=exc)  # fmt: skip
                self._settle(key, kind)
            else:
                self._settle(key, AcknowledgeType.ACCEPT)
        except BaseException:  # cancelled: not finished, so it goes back
            self._settle(key, AcknowledgeType.RELEASE)
            raise

    def _deserialize(self, record: ShareRecord, key: Key) -> None:
        for what, fn in (
            ("key", self.config.key_deserializer),
            ("value", self.config.value_deserializer),
        ):
            if fn is None:
                continue
            try:
                if what == "key":
                    record.key = fn(record.key)
                else:
                    record.value = fn(record.value)
            except Exception as exc:
                raise RecordDeserializationError(key[0], key[1], what, exc) from exc


def _merged(
    first: dict[TopicPartition, dict[int, int]], then: dict[TopicPartition, dict[int, int]]
) -> dict[TopicPartition, dict[int, int]]:
    """``first`` updated with ``then`` (a later type for an offset wins)."""
    out = {tp: dict(offsets) for tp, offsets in first.items()}
    for tp, offsets in then.items():
        out.setdefault(tp, {}).update(offsets)
    return out


def _without_renewals(
    acks: dict[TopicPartition, dict[int, int]],
) -> dict[TopicPartition, dict[int, int]]:
    kept = {tp: {o: k for o, k in offs.items() if k != _RENEW} for tp, offs in acks.items()}
    return {tp: offs for tp, offs in kept.items() if offs}


def _ack_batches(message: Any, offsets: dict[int, int]) -> list[Any]:
    """``offsets`` (offset -> type) as ``message``'s AcknowledgementBatch list."""
    return [
        message.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=k)
        for f, last, k in ack_batches(offsets)
    ]


def _session_lost(node: int, why: str) -> NetworkError:
    error = NetworkError(
        f"the share session with broker {node} was lost ({why}); they are sent again in the "
        "leader's next session, and a record that comes back to this member is settled as "
        "acknowledged; a record the broker released meanwhile may go to another member"
    )
    error.retriable = True
    return error


def _size(data: object) -> int:
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0


def _unknown_option(name: str) -> str:
    close = difflib.get_close_matches(
        name, (*_CLIENT_OPTIONS, *(f.name for f in dataclasses.fields(ShareConsumerConfig))), 1
    )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{name!r} is not an option of ShareConsumer{hint}"
