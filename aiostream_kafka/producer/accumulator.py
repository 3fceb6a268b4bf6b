"""The record accumulator: per-partition deques of batches waiting to be sent.

Callers append records to the open (last) batch of their partition's deque; a batch closes
when the next record does not fit in ``batch_size`` (Java's semantics: the first record of
a batch is always taken, whatever its size) or when the sender takes it. The sender takes
batches from the head of each deque (:mod:`aiostream_kafka.producer.sender`).

Memory: a new batch first reserves its capacity in the :class:`BufferPool`, waiting up to
``max_block_ms``; the reservation is returned when the batch completes. A caller that had
to wait for memory looks at the deque again afterwards: another caller may have opened a
batch with room meanwhile ("somebody else found us a batch", as the Java client says).

Everything here runs on the event loop thread; "concurrent" means interleaved at awaits,
so the only awaits on the append path are the buffer-pool wait and metadata waits.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.producer.batch import Segment
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.delivery import Unwatched
from aiostream_kafka.protocol.compression import CompressionType
from aiostream_kafka.protocol.records import (
    HEADER_SIZE,
    NO_SEQUENCE,
    RecordBatchBuilder,
    iter_batches,
    restamp_batch,
)
from aiostream_kafka.structs import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)

# Whether this module runs compiled (mypyc: see aiostream_kafka._native).
COMPILED: Final[bool] = not __file__.endswith(".py")
#: ``asyncio.Future`` (C's, where asyncio has it) and two of its methods as plain
#: functions: :meth:`ProducerBatch.complete` calls them per record.
_FUTURE_TYPE: Final[type] = asyncio.Future
_future_done: Final[Callable[[Any], bool]] = asyncio.Future.done
_future_set_result: Final[Callable[[Any, Any], None]] = asyncio.Future.set_result

__all__ = ["Accumulator", "ProducerBatch", "record_size_upper_bound"]

HeaderList = Sequence[tuple[str | bytes, bytes | bytearray | None]]
BytesLike = bytes | bytearray | memoryview


def record_size_upper_bound(
    key: BytesLike | None, value: BytesLike | None, headers: HeaderList | None
) -> int:
    """An upper bound of the encoded size of one record, batch header included."""
    # length 5 + attributes 1 + timestampDelta 10 + offsetDelta 5 + keyLength 5
    # + valueLength 5 + headerCount 5 = 36 bytes of worst-case framing.
    size = HEADER_SIZE + 36
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        for name, hvalue in headers:
            size += 10 + len(name) * (4 if isinstance(name, str) else 1)
            if hvalue is not None:
                size += len(hvalue)
    return size


# A bound of the framing of one keyless, headerless record with a value under 8,000 bytes
# whose offset delta and timestamp delta fit two-byte varints: length 2 + attributes 1 +
# timestamp delta 2 + offset delta 2 + key length 1 + value length 2 + header count 1.
PLAIN_OVERHEAD = 11

#: A batch call's batch reserves at least this much (or ``batch_size``, when smaller):
#: see :meth:`Accumulator.reservation`.
_SMALLEST_RESERVATION = 16_384


class ProducerBatch:
    """One record batch of one partition, with a future per record (``None`` for the
    records of batch calls, which ``groups`` resolve a segment at a time: see
    :mod:`aiostream_kafka.producer.batch`).

    Records are appended through :meth:`append`, except on the producer's hot path: a
    keyless, headerless record of bytes joins ``pending`` (with its timestamp and future)
    and takes ``len(value) + PLAIN_OVERHEAD`` bytes of ``room``; pending values are encoded
    in one pass when the batch is built or a general record follows. ``room`` is what such
    a record may still take without the batch exceeding ``batch_size`` (a timestamp more
    than 8 s after the batch's first record may cost one byte more per record).

    Producer id, epoch and base sequence are stamped when the sender first takes the batch
    (and re-stamped after an epoch bump); the encoded (and compressed) bytes are built
    once and re-stamped in place of rebuilding on retry. A large batch is compressed in a
    worker thread before it is taken (``codec_job``); :meth:`encoded` then only frames it.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "batch_size",
        "builder",
        "closed",
        "codec_job",
        "created",
        "deadline",
        "done",
        "futures",
        "groups",
        "maybe_written",
        "payload",
        "pending",
        "pending_keys",
        "producer_epoch",
        "producer_id",
        "reserved",
        "retry_at",
        "room",
        "timestamps",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        batch_size: int,
        reserved: int,
        created: float,
        deadline: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.tp = tp
        self.batch_size = batch_size
        self.builder = RecordBatchBuilder(batch_size)
        # Per record: its future, a delivery.py sink, or None (a batch call's record). Typed
        # Any: compiled, a typed element would be type-checked on every read.
        self.futures: list[Any] = []
        # The batch calls' segments in this batch (None: only single records).
        self.groups: list[Segment] | None = None
        self.timestamps: list[int] = []
        self.pending: list[bytes] = []
        # The keys of the pending records, once one of them has a key (:meth:`take`);
        # None while every pending record is keyless.
        self.pending_keys: list[bytes | None] | None = None
        self.room = batch_size - HEADER_SIZE - PLAIN_OVERHEAD
        self.reserved = reserved
        self.created = created
        self.deadline = deadline
        self.closed = False
        self.done: asyncio.Future[None] = loop.create_future()
        self.base_sequence = NO_SEQUENCE
        self.producer_id = -1
        self.producer_epoch = -1
        self.payload: bytes | None = None
        # The sender's task compressing a large batch in a worker thread (see
        # Sender._compressed); the batch is not encoded while it runs.
        self.codec_job: asyncio.Task[None] | None = None
        self.attempts = 0
        self.retry_at = 0.0
        # True once a request carrying it failed without an answer: the broker may have
        # written it, so only a retry with the same producer id, epoch and sequence is safe.
        self.maybe_written = False

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.tp.topic}-{self.tp.partition} records={len(self.futures)} "
            f"seq={self.base_sequence} attempts={self.attempts}>"
        )

    @property
    def record_count(self) -> int:
        """Records in the batch."""
        return len(self.futures)

    @property
    def size_in_bytes(self) -> int:
        """The batch's uncompressed size (exact once built, a close bound before)."""
        return self.batch_size - PLAIN_OVERHEAD - self.room

    def is_full(self) -> bool:
        """Whether the batch has reached ``batch_size``."""
        return self.room + PLAIN_OVERHEAD <= 0

    def has_room_for(
        self, key: BytesLike | None, value: BytesLike | None, headers: HeaderList | None
    ) -> bool:
        """Whether a record fits within ``batch_size`` (always true when empty)."""
        if not self.futures:
            return True
        return record_size_upper_bound(key, value, headers) - HEADER_SIZE <= (
            self.room + PLAIN_OVERHEAD
        )

    def flush_pending(self) -> None:
        """Encode the records appended on the hot path."""
        pending = self.pending
        if pending:
            builder = self.builder
            keys = self.pending_keys
            if keys is None:
                builder.extend_values(pending, self.timestamps[builder.record_count :])
            else:
                builder.extend_pairs(keys, pending, self.timestamps[builder.record_count :])
                self.pending_keys = None
            self.pending = []

    def take(self, key: bytes | None, value: bytes, timestamp_ms: int, outcome: object) -> bool:
        """The compiled per-record path (:mod:`.append`): add a record of ``bytes`` with no
        headers to ``pending`` if the batch is open and has ``room`` for it (its encoding
        deferred, as the keyless hot path's); False, nothing done, otherwise. A key of 64
        bytes or more takes one byte more of framing than ``PLAIN_OVERHEAD`` counts."""
        if self.closed:
            return False
        size = len(value)
        if key is not None:
            size += len(key) if len(key) < 64 else len(key) + 1
        if size > self.room:
            return False
        self.room -= size + PLAIN_OVERHEAD
        pending = self.pending
        pending.append(value)
        keys = self.pending_keys
        if keys is not None:
            keys.append(key)
        elif key is not None:
            keys = [None] * (len(pending) - 1)
            keys.append(key)
            self.pending_keys = keys
        self.timestamps.append(timestamp_ms)
        self.futures.append(outcome)
        return True

    def extend_plain(self, values: list[bytes], timestamp_ms: int, total: int) -> None:
        """Add keyless, headerless records of a batch call that take ``total`` bytes of
        ``room`` (the caller checked they fit) to ``pending``; their futures are None."""
        if self.pending_keys is not None:
            self.flush_pending()
        count = len(values)
        self.pending += values
        self.timestamps += [timestamp_ms] * count
        self.futures += [None] * count
        self.room -= total

    def append(
        self,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: HeaderList | None,
        timestamp_ms: int,
        future: Any,
    ) -> None:
        """Add one record (the caller checked :meth:`has_room_for`); ``future`` (its
        outcome: a future or a :mod:`.delivery` sink) is None for a record of a batch call
        (its segment is attached by the caller)."""
        if self.pending:
            self.flush_pending()
        builder = self.builder
        builder.append(key, value, headers, timestamp_ms)
        self.futures.append(future)
        self.timestamps.append(timestamp_ms)
        self.room = self.batch_size - PLAIN_OVERHEAD - builder.size_in_bytes

    def extend_keyed(
        self,
        keys: list[BytesLike | None],
        values: list[BytesLike | None],
        start: int,
        end: int,
        timestamp_ms: int,
    ) -> int:
        """Add records ``start .. end - 1`` of a batch call (no headers, one timestamp)
        while they fit within ``batch_size``; return how many (at least one when the caller
        checked :meth:`has_room_for` for the first). Their futures are None: the caller
        attaches their segment."""
        if self.pending:
            self.flush_pending()
        builder = self.builder
        count = builder.extend_keyed(keys, values, start, end, timestamp_ms)
        if count:
            self.futures += [None] * count
            self.timestamps += [timestamp_ms] * count
            self.room = self.batch_size - PLAIN_OVERHEAD - builder.size_in_bytes
        return count

    def split(self, loop: asyncio.AbstractEventLoop) -> list[ProducerBatch]:
        """Two batches holding this batch's records (first half, second half) with their
        futures, timestamps and share of the memory reservation, for a broker that refused
        the batch as too large. Sequenced parts keep this batch's producer id and epoch and
        number their records where this batch did, so the batches behind them keep their
        sequences. This batch's ``done`` resolves once both parts are done."""
        self.flush_pending()
        (whole,) = iter_batches(self.builder.build())
        records = whole.records(self.tp.topic, self.tp.partition)
        half = len(records) // 2
        groups: list[tuple[Segment | None, Segment | None]] = [
            segment.split(half) for segment in self.groups or ()
        ]
        self.groups = None  # the parts resolve them now
        parts: list[ProducerBatch] = []
        for first, last, reserved in (
            (0, half, self.reserved // 2),
            (half, len(records), self.reserved - self.reserved // 2),
        ):
            part = ProducerBatch(
                self.tp, self.batch_size, reserved, self.created, self.deadline, loop
            )
            for record, future in zip(records[first:last], self.futures[first:last], strict=True):
                part.append(record.key, record.value, record.headers, record.timestamp_ms, future)
            part.closed = True
            side = 0 if first == 0 else 1
            segments = [segment for pair in groups if (segment := pair[side]) is not None]
            if segments:
                part.groups = segments
            part.attempts = self.attempts
            if self.base_sequence != NO_SEQUENCE:
                part.base_sequence = (self.base_sequence + first) & 0x7FFFFFFF
                part.producer_id = self.producer_id
                part.producer_epoch = self.producer_epoch
            parts.append(part)
        remaining = len(parts)

        def part_done(_: asyncio.Future[None]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0 and not self.done.done():
                self.done.set_result(None)

        for part in parts:
            part.done.add_done_callback(part_done)
        return parts

    def encoded(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        compression: CompressionType,
        compression_level: int | None,
        is_transactional: bool = False,
    ) -> bytes:
        """The batch's bytes stamped with ``producer_id``/``producer_epoch``/``base_sequence``
        (compressed once; later calls only re-stamp the header and CRC). A transactional
        producer's batches carry the transactional attribute: consumers reading
        ``read_committed`` hold them back until the transaction's marker."""
        payload = self.payload
        if payload is None:
            self.flush_pending()
            payload = self.builder.build(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                compression=compression,
                compression_level=compression_level,
                is_transactional=is_transactional,
            )
        elif (producer_id, producer_epoch, base_sequence) != (
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
        ):
            payload = restamp_batch(
                payload,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
            )
        self.payload = payload
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        return payload

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        """Resolve every record future with its metadata, and every batch call's segment."""
        if self.groups is not None:
            self._complete_groups(base_offset, log_append_time_ms)
            return
        topic, partition = self.tp
        # No batch call's records here: every record has a future or a delivery.py sink
        # (the shared Unwatched sink says it is done: a success builds nothing for it).
        futures = self.futures
        timestamps = self.timestamps
        new = tuple.__new__  # RecordMetadata is a named tuple: skip its __new__ wrapper
        meta = RecordMetadata
        if base_offset < 0:  # acks=0: no offsets
            for i, future in enumerate(futures):
                if not future.done():
                    ts = timestamps[i] if log_append_time_ms < 0 else log_append_time_ms
                    future.set_result(new(meta, (topic, partition, -1, ts)))
        elif log_append_time_ms < 0:  # CreateTime: each record's own timestamp
            offset = base_offset
            if COMPILED:
                # Unwatched skipped by its type: a compare, where done() is a method call
                # (interpreted, type() would cost as much as the call, so not there); an
                # asyncio future's methods called through its type, not looked up on it
                unwatched = Unwatched
                future_type = _FUTURE_TYPE
                done = _future_done
                set_result = _future_set_result
                for future, ts in zip(futures, timestamps, strict=True):
                    if type(future) is future_type:
                        if not done(future):
                            set_result(future, new(meta, (topic, partition, offset, ts)))
                    elif type(future) is not unwatched and not future.done():
                        future.set_result(new(meta, (topic, partition, offset, ts)))
                    offset += 1
            else:
                for future, ts in zip(futures, timestamps, strict=True):
                    if not future.done():
                        future.set_result(new(meta, (topic, partition, offset, ts)))
                    offset += 1
        else:
            for i, future in enumerate(futures):
                if not future.done():
                    future.set_result(
                        new(meta, (topic, partition, base_offset + i, log_append_time_ms))
                    )
        if not self.done.done():
            self.done.set_result(None)

    def _complete_groups(self, base_offset: int, log_append_time_ms: int) -> None:
        """:meth:`complete` for a batch holding batch calls' records (and maybe single
        records too)."""
        topic, partition = self.tp
        futures = self.futures
        if futures.count(None) != len(futures):
            new = tuple.__new__
            meta = RecordMetadata
            for i, future in enumerate(futures):
                if future is not None and not future.done():
                    if log_append_time_ms >= 0:
                        ts = log_append_time_ms
                    else:
                        ts = self.timestamps[i]
                    offset = base_offset + i if base_offset >= 0 else -1
                    future.set_result(new(meta, (topic, partition, offset, ts)))
        for segment in self.groups or ():
            segment.completion.delivered(segment, partition, base_offset, log_append_time_ms)
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, error: KafkaError) -> None:
        """Fail every record future, and every batch call's segment, with ``error``."""
        for future in self.futures:
            if future is not None and (not future.done() or isinstance(future, Unwatched)):
                future.set_exception(error)
        if self.groups is not None:
            partition = self.tp.partition
            for segment in self.groups:
                segment.completion.failed(segment, partition, error)
        if not self.done.done():
            self.done.set_result(None)


class Accumulator:
    """Per-partition deques of batches, and the batches not yet completed.

    ``wakeup`` is set whenever the sender may have something new to do (a new batch, a
    full batch); the sender clears it.
    """

    def __init__(
        self,
        batch_size: int,
        delivery_timeout_ms: int,
        pool: BufferPool,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.batch_size = batch_size
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.pool = pool
        self.loop = loop
        self.batches: dict[TopicPartition, collections.deque[ProducerBatch]] = {}
        # Every batch created and not yet completed, queued or in flight (for flush/close).
        self.incomplete: set[ProducerBatch] = set()
        self.wakeup = asyncio.Event()

    def try_append(
        self,
        tp: tuple[str, int],
        key: BytesLike | None,
        value: BytesLike | None,
        headers: HeaderList | None,
        timestamp_ms: int,
        sink: Any = None,
    ) -> Any:
        """Append to the open batch of ``tp`` if it has room; None when a new batch is
        needed. Never waits. The record's outcome goes to a new future, returned, or to
        ``sink`` (a :mod:`.delivery` object: ``enqueue_nowait``), also returned."""
        dq = self.batches.get(tp)  # type: ignore[call-overload]
        if dq:
            last = dq[-1]
            if not last.closed:
                if last.has_room_for(key, value, headers):
                    future: Any = asyncio.Future(loop=self.loop) if sink is None else sink
                    last.append(key, value, headers, timestamp_ms, future)
                    return future
                last.closed = True  # full: the sender may take it now
                self.wakeup.set()
        return None

    def open_batch(self, tp: TopicPartition) -> ProducerBatch | None:
        """The open batch of ``tp``, if any."""
        dq = self.batches.get(tp)
        if dq:
            last = dq[-1]
            if not last.closed:
                return last
        return None

    async def append_new(
        self,
        tp: TopicPartition,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: HeaderList | None,
        timestamp_ms: int,
        timeout_s: float,
    ) -> tuple[asyncio.Future[RecordMetadata], ProducerBatch]:
        """Open a new batch for the record (reserving memory, waiting up to ``timeout_s``)
        unless another caller opened one with room meanwhile. Returns the record's future
        and the batch it went to.

        Raises:
            KafkaTimeoutError: no memory became free within ``timeout_s``.
        """
        # A batch reserves its capacity; never more than the whole budget (the producer
        # refused records larger than that already).
        size = max(self.batch_size, record_size_upper_bound(key, value, headers))
        size = min(size, self.pool.total)
        if not self.pool.try_reserve(size):
            self.wakeup.set()  # waiters make every batch sendable: let the sender run
            await self.pool.reserve(size, timeout_s)
            joined = self.try_append(tp, key, value, headers, timestamp_ms)
            if joined is not None:
                self.pool.release(size)
                return joined, self.batches[tp][-1]
        future: asyncio.Future[RecordMetadata] = asyncio.Future(loop=self.loop)
        return future, self._open_with(tp, size, key, value, headers, timestamp_ms, future)

    def _open_with(
        self,
        tp: TopicPartition,
        reserved: int,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: HeaderList | None,
        timestamp_ms: int,
        outcome: Any,
    ) -> ProducerBatch:
        """A new batch of ``tp`` holding ``reserved`` bytes, with this first record (its
        outcome to ``outcome``), queued behind the partition's others (closing the open
        one)."""
        now = time.monotonic()
        batch = ProducerBatch(
            tp, self.batch_size, reserved, now, now + self.delivery_timeout_s, self.loop
        )
        batch.append(key, value, headers, timestamp_ms, outcome)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        elif dq and not dq[-1].closed:
            dq[-1].closed = True
        dq.append(batch)
        self.incomplete.add(batch)
        self.wakeup.set()
        return batch

    def append_new_nowait(
        self,
        tp: TopicPartition,
        key: BytesLike | None,
        value: BytesLike | None,
        headers: HeaderList | None,
        timestamp_ms: int,
        sink: Any,
    ) -> ProducerBatch | None:
        """:meth:`append_new` without waiting (``enqueue_nowait``): the new batch the
        record went to, or None when ``buffer_memory`` has no room for one (nothing was
        appended)."""
        size = max(self.batch_size, record_size_upper_bound(key, value, headers))
        size = min(size, self.pool.total)
        if not self.pool.try_reserve(size):
            self.wakeup.set()  # let the sender free memory
            return None
        return self._open_with(tp, size, key, value, headers, timestamp_ms, sink)

    def reservation(self, first_record_size: int, wanted: int | None = None) -> int:
        """The memory a new batch reserves when its first record has this size bound:
        ``batch_size``; or, once half of ``buffer_memory`` is reserved, for a batch call
        that expects to put only about ``wanted`` bytes in it, that much (not below 16
        KiB, the default ``batch_size``). The batch then holds at most what it reserved
        (:meth:`open_reserved`), so a large ``batch_size`` does not make a call writing a
        few records to each of many partitions wait for memory that its batches hold
        but never fill (while memory is plentiful, a batch keeps room for the next
        call's records)."""
        size = self.batch_size
        pool = self.pool
        if wanted is not None and wanted < size and pool.available * 2 < pool.total:
            size = max(wanted, min(size, _SMALLEST_RESERVATION))
        return min(max(size, first_record_size), pool.total)

    def open_reserved(
        self, tp: TopicPartition, reserved: int, fits: Callable[[ProducerBatch], bool]
    ) -> ProducerBatch:
        """For a batch call that reserved ``reserved`` bytes (:meth:`reservation`): a new,
        empty batch of ``tp`` holding the reservation, or, when another caller opened a
        batch while this one waited for memory and ``fits`` says it takes the next record,
        that batch (the reservation is returned). The caller appends at least one record
        before it awaits anything (an empty batch is never sent); the first record of an
        empty batch is always taken. Never waits."""
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = collections.deque()
        elif dq and not dq[-1].closed:
            if fits(dq[-1]):
                self.pool.release(reserved)
                return dq[-1]
            dq[-1].closed = True
        now = time.monotonic()
        batch = ProducerBatch(
            tp,
            min(self.batch_size, reserved),
            reserved,
            now,
            now + self.delivery_timeout_s,
            self.loop,
        )
        dq.append(batch)
        self.incomplete.add(batch)
        self.wakeup.set()
        return batch

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch back for a retry, ahead of every batch never sent and in sequence
        order among those already sequenced, so that a partition's batches go out again in
        the order the broker expects them (KIP-98)."""
        dq = self.batches.get(batch.tp)
        if dq is None:
            dq = self.batches[batch.tp] = collections.deque()
        batch.closed = True
        index = 0
        if batch.base_sequence >= 0:
            for queued in dq:
                if queued.base_sequence < 0 or queued.base_sequence > batch.base_sequence:
                    break
                index += 1
        dq.insert(index, batch)
        self.wakeup.set()

    def requeue_split(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """Put the parts of a split batch back in its place, in record order; they take
        over its memory reservation."""
        self.incomplete.discard(batch)
        self.incomplete.update(parts)
        # requeue() puts an unsequenced batch at the head and a sequenced one after those
        # with a sequence not above its own: either way the first part must end up first.
        for part in parts if batch.base_sequence != NO_SEQUENCE else reversed(parts):
            self.requeue(part)

    def finish(self, batch: ProducerBatch) -> None:
        """Forget a completed batch and return its memory."""
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.pool.release(batch.reserved)

    def fail_all(self, error: KafkaError) -> int:
        """Fail every batch still queued (not those in flight); return how many records."""
        failed = 0
        for dq in self.batches.values():
            while dq:
                batch = dq.popleft()
                failed += batch.record_count
                batch.fail(error)
                self.finish(batch)
        return failed
