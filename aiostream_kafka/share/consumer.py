"""``ShareConsumer``: Kafka as a queue (share groups, KIP-932), with ``async for``.

::

    async with ShareConsumer(bootstrap_servers=bs, group_id="jobs") as sc:
        sc.subscribe(["jobs"])
        async for record in sc:       # accepted when the loop asks for the next one
            await handle(record)

Members of one share group take the records of the same partitions cooperatively: the
partition leader hands each record to one member under a time lock, and archives it once
that member acknowledges it (ACCEPT, or REJECT), or delivers it again after a RELEASE, a
lock expiry or the member leaving.

The parts, all owned by the consumer's :class:`~aiostream_kafka.concurrency.TaskScope`:

* **membership** (``membership.py``): ShareGroupHeartbeat in its own task; the assignment
  says which partitions to fetch from (several members may share one).
* **the fetch loop** (one task): while the prefetch buffer has room (``max_prefetch_records``
  and ``max_prefetch_bytes``), one ShareFetch per partition leader, inside that leader's
  share session (epoch 0 opens it, each request increments it, -1 closes it), asking for
  at most the room left (``share_acquire_mode`` record_limit, KIP-1206, so the broker does
  not round up to whole batches). Pending acknowledgements ride on these requests. While
  the buffer is full it sends only acknowledgements (ShareAcknowledge): a slow application
  holds no more locks than the bound.
* **the iterator** hands out only records inside acquired ranges (``acks.py``). In implicit
  mode a record is accepted when the loop asks for the next one; a loop that ends on the
  record instead (its body raised, or ``break``) releases it: it is delivered again, never
  silently accepted.

Acknowledgements belong to the share session that acquired the records. When a session is
lost (the connection dropped, the broker answered SHARE_SESSION_NOT_FOUND or
INVALID_SHARE_SESSION_EPOCH) the broker has released its records already: the consumer
drops those still buffered, and acknowledgements for them are reported (logged, and raised
by the next :meth:`ShareConsumer.commit` as :class:`ShareAcknowledgeError`), never dropped
silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import logging
from collections import deque
from collections.abc import AsyncIterator, Collection, Sequence
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
    shared_task,
    shielded,
)
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer.errors import ConsumerStateError, RecordDeserializationError
from aiostream_kafka.errors import ConfigError, KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.net.pool import Lane
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

from .acks import GAP_TYPE, PendingAcks, ack_batches, acquired_records
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


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True, eq=False)
class _Session:
    """This member's share session with one partition leader."""

    node: int
    epoch: int = 0  # 0: none open (the next ShareFetch opens one)
    partitions: set[TopicPartition] = field(default_factory=set)
    generation: int = 0  # bumped when the session is lost: its buffered records are void
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class _Held:
    """A record acquired and not handed out yet."""

    record: ShareRecord
    node: int
    generation: int
    size: int


class ShareConsumer:
    """A member of share group ``group_id`` (KIP-932, Kafka 4.2+).

    Use as ``async with ShareConsumer(bootstrap_servers=..., group_id=...) as sc``, then
    :meth:`subscribe` and ``async for record in sc`` (:class:`ShareRecord`: the
    :class:`Record` fields plus ``delivery_count``).

    Options: every client option of :class:`~aiostream_kafka.Consumer` (``client_id``,
    ``request_timeout_ms``, security, ...) and

    * ``acknowledgement_mode``: ``"implicit"`` (default): a record is accepted when the
      loop asks for the next one, released when the loop ends on it (an exception in its
      body, ``break``); ``"explicit"``: :meth:`acknowledge` each record (one left
      unacknowledged is released at close, or by the broker when its lock expires).
    * ``max_prefetch_records`` (500) and ``max_prefetch_bytes`` (16 MiB, keys and values):
      the bound on records acquired and not handed out yet. Records are acquired only
      while it has room, so a slow member holds few locks.
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
        max_prefetch_records: int = 500,
        max_prefetch_bytes: int = 16 * 1024 * 1024,
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
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            check_crcs=check_crcs,
            client_rack=client_rack,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
        )
        self._implicit = acknowledgement_mode == "implicit"
        self._cluster = Cluster(self.client_config)
        self._membership = ShareMembership(
            self._cluster, self.client_config, group_id, client_rack, self._membership_changed
        )
        self._scope = TaskScope(f"share consumer {group_id}", on_fail=self._crashed)
        self._sessions: dict[int, _Session] = {}
        self._buffer: deque[_Held] = deque()
        self._buffer_bytes = 0
        # Handed out and not acknowledged yet: (partition, offset) -> the acquiring broker.
        self._delivered: dict[tuple[TopicPartition, int], int] = {}
        self._pending = PendingAcks()
        # Acknowledgement failures since the last commit(), which raises them.
        self._ack_errors: dict[TopicPartition, KafkaError] = {}
        self._fatal: KafkaError | None = None
        self._started = False
        self._stopping = False  # the fetch loop ends after its current round
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()  # the fetch loop: room, acknowledgements, assignment
        self._ready = asyncio.Event()  # the iterators: records, close, a fatal error
        self._loop_done = asyncio.Event()
        self._loop_started = False
        self._refresh_metadata = False
        self._acquire_mode_ok = True
        # Counters (tests and health): records acquired, handed out; fetches; acks sent.
        self.records_acquired = 0
        self.records_delivered = 0
        self.fetches = 0
        self.acknowledgements_sent = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the cluster metadata and start the membership and the fetch loop.

        Raises:
            BootstrapError: no bootstrap broker answered.
            ConsumerStateError: already started, or closed.
        """
        if self._started or self._closed:
            raise ConsumerStateError("the share consumer is already started (or closed)")
        self._started = True
        await self._cluster.bootstrap()
        self._membership.start()
        self._loop_started = True
        self._scope.spawn(
            self._fetch_loop, name=f"share consumer {self.config.group_id} fetch",
            crash=Crash.FAIL_OWNER,
        )  # fmt: skip

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
                    await self._loop_done.wait()  # the request in flight is answered first
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
        ``type``: ACCEPT (done), RELEASE (deliver it again) or REJECT (never again). Sent
        with the next request to its leader, or by :meth:`commit`. Also usable in
        implicit mode, for the record the loop is on (then not accepted implicitly).

        Raises:
            ValueError: the record was not handed out by this consumer or is acknowledged
                already, or ``type`` is RENEW (not supported yet).
        """
        kind = AcknowledgeType(type)
        if kind is AcknowledgeType.RENEW:
            raise ValueError("AcknowledgeType.RENEW is not supported by this version yet")
        key = (TopicPartition(record.topic, record.partition), record.offset)
        node = self._delivered.pop(key, None)
        if node is None:
            raise ValueError(
                f"{record.topic}[{record.partition}] offset {record.offset} is not a record "
                "this share consumer handed out, or it is acknowledged already"
            )
        self._pending.add(node, key[0], key[1], int(kind))
        self._wake.set()

    def _settle(self, key: tuple[TopicPartition, int], kind: AcknowledgeType) -> None:
        node = self._delivered.pop(key, None)
        if node is not None:  # not acknowledged explicitly meanwhile
            self._pending.add(node, key[0], key[1], int(kind))
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

    def _lost(self, acks: dict[TopicPartition, dict[int, int]], node: int, why: str) -> None:
        for tp, offsets in acks.items():
            error = NetworkError(
                f"the share session with broker {node} was lost ({why}); the broker released "
                "these records and delivers them again"
            )
            error.retriable = True
            self._report(tp, error, len(offsets))

    def _release_everything(self) -> None:
        """RELEASE what was acquired and not handed out, and what was handed out and not
        acknowledged (the loop did not finish it): delivered again, never accepted."""
        while self._buffer:
            held = self._buffer.popleft()
            session = self._sessions.get(held.node)
            if session is not None and session.generation == held.generation:
                r = held.record
                tp = TopicPartition(r.topic, r.partition)
                self._pending.add(held.node, tp, r.offset, int(AcknowledgeType.RELEASE))
        self._buffer_bytes = 0
        for key in list(self._delivered):
            self._settle(key, AcknowledgeType.RELEASE)

    async def _acknowledge(self, node: int, *, final: bool) -> None:
        """ShareAcknowledge to ``node`` with what is pending for it (``final``: closing
        the session, epoch -1). Errors are reported, not raised."""
        session = self._session(node)
        async with session.lock:
            acks = self._pending.take(node)
            if session.epoch == 0:
                if acks:
                    self._lost(acks, node, "no share session open")
                return
            if not acks and not final:
                return
            epoch = _CLOSE_SESSION if final else session.epoch
            ids = self._topic_ids()
            topics: dict[str, list[ShareAcknowledgeRequest.AcknowledgePartition]] = {}
            for tp, offsets in sorted(acks.items()):
                topics.setdefault(tp.topic, []).append(
                    ShareAcknowledgeRequest.AcknowledgePartition(
                        partition_index=tp.partition,
                        acknowledgement_batches=[
                            ShareAcknowledgeRequest.AcknowledgementBatch(
                                first_offset=f, last_offset=last, acknowledge_types=k
                            )
                            for f, last, k in ack_batches(offsets)
                        ],
                    )
                )
            missing = [t for t in topics if t not in ids]
            for missing_topic in missing:
                for tp in [tp for tp in acks if tp.topic == missing_topic]:
                    self._report(tp, KafkaError(f"topic {missing_topic!r} has no known id"), 1)
            request = ShareAcknowledgeRequest(
                group_id=self.config.group_id,
                member_id=self._membership.member_id,
                share_session_epoch=epoch,
                topics=[
                    ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=ids[t], partitions=p)
                    for t, p in topics.items()
                    if t in ids
                ],
            )
            try:
                conn = await self._cluster.connection(node, Lane.FETCH)
                response = await conn.request(request)
            except (NetworkError, KafkaTimeoutError) as exc:
                self._reset(session, f"ShareAcknowledge failed: {exc}")
                self._lost(acks, node, str(exc))
                return
            assert isinstance(response, ShareAcknowledgeResponse)
            count = sum(len(a) for a in acks.values())
            log.debug("share group %s: ShareAcknowledge to %d epoch %d: %d acks -> %d",
                      self.config.group_id, node, epoch, count, response.error_code)  # fmt: skip
            if response.error_code:
                error = broker_error(
                    response.error_code, f"ShareAcknowledge to broker {node}",
                    response.error_message,
                )  # fmt: skip
                self._reset(session, str(error))
                for tp, offsets in acks.items():
                    self._report(tp, error, len(offsets))
                return
            self.acknowledgements_sent += count
            if final:
                self._reset(session, None)
            else:
                session.epoch = _next_epoch(session.epoch)
            names = {v: k for k, v in ids.items()}
            for answer in response.responses:
                answered = names.get(answer.topic_id)
                for part in answer.partitions:
                    if part.error_code and answered is not None:
                        tp = TopicPartition(answered, part.partition_index)
                        err = broker_error(part.error_code, "acknowledge", part.error_message)
                        self._report(tp, err, len(acks.get(tp, ())))
                        if part.error_code in _STALE_METADATA:
                            self._refresh_metadata = True

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
        kept = deque(h for h in self._buffer if h.node != session.node)
        if len(kept) != len(self._buffer):
            self._buffer = kept
            self._buffer_bytes = sum(h.size for h in kept)
        # Records handed out and not acknowledged stay in _delivered: their
        # acknowledgements, once made, are reported as lost (the broker released them).

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
            f"share consumer {self.config.group_id!r}: the fetch loop failed: {exc!r}")  # fmt: skip
        if error is not exc:
            error.__cause__ = exc
        log.error("share consumer %s stops: %s", self.config.group_id, error)
        if self._fatal is None:
            self._fatal = error
        self._ready.set()

    async def _fetch_loop(self) -> None:
        backoff = Backoff.of(self.client_config)
        try:
            while not self._stopping and self._fatal is None:
                self._wake.clear()
                room = self.config.max_prefetch_records - len(self._buffer)
                room_bytes = self.config.max_prefetch_bytes - self._buffer_bytes
                assigned = self._membership.assignment
                ok = True
                if assigned and room > 0 and room_bytes > 0:
                    plan = await self._plan(assigned)
                    if plan:
                        share = max(1, room // len(plan))
                        results = await gather_all(
                            *(self._fetch(n, tps, share, room_bytes) for n, tps in plan.items())
                        )
                        ok = all(results)
                        # Leaders with nothing to fetch any more still get their acks.
                        rest = self._pending.nodes() - set(plan)
                        await gather_all(*(self._acknowledge(n, final=False) for n in rest))
                        if ok:
                            backoff.reset()
                            continue
                elif self._pending.nodes():
                    await gather_all(
                        *(self._acknowledge(n, final=False) for n in self._pending.nodes())
                    )
                    continue
                # Wait for room, acknowledgements or an assignment; after an error, or while
                # no leader is known (the metadata is refreshed), no longer than a back-off.
                delay = backoff.next_delay() if not ok or (assigned and room > 0) else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
        finally:
            self._loop_done.set()

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
        of ``wanted``, carrying the acknowledgements pending for ``node``. Returns False
        after an error (the loop backs off); raises only for bugs."""
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
                        acknowledgement_batches=[
                            ShareFetchRequest.AcknowledgementBatch(
                                first_offset=f, last_offset=last, acknowledge_types=k
                            )
                            for f, last, k in ack_batches(acks.get(tp, {}))
                        ],
                    )
                )
            forgotten_by_topic: dict[str, list[int]] = {}
            for tp in sorted(forgotten):
                if tp.topic in ids:
                    forgotten_by_topic.setdefault(tp.topic, []).append(tp.partition)
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
                        _RECORD_LIMIT if version >= 2 and self._acquire_mode_ok else 0
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
                response = await conn.request(request, version=version, timeout_ms=timeout_ms)
            except (NetworkError, KafkaTimeoutError) as exc:
                self._reset(session, f"ShareFetch failed: {exc}")
                self._lost(acks, node, str(exc))
                self._refresh_metadata = True
                return False
            assert isinstance(response, ShareFetchResponse)
            self.fetches += 1
            if response.error_code:
                error = broker_error(
                    response.error_code, f"ShareFetch to broker {node}", response.error_message
                )
                self._reset(session, str(error))
                for tp, offsets in acks.items():
                    self._report(tp, error, len(offsets))
                if response.error_code not in _SESSION_LOST:
                    log.warning("share group %s: %s", self.config.group_id, error)
                    if response.error_code == 42 and self._acquire_mode_ok:
                        self._acquire_mode_ok = False  # INVALID_REQUEST: try without it
                return False
            session.epoch = _next_epoch(session.epoch)
            session.partitions = (session.partitions | listed) - forgotten
            self.acknowledgements_sent += sum(len(a) for a in acks.values())
            self._file(node, session, response, ids, acks)
            return True

    def _file(
        self,
        node: int,
        session: _Session,
        response: ShareFetchResponse,
        ids: dict[str, Any],
        acks: dict[TopicPartition, dict[int, int]],
    ) -> None:
        """Put the acquired records of a ShareFetch answer in the buffer; report its
        acknowledgement errors."""
        names = {v: k for k, v in ids.items()}
        added = 0
        for topic in response.responses:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for part in topic.partitions:
                tp = TopicPartition(name, part.partition_index)
                if part.acknowledge_error_code:
                    err = broker_error(
                        part.acknowledge_error_code, "acknowledge", part.acknowledge_error_message
                    )
                    self._report(tp, err, len(acks.get(tp, ())))
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
                acquired, gaps = acquired_records(records, ranges)
                for offset in gaps:
                    self._pending.add(node, tp, offset, GAP_TYPE)
                for record in acquired:
                    size = _size(record.key) + _size(record.value)
                    self._buffer.append(_Held(record, node, session.generation, size))
                    self._buffer_bytes += size
                added += len(acquired)
        if added:
            self.records_acquired += added
            self._ready.set()

    # -- iteration ----------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        return self._records()

    async def _take(self) -> tuple[ShareRecord, int]:
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._closed:
                raise StopAsyncIteration
            if not self._started:
                raise ConsumerStateError("start the share consumer (async with) before iterating")
            while self._buffer:
                held = self._buffer.popleft()
                self._buffer_bytes -= held.size
                self._wake.set()  # room: the fetch loop may acquire more
                session = self._sessions.get(held.node)
                if session is None or session.generation != held.generation:
                    continue  # its session was lost: the broker released it already
                return held.record, held.node
            self._ready.clear()
            await self._ready.wait()

    async def _records(self) -> AsyncIterator[ShareRecord]:
        """The records, one at a time (see the class docstring for acknowledgements)."""
        current: tuple[TopicPartition, int] | None = None
        try:
            while True:
                try:
                    record, node = await self._take()
                except StopAsyncIteration:
                    return
                key = (TopicPartition(record.topic, record.partition), record.offset)
                self._delivered[key] = node
                self.records_delivered += 1
                if self._implicit:
                    current = key
                self._deserialize(record, key)
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

    def _deserialize(self, record: ShareRecord, key: tuple[TopicPartition, int]) -> None:
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
                self._settle(key, AcknowledgeType.RELEASE)
                raise RecordDeserializationError(key[0], key[1], what, exc) from exc


def _size(data: object) -> int:
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0


def _unknown_option(name: str) -> str:
    close = difflib.get_close_matches(
        name, (*_CLIENT_OPTIONS, *(f.name for f in dataclasses.fields(ShareConsumerConfig))), 1
    )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{name!r} is not an option of ShareConsumer{hint}"
