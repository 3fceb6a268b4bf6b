"""``Producer``: the public producer.

``send`` and ``enqueue`` serialize the record, choose its partition, and append it to the
accumulator; one sender task (:mod:`aiostream_kafka.producer.sender`) sends ready batches.
See ``ARCHITECTURE.md`` for the design and the invariants.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Never

from aiostream_kafka import habits
from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import TopicMetadata
from aiostream_kafka.concurrency import (
    DEFAULT_CLOSE_TIMEOUT_S,
    Crash,
    TaskScope,
    shared_task,
    shielded,
)
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import (
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    reraisable,
)
from aiostream_kafka.options import check_options
from aiostream_kafka.producer.accumulator import (
    PLAIN_OVERHEAD,
    Accumulator,
    HeaderList,
    ProducerBatch,
    record_size_upper_bound,
)
from aiostream_kafka.producer.batch import BatchCompletion, BatchMetadata
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.producer.idempotence import IdempotenceState
from aiostream_kafka.producer.partitioner import StickyPartitioner, partition_for_key
from aiostream_kafka.producer.sender import Sender, broker_error
from aiostream_kafka.producer.transactions import (
    TransactionManager,
    TransactionState,
    TransactionStateError,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.records import HEADER_SIZE
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.serde import Serializer, serialize
from aiostream_kafka.structs import ConsumerGroupMetadata, RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

__all__ = ["Producer", "ProducerClosedError", "ProducerRecord", "TransactionScope"]

_BYTES = (bytes, bytearray, memoryview)
# The C future constructor: cheaper per record than loop.create_future(), a Python method.
_Future = asyncio.Future
_time_ns = time.time_ns
# Topic errors worth waiting out (the topic is being created, or its leaders elected).
_TRANSIENT_TOPIC_ERRORS = frozenset({3, 5})
_BYTES_OR_NONE = frozenset({bytes, bytearray, memoryview, type(None)})
_ONLY_BYTES = frozenset({bytes})
# A batch call yields to the event loop after this many new batches (so that the sender
# starts on them while it appends more, with a few partitions' batches per request).
_YIELD_EVERY = 4


class _TopicNotReady(Exception):
    """A topic (or partition) not (yet) in the metadata: waited for up to max_block_ms."""


class ProducerClosedError(ClientClosedError):
    """The producer is closed (or closing): it takes no more records; records it could
    not deliver before ``close(timeout)`` ran out fail with this error."""


@dataclass(slots=True)
class ProducerRecord:
    """A record to send, for :meth:`Producer.pipe` (and :meth:`Producer.send_record`)."""

    topic: str
    value: Any = None
    key: Any = None
    headers: Sequence[tuple[str, bytes | None]] | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    #: Anything the caller wants carried along (not sent).
    context: Any = field(default=None, compare=False)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_headers(headers: Any) -> HeaderList:
    try:
        items = list(headers)
    except TypeError:
        raise TypeError(
            f"headers must be a sequence of (str, bytes | None) pairs, got {type(headers).__name__}"
        ) from None
    for item in items:
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[0], str | bytes)
            or not (item[1] is None or isinstance(item[1], _BYTES))
        ):
            raise TypeError(f"a header must be a (str, bytes | None) pair, got {item!r}")
    return items


class _Run:
    """The records of one batch call bound for one partition (or, keyless, for the topic's
    sticky partitions), in the call's order: ``indexes`` are their positions in the call.
    ``pos`` is the next record to append.

    A *plain* run (``sizes`` given: bytes values, no keys, headers or timestamps, and a
    batch size where the hot path's framing bound holds) is appended as
    :meth:`Producer.enqueue`'s hot path appends one record, a batch's worth at a time:
    each record takes ``len(value) + PLAIN_OVERHEAD`` of the batch's ``room``, and the
    number that fit is guessed from the next record's size and corrected with sums of
    slices of ``sizes``. Others go through :meth:`ProducerBatch.append` one by one.
    """

    __slots__ = ("headers", "indexes", "keys", "n", "pos", "sizes", "timestamps", "values")

    def __init__(
        self,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[HeaderList | None] | None,
        timestamps: list[int] | int | None,
        indexes: Sequence[int],
        sizes: list[int] | None,
    ) -> None:
        self.values = values
        self.keys = keys
        self.headers = headers
        self.timestamps = timestamps
        self.indexes = indexes
        self.sizes = sizes
        self.n = len(values)
        self.pos = 0

    def first_size(self) -> int:
        """The size bound of the next record (what a new batch for it reserves)."""
        pos = self.pos
        return record_size_upper_bound(
            None if self.keys is None else self.keys[pos],
            self.values[pos],
            None if self.headers is None else self.headers[pos],
        )

    def wanted(self, first_size: int) -> int:
        """About the bytes the rest of the run takes, estimated from the next record's
        bound ``first_size`` (which includes a batch header): what a new batch for it
        needs to reserve at most."""
        return HEADER_SIZE + (self.n - self.pos) * (first_size - HEADER_SIZE)

    def fits(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` takes the next record (an empty batch always does)."""
        pos = self.pos
        if self.sizes is not None:
            return not batch.futures or self.sizes[pos] <= batch.room
        return batch.has_room_for(
            None if self.keys is None else self.keys[pos],
            self.values[pos],
            None if self.headers is None else self.headers[pos],
        )

    def _keys_or_nulls(self) -> list[Any]:
        """The run's keys; for a keyless run, a null key per record (made once), so that
        keyless records the plain path does not take (batches over 64 KiB, None values)
        are encoded a batch's worth per call too."""
        keys = self.keys
        if keys is None:
            keys = self.keys = [None] * self.n
        return keys

    def fill(self, batch: ProducerBatch, completion: BatchCompletion) -> None:
        """Append to ``batch`` the next records that fit (at least one: the caller checked
        :meth:`fits`) and attach them to ``completion`` as one segment."""
        pos = self.pos
        start = len(batch.futures)
        sizes = self.sizes
        if sizes is not None:
            # Records pos..end-1 fit while sum(size + PLAIN_OVERHEAD) - PLAIN_OVERHEAD
            # <= room (the last record needs only its own size within the room).
            room = batch.room
            limit = room + PLAIN_OVERHEAD
            n = self.n
            end = min(n, pos + max(1, limit // (sizes[pos] + PLAIN_OVERHEAD)))
            total = sum(sizes[pos:end]) + PLAIN_OVERHEAD * (end - pos)
            if total <= limit:
                while end < n:
                    more = total + sizes[end] + PLAIN_OVERHEAD
                    if more > limit:
                        break
                    total = more
                    end += 1
            else:
                while total > limit and end > pos + 1:
                    end -= 1
                    total -= sizes[end] + PLAIN_OVERHEAD
                # one record left that does not fit: only an empty batch takes it
            count = end - pos
            batch.pending += self.values[pos:end]
            batch.timestamps += [_time_ns() // 1_000_000] * count
            batch.futures += [None] * count
            batch.room = room - total
        elif (
            self.headers is None
            and (self.timestamps is None or type(self.timestamps) is int)
            and (
                count := batch.extend_keyed(
                    self._keys_or_nulls(),
                    self.values,
                    pos,
                    self.n,
                    _time_ns() // 1_000_000 if self.timestamps is None else self.timestamps,
                )
            )
        ):
            end = pos + count  # keyed, no headers: a batch's worth in one call
        else:
            keys, values, headers, stamps = self.keys, self.values, self.headers, self.timestamps
            now = _time_ns() // 1_000_000 if stamps is None else 0
            end, n = pos, self.n
            while end < n:
                key = None if keys is None else keys[end]
                value = values[end]
                record_headers = None if headers is None else headers[end]
                if end > pos and not batch.has_room_for(key, value, record_headers):
                    break
                if stamps is None:
                    timestamp = now
                elif type(stamps) is int:
                    timestamp = stamps
                else:
                    timestamp = stamps[end]  # type: ignore[index]
                batch.append(key, value, record_headers, timestamp, None)
                end += 1
            count = end - pos
        completion.attach(batch, start, count, self.indexes[pos:end])
        self.pos = end


class Producer:
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

    # BEGIN GENERATED __init__ (tools/gen_signatures.py; do not edit by hand)
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "aiostream-kafka",
        request_timeout_ms: int = 30_000,
        socket_connection_setup_timeout_ms: int = 10_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        metadata_max_age_ms: int = 300_000,
        metadata_max_idle_ms: int = 300_000,
        default_api_timeout_ms: int = 60_000,
        bootstrap_timeout_ms: int = 10_000,
        connections_max_idle_ms: int = 540_000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: Any = None,
        max_pipelined_requests: int = 100,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 16_384,
        buffer_memory: int = 33_554_432,
        max_block_ms: int = 60_000,
        max_request_size: int = 1_048_576,
        compression_type: str | None = None,
        compression_level: int | None = None,
        enable_idempotence: bool | None = None,
        max_in_flight_requests_per_connection: int = 5,
        delivery_timeout_ms: int = 120_000,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        **unknown: Never,
    ) -> None:
        """Create a producer; it connects in :meth:`start` (or ``async with``).

        Args:
            bootstrap_servers: Where to find the cluster: `"host:port[,host:port]"` or a list of
                `"host:port"` (IPv6 hosts in brackets: `"[::1]:9092"`). After the first metadata
                answer the client talks to the brokers the metadata names, and falls back to these
                addresses only when none of those answers. (required)
            client_id: Sent in the header of every request; brokers show it in their logs and
                request metrics and apply client quotas by it. (default `'aiostream-kafka'`)
            request_timeout_ms: How long to wait for the answer to one request. When it runs out the
                connection is closed and every request in flight on it fails with a retriable
                `NetworkError`, which the caller retries within its own deadline. A Fetch gets
                `fetch_max_wait_ms` on top, since the broker may hold it that long. The producer
                uses the same value for its Produce requests. (ms, default `30000` (30 s))
            socket_connection_setup_timeout_ms: How long opening one connection (TCP connect, and
                the TLS handshake with `SSL`) may take before it fails with `KafkaTimeoutError`.
                (ms, default `10000` (10 s))
            reconnect_backoff_ms: Wait before connecting again to an address whose last attempt
                failed; it doubles with each further failure up to `reconnect_backoff_max_ms`, with
                ±20 % jitter. (ms, default `50`)
            reconnect_backoff_max_ms: Upper bound of the reconnect back-off. Must be at least
                `reconnect_backoff_ms`. (ms, default `1000` (1 s))
            retry_backoff_ms: First wait before retrying an operation that failed with a retriable
                error (metadata refreshes, Admin calls, offset lookups, produce retries); it doubles
                with each further failure up to `retry_backoff_max_ms`. (ms, default `100`)
            retry_backoff_max_ms: Upper bound of the retry back-off. (ms, default `1000` (1 s))
            metadata_max_age_ms: Cluster metadata older than this is refreshed even when no error
                asked for it. A consumer subscribed with a `pattern` also looks for new matching
                topics this often. (ms, default `300000` (5 min))
            metadata_max_idle_ms: A topic the producer has not sent to for this long is dropped from
                its metadata requests (KIP-526), and its per-partition state with it; sending to it
                again fetches its metadata again. (ms, default `300000` (5 min))
            default_api_timeout_ms: Deadline of operations that retry as a whole: `start()` (the
                first metadata), Admin calls without their own `timeout_ms`, the consumer's offset
                lookups (`seek_to_beginning`, `seek_to_end`, `offsets_for_times`, ...), commits and
                reading committed offsets. Past it they raise `KafkaTimeoutError` with the last
                error. (ms, default `60000` (1 min))
            bootstrap_timeout_ms: How long `start()` keeps trying the bootstrap addresses (each
                failed attempt logs a warning) before it raises `BootstrapError` naming every
                address and its last error. Only the first metadata request has this short deadline;
                later refreshes use `default_api_timeout_ms`. (ms, default `10000` (10 s))
            connections_max_idle_ms: A connection with nothing in flight that has not been used for
                this long is closed (below the broker's own 10-minute limit, so that the client ends
                it cleanly); the next request opens a new one. (ms, default `540000` (9 min))
            security_protocol: `"PLAINTEXT"`, `"SSL"` (TLS), `"SASL_PLAINTEXT"` or `"SASL_SSL"`
                (SASL authentication, without or with TLS; see Security). (default `'PLAINTEXT'`)
            ssl_context: The `ssl.SSLContext` for `SSL` and `SASL_SSL` connections. Without one, a
                context is built from the system's trust store (or `ssl_cafile`, and `ssl_certfile`
                for mutual TLS); giving both a context and the files is a `ConfigError`, and so is a
                context with a protocol without TLS. (default `None`)
            ssl_cafile: PEM file of the certificate authorities to trust instead of the system's
                (Kafka's `ssl.truststore.location` with a PEM truststore). (default `None`)
            ssl_certfile: PEM file of the client certificate (chain) for mutual TLS; its key is in
                it or in `ssl_keyfile`. (default `None`)
            ssl_keyfile: PEM file of the client certificate's private key. (default `None`)
            ssl_password: Password of an encrypted `ssl_keyfile`. Never shown in a repr or a
                message. (default `None`)
            ssl_check_hostname: Check that the broker's certificate names the host connected to.
                Turning it off still verifies the certificate against the trusted authorities.
                (default `True`)
            sasl_mechanism: `"PLAIN"`, `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"` or `"OAUTHBEARER"`;
                required with `SASL_PLAINTEXT` and `SASL_SSL`. GSSAPI (Kerberos) is not supported
                yet. (default `None`)
            sasl_plain_username: User name for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API key).
                (default `None`)
            sasl_plain_password: Password for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API
                secret). Never shown in a repr, log line or error message. (default `None`)
            sasl_oauth_token_provider: For `OAUTHBEARER`: an object with `async def token(self) ->
                str`, asked for a token at every (re-)authentication;
                `aiostream_kafka.security.OAuthClientCredentialsProvider` is a ready OIDC
                client-credentials one (KIP-768). (default `None`)
            max_pipelined_requests: Requests written to one connection and not yet answered. A
                caller beyond it waits for a slot; a slot frees when the answer is read, not when a
                caller gives up. (default `100`)
            acks: How many replicas must have the records before the broker acknowledges them:
                `"all"` (or `-1`, every in-sync replica), `1` (the leader) or `0` (no answer is
                awaited; offsets come back as -1). (default `'all'`)
            linger_ms: How long a batch that is not full waits for more records before it is sent.
                `flush()`, `close()` and callers waiting for buffer memory make every batch ready at
                once. (ms, default `5`)
            batch_size: Target size of one partition's batch; a batch this full is sent without
                waiting for `linger_ms`. A single record larger than it gets a batch of its own. 0
                means one record per batch. (bytes, default `16384` (16 KiB))
            buffer_memory: All batches not yet acknowledged, together. `send` and `enqueue` wait
                (first come, first served) for memory to free up, at most `max_block_ms`. (bytes,
                default `33554432` (32 MiB))
            max_block_ms: How long `send`/`enqueue` may wait for buffer memory, or for the metadata
                of a topic not seen before, before raising (`KafkaTimeoutError`,
                `UnknownTopicOrPartitionError`). (ms, default `60000` (1 min))
            max_request_size: Largest Produce request, and so the largest record. A bigger record
                raises `RecordTooLargeError` before anything is sent. (bytes, default `1048576` (1
                MiB))
            compression_type: Batch compression: `None`, `"gzip"`, `"snappy"` (needs the `snappy`
                extra), `"lz4"` or `"zstd"`. (default `None`)
            compression_level: Codec level; `None` takes the codec's default. An int in -131072..22
                (what is meaningful depends on the codec). (default `None`)
            enable_idempotence: `None`: on unless `acks` is not `"all"` or
                `max_in_flight_requests_per_connection` is above 5 (as in the Java client since
                Kafka 3.2). `True` with such settings is a `ConfigError`; `False` turns it off. With
                idempotence, retries write no duplicates and keep each partition's order. (default
                `None`)
            max_in_flight_requests_per_connection: Produce requests sent to one broker and not yet
                answered. Idempotence allows at most 5. (default `5`)
            delivery_timeout_ms: Bound on the time from `send`/`enqueue` until the record is
                acknowledged or failed, retries included: a record still unacknowledged then fails
                with `KafkaTimeoutError`. Must be at least `linger_ms + request_timeout_ms`. (ms,
                default `120000` (2 min))
            key_serializer: Callable `(key) -> bytes | None`; without it keys must be bytes-like or
                `None` (`TypeError` otherwise). See `aiostream_kafka.serde`. (default `None`)
            value_serializer: As `key_serializer`, for values. (default `None`)
            transactional_id: Makes the producer transactional (implies idempotence; `ConfigError`
                with `enable_idempotence=False`): records are sent inside transactions
                (`producer.transaction()`), committed or aborted as a whole, and a consumer group's
                offsets can be committed with them. The id names one logical producer across
                restarts: a new instance's `init_transactions()` fences the old one and aborts its
                open transaction. See Exactly-once. (default `None`)
            transaction_timeout_ms: How long the transaction coordinator lets a transaction stay
                open before it aborts it (and bumps the producer's epoch). Must not exceed the
                broker's `transaction.max.timeout.ms` (15 min by default): `init_transactions()`
                raises `InvalidTransactionTimeoutError` then. (ms, default `60000` (1 min))
            **unknown: not an option: a name given here raises `ConfigError` saying what to write
                instead (typed `Never`, so that a type checker flags it too).

        Raises:
            ConfigError: an unknown option, an invalid value or two options that contradict each
                other, before any network I/O.
        """
        check_options("Producer", unknown)
        self.client_config = ClientConfig(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            socket_connection_setup_timeout_ms=socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=reconnect_backoff_ms,
            reconnect_backoff_max_ms=reconnect_backoff_max_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            metadata_max_idle_ms=metadata_max_idle_ms,
            default_api_timeout_ms=default_api_timeout_ms,
            bootstrap_timeout_ms=bootstrap_timeout_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            security_protocol=security_protocol,
            ssl_context=ssl_context,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_password=ssl_password,
            ssl_check_hostname=ssl_check_hostname,
            sasl_mechanism=sasl_mechanism,
            sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password,
            sasl_oauth_token_provider=sasl_oauth_token_provider,
            max_pipelined_requests=max_pipelined_requests,
        )
        self.config = ProducerConfig(
            request_timeout_ms=request_timeout_ms,
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            max_request_size=max_request_size,
            compression_type=compression_type,
            compression_level=compression_level,
            enable_idempotence=enable_idempotence,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            delivery_timeout_ms=delivery_timeout_ms,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        # END GENERATED __init__
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
        self._cluster = Cluster(self.client_config, expire_idle_topics=True)
        self._pool = BufferPool(config.buffer_memory)
        self._partitioner = StickyPartitioner()
        self._sticky: dict[str, Any] = {}  # topic -> the batch keyless records stick to
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
        self._sender.on_topics_expired = self._forget_topics
        self._sender.on_crash = self._sender_failed
        self._scope.spawn(
            self._sender.run, name="aiostream-kafka producer sender", crash=Crash.FAIL_OWNER
        )
        self._state = "running"
        self._update_open()
        if self._txn is not None:
            self._txn.acc = self._accumulator
            await self._txn.init_transactions()

    def _update_open(self) -> None:
        txn = self._txn
        self._open = self._state == "running" and (
            txn is None or txn.state is TransactionState.IN_TRANSACTION
        )

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
        """
        if self._close_task is None:
            limit = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
            self._close_task = shared_task(self._close(limit), name="closing the producer")
        await shielded(self._close_task, timeout=None, what="closing the producer")

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
        # guarantees that a record fitting in a batch fits every size limit).
        if (
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
        acc = self._accumulator
        if self._state != "running" or acc is None:
            raise self._not_running()
        if self._txn is not None:
            refusal = self._txn.send_refusal()
            if refusal is not None:
                raise refusal
        # Checks cheapest first, and a keyless record joins its topic's sticky batch
        # without looking at the metadata.
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
        if headers is not None:
            headers = _check_headers(headers)  # type: ignore[assignment]
            self._check_size(topic, key, value, headers)
        elif (value is not None and len(value) > self._size_check_from) or (
            key is not None and len(key) > self._size_check_from
        ):
            self._check_size(topic, key, value, headers)
        if key is None and partition is None:
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed and batch.has_room_for(None, value, headers):
                future = _Future(loop=acc.loop)
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
            partition = partition_for_key(key, count)
        else:
            return await self._append_keyless(acc, meta, value, headers, timestamp_ms)
        future_or_none = acc.try_append((topic, partition), key, value, headers, timestamp_ms)
        if future_or_none is None:
            future, _ = await acc.append_new(
                TopicPartition(topic, partition),
                key,
                value,
                headers,
                timestamp_ms,
                self._max_block_s,
            )
            await asyncio.sleep(0)  # a new batch: let the sender and the readers run
            return future
        return future_or_none

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
        count = len(meta.partitions)
        available = [p for p, m in meta.partitions.items() if m.leader >= 0]
        if batch is None:
            partition = self._partitioner.partition(topic, count, available)
        else:
            partition = self._partitioner.next_partition(topic, count, available)
        tp = TopicPartition(topic, partition)
        future_or_none = acc.try_append(tp, None, value, headers, timestamp_ms)
        if future_or_none is not None:
            self._sticky[topic] = acc.open_batch(tp)
            return future_or_none
        future, new_batch = await acc.append_new(
            tp, None, value, headers, timestamp_ms, self._max_block_s
        )
        self._sticky[topic] = new_batch
        await asyncio.sleep(0)  # a new batch: let the sender and the readers run
        return future

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

    # -- batch calls ---------------------------------------------------------------------------

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        partition: int | None = None,
        timestamps_ms: int | Sequence[int] | None = None,
    ) -> BatchMetadata:
        """Send many records to ``topic`` with one call and one completion for all of
        them, without a future per record; return once every record is acknowledged.

        ``values[i]`` (with ``keys[i]``, ``headers[i]``, ``timestamps_ms[i]`` when given)
        is the call's record ``i``. Serializers apply as for :meth:`send`. Partitions are
        chosen as for :meth:`send`: ``partition`` for every record when given, else
        ``murmur2(key)`` for a keyed record, else the topic's sticky partition (KIP-480:
        the call fills one partition's batch, then the next). ``timestamps_ms`` is one
        timestamp for all or one per record (default: the time of the append).

        The records are appended a batch at a time in a tight loop; a call larger than
        the free ``buffer_memory`` waits for memory batch by batch (each wait bounded by
        ``max_block_ms``) while earlier batches are sent. The records of one partition
        keep the call's order (and idempotence keeps it through retries); records of
        concurrent calls may interleave between batches.

        Returns:
            :class:`~aiostream_kafka.producer.batch.BatchMetadata`: ``record_count`` and
            one ``BatchRun(partition, offset, indexes, log_append_time_ms)`` per run of
            records acknowledged together (record ``indexes[j]`` is at ``offset + j``).

        Raises:
            TypeError: a value, key, header or timestamp of the wrong type (naming its
                index), ``values`` that is itself bytes or str, or no serializer for
                non-bytes; nothing of the call was appended.
            ValueError: ``keys``, ``headers`` or ``timestamps_ms`` not as long as
                ``values``; nothing appended.
            RecordTooLargeError: a record over ``max_request_size`` or
                ``buffer_memory`` (naming its index); nothing of the call was appended.
            UnknownTopicOrPartitionError: the topic (or ``partition``) is not in the
                metadata within ``max_block_ms``; nothing appended.
            KafkaTimeoutError: no buffer memory within ``max_block_ms`` before any record
                of the call was appended; nothing appended.
            ProducerClosedError: the producer is closed; nothing appended.
            BatchDeliveryError: some records were not acknowledged (a batch failed or
                timed out, or the call could not append the rest: memory, closing);
                ``failed_indexes``/``failed_ranges`` name exactly those records, the rest
                were acknowledged (``delivered``), so retrying only those completes the
                call. ``first_error`` is the first failure's typed error.

        Cancelled (e.g. by a timeout) while appending or waiting, the records already
        appended are still sent (they cannot be taken back out of their batches); their
        outcome is logged (INFO, or WARNING naming the failed indexes), never lost as an
        unretrieved exception. The records not yet appended are not sent.
        """
        future = await self.enqueue_batch(
            topic,
            values,
            keys,
            headers=headers,
            partition=partition,
            timestamps_ms=timestamps_ms,
        )
        if self._lingers and not future.done():
            self._expedite_when_idle()
        return await future

    async def enqueue_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        partition: int | None = None,
        timestamps_ms: int | Sequence[int] | None = None,
    ) -> asyncio.Future[BatchMetadata]:
        """:meth:`send_batch` without waiting for the acknowledgements: return once every
        record is in a batch, with one future of the call's
        :class:`~aiostream_kafka.producer.batch.BatchMetadata`.

        The call-time errors of :meth:`send_batch` (``TypeError``, ``ValueError``,
        ``RecordTooLargeError``, ``UnknownTopicOrPartitionError``, ``KafkaTimeoutError``
        for memory before the first record, ``ProducerClosedError``) are raised here, and
        then nothing of the call was appended. Once some records are appended, a failure to
        append the rest (memory, closing) is not raised here: the future fails with
        :class:`~aiostream_kafka.producer.batch.BatchDeliveryError` naming them, once the
        appended ones have an outcome.
        """
        acc = self._accumulator
        if self._state != "running" or acc is None:
            raise self._not_running()
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise TypeError(f"partition must be a non-negative int, got {partition!r}")
        values_, keys_, headers_, stamps, sizes = self._prepare_batch(
            topic, values, keys, headers, timestamps_ms
        )
        n = len(values_)
        completion = BatchCompletion(topic, n, acc.loop)
        if not n:
            completion.seal()
            return completion.future
        meta = self._cluster.snapshot.topics.get(topic)
        if (
            meta is None
            or meta.error_code
            or not meta.partitions
            or (partition is not None and partition not in meta.partitions)
        ):
            meta = await self._wait_for_topic(topic, partition)
        runs = self._plan_batch(meta, values_, keys_, headers_, stamps, sizes, partition)
        try:
            for tp, run in runs:
                if tp is None:
                    await self._append_sticky(acc, meta, run, completion)
                else:
                    await self._append_run(acc, tp, run, completion)
        except asyncio.CancelledError:
            if completion.appended:
                completion.abandon()  # its outcome is logged when known
                completion.seal()
            raise
        except Exception as exc:
            if not completion.appended:
                raise
            rest = sorted(itertools.chain.from_iterable(r.indexes[r.pos :] for _, r in runs))
            completion.seal(rest, exc)
            return completion.future
        completion.seal()
        return completion.future

    def _prepare_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        timestamps_ms: int | Sequence[int] | None,
    ) -> tuple[list[Any], list[Any] | None, list[HeaderList | None] | None, Any, list[int] | None]:
        """Serialize and check a batch call's records before any of them is appended.
        Returns values, keys (None: all keyless), headers (None: none), the timestamps
        (None, one int or a list) and, when every value is ``bytes``, their sizes."""
        if isinstance(values, str | bytes | bytearray | memoryview):
            raise TypeError(
                f"values must be a sequence of record values, got {type(values).__name__}: "
                "for one record use send()"
            )
        serializer = self._value_serializer
        if serializer is not None:
            out = []
            for i, value in enumerate(values):
                try:
                    out.append(serialize(serializer, value, "value"))
                except Exception as exc:
                    exc.add_note(f"(values[{i}] of the batch call)")
                    raise
            values_: list[Any] = out
        else:
            values_ = list(values)
        n = len(values_)
        types = set(map(type, values_))
        only_bytes = types <= _ONLY_BYTES
        if not only_bytes and not types <= _BYTES_OR_NONE:
            _check_items(values_, "value")
        keys_: list[Any] | None = None
        if keys is not None:
            if isinstance(keys, str | bytes | bytearray | memoryview):
                raise TypeError(f"keys must be a sequence of keys, got {type(keys).__name__}")
            serializer = self._key_serializer
            if serializer is not None:
                keys_ = []
                for i, key in enumerate(keys):
                    try:
                        keys_.append(serialize(serializer, key, "key"))
                    except Exception as exc:
                        exc.add_note(f"(keys[{i}] of the batch call)")
                        raise
            else:
                keys_ = list(keys)
            if len(keys_) != n:
                raise ValueError(f"{len(keys_)} keys for {n} values")
            if not set(map(type, keys_)) <= _BYTES_OR_NONE:
                _check_items(keys_, "key")
            if keys_.count(None) == n:
                keys_ = None
        headers_: list[HeaderList | None] | None = None
        if headers is not None:
            headers_ = []
            for i, record_headers in enumerate(headers):
                try:
                    headers_.append(
                        None if record_headers is None else _check_headers(record_headers)
                    )
                except TypeError as exc:
                    raise TypeError(f"headers[{i}]: {exc}") from None
            if len(headers_) != n:
                raise ValueError(f"{len(headers_)} header lists for {n} values")
            if headers_.count(None) == n:
                headers_ = None
        stamps: Any = None
        if timestamps_ms is not None:
            if type(timestamps_ms) is int:
                if timestamps_ms < 0:
                    raise TypeError(f"timestamps_ms must be >= 0, got {timestamps_ms}")
                stamps = timestamps_ms
            else:
                stamps = list(timestamps_ms)  # type: ignore[arg-type]
                if len(stamps) != n:
                    raise ValueError(f"{len(stamps)} timestamps for {n} values")
                if n and (not set(map(type, stamps)) <= {int} or min(stamps) < 0):
                    bad = next(i for i, t in enumerate(stamps) if type(t) is not int or t < 0)
                    raise TypeError(
                        f"timestamps_ms[{bad}] must be a non-negative int, got {stamps[bad]!r}"
                    )
        # Sizes: only records that may exceed a limit are measured exactly.
        limit = self._size_check_from
        sizes = list(map(len, values_)) if only_bytes else None
        if sizes is not None and keys_ is None and headers_ is None:
            suspects: Iterable[int] = range(n) if n and max(sizes) > limit else ()
        elif (
            sizes is not None
            and headers_ is None
            and max(sizes, default=0) + max(map(len, filter(None, keys_ or ())), default=0) <= limit
        ):
            suspects = ()  # no value and key together can reach the limit
        else:
            suspects = (
                i
                for i in range(n)
                if (headers_ is not None and headers_[i])
                or _length(values_[i]) + (0 if keys_ is None else _length(keys_[i])) > limit
            )
        for i in suspects:
            try:
                self._check_size(
                    topic,
                    None if keys_ is None else keys_[i],
                    values_[i],
                    None if headers_ is None else headers_[i],
                )
            except ec.RecordTooLargeError as exc:
                raise ec.RecordTooLargeError(
                    f"values[{i}] of the batch call (nothing of the call was sent): {exc}"
                ) from None
        return values_, keys_, headers_, stamps, sizes

    def _plan_batch(
        self,
        meta: TopicMetadata,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[HeaderList | None] | None,
        stamps: Any,
        sizes: list[int] | None,
        partition: int | None,
    ) -> list[tuple[TopicPartition | None, _Run]]:
        """Split a batch call into runs, one per partition (None: the sticky partitions
        of keyless records), each in the call's order."""
        topic = meta.name
        n = len(values)
        if headers is not None or stamps is not None or not self._plain_batches:
            sizes = None  # not plain: record by record
        if partition is not None:
            run = _Run(values, keys, headers, stamps, range(n), None if keys else sizes)
            return [(TopicPartition(topic, partition), run)]
        if keys is None:
            return [(None, _Run(values, None, headers, stamps, range(n), sizes))]
        count = len(meta.partitions)
        by_partition: dict[int, list[int]] = {}
        keyless: list[int] = []
        for i, key in enumerate(keys):
            if key is None:
                keyless.append(i)
                continue
            p = partition_for_key(key, count)
            indexes = by_partition.get(p)
            if indexes is None:
                by_partition[p] = [i]
            else:
                indexes.append(i)

        def run_of(indexes: list[int], keyed: bool) -> _Run:
            return _Run(
                [values[i] for i in indexes],
                [keys[i] for i in indexes] if keyed else None,
                None if headers is None else [headers[i] for i in indexes],
                [stamps[i] for i in indexes] if isinstance(stamps, list) else stamps,
                indexes,
                None if keyed or sizes is None else [sizes[i] for i in indexes],
            )

        runs: list[tuple[TopicPartition | None, _Run]] = [
            (TopicPartition(topic, p), run_of(indexes, True))
            for p, indexes in sorted(by_partition.items())
        ]
        if keyless:
            runs.append((None, run_of(keyless, False)))
        return runs

    async def _batch_for(self, acc: Accumulator, tp: TopicPartition, run: _Run) -> ProducerBatch:
        """A batch of ``tp`` that takes ``run``'s next record, new unless another caller
        opened one while this one waited for memory."""
        first = run.first_size()
        reserved = acc.reservation(first, run.wanted(first))
        if not acc.pool.try_reserve(reserved):
            acc.wakeup.set()  # waiters make every batch sendable: let the sender run
            await acc.pool.reserve(reserved, self._max_block_s)
            refusal = self._refusal()  # closed, or the transaction ended meanwhile
            if refusal is not None:
                acc.pool.release(reserved)
                raise refusal
        return acc.open_reserved(tp, reserved, run.fits)

    async def _append_run(
        self, acc: Accumulator, tp: TopicPartition, run: _Run, completion: BatchCompletion
    ) -> None:
        """Append ``run`` to partition ``tp``, a batch at a time."""
        while run.pos < run.n:
            batch = acc.open_batch(tp)
            if batch is not None and run.fits(batch):
                run.fill(batch, completion)
                continue
            if batch is not None:
                batch.closed = True  # full: the sender may take it now
                acc.wakeup.set()
            run.fill(await self._batch_for(acc, tp, run), completion)
            completion.batches += 1
            if not completion.batches % _YIELD_EVERY:
                await asyncio.sleep(0)  # new batches: let the sender and the readers run
                refusal = self._refusal()
                if refusal is not None:
                    raise refusal

    async def _append_sticky(
        self, acc: Accumulator, meta: TopicMetadata, run: _Run, completion: BatchCompletion
    ) -> None:
        """Append keyless ``run`` to the topic's sticky partition (KIP-480), moving on to
        another partition each time the sticky batch is complete, as :meth:`enqueue`."""
        topic = meta.name
        while run.pos < run.n:
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed:
                if run.fits(batch):
                    run.fill(batch, completion)
                    continue
                batch.closed = True
                acc.wakeup.set()
            current = self._cluster.snapshot.topics.get(topic)
            if current is not None and not current.error_code and current.partitions:
                meta = current
            count = len(meta.partitions)
            available = [p for p, m in meta.partitions.items() if m.leader >= 0]
            if batch is None:
                partition = self._partitioner.partition(topic, count, available)
            else:
                partition = self._partitioner.next_partition(topic, count, available)
            tp = TopicPartition(topic, partition)
            batch = acc.open_batch(tp)
            if batch is not None and run.fits(batch):
                self._sticky[topic] = batch
                run.fill(batch, completion)
                continue
            if batch is not None:
                batch.closed = True
                acc.wakeup.set()
            batch = await self._batch_for(acc, tp, run)
            self._sticky[topic] = batch
            run.fill(batch, completion)
            completion.batches += 1
            if not completion.batches % _YIELD_EVERY:
                await asyncio.sleep(0)  # new batches: let the sender and the readers run
                refusal = self._refusal()
                if refusal is not None:
                    raise refusal

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

    # -- transactions ------------------------------------------------------------------------

    def _transactions(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError(
                f"{what} needs a transactional producer: create it with transactional_id=..."
            )
        if self._state != "running" and not (
            self._state == "new" and what == "init_transactions()"
        ):
            raise self._not_running()
        return self._txn

    async def init_transactions(self) -> None:
        """Register the ``transactional_id`` with its transaction coordinator: get a
        producer id and epoch, fencing any older producer with the same id and aborting
        the transaction it left open. :meth:`start` (``async with``) already calls it;
        calling it again once it succeeded does nothing. On a producer not started yet it
        starts it.

        Returns None once the producer may begin transactions.

        Raises:
            KafkaTimeoutError: the coordinator did not answer within ``max_block_ms``
                (retriable: call it again).
            ProducerFencedError: fatal, the producer is unusable (so are
                ``TransactionalIdAuthorizationFailedError`` and
                ``InvalidTransactionTimeoutError``: ``transaction_timeout_ms`` above the
                broker's ``transaction.max.timeout.ms``).
            TransactionStateError: not a transactional producer, or a transaction is open.
            ProducerClosedError: the producer is closed.
        """
        txn = self._transactions("init_transactions()")
        if self._state == "new":
            await self.start()  # which initializes
            return
        await txn.init_transactions()

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on belong to it until
        :meth:`commit_transaction` or :meth:`abort_transaction`. Sends no request.

        Raises:
            TransactionStateError: not transactional, not initialized, or a transaction is
                already open.
            TransactionAbortableError: the last transaction failed and was not aborted.
            ProducerFencedError (or another fatal error): the producer is unusable.
            ProducerClosedError: the producer is closed.
        """
        self._transactions("begin_transaction()").begin_transaction()

    async def commit_transaction(self) -> None:
        """Commit the open transaction: send and wait for every record of it, then make
        the coordinator commit (EndTxn). Returns None once committed: consumers reading
        ``read_committed`` see its records, and the offsets it carries are the group's.

        Raises:
            TransactionAbortableError: a record of the transaction failed (its error is the
                ``__cause__``), or the coordinator refused the commit in a way that
                leaves the producer usable (the transaction timed out, an offset commit
                was refused...): call :meth:`abort_transaction`.
            KafkaTimeoutError: not done within ``max_block_ms``; the transaction stays
                ``COMMITTING``: call it again to finish.
            ProducerFencedError: fatal (so are ``InvalidProducerEpochError`` from the
                coordinator and ``TransactionalIdAuthorizationFailedError``); every record
                not yet acknowledged failed with it and the producer is unusable.
            TransactionStateError: no transaction is open.
            ProducerClosedError: the producer is closed.
        """
        await self._transactions("commit_transaction()").commit(self._flush)

    async def abort_transaction(self) -> None:
        """Abort the open (or failed) transaction: records not sent yet fail with
        :class:`~aiostream_kafka.producer.transactions.TransactionAbortedError`, those in
        flight are waited for, then the coordinator aborts (EndTxn): consumers reading
        ``read_committed`` never see its records, and its offsets are dropped. Returns
        None once the producer may begin the next transaction.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms`` (call it again).
            ProducerFencedError (or another fatal error): the producer is unusable.
            TransactionStateError: no transaction is open.
            ProducerClosedError: the producer is closed.
        """
        await self._transactions("abort_transaction()").abort()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Make ``offsets`` (of each partition, the *next* offset to consume, as
        ``Consumer.commit`` takes them) the consumer group's committed offsets if, and
        only if, the open transaction commits: consume-transform-produce exactly once.
        ``group_metadata`` is the consuming consumer's :meth:`Consumer.group_metadata`
        (a bare group id skips the KIP-447 generation check). Returns None once the group
        coordinator holds them as pending.

        Raises:
            TransactionAbortableError: the group coordinator refused them (its cause is a
                ``CommitFailedError`` when a rebalance moved the group on, so the
                partitions may belong to another member now; ``FencedInstanceIdError``,
                ``GroupAuthorizationFailedError``): abort the transaction.
            KafkaTimeoutError: not done within ``max_block_ms``.
            ProducerFencedError (or another fatal error): the producer is unusable.
            TransactionStateError: no transaction is open.
            TypeError: a negative or non-int offset.
        """
        txn = self._transactions("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        await txn.send_offsets(offsets, group_metadata)

    def transaction(self) -> TransactionScope:
        """``async with producer.transaction():`` -- begin a transaction; commit it when
        the block ends normally, abort it when the block raises, then re-raise the
        block's exception. A commit that fails with ``TransactionAbortableError`` is
        aborted and that error raised. The abort runs to its end even when the task is
        being cancelled (then the cancellation goes on). If the abort itself fails with a
        fatal error (``ProducerFencedError``: another instance took the transactional id)
        that error is raised instead, the original one as its ``__cause__``, since the
        producer is unusable; any other failure of the abort is added to the original
        error's notes.

        Raises what :meth:`begin_transaction`, :meth:`commit_transaction` and
        :meth:`abort_transaction` raise.
        """
        return TransactionScope(self)

    # -- flush and pipe ----------------------------------------------------------------------

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send every buffered record now and wait until each is acknowledged or failed
        (records appended while flushing are sent at once too, but not waited for).

        Raises:
            KafkaTimeoutError: ``timeout`` seconds passed first (nothing is failed by it).
            ProducerClosedError: the producer is closed.
        """
        if self._state != "running":
            raise self._not_running()
        try:
            async with asyncio.timeout(timeout):
                await self._flush()
        except TimeoutError:
            raise KafkaTimeoutError(f"flush did not complete within {timeout} s") from None

    async def _flush(self) -> None:
        acc, sender = self._accumulator, self._sender
        if acc is None or sender is None:
            return
        pending = [b.done for b in acc.incomplete]
        if not pending:
            return
        sender.flushing += 1
        acc.wakeup.set()
        try:
            await asyncio.wait(pending)
        finally:
            sender.flushing -= 1

    async def pipe(
        self,
        records: AsyncIterable[ProducerRecord] | Iterable[ProducerRecord],
        max_in_flight: int = 1000,
    ) -> AsyncIterator[RecordMetadata]:
        """Send every record of ``records`` and yield their metadata in the same order.

        At most ``max_in_flight`` records are buffered and not yet yielded: the source is
        read only as fast as acknowledgements come back and the consumer of this iterator
        takes them (fs2-kafka's ``pipe``). Metadata is yielded as soon as the oldest
        record is acknowledged.

        Raises the first record's delivery error, in order (records after it are still
        delivered by the producer, their results dropped), and what :meth:`send` raises.
        """
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        window: collections.deque[asyncio.Future[RecordMetadata]] = collections.deque()

        async def take() -> RecordMetadata:
            return await window.popleft()

        try:
            if isinstance(records, AsyncIterable):
                async for record in records:
                    while window and (len(window) >= max_in_flight or window[0].done()):
                        yield await take()
                    window.append(await self._enqueue_record(record))
            else:
                for record in records:
                    while window and (len(window) >= max_in_flight or window[0].done()):
                        yield await take()
                    window.append(await self._enqueue_record(record))
            while window:
                yield await take()
        finally:
            for future in window:  # abandoned: retrieve, so nothing is logged as lost
                future.add_done_callback(_retrieve)

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


def _length(data: Any) -> int:
    return 0 if data is None else len(data)


def _check_items(items: list[Any], what: str) -> None:
    """Raise the TypeError of the first item that is neither bytes-like nor None."""
    for i, item in enumerate(items):
        if item is not None and not isinstance(item, _BYTES):
            try:
                serialize(None, item, what)
            except TypeError as exc:
                raise TypeError(f"{what}s[{i}]: {exc}") from None


class TransactionScope:
    """The async context manager :meth:`Producer.transaction` returns."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    async def __aenter__(self) -> Producer:
        self._producer.begin_transaction()
        return self._producer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                await self._producer.commit_transaction()
            except ec.TransactionAbortableError as commit_error:
                await self._abort(commit_error)
                raise
            return
        await self._abort(exc)  # then ``exc`` goes on

    async def _abort(self, cause: BaseException) -> None:
        """Abort after ``cause``. A fatal error of the abort (the producer was fenced) is
        raised, ``cause`` as its ``__cause__``: it supersedes, the producer is unusable.
        Any other failure of the abort is added to ``cause``'s notes."""
        producer = self._producer
        try:
            await shielded(
                producer.abort_transaction(), timeout=None, what="aborting a transaction"
            )
        except KafkaError as exc:
            if exc is producer.transaction_error and producer.error is exc:
                raise exc from cause
            log.warning("aborting the transaction after %r failed: %r", cause, exc)
            cause.add_note(f"aborting the transaction failed too: {type(exc).__name__}: {exc}")


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


habits.install(Producer)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
