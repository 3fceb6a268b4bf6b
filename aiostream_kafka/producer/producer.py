"""``Producer``: the public producer.

``send`` and ``enqueue`` serialize the record, choose its partition, and append it to the
accumulator; one sender task (:mod:`aiostream_kafka.producer.sender`) sends ready batches.
See ``ARCHITECTURE.md`` for the design and the invariants.

``Producer`` is composed of: its generated constructor (``ProducerConstructor``,
:mod:`aiostream_kafka.producer._generated`), the batch calls (``BatchCalls``,
:mod:`aiostream_kafka.producer.batch_calls`) and the transaction calls
(``TransactionCalls``, :mod:`aiostream_kafka.producer.transaction_calls`); the lifecycle
and the per-record path (``send``/``enqueue``) are here, in the class body.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from aiostream_kafka import habits
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import TopicMetadata
from aiostream_kafka.concurrency import (
    DEFAULT_CLOSE_TIMEOUT_S,
    Crash,
    TaskScope,
    shared_task,
    shielded,
)
from aiostream_kafka.errors import (
    BufferFullError,
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    RecordsNotDeliveredError,
    reraisable,
)
from aiostream_kafka.otel.telemetry import telemetry_for
from aiostream_kafka.producer._generated import ProducerConstructor
from aiostream_kafka.producer.accumulator import (
    PLAIN_OVERHEAD,
    Accumulator,
    HeaderList,
    record_size_upper_bound,
)
from aiostream_kafka.producer.append import COMPILED as _APPEND_COMPILED
from aiostream_kafka.producer.append import Appender
from aiostream_kafka.producer.batch_calls import BatchCalls
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.delivery import Delivery, DeliveryCallback, Unwatched
from aiostream_kafka.producer.idempotence import IdempotenceState
from aiostream_kafka.producer.partitioner import KeyPartitions, StickyPartitioner
from aiostream_kafka.producer.record import BYTES as _BYTES
from aiostream_kafka.producer.record import ProducerRecord
from aiostream_kafka.producer.record import check_headers as _check_headers
from aiostream_kafka.producer.sender import Sender, broker_error
from aiostream_kafka.producer.transaction_calls import TransactionCalls, TransactionScope
from aiostream_kafka.producer.transactions import TransactionManager, TransactionState
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.serde import serialize
from aiostream_kafka.structs import RecordMetadata, TopicPartition
from aiostream_kafka.telemetry.clients import start_producer_push
from aiostream_kafka.telemetry.push import TelemetryPusher

log = logging.getLogger(__name__)

__all__ = ["Producer", "ProducerClosedError", "ProducerRecord", "TransactionScope"]

# The C future constructor: cheaper per record than loop.create_future(), a Python method.
_Future = asyncio.Future
_time_ns = time.time_ns
_monotonic = time.monotonic
#: ``enqueue`` lets the loop run when it opens a batch, at most this often.
_YIELD_EVERY_S = 0.0005
# Topic errors worth waiting out (the topic is being created, or its leaders elected).
_TRANSIENT_TOPIC_ERRORS = frozenset({3, 5})


class _TopicNotReady(Exception):
    """A topic (or partition) not (yet) in the metadata: waited for up to max_block_ms."""


class ProducerClosedError(ClientClosedError):
    """The producer is closed (or closing): it takes no more records; records it could
    not deliver before ``close(timeout)`` ran out fail with this error."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer(BatchCalls, TransactionCalls, ProducerConstructor):
    """An asyncio Kafka producer.

    Use as ``async with Producer(bootstrap_servers="host:9092") as producer: ...``.
    Every option is a keyword parameter of the constructor, whose docstring says what each
    does; see also docs/configuration.md.

    Leaving ``async with`` delivers everything buffered, then closes; :meth:`close` with a
    timeout fails what is left after it.

    With ``transactional_id`` (and ``transaction_timeout_ms``, default 60000) the producer
    is transactional: :meth:`start` also runs :meth:`init_transactions`, records may be
    sent only inside a transaction (:meth:`transaction`, or :meth:`begin_transaction` and
    :meth:`commit_transaction` / :meth:`abort_transaction`), and
    :meth:`send_offsets_to_transaction` commits a consumer group's progress with them.
    See :mod:`aiostream_kafka.producer.transactions` for the protocol and the errors.

    Raises:
        ConfigError: an unknown or invalid option, before any network I/O.
    """

    def _setup(self) -> None:
        """The rest of ``__init__`` (generated: :class:`ProducerConstructor`), run last."""
        config = self.config
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        self._max_block_s = config.max_block_ms / 1000
        # A record whose value alone is below this cannot exceed any size limit.
        self._size_check_from = min(config.max_request_size, config.buffer_memory) - 1024
        # The hot path bounds a record's framing by PLAIN_OVERHEAD, which a batch may exceed
        # by a byte or two per record in rare cases (clock jumps, values over 8 KB): keep
        # it to batch sizes far enough below every limit.
        self._fast = (
            self._key_serializer is None
            and self._value_serializer is None
            and config.batch_size <= min(65536, self._size_check_from * 9 // 10)
        )
        # The batch calls' fast path (the same bound for the records' framing) needs no
        # serializer check: values are serialized first.
        self._plain_batches = config.batch_size <= min(65536, self._size_check_from * 9 // 10)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._yielded_at = 0.0  # enqueue's last turn given to the loop (monotonic s)
        self._cluster = Cluster(self.client_config, expire_idle_topics=True)
        self._pool = BufferPool(config.buffer_memory)
        self._partitioner = StickyPartitioner()
        self._key_partitions = KeyPartitions()  # keyed records: murmur2 once per key
        self._sticky: dict[str, Any] = {}  # topic -> the batch keyless records stick to
        # enqueue_nowait: the outcome sink of records sent without a callback, and the
        # records held (in order) until their topic's metadata is known.
        self._unwatched = Unwatched()
        self._held: dict[str, collections.deque[Any]] = {}
        self._held_bytes = 0
        self._held_limit = config.buffer_memory // 4
        self._held_space = asyncio.Event()  # set when the held records are down to half
        self._held_tasks: set[asyncio.Task[None]] = set()
        self._idempotence = IdempotenceState() if config.idempotent else None
        self._txn: TransactionManager | None = None
        if config.transactional_id is not None:
            assert self._idempotence is not None  # the config made sure of it
            self._txn = TransactionManager(
                config.transactional_id,
                config,
                self._cluster,
                self._idempotence,
                on_fatal=self._transaction_failed,
                on_change=self._update_open,
            )
        self._accumulator: Accumulator | None = None
        # The compiled per-record path (producer/append.py), made at start() in the
        # compiled build only; None: the inline paths of enqueue()/enqueue_nowait() here.
        self._appender: Appender | None = None
        self._sender: Sender | None = None
        # The sender task; a crash (a bug) fails the producer (_sender_failed).
        self._scope = TaskScope("producer", on_fail=self._sender_failed)
        self._state = "new"  # new -> running (-> failed) -> closing -> closed
        # Whether records may be appended now (running, and inside a transaction when
        # transactional): the hot path of enqueue() checks only this.
        self._open = False
        self._failure: BaseException | None = None
        self._failure_is_fatal = False  # _failure is a fatal transaction error
        self._close_task: asyncio.Future[None] | None = None
        # The pending check of _expedite_when_idle (one at a time).
        self._idle_check: asyncio.Handle | None = None
        self._lingers = config.linger_ms > 0
        self._metrics_push: TelemetryPusher | None = None  # KIP-714 (enable_metrics_push)

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the cluster metadata and start the sender task; a transactional producer
        then runs :meth:`init_transactions`.

        Raises:
            KafkaTimeoutError: no bootstrap address answered within
                ``default_api_timeout_ms`` (or, transactional, the coordinator did not
                answer within ``max_block_ms``).
            ProducerClosedError: the producer was closed.
            ProducerFencedError, TransactionalIdAuthorizationFailedError, ...: what
                :meth:`init_transactions` raises.
        """
        if self._state != "new":
            if self._state == "running":
                return
            raise ProducerClosedError("the producer is closed; create a new one")
        await self._cluster.bootstrap()
        loop = self._loop = asyncio.get_running_loop()
        self._accumulator = Accumulator(
            self.config.batch_size, self.config.delivery_timeout_ms, self._pool, loop
        )
        self._sender = Sender(
            self._cluster, self._accumulator, self.config, self._idempotence, self._txn
        )
        if _APPEND_COMPILED:
            self._appender = Appender(
                self._accumulator,
                self._cluster,
                self._sticky,
                self._held,
                self._unwatched,
                self.config.batch_size,
                loop,
                Producer.enqueue_nowait.__get__(self),
                self._enqueue_slow,
            )
            self._appender.fast = self._fast
            if type(self).enqueue_nowait is Producer.enqueue_nowait:  # not overridden
                # The compiled call, no interpreted frame (it calls the method above for
                # what it does not take); an instance attribute shadows the class's
                # method for this producer only, as the OpenTelemetry hooks do.
                self.enqueue_nowait = self._appender.enqueue_nowait  # type: ignore[method-assign]
            if type(self).enqueue is Producer.enqueue:
                # Likewise a compiled coroutine: no interpreted frame per record.
                self.enqueue = self._appender.enqueue  # type: ignore[method-assign]
        self._sender.on_topics_expired = self._forget_topics
        self._sender.on_crash = self._sender_failed
        self._scope.spawn(
            self._sender.run, name="aiostream-kafka producer sender", crash=Crash.FAIL_OWNER
        )
        self._metrics_push = start_producer_push(
            self._cluster,
            self._sender.stats,
            transactional_id=self.config.transactional_id,
            scope=self._scope,
        )
        self._state = "running"
        self._update_open()
        self._instrument()
        if self._txn is not None:
            self._txn.acc = self._accumulator
            await self._txn.init_transactions()

    def _instrument(self) -> None:
        """OpenTelemetry, when this producer emits (decided now, once): traced
        ``enqueue``/``enqueue_batch`` on this object (:mod:`aiostream_kafka.otel.producer`)."""
        cc = self.client_config
        telemetry = telemetry_for(
            cc.opentelemetry, cc.tracer_provider, cc.meter_provider, client_id=cc.client_id
        )
        if telemetry is not None:
            from aiostream_kafka.otel.producer import instrument_producer

            instrument_producer(self, telemetry)
            if self._appender is not None:
                self._appender.fast = self._fast

    def _update_open(self) -> None:
        txn = self._txn
        self._open = self._state == "running" and (
            txn is None or txn.state is TransactionState.IN_TRANSACTION
        )
        if self._appender is not None:
            self._appender.open = self._open

    def _transaction_failed(self, error: KafkaError) -> None:
        """A fatal transaction error (fenced...): the producer stops, and every record it
        holds fails with ``error``."""
        self._failure = error
        self._failure_is_fatal = True
        if self._state == "running":
            self._state = "failed"
        self._update_open()
        if self._accumulator is not None and self._sender is not None:
            self._sender.fail_batches(self._accumulator.incomplete, error)

    def _forget_topics(self, topics: set[str]) -> None:
        for topic in topics:
            self._sticky.pop(topic, None)
            self._partitioner.forget(topic)
            self._key_partitions.forget(topic)
            if self._appender is not None:
                self._appender.forget(topic)

    def _sender_failed(self, error: Exception) -> None:
        """The sender or one of its tasks crashed (a bug): make it visible to every caller
        rather than hanging them."""
        if self._state != "running":
            return
        self._failure = error
        self._state = "failed"  # takes no more records; close() still cleans up
        self._update_open()
        failure = KafkaError(f"the producer's sender task died: {error!r}")
        if self._accumulator is not None and self._sender is not None:
            self._sender.fail_batches(self._accumulator.incomplete, failure)

    async def stop(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- as close()
        """:meth:`close` under aiokafka's name: the same call, same ``timeout``; returns
        once the producer is closed."""
        await self.close(timeout)

    async def __aenter__(self) -> Producer:
        try:
            await self.start()
        except BaseException:
            await self.close(timeout=0)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.close()
            return
        with contextlib.suppress(RecordsNotDeliveredError):  # logged; the body's error wins
            await self.close()

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- Kafka's close(timeout)
        """Stop taking records, deliver what is buffered, then release everything.

        ``timeout`` (seconds; ``None``: the default, 30 s, as the Consumer's and the
        Admin's close) bounds delivering what is buffered (and aborting an open
        transaction); records not acknowledged by then fail with
        :class:`ProducerClosedError`. Then the tasks stop and every connection is closed
        (flushed for at most a second, then aborted), so close is bounded even when a
        broker stopped reading. Idempotent; concurrent calls share one close (the first
        one's ``timeout`` counts). Cancelling the caller does not cut the close short: the
        records left fail with :class:`ProducerClosedError`, every task and connection is
        released, then the :class:`asyncio.CancelledError` is re-raised.

        Raises:
            RecordsNotDeliveredError: records given to :meth:`enqueue_nowait` without
                ``on_delivery`` failed since the last :meth:`flush` (after closing; not
                raised by ``async with`` when its body raised: they were logged).
        """
        if self._close_task is None:
            limit = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
            self._close_task = shared_task(self._close(limit), name="closing the producer")
        await shielded(self._close_task, timeout=None, what="closing the producer")
        failed = self._unwatched.take()
        if failed is not None:
            raise failed

    async def _close(self, timeout: float) -> None:  # noqa: ASYNC109
        started = self._state == "running"
        self._state = "closing"
        self._update_open()
        if self._sender is not None:
            self._sender.closing = True  # every batch is ready now: no lingering
            if self._accumulator is not None:
                self._accumulator.wakeup.set()
        try:
            txn = self._txn
            if (
                started
                and txn is not None
                and txn.in_transaction
                and txn.state is not TransactionState.COMMITTING
            ):
                # As the Java client: an open transaction is aborted, its records not
                # sent yet fail with TransactionAbortedError.
                log.warning("closing the producer of transactional id %r with a "
                            "transaction open: aborting it", txn.transactional_id)  # fmt: skip
                try:
                    async with asyncio.timeout(timeout):
                        await txn.abort()
                except (KafkaError, TimeoutError) as exc:
                    log.warning("aborting the open transaction on close failed: %r", exc)
            if started:
                try:
                    async with asyncio.timeout(timeout):
                        await self._flush()
                except TimeoutError:
                    pass
        finally:
            acc, sender = self._accumulator, self._sender
            if acc is not None and sender is not None and acc.incomplete:
                left = sum(b.record_count for b in acc.incomplete)
                log.warning("producer closed with %d record(s) not delivered", left)
                sender.fail_batches(
                    acc.incomplete,
                    ProducerClosedError(
                        f"the producer was closed (close timeout {timeout} s) before this "
                        "record was acknowledged"
                    ),
                )
            try:
                if self._txn is not None:
                    await self._txn.stop()
                if sender is not None:
                    await sender.stop()
                await self._scope.aclose()
            finally:
                if self._idle_check is not None:
                    self._idle_check.cancel()
                    self._idle_check = None
                if self._metrics_push is not None:  # the terminating push, bounded
                    await self._metrics_push.stop()
                await self._cluster.close()
                self._state = "closed"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began."""
        return self._state in ("closing", "closed")

    @property
    def error(self) -> BaseException | None:
        """The error that stopped the producer (its sender task died, or a fatal
        transaction error such as ``ProducerFencedError``), or None. A stopped producer
        takes no more records; a health probe should report it."""
        return self._failure

    @property
    def transactional_id(self) -> str | None:
        """The ``transactional_id`` (None: not a transactional producer)."""
        return self.config.transactional_id

    @property
    def transaction_state(self) -> TransactionState | None:
        """Where the transactional producer is (:class:`TransactionState`), None when it
        is not transactional."""
        return None if self._txn is None else self._txn.state

    @property
    def transaction_error(self) -> KafkaError | None:
        """The error that made the transaction abortable (a ``TransactionAbortableError``
        whose ``__cause__`` is the original error) or the producer fail for good (the fatal
        error itself); None otherwise."""
        return None if self._txn is None else self._txn.error

    @property
    def cluster(self) -> Cluster:
        """The metadata cache and connection pool (for diagnostics)."""
        return self._cluster

    @property
    def buffer_pool(self) -> BufferPool:
        """The memory budget (``buffer_memory``) and its use, for diagnostics."""
        return self._pool

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """The idempotent producer id and epoch ((-1, -1) before the first batch or when
        idempotence is off)."""
        idem = self._idempotence
        return (-1, -1) if idem is None else (idem.producer_id, idem.producer_epoch)

    def _refusal(self) -> Exception | None:
        """Why records may not be appended now (None: they may): the producer is not
        running, or, transactional, no transaction is open (or it is ending)."""
        if self._state != "running":
            return self._not_running()
        if self._txn is not None:
            return self._txn.send_refusal()
        return None

    def _not_running(self) -> Exception:
        if self._failure_is_fatal and isinstance(self._failure, KafkaError):
            return reraisable(self._failure)
        if self._failure is not None:
            return KafkaError(f"the producer failed: {self._failure!r}")
        if self._state == "new":
            return RuntimeError(
                "the producer is not started: use `async with Producer(...)` or "
                "`await producer.start()`"
            )
        return ProducerClosedError("the producer is closed; it takes no more records")

    # -- sending ---------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and return its :class:`RecordMetadata` once acknowledged
        (with ``acks=0``: once written to the socket, offset -1).

        Raises:
            TypeError: a key or value that is not bytes (or None) and no serializer, or bad
                headers.
            RecordTooLargeError: the record exceeds ``max_request_size`` or
                ``buffer_memory``.
            UnknownTopicOrPartitionError: the topic (or partition) did not appear in the
                metadata within ``max_block_ms``.
            KafkaTimeoutError: no buffer memory within ``max_block_ms``, or no
                acknowledgement within ``delivery_timeout_ms``.
            KafkaError: the broker's error for this record (typed, e.g.
                ``TopicAuthorizationFailedError``).
            ProducerClosedError: the producer is closed.
        """
        future = await self.enqueue(topic, value, key, headers, partition, timestamp_ms)
        if self._lingers and not future.done():
            self._expedite_when_idle()
        return await future

    async def send_record(self, record: ProducerRecord) -> RecordMetadata:
        """:meth:`send` for a :class:`ProducerRecord`."""
        return await self.send(
            record.topic,
            record.value,
            record.key,
            record.headers,
            record.partition,
            record.timestamp_ms,
        )

    def _expedite_when_idle(self) -> None:
        """A caller awaits a record's acknowledgement (:meth:`send`): once the event loop
        has gone a whole turn without a record appended anywhere, nothing else is coming
        to fill the open batches, so they are closed and go now instead of after
        ``linger_ms``. While records keep arriving (concurrent senders, an
        :meth:`enqueue` pipeline) the check is repeated each turn and batches linger as
        configured. One check is pending at a time."""
        if self._idle_check is None and self._loop is not None:
            self._idle_check = self._loop.call_soon(self._check_idle, self._open_rooms())

    def _open_rooms(self) -> list[tuple[Any, int]]:
        """The open batches with their ``room`` (which every append changes)."""
        acc = self._accumulator
        if acc is None:
            return []
        return [(dq[-1], dq[-1].room) for dq in acc.batches.values() if dq and not dq[-1].closed]

    def _check_idle(self, before: list[tuple[Any, int]]) -> None:
        self._idle_check = None
        now = self._open_rooms()
        if now != before:  # records were appended during the last turn: look again
            if now and self._loop is not None:
                self._idle_check = self._loop.call_soon(self._check_idle, now)
            return
        if now and self._accumulator is not None:
            for batch, _ in now:
                batch.closed = True  # ready: the sender takes it on its next round
            self._accumulator.wakeup.set()

    async def enqueue_record(self, record: ProducerRecord) -> asyncio.Future[RecordMetadata]:
        """:meth:`enqueue` for a :class:`ProducerRecord`."""
        return await self._enqueue_record(record)

    async def enqueue(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Buffer one record and return a future of its :class:`RecordMetadata`.

        Returns as soon as the record is in a batch: it waits only for buffer memory (and,
        for a topic not seen before, its metadata), both up to ``max_block_ms``. The
        future fails with what :meth:`send` would raise for the record's delivery.

        Raises: the call-time errors of :meth:`send` (``TypeError``,
        ``RecordTooLargeError``, ``UnknownTopicOrPartitionError``, ``KafkaTimeoutError``
        for memory, ``ProducerClosedError``).
        """
        # The hot path: a keyless record of bytes, no headers, no serializers, joins its
        # topic's open sticky batch without looking at the metadata (``_fast`` also
        # guarantees that a record fitting in a batch fits every size limit). Compiled,
        # the appender takes keyed records to their partition's open batch too.
        appender = self._appender
        if appender is not None:
            fast_future = appender.enqueue_now(topic, value, key, headers, partition, timestamp_ms)
            if fast_future is not None:
                return fast_future
        elif (
            key is None
            and type(value) is bytes
            and headers is None
            and partition is None
            and timestamp_ms is None
            and self._fast
            and self._open
        ):
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed:
                size = len(value)
                if size <= batch.room:
                    batch.room -= size + PLAIN_OVERHEAD
                    batch.pending.append(value)
                    batch.timestamps.append(_time_ns() // 1_000_000)
                    future: asyncio.Future[RecordMetadata] = _Future(loop=self._loop)
                    batch.futures.append(future)
                    return future
        return await self._enqueue_slow(topic, value, key, headers, partition, timestamp_ms)

    async def _enqueue_slow(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[tuple[str, bytes | None]] | None,
        partition: int | None,
        timestamp_ms: int | None,
    ) -> asyncio.Future[RecordMetadata]:
        """:meth:`enqueue` for every record its fast path (or the compiled
        :meth:`~aiostream_kafka.producer.append.Appender.enqueue`) does not take."""
        acc = self._accumulator
        if self._state != "running" or acc is None:
            raise self._not_running()
        if self._txn is not None:
            refusal = self._txn.send_refusal()
            if refusal is not None:
                raise refusal
        # Checks cheapest first, and a keyless record joins its topic's sticky batch
        # without looking at the metadata.
        value, key, checked, timestamp_ms = self._prepare(topic, value, key, headers, timestamp_ms)
        headers = checked  # type: ignore[assignment]
        if key is None and partition is None:
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed and batch.has_room_for(None, value, headers):
                future: asyncio.Future[RecordMetadata] = _Future(loop=acc.loop)
                batch.append(None, value, headers, timestamp_ms, future)
                return future
        meta = self._cluster.snapshot.topics.get(topic)
        if meta is None or meta.error_code or not meta.partitions:
            meta = await self._wait_for_topic(topic, partition)
        count = len(meta.partitions)
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise TypeError(f"partition must be a non-negative int, got {partition!r}")
            if partition >= count:
                meta = await self._wait_for_topic(topic, partition)
        elif key is not None:
            partition = self._key_partitions.partition(topic, key, count)
        else:
            return await self._append_keyless(acc, meta, value, headers, timestamp_ms)
        future_or_none: asyncio.Future[RecordMetadata] | None = acc.try_append(
            (topic, partition), key, value, headers, timestamp_ms
        )
        if future_or_none is None:
            future, _ = await acc.append_new(
                TopicPartition(topic, partition),
                key,
                value,
                headers,
                timestamp_ms,
                self._max_block_s,
            )
            # A new batch: let the sender and the readers run, at most every half
            # millisecond (over many partitions nearly every record opens a batch, and a
            # loop turn per record would cost more than the record).
            now = _monotonic()
            if now - self._yielded_at >= _YIELD_EVERY_S:
                self._yielded_at = now
                await asyncio.sleep(0)
            return future
        return future_or_none

    def enqueue_nowait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Buffer one record without awaiting anything and without a future: the fastest
        call for a pipeline (confluent-kafka's ``produce()``, asyncio's ``put_nowait``).

        ``on_delivery(metadata, error)`` runs on the event loop once the record is
        acknowledged (``metadata`` a :class:`RecordMetadata`, ``error`` None) or has
        failed (``metadata`` None); an exception it raises is logged and ignored. A record
        with no ``on_delivery`` costs no object of its own; if it fails, the failure is
        logged and counted, and the next :meth:`flush` or :meth:`close` raises
        :class:`~aiostream_kafka.errors.RecordsNotDeliveredError` naming how many failed
        and the first error: never lost silently. Records of a topic whose metadata is
        not known yet are held (in order, bounded) until it is.

        Raises:
            BufferFullError: ``buffer_memory`` has no room for the record now (nothing
                was buffered): ``await`` :meth:`wait_for_buffer` and call again.
            TypeError, RecordTooLargeError, ProducerClosedError: as :meth:`enqueue`.
        """
        sink: Any = self._unwatched if on_delivery is None else Delivery(on_delivery)
        if (
            key is None
            and type(value) is bytes
            and headers is None
            and partition is None
            and self._fast
            and self._open
        ):
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed:
                size = len(value)
                if size <= batch.room:
                    batch.room -= size + PLAIN_OVERHEAD
                    batch.pending.append(value)
                    batch.timestamps.append(_time_ns() // 1_000_000)
                    batch.futures.append(sink)
                    return
        acc = self._accumulator
        if self._state != "running" or acc is None:
            raise self._not_running()
        if self._txn is not None:
            refusal = self._txn.send_refusal()
            if refusal is not None:
                raise refusal
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise TypeError(f"partition must be a non-negative int, got {partition!r}")
        value, key, checked, timestamp_ms = self._prepare(topic, value, key, headers, None)
        held = self._held.get(topic)
        if held is not None:  # records wait for its metadata: keep their order
            self._hold(topic, value, key, checked, partition, timestamp_ms, sink)
            return
        meta = self._cluster.snapshot.topics.get(topic)
        if (
            meta is None
            or meta.error_code
            or not meta.partitions
            or (partition is not None and partition not in meta.partitions)
        ):
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, got {topic!r}")
            self._hold(topic, value, key, checked, partition, timestamp_ms, sink)
            return
        if not self._append_now(acc, meta, value, key, checked, partition, timestamp_ms, sink):
            raise BufferFullError(
                f"buffer_memory ({self.config.buffer_memory} bytes) is full of records not "
                "yet acknowledged: await producer.wait_for_buffer() and send again, or "
                "raise buffer_memory"
            )

    def _append_now(
        self,
        acc: Accumulator,
        meta: TopicMetadata,
        value: Any,
        key: Any,
        headers: HeaderList | None,
        partition: int | None,
        timestamp_ms: int,
        sink: Any,
    ) -> bool:
        """Append a checked record whose topic's metadata is known, never waiting: False
        when a new batch is needed and ``buffer_memory`` has no room for it."""
        topic = meta.name
        if partition is None:
            if key is not None:
                partition = self._key_partitions.partition(topic, key, len(meta.partitions))
            else:
                batch = self._sticky.get(topic)
                if batch is not None and not batch.closed:
                    if batch.has_room_for(None, value, headers):
                        batch.append(None, value, headers, timestamp_ms, sink)
                        return True
                    batch.closed = True
                    acc.wakeup.set()
                tp = TopicPartition(topic, self._sticky_partition(meta, moving=batch is not None))
                if acc.try_append(tp, None, value, headers, timestamp_ms, sink) is not None:
                    self._sticky[topic] = acc.open_batch(tp)
                    return True
                new_batch = acc.append_new_nowait(tp, None, value, headers, timestamp_ms, sink)
                if new_batch is None:
                    return False
                self._sticky[topic] = new_batch
                return True
        # a plain tuple finds the partition's batches (TopicPartition is one): the named
        # one only for a new batch
        if acc.try_append((topic, partition), key, value, headers, timestamp_ms, sink) is not None:
            return True
        tp = TopicPartition(topic, partition)
        return acc.append_new_nowait(tp, key, value, headers, timestamp_ms, sink) is not None

    def _hold(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: HeaderList | None,
        partition: int | None,
        timestamp_ms: int,
        sink: Any,
    ) -> None:
        """Keep a record of ``enqueue_nowait`` until its topic's metadata arrives (a task
        per topic appends the held records in order then); bounded by a quarter of
        ``buffer_memory``."""
        size = record_size_upper_bound(key, value, headers)
        if self._held_bytes + size > self._held_limit:
            raise BufferFullError(
                f"{sum(len(h) for h in self._held.values())} record(s) already wait for the "
                f"metadata of their topic ({', '.join(sorted(self._held))}): await "
                "producer.wait_for_buffer() and send again"
            )
        held = self._held.get(topic)
        if held is None:
            held = self._held[topic] = collections.deque()
            self._held_tasks.add(
                self._scope.spawn(
                    self._release_held(topic, held),
                    name=f"aiostream-kafka producer: records waiting for topic {topic!r}",
                    crash=Crash.AWAITED,
                )
            )
        held.append((value, key, headers, partition, timestamp_ms, sink, size))
        self._held_bytes += size

    async def _release_held(self, topic: str, held: collections.deque[Any]) -> None:
        """Wait for ``topic``'s metadata (up to ``max_block_ms``), then append its held
        records in order, waiting for buffer memory as ``enqueue`` does; on failure each
        held record's outcome is the error."""
        error: BaseException | None = None
        try:
            while held:
                value, key, headers, partition, timestamp_ms, sink, size = held[0]
                try:
                    meta = self._cluster.snapshot.topics.get(topic)  # known: no request
                    if (
                        meta is None
                        or meta.error_code
                        or not meta.partitions
                        or (partition is not None and partition not in meta.partitions)
                    ):
                        meta = await self._wait_for_topic(topic, partition)
                    acc = self._accumulator
                    if self._state not in ("running", "closing") or acc is None:
                        raise self._not_running()
                    while not self._append_now(
                        acc, meta, value, key, headers, partition, timestamp_ms, sink
                    ):
                        await self._wait_for_memory(self._max_block_s)
                except Exception as exc:
                    sink.set_exception(exc)
                held.popleft()
                self._held_bytes -= size
                if self._held_bytes <= self._held_limit // 2:
                    self._held_space.set()
        except BaseException as exc:  # cancelled (the producer closes): fail what is left
            error = exc
            raise
        finally:
            self._held.pop(topic, None)
            self._held_tasks.discard(asyncio.current_task())
            self._held_space.set()
            if held:
                closed = ProducerClosedError(
                    f"the producer closed while this record waited for topic {topic!r}"
                )
                closed.__cause__ = error if isinstance(error, Exception) else None
                for entry in held:
                    entry[5].set_exception(closed)
                    self._held_bytes -= entry[6]
                held.clear()

    async def wait_for_buffer(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until :meth:`enqueue_nowait` may take a record again after
        :class:`~aiostream_kafka.errors.BufferFullError`: ``buffer_memory`` has room for a
        new batch, and the records held for their topic's metadata are down to half their
        bound. No future per record; the event loop runs at least once (the sender frees
        memory meanwhile).

        Raises:
            KafkaTimeoutError: no room within ``timeout`` seconds (default ``max_block_ms``).
            ProducerClosedError: the producer is closed.
        """
        if self._state != "running" or self._accumulator is None:
            raise self._not_running()
        limit_s = self._max_block_s if timeout is None else timeout
        deadline = time.monotonic() + limit_s
        self._accumulator.wakeup.set()
        await asyncio.sleep(0)
        while self._held_bytes > self._held_limit // 2 and self._held_tasks:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(
                    f"records waiting for their topic's metadata still fill their share of "
                    f"buffer_memory after {limit_s} s"
                )
            self._held_space.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._held_space.wait()
        await self._wait_for_memory(max(deadline - time.monotonic(), 0.0))

    async def _wait_for_memory(self, limit_s: float) -> None:
        """Wait up to ``limit_s`` until ``buffer_memory`` has room for a new batch.

        Raises:
            KafkaTimeoutError: it had none in time.
        """
        size = min(self.config.batch_size, self._pool.total)
        if self._accumulator is not None:
            self._accumulator.wakeup.set()
        await self._pool.reserve(size, limit_s)
        self._pool.release(size)

    def _prepare(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Sequence[tuple[str, bytes | None]] | None,
        timestamp_ms: int | None,
    ) -> tuple[Any, Any, HeaderList | None, int]:
        """A record's value and key serialized, its headers and size checked, its
        timestamp (now, if none): the checks of :meth:`enqueue` and
        :meth:`enqueue_nowait` past their hot paths. Raises as :meth:`enqueue` does."""
        serializer = self._value_serializer
        if serializer is not None:
            value = serialize(serializer, value, "value")
        elif value is not None and type(value) is not bytes and not isinstance(value, _BYTES):
            serialize(None, value, "value")  # raises TypeError naming the fix
        serializer = self._key_serializer
        if serializer is not None:
            key = serialize(serializer, key, "key")
        elif key is not None and type(key) is not bytes and not isinstance(key, _BYTES):
            serialize(None, key, "key")
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            raise TypeError(f"timestamp_ms must be a non-negative int, got {timestamp_ms!r}")
        checked: HeaderList | None = None
        if headers is not None:
            checked = _check_headers(headers)
            self._check_size(topic, key, value, checked)
        elif (value is not None and len(value) > self._size_check_from) or (
            key is not None and len(key) > self._size_check_from
        ):
            self._check_size(topic, key, value, None)
        return value, key, checked, timestamp_ms

    async def _append_keyless(
        self,
        acc: Accumulator,
        meta: TopicMetadata,
        value: Any,
        headers: HeaderList | None,
        timestamp_ms: int,
    ) -> asyncio.Future[RecordMetadata]:
        """Append a keyless record to its topic's sticky partition (KIP-480), moving to
        another partition when the sticky batch is complete."""
        topic = meta.name
        batch = self._sticky.get(topic)
        if batch is not None and not batch.closed:
            if batch.has_room_for(None, value, headers):
                future: asyncio.Future[RecordMetadata] = _Future(loop=acc.loop)
                batch.append(None, value, headers, timestamp_ms, future)
                return future
            batch.closed = True
            acc.wakeup.set()
        tp = TopicPartition(topic, self._sticky_partition(meta, moving=batch is not None))
        future_or_none: asyncio.Future[RecordMetadata] | None = acc.try_append(
            tp, None, value, headers, timestamp_ms
        )
        if future_or_none is not None:
            self._sticky[topic] = acc.open_batch(tp)
            return future_or_none
        future, new_batch = await acc.append_new(
            tp, None, value, headers, timestamp_ms, self._max_block_s
        )
        self._sticky[topic] = new_batch
        await asyncio.sleep(0)  # a new batch: let the sender and the readers run
        return future

    def _sticky_partition(self, meta: TopicMetadata, *, moving: bool) -> int:
        """The partition keyless records of ``meta``'s topic stick to (KIP-480): a first
        one, or, ``moving`` (its sticky batch is complete), the next one; partitions with
        a leader preferred."""
        count = len(meta.partitions)
        available = [p for p, m in meta.partitions.items() if m.leader >= 0]
        if moving:
            return self._partitioner.next_partition(meta.name, count, available)
        return self._partitioner.partition(meta.name, count, available)

    def _check_size(self, topic: str, key: Any, value: Any, headers: HeaderList | None) -> None:
        size = record_size_upper_bound(key, value, headers)
        limit = min(self.config.max_request_size, self.config.buffer_memory)
        if size > limit:
            which = (
                "max_request_size"
                if self.config.max_request_size <= self.config.buffer_memory
                else "buffer_memory"
            )
            raise ec.RecordTooLargeError(
                f"a record for topic {topic!r} is {size} bytes when serialized (upper bound), "
                f"more than {which}={limit}"
            )

    async def _wait_for_topic(self, topic: str, partition: int | None) -> TopicMetadata:
        """Wait up to ``max_block_ms`` for ``topic`` (and ``partition``) in the metadata."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        limit = f"max_block_ms={self.config.max_block_ms}"

        async def attempt() -> TopicMetadata:
            refresh_error: KafkaTimeoutError | None = None
            try:
                snapshot = await self._cluster.refresh([topic])
            except KafkaTimeoutError as exc:
                snapshot, refresh_error = self._cluster.snapshot, exc
            meta = snapshot.topics.get(topic)
            if meta is None:
                reason = f"the metadata has no topic {topic!r}"
            elif meta.error_code:
                if meta.error_code not in _TRANSIENT_TOPIC_ERRORS:
                    self._cluster.untrack([topic])
                    raise broker_error(meta.error_code, f"topic {topic!r}")
                reason = f"topic {topic!r}: {ec.ERRORS_BY_CODE[meta.error_code].name}"
            elif not meta.partitions:
                reason = f"topic {topic!r} has no partitions yet"
            elif partition is None or partition in meta.partitions:
                return meta
            else:
                reason = f"topic {topic!r} has no partition {partition}"
            if self._state != "running":
                raise self._not_running()
            if refresh_error is not None:
                reason += f" (refreshing it: {refresh_error})"
            raise _TopicNotReady(reason)

        def unknown(timeout: KafkaTimeoutError) -> Exception:
            self._cluster.untrack([topic])
            meta = self._cluster.snapshot.topics.get(topic)
            last = f"; last: {timeout.__cause__}" if timeout.__cause__ is not None else ""
            if meta is not None and meta.error_code == 0 and partition is not None:
                return ec.UnknownTopicOrPartitionError(
                    f"partition {partition} of topic {topic!r} does not exist (it has "
                    f"{len(meta.partitions)}), still after {limit}{last}"
                )
            return ec.UnknownTopicOrPartitionError(
                f"topic {topic!r} is not in the cluster metadata after {limit} (create it "
                f"first: automatic topic creation is not requested){last}"
            )

        return await retry_until(
            f"the metadata of topic {topic!r}",
            attempt,
            deadline=time.monotonic() + self._max_block_s,
            limit=limit,
            backoff=Backoff.of(self.client_config),
            retriable=lambda error: isinstance(error, _TopicNotReady),
            give_up=unknown,
        )

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for its metadata.

        Raises:
            UnknownTopicOrPartitionError: the topic did not appear in time.
        """
        if self._state != "running":
            raise self._not_running()
        meta = self._cluster.snapshot.topics.get(topic)
        if meta is None or meta.error_code or not meta.partitions:
            meta = await self._wait_for_topic(topic, None)
        return sorted(meta.partitions)

    # -- flush ---------------------------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send every buffered record now and wait until each is acknowledged or failed
        (records appended while flushing are sent at once too, but not waited for).

        Raises:
            KafkaTimeoutError: ``timeout`` seconds passed first (nothing is failed by it).
            ProducerClosedError: the producer is closed.
            RecordsNotDeliveredError: records given to :meth:`enqueue_nowait` without
                ``on_delivery`` failed since the last report.
        """
        if self._state != "running":
            raise self._not_running()
        try:
            async with asyncio.timeout(timeout):
                await self._flush()
        except TimeoutError:
            raise KafkaTimeoutError(f"flush did not complete within {timeout} s") from None
        failed = self._unwatched.take()
        if failed is not None:
            raise failed

    async def _flush(self) -> None:
        acc, sender = self._accumulator, self._sender
        if acc is None or sender is None:
            return
        while self._held_tasks:  # records of enqueue_nowait waiting for their topic first
            await asyncio.wait(set(self._held_tasks))
        pending = [b.done for b in acc.incomplete]
        if not pending:
            return
        sender.flushing += 1
        acc.wakeup.set()
        try:
            await asyncio.wait(pending)
        finally:
            sender.flushing -= 1

    async def _enqueue_record(self, record: ProducerRecord) -> asyncio.Future[RecordMetadata]:
        if not isinstance(record, ProducerRecord):
            raise TypeError(f"pipe expects ProducerRecord items, got {type(record).__name__}")
        return await self.enqueue(
            record.topic,
            record.value,
            record.key,
            record.headers,
            record.partition,
            record.timestamp_ms,
        )


habits.install(Producer)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
