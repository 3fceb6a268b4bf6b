"""The sender: one task that drains ready batches into Produce requests.

Each round (woken by a new or full batch, a finished request, new metadata, or the
earliest linger deadline) it:

1. fails batches whose ``delivery_timeout_ms`` has passed;
2. finds the partitions whose head batch is *ready* -- full, or older than ``linger_ms``,
   or needed now (``flush()``, ``close()``, callers waiting for buffer memory) -- and not
   backing off after an error;
3. groups them by leader and, for each leader with fewer than
   ``max_in_flight_requests_per_connection`` requests in flight, takes one batch per ready
   partition (up to ``max_request_size``) into one Produce request (seed 002,
   ``RecordAccumulator.drain``), launched as its own task.

Requests to one broker are written in the order they were made: the sender only launches
a request on a connection that is already open (opening one is a separate task), and a
launched request reaches its socket write without suspending, so tasks created in order
write in order. Idempotence relies on this (see :mod:`~aiostream_kafka.producer.idempotence`).

A batch large enough for its codec (:func:`~aiostream_kafka.protocol.compression.worth_offloading`)
is compressed in a worker thread first: once it is ready (or closed behind a ready one), a
job task owned by the sender closes it and awaits the codec in a worker thread
(``concurrency.run_in_worker``); the
batch is not taken into a request until the job ended, and only the header and CRC are
stamped when it is (nothing changes for sequences or order: they are assigned when the
head is taken, as before). Smaller batches are compressed inline.

Responses complete record futures, or requeue the batch for a retry with exponential
back-off until ``delivery_timeout_ms``. Errors that mean stale metadata use the KIP-951
leader hint carried by the Produce response when there is one (the retry then goes to the
new leader at once, without back-off), else refresh the metadata. Broker throttling
(``throttle_time_ms``, KIP-219) mutes the broker for that long.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import BrokerMetadata
from aiostream_kafka.concurrency import Crash, TaskScope, run_in_worker
from aiostream_kafka.errors import KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.producer.accumulator import Accumulator, ProducerBatch
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.producer.errors import broker_error
from aiostream_kafka.producer.idempotence import IdempotenceState
from aiostream_kafka.protocol import compression as codecs
from aiostream_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiostream_kafka.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiostream_kafka.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.telemetry.stats import ProducerStats

log = logging.getLogger(__name__)

__all__ = ["Sender", "TransactionGate", "broker_error"]

# Errors after which the partition's leader as we know it is probably wrong.
_STALE_METADATA = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        76,  # UNKNOWN_LEADER_EPOCH
    }
)
_DUPLICATE_SEQUENCE = 46
_OUT_OF_ORDER_SEQUENCE = 45
_UNKNOWN_PRODUCER_ID = 59
_INVALID_PRODUCER_EPOCH = 47
_PRODUCER_FENCED = 90
_MESSAGE_TOO_LARGE = 10
# Produce errors that end a transactional producer (KIP-1050 "fatal"): PRODUCER_FENCED,
# TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED.
_FATAL_IN_TRANSACTION = frozenset({90, 53, 31})
_MIN_WAIT_S = 0.0005
_MAX_EPOCH = 32767
# Compression jobs in worker threads at a time, per producer (they share the event loop's
# default executor with the application).
_MAX_CODEC_JOBS = 2


class TransactionGate(Protocol):
    """What the sender uses of a transactional producer's transaction manager
    (``producer.transactions.TransactionManager`` satisfies it): whether records may go,
    the partitions' registration (AddPartitionsToTxn, protocol v1), and the outcomes of
    Produce that concern the transaction."""

    @property
    def transactional_id(self) -> str: ...

    @property
    def fatal_error(self) -> KafkaError | None:
        """The fatal error that ended the producer, if any."""
        ...

    def unsent_refusal(self) -> KafkaError | None:
        """The error to fail the records not yet sent with; None while they may go."""
        ...

    def needs_enrolment(self, tp: TopicPartition) -> bool:
        """Whether the batches of ``tp`` must wait before their first Produce."""
        ...

    def maybe_enrol(self, wakeup: asyncio.Event) -> None:
        """Register the partitions waiting (``wakeup`` is set when done)."""
        ...

    def produce_version_cap(self) -> int | None:
        """The highest Produce version transactional requests may use, if capped."""
        ...

    def fatal(self, error: KafkaError) -> KafkaError:
        """End the producer with ``error``; returns the fatal error (the first one)."""
        ...

    def bump_on_abort(self) -> None:
        """A partition's sequences are lost: aborting must bump the epoch."""
        ...

    def record_failed(self, error: KafkaError) -> None:
        """The sender gave up on a record of the transaction: it cannot commit."""
        ...


class Sender:
    """Owns the produce side of the network for one producer; :meth:`run` is its task."""

    def __init__(
        self,
        cluster: Cluster,
        accumulator: Accumulator,
        config: ProducerConfig,
        idempotence: IdempotenceState | None,
        transactions: TransactionGate | None = None,
    ) -> None:
        self.cluster = cluster
        self.acc = accumulator
        self.config = config
        self.idem = idempotence
        # A transactional producer's state: its partitions are registered before their
        # first Produce (protocol v1), and its epoch changes only through the transaction
        # coordinator, never here.
        self.txn = transactions
        self.linger_s = config.linger_ms / 1000
        self.max_in_flight = config.max_in_flight_requests_per_connection
        self.request_timeout_ms = config.request_timeout_ms
        self.retry_backoff_s = cluster.config.retry_backoff_ms / 1000
        self.retry_backoff_max_s = cluster.config.retry_backoff_max_ms / 1000
        self.metadata_max_age_s = cluster.config.metadata_max_age_ms / 1000
        self.flushing = 0
        self.closing = False
        self._stopping = False
        self._in_flight: dict[int, int] = {}
        self._throttled_until: dict[int, float] = {}
        self._conns: dict[int, BrokerConnection] = {}
        # Every task the sender starts (a request, a compression job, a metadata refresh, a
        # connection attempt, InitProducerId): a crash (a bug) fails the producer
        # (on_crash) instead of leaving its batches waiting for an answer that never comes.
        self.scope = TaskScope("producer sender", on_fail=self._crashed)
        self.on_crash: Callable[[Exception], None] | None = None
        self._connecting: dict[int, asyncio.Task[None]] = {}
        self._metadata_task: asyncio.Task[None] | None = None
        self._pid_task: asyncio.Task[None] | None = None
        self._last_refresh = 0.0
        self._rotation = 0
        self._sent = False
        # KIP-526: topics not sent to for metadata_max_idle_ms are forgotten, checked this
        # often; on_topics_expired lets the producer drop its own per-topic state.
        self._prune_every_s = min(30.0, cluster.config.metadata_max_idle_ms / 4000)
        self._prune_at = time.monotonic() + self._prune_every_s
        self.on_topics_expired: Callable[[set[str]], None] | None = None
        # Batches of at least this many uncompressed bytes are compressed in a worker thread
        # before they are sent (None: never, e.g. without compression).
        self._offload_from = codecs.OFFLOAD_MIN_BYTES.get(config.compression)
        self._codec_jobs = 0
        # What the pushed client metrics report (KIP-714): per batch and per request.
        self.stats = ProducerStats()

    # -- the loop ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Produce requests sent and not yet answered, over all brokers."""
        return sum(self._in_flight.values())

    async def run(self) -> None:
        """Run until :meth:`stop`. Raises only on a bug (the producer surfaces it)."""
        wakeup = self.acc.wakeup
        while not self._stopping:
            wakeup.clear()
            self._sent = False
            delay = self._run_once(time.monotonic())
            if self._stopping:
                break
            if self._sent:
                # One round sends at most one request per broker; go round again (after
                # letting the new request tasks write) while brokers take more.
                await asyncio.sleep(0)
                continue
            if delay is None:
                await wakeup.wait()
            else:
                try:
                    async with asyncio.timeout(max(delay, _MIN_WAIT_S)):
                        await wakeup.wait()
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        """Stop the loop and every task it started (in-flight requests are cancelled; the
        producer fails their batches)."""
        self._stopping = True
        self.acc.wakeup.set()
        await self.scope.aclose()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        return self.scope.spawn(coro, name=name, crash=Crash.FAIL_OWNER)

    def _crashed(self, exc: Exception) -> None:
        if self.on_crash is not None:
            self.on_crash(exc)

    def _run_once(self, now: float) -> float | None:
        acc = self.acc
        self._expire(now)
        if now >= self._prune_at:
            self._prune(now)
        idem = self.idem
        txn = self.txn
        if txn is not None:
            if txn.fatal_error is not None:
                self.acc.fail_all(txn.fatal_error)  # the producer stops: nothing more goes
                return None
            refusal = txn.unsent_refusal()
            if refusal is not None:
                self._fail_unsent(refusal)
        elif idem is not None and (not idem.has_producer_id or idem.bump_reason is not None):
            if self.in_flight:
                return None  # woken when a request finishes
            if idem.has_producer_id and idem.producer_epoch < _MAX_EPOCH:
                # KIP-360 for an idempotent producer: the epoch is bumped by the client
                # (brokers take a higher epoch starting at sequence 0); only an exhausted
                # epoch needs a new producer id from InitProducerId.
                log.info(
                    "idempotent producer id %d: epoch %d -> %d",
                    idem.producer_id,
                    idem.producer_epoch,
                    idem.producer_epoch + 1,
                )
                idem.reset(idem.producer_id, idem.producer_epoch + 1)
                self._resequence()
            else:
                if self._pid_task is None and (idem.bump_reason is not None or acc.incomplete):
                    self._pid_task = self._spawn(self._init_producer_id(), "InitProducerId")
                return None  # woken when the id arrives
        snapshot = self.cluster.snapshot
        if now - snapshot.fetched_at > self.metadata_max_age_s:
            self._request_metadata()
        everything_ready = self.flushing > 0 or self.closing or acc.pool.queued > 0
        linger = self.linger_s
        delay: float | None = None
        ready: dict[int, list[TopicPartition]] = {}
        unknown_leader = False
        brokers = snapshot.brokers
        offload_from = self._offload_from
        compressing: list[collections.deque[ProducerBatch]] = []
        for tp, dq in acc.batches.items():
            if not dq:
                continue
            head = dq[0]
            meta = snapshot.partition(tp)
            leader = -1 if meta is None else meta.leader
            if leader < 0 or leader not in brokers:
                unknown_leader = True
                continue
            if txn is not None and txn.needs_enrolment(tp):
                continue  # woken when AddPartitionsToTxn is answered
            if head.retry_at > now:
                wait = head.retry_at - now
                delay = wait if delay is None or wait < delay else delay
                continue
            if not (everything_ready or head.closed or len(dq) > 1 or head.is_full()):
                wait = head.created + linger - now
                if wait > 0:
                    delay = wait if delay is None or wait < delay else delay
                    continue
            if (
                offload_from is not None
                and head.payload is None
                and head.size_in_bytes >= offload_from
            ):
                compressing.append(dq)
                if not self._compressed(head):
                    continue  # woken when its compression job ends
            if idem is not None and not idem.can_send(head):
                continue  # woken when the batch before it is answered
            nodes = ready.get(leader)
            if nodes is None:
                ready[leader] = [tp]
            else:
                nodes.append(tp)
        if unknown_leader:
            self._request_metadata()
        if txn is not None:
            txn.maybe_enrol(acc.wakeup)
        if compressing and offload_from is not None and self._codec_jobs < _MAX_CODEC_JOBS:
            self._compress_ahead(compressing, offload_from)
        for node, tps in ready.items():
            if self._in_flight.get(node, 0) >= self.max_in_flight:
                continue
            throttled = self._throttled_until.get(node, 0.0) - now
            if throttled > 0:
                delay = throttled if delay is None or throttled < delay else delay
                continue
            conn = self._conns.get(node)
            if conn is None or conn.closed:
                self._connect(node)
                continue
            self._send(node, conn, tps)
        return delay

    # -- compression in a worker thread -----------------------------------------------------

    def _compressed(self, batch: ProducerBatch) -> bool:
        """Whether large ``batch`` may be encoded now: its compression job ended (done,
        failed or cancelled; encoding compresses inline what the job did not). Starts the
        job if there is none yet."""
        job = batch.codec_job
        if job is None:
            if self._codec_jobs < _MAX_CODEC_JOBS and not self._stopping:
                self._start_compression(batch)
            return False
        return job.done()

    def _compress_ahead(
        self, deques: list[collections.deque[ProducerBatch]], offload_from: int
    ) -> None:
        """Start the compression of closed large batches queued behind heads that needed
        it, while jobs are free, so that a partition's next batch is ready when its head
        has gone out."""
        for dq in deques:
            for batch in itertools.islice(dq, 1, None):
                if not batch.closed:
                    break  # the open batch, last in the deque
                if (
                    batch.codec_job is None
                    and batch.payload is None
                    and batch.size_in_bytes >= offload_from
                ):
                    if self._codec_jobs >= _MAX_CODEC_JOBS:
                        return
                    self._start_compression(batch)

    def _start_compression(self, batch: ProducerBatch) -> None:
        # Closed first: no record may join a batch whose buffer a thread is reading.
        batch.closed = True
        batch.flush_pending()
        self._codec_jobs += 1
        job = batch.codec_job = self._spawn(self._compress(batch), "compress a batch")
        job.add_done_callback(self._compression_done)  # also when cancelled before it ran

    def _compression_done(self, _: asyncio.Task[None]) -> None:
        self._codec_jobs -= 1
        self.acc.wakeup.set()

    async def _compress(self, batch: ProducerBatch) -> None:
        """Compress ``batch``'s records in a worker thread and keep the result in its
        builder. Cancelled, it returns at once and the thread's result, when it comes, is
        dropped (the thread only reads the closed batch's buffer); failed, the batch is
        compressed inline when it is sent (raising there as it always has)."""
        config = self.config
        builder = batch.builder
        count = builder.record_count
        try:
            records = await run_in_worker(
                codecs.compress,
                config.compression,
                builder.records_buffer,
                level=config.compression_level,
            )
        except Exception as exc:
            log.debug("compressing %r in a worker thread failed: %r", batch, exc)
        else:
            builder.set_compressed(config.compression, config.compression_level, records, count)

    def _expire(self, now: float) -> None:
        for dq in self.acc.batches.values():
            while dq and dq[0].deadline <= now:
                batch = dq.popleft()
                batch.closed = True
                self._fail(
                    batch,
                    KafkaTimeoutError(
                        f"{len(batch.futures)} record(s) for {batch.tp.topic}-"
                        f"{batch.tp.partition} were not acknowledged within "
                        f"delivery_timeout_ms={self.config.delivery_timeout_ms} "
                        f"({batch.attempts} attempt(s))"
                    ),
                )

    # -- requests ----------------------------------------------------------------------------

    def _send(self, node: int, conn: BrokerConnection, tps: list[TopicPartition]) -> None:
        """Take one batch of each partition in ``tps`` (all led by ``node``) into one
        Produce request and launch it."""
        acc = self.acc
        idem = self.idem
        config = self.config
        if len(tps) > 1:  # rotate the start so that max_request_size starves nobody
            self._rotation = (self._rotation + 1) % len(tps)
            tps = tps[self._rotation :] + tps[: self._rotation]
        size = 0
        stats = self.stats
        taken: dict[tuple[str, int], ProducerBatch] = {}
        by_topic: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        now = time.monotonic()
        for tp in tps:
            dq = acc.batches[tp]
            head = dq[0]
            estimate = head.size_in_bytes if head.payload is None else len(head.payload)
            if taken and size + estimate > config.max_request_size:
                break
            dq.popleft()
            head.closed = True
            if idem is not None:
                payload = head.encoded(
                    idem.producer_id,
                    idem.producer_epoch,
                    idem.sequence_for(head),
                    config.compression,
                    config.compression_level,
                    self.txn is not None,
                )
                idem.sent(head)
            else:
                payload = head.encoded(
                    NO_PRODUCER_ID,
                    NO_PRODUCER_EPOCH,
                    NO_SEQUENCE,
                    config.compression,
                    config.compression_level,
                )
            size += len(payload)
            taken[tp] = head
            stats.records_sent += head.record_count
            if head.attempts == 0:
                stats.queue_time.record((now - head.created) * 1000)
            parts = by_topic.get(tp.topic)
            if parts is None:
                parts = by_topic[tp.topic] = []
                self.cluster.touch(tp.topic, now)
            parts.append(ProduceRequest.PartitionProduceData(index=tp.partition, records=payload))
        topics = self.cluster.snapshot.topics
        request = ProduceRequest(
            transactional_id=None if self.txn is None else self.txn.transactional_id,
            acks=config.required_acks,
            timeout_ms=self.request_timeout_ms,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=name,
                    topic_id=topics[name].topic_id,
                    partition_data=parts,
                )
                for name, parts in by_topic.items()
            ],
        )
        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        self._sent = True
        stats.requests += 1
        stats.bytes_sent += size
        # The task's first step runs up to the socket write without suspending (the
        # connection is open and has free slots), so requests are written in launch order.
        self._spawn(self._produce(node, conn, request, taken), f"produce to broker {node}")

    async def _produce(
        self,
        node: int,
        conn: BrokerConnection,
        request: ProduceRequest,
        batches: dict[tuple[str, int], ProducerBatch],
    ) -> None:
        try:
            if request.acks == 0:
                await conn.request(request, expect_response=False)
                for batch in batches.values():
                    self._succeed(batch, -1, -1)
                return
            version = conn.version_for(ProduceRequest)
            cap = None if self.txn is None else self.txn.produce_version_cap()
            sent_at = time.monotonic()
            # Produce v12+ in a transaction means transaction protocol v2 (KIP-890).
            response = await conn.request(
                request, version=version if cap is None else min(version, cap)
            )
            self.stats.latency(node).record((time.monotonic() - sent_at) * 1000)
        except (NetworkError, KafkaTimeoutError) as exc:
            log.info("produce request to broker %d failed (%s); retrying its batches", node, exc)
            for batch in batches.values():
                batch.maybe_written = True
                self._answered(batch, acknowledged=False)
                self._retry(batch, exc)
            self._request_metadata()
        except KafkaError as exc:
            # Undecodable response, or no common version: fail what cannot be retried.
            for batch in batches.values():
                batch.maybe_written = True
                self._answered(batch, acknowledged=False)
                if exc.retriable:
                    self._retry(batch, exc)
                else:
                    self._fail(batch, exc)
        except Exception as exc:
            # A bug (e.g. a request that does not encode): fail these records loudly rather
            # than leave their callers waiting forever.
            log.exception("produce request to broker %d failed unexpectedly", node)
            error = KafkaError(f"producing failed unexpectedly: {exc!r}")
            for batch in batches.values():
                self._answered(batch, acknowledged=False)
                self._fail(batch, error)
        else:
            assert isinstance(response, ProduceResponse)
            self._handle_response(node, response, batches)
        finally:
            self._in_flight[node] -= 1
            self.acc.wakeup.set()

    def _handle_response(
        self,
        node: int,
        response: ProduceResponse,
        batches: dict[tuple[str, int], ProducerBatch],
    ) -> None:
        self.stats.throttle_time.record(response.throttle_time_ms)
        if response.throttle_time_ms > 0:
            # KIP-219: the broker answered at once but asks us to hold back this long.
            self._throttled_until[node] = time.monotonic() + response.throttle_time_ms / 1000
        endpoints = {
            e.node_id: BrokerMetadata(e.node_id, e.host, e.port, e.rack)
            for e in response.node_endpoints
        }
        snapshot = self.cluster.snapshot
        for topic in response.responses:
            name = topic.name or snapshot.topic_name(topic.topic_id) or ""
            for part in topic.partition_responses:
                batch = batches.pop((name, part.index), None)
                if batch is None:
                    log.warning(
                        "broker %d answered for %s-%d, not in the request", node, name, part.index
                    )
                    continue
                code = part.error_code
                if code == 0 or code == _DUPLICATE_SEQUENCE:
                    self._answered(batch, acknowledged=True)
                    self._succeed(batch, part.base_offset, part.log_append_time_ms)
                else:
                    self._partition_error(batch, part, endpoints)
        for batch in batches.values():
            self._answered(batch, acknowledged=False)
            self._retry(batch, NetworkError(f"broker {node} did not answer for {batch.tp}"))

    def _partition_error(
        self,
        batch: ProducerBatch,
        part: ProduceResponse.PartitionProduceResponse,
        endpoints: dict[int, BrokerMetadata],
    ) -> None:
        tp = batch.tp
        code = part.error_code
        message = part.error_message
        if part.record_errors:
            indexes = ", ".join(
                f"#{e.batch_index}: {e.batch_index_error_message}" for e in part.record_errors
            )
            message = f"{message or ''} (records {indexes})".strip()
        error = broker_error(code, f"producing to {tp.topic}-{tp.partition}", message)
        idem = self.idem
        self._answered(batch, acknowledged=False)
        if code == _MESSAGE_TOO_LARGE and batch.record_count > 1 and not self._stopping:
            # The broker's limit (the topic's max.message.bytes) is below our batch: split
            # the batch in two and send the halves; a single record too large fails.
            parts = batch.split(self.acc.loop)
            log.info(
                "%s-%d: the broker refused a batch of %d records as too large; sending it "
                "as batches of %d and %d",
                tp.topic, tp.partition, batch.record_count,
                parts[0].record_count, parts[1].record_count,
            )  # fmt: skip
            self.acc.requeue_split(batch, parts)
            return
        txn = self.txn
        if txn is not None:
            if code in _FATAL_IN_TRANSACTION:
                # The producer was fenced (or may not use its transactional id): it stops,
                # failing every record it holds with this error.
                txn.fatal(error)
                self._fail(batch, error)
                return
            if code in (_OUT_OF_ORDER_SEQUENCE, _UNKNOWN_PRODUCER_ID, _INVALID_PRODUCER_EPOCH):
                if code == _OUT_OF_ORDER_SEQUENCE and self._earlier_pending(batch):
                    self._retry(batch, error)
                    return
                # A transactional producer cannot bump its epoch alone: the transaction
                # fails (abortable), and aborting it bumps the epoch (KIP-360; v2's EndTxn
                # always does). INVALID_PRODUCER_EPOCH from a partition leader is abortable
                # too (KIP-588): the coordinator tells at EndTxn whether we were fenced.
                txn.bump_on_abort()
                self._fail(batch, error)
                return
        if idem is not None and code in (_OUT_OF_ORDER_SEQUENCE, _UNKNOWN_PRODUCER_ID):
            # A gap while an earlier batch of the partition is still in flight or waiting
            # for its retry is that batch's doing: retry after it. A gap nothing of ours
            # can fill, or an unknown producer id, means the broker lost our state or a
            # sequenced batch was given up: bump the epoch and resend (KIP-360).
            if code == _UNKNOWN_PRODUCER_ID or not self._earlier_pending(batch):
                idem.request_bump(str(error))
            self._retry(batch, error)
            return
        if idem is not None and code in (_INVALID_PRODUCER_EPOCH, _PRODUCER_FENCED):
            idem.request_bump(str(error))
            self._retry(batch, error)
            return
        moved = False
        if code in _STALE_METADATA:
            hint = part.current_leader
            if hint.leader_id >= 0 and hint.leader_epoch >= 0:
                moved = self.cluster.apply_leader_hint(
                    tp, hint.leader_id, hint.leader_epoch, endpoints.get(hint.leader_id)
                )
            if not moved:
                self._request_metadata()
        if error.retriable:
            self._retry(batch, error, backoff=not moved)
        else:
            self._fail(batch, error)

    def _earlier_pending(self, batch: ProducerBatch) -> bool:
        """Whether a batch of the same partition with a lower sequence (same epoch) is in
        flight or queued for a retry."""
        idem = self.idem
        assert idem is not None
        state = idem.partitions.get(batch.tp)
        if state is not None and state.in_flight and state.in_flight[0] < batch.base_sequence:
            return True
        for queued in self.acc.batches.get(batch.tp, ()):
            if queued.base_sequence == NO_SEQUENCE:
                break  # never sent: so is everything behind it
            if (
                queued.producer_epoch == idem.producer_epoch
                and queued.base_sequence < batch.base_sequence
            ):
                return True
        return False

    # -- outcomes -------------------------------------------------------------------------

    def _answered(self, batch: ProducerBatch, acknowledged: bool) -> None:
        if self.idem is not None:
            self.idem.answered(batch, acknowledged)

    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        batch.complete(base_offset, log_append_time_ms)
        self.acc.finish(batch)

    def _retry(self, batch: ProducerBatch, error: KafkaError, backoff: bool = True) -> None:
        now = time.monotonic()
        if self._stopping:
            self._fail(batch, error)
            return
        if now >= batch.deadline:
            self._fail(
                batch,
                KafkaTimeoutError(
                    f"{len(batch.futures)} record(s) for {batch.tp.topic}-{batch.tp.partition} "
                    f"were not acknowledged within delivery_timeout_ms="
                    f"{self.config.delivery_timeout_ms} ({batch.attempts + 1} attempt(s)); "
                    f"last error: {type(error).__name__}: {error}"
                ),
            )
            return
        batch.attempts += 1
        self.stats.record_retries += batch.record_count
        if backoff:
            delay = min(
                self.retry_backoff_max_s, self.retry_backoff_s * 2 ** min(batch.attempts - 1, 20)
            )
            batch.retry_at = now + delay * random.uniform(0.8, 1.2)
        else:
            batch.retry_at = 0.0
        log.debug("retrying %r after %s", batch, error)
        self.acc.requeue(batch)

    def _fail(self, batch: ProducerBatch, error: KafkaError) -> None:
        idem = self.idem
        if (
            idem is not None
            and batch.base_sequence != NO_SEQUENCE
            and batch.producer_epoch == idem.producer_epoch
        ):
            # Its sequence may or may not have been used up at the broker; either way the
            # batches after it cannot follow on: restart the sequences (KIP-360). A
            # transactional producer does it when the transaction is aborted.
            if self.txn is not None:
                self.txn.bump_on_abort()
            else:
                idem.request_bump(f"a sequenced batch of {batch.tp} failed: {error}")
        self.stats.record_errors += batch.record_count
        batch.fail(error)
        self.acc.finish(batch)
        if self.txn is not None:
            self.txn.record_failed(error)

    def _fail_unsent(self, error: KafkaError) -> None:
        """Fail every queued batch never sent (the transaction is being aborted, or must
        be). Batches already sent and waiting for a retry keep going: their sequences are
        in the broker's books, and the transaction ends only once they are answered."""
        for dq in self.acc.batches.values():
            while dq and dq[-1].base_sequence == NO_SEQUENCE:
                batch = dq.pop()
                batch.closed = True
                self._fail(batch, error)

    def _prune(self, now: float) -> None:
        """Forget the state of topics not sent to for ``metadata_max_idle_ms``: their
        metadata, their empty per-partition queues, and, for topics the metadata says are
        gone, their idempotence sequences (the broker dropped its side with the log; for a
        topic that still exists the sequences must stay, or its next batch would be out of
        order)."""
        self._prune_at = now + self._prune_every_s
        snapshot = self.cluster.snapshot
        acc, idem = self.acc, self.idem
        for tp, dq in acc.batches.items():
            if dq:  # waiting batches keep their topic alive (a leader may be unknown)
                self.cluster.touch(tp.topic, now)
        expired = self.cluster.expire_idle_topics()
        if not expired:
            return
        for tp in [tp for tp, dq in acc.batches.items() if not dq and tp.topic in expired]:
            del acc.batches[tp]
            if idem is not None:
                meta = snapshot.topics.get(tp.topic)
                state = idem.partitions.get(tp)
                gone = meta is None or meta.error_code != 0
                if gone and state is not None and not state.in_flight:
                    del idem.partitions[tp]
        if self.on_topics_expired is not None:
            self.on_topics_expired(expired)

    def fail_batches(self, batches: Iterable[ProducerBatch], error: KafkaError) -> None:
        """Fail ``batches`` (queued or in flight) with ``error`` (used by close)."""
        for batch in list(batches):
            self.stats.record_errors += batch.record_count
            batch.fail(error)
            self.acc.finish(batch)

    # -- metadata, connections, producer id --------------------------------------------------

    def _request_metadata(self) -> None:
        if self._metadata_task is None and not self._stopping:
            self._metadata_task = self._spawn(self._refresh_metadata(), "metadata refresh")

    async def _refresh_metadata(self) -> None:
        try:
            wait = self._last_refresh + self.retry_backoff_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_refresh = time.monotonic()
            await self.cluster.refresh()
        except KafkaError as exc:
            log.info("metadata refresh failed: %s", exc)
        finally:
            self._metadata_task = None
            self.acc.wakeup.set()

    def _connect(self, node: int) -> None:
        if node not in self._connecting and not self._stopping:
            self._connecting[node] = self._spawn(self._open(node), f"connect to broker {node}")

    async def _open(self, node: int) -> None:
        try:
            self._conns[node] = await self.cluster.connection(node, Lane.PRODUCE)
        except KafkaError as exc:
            log.info("cannot connect to broker %d to produce: %s", node, exc)
            self._request_metadata()
        finally:
            del self._connecting[node]
            self.acc.wakeup.set()

    async def _init_producer_id(self) -> None:
        """Get a new producer id (epoch 0) and reset sequences."""
        idem = self.idem
        assert idem is not None
        # A new id: at start, or when the epoch is exhausted (brokers hand a
        # non-transactional producer a new id rather than bump the epoch of its old one).
        request = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=60_000,
            producer_id=NO_PRODUCER_ID,
            producer_epoch=NO_PRODUCER_EPOCH,
        )

        async def attempt() -> None:
            if self._stopping:
                return
            response = await self.cluster.send(None, request)
            assert isinstance(response, InitProducerIdResponse)
            if response.error_code == 0:
                old = (idem.producer_id, idem.producer_epoch)
                idem.reset(response.producer_id, response.producer_epoch)
                self._resequence()
                log.info(
                    "idempotent producer id %d epoch %d (was %d/%d)",
                    response.producer_id,
                    response.producer_epoch,
                    *old,
                )
                return
            error = broker_error(response.error_code, "InitProducerId")
            if error.retriable:
                raise error
            log.error("cannot get a producer id: %s", error)
            self.acc.fail_all(error)
            idem.bump_reason = None

        async def between(error: Exception) -> None:
            log.info("InitProducerId failed (%s); retrying", error)
            self.acc.wakeup.set()  # let the sender expire batches meanwhile

        try:
            # No deadline: the sender expires the waiting batches (delivery_timeout_ms).
            await retry_until(
                "InitProducerId",
                attempt,
                deadline=None,
                backoff=Backoff(self.retry_backoff_s, self.retry_backoff_max_s),
                between=between,
            )
        finally:
            self._pid_task = None
            self.acc.wakeup.set()

    def _resequence(self) -> None:
        """After a new epoch: batches waiting for a retry get new sequences on their next
        send, in queue order (which is sequence order); drop stale back-offs."""
        for dq in self.acc.batches.values():
            for batch in dq:
                if batch.base_sequence != NO_SEQUENCE:
                    batch.retry_at = 0.0
