"""Partition logs of the fake broker: record batches kept as the bytes a producer sent.

A batch is validated once, when it is appended (its CRC, its record count, its magic),
and then stored as bytes with only the two fields outside the CRC rewritten: the base
offset (the log's next offset) and the partition leader epoch. The records are never
decompressed to be stored, so every codec a client can write is accepted and served
back byte for byte; decompression happens only where a question needs the records
(a timestamp look-up, :meth:`PartitionLog.records` for a test).

Idempotence (KIP-98) is kept here too, per producer id: the epoch and the last five
batches' sequence ranges with their offsets, so that a resent batch is answered with
the offset it got the first time and a gap is refused.

Transactions (KIP-98) are kept per producer id too: the first offset of each open
transaction (the last stable offset is the smallest of them, else the high watermark),
and the aborted transactions' offset ranges that read_committed fetches are told of.
The coordinator ends a transaction with :meth:`PartitionLog.write_marker`, a control
batch as Kafka writes it.

The high watermark is the log end offset (one copy of every partition: acks=all and
acks=1 mean the same here). Sans-IO: no asyncio here; whoever waits for an append
registers a listener.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.protocol.records import MAGIC, RecordBatch, iter_batches
from aiostream_kafka.protocol.records.record_batch import ControlRecordType, build_control_batch
from aiostream_kafka.structs import Record
from aiostream_kafka.testing.fake import errors

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "AbortedTxn",
    "AppendResult",
    "PartitionLog",
    "ProducerEntry",
    "StoredBatch",
]

_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_AT = 12
_INT32_MAX = 2**31 - 1
#: Batches of one producer remembered per partition (Kafka's
#: ``max.in.flight.requests.per.connection`` bound for idempotence).
PRODUCER_BATCHES_KEPT = 5
#: Kafka's default ``max.message.bytes`` of a topic (the largest batch it accepts).
DEFAULT_MAX_BATCH_BYTES = 1_048_588


@dataclass(slots=True)
class StoredBatch:
    """One batch of the log: its offsets, its max timestamp and its bytes."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    data: bytes
    producer_id: int
    is_transactional: bool
    is_control: bool


@dataclass(slots=True)
class ProducerEntry:
    """What the log remembers of one idempotent producer: its epoch and its last batches
    as ``(first sequence, last sequence, base offset)``."""

    epoch: int
    batches: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    """An aborted transaction of one producer in a partition: its first offset and the
    offset of its ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class AppendResult:
    """The outcome of :meth:`PartitionLog.append`: an error code (0: written), the base
    offset of the first batch and the log start offset after the append."""

    error_code: int
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None


def _next_sequence(sequence: int, count: int) -> int:
    # Sequences wrap from int32 max to 0 (Kafka's DefaultRecordBatch.incrementSequence).
    total = sequence + count
    return total - _INT32_MAX - 1 if total > _INT32_MAX else total


class PartitionLog:
    """The records of one partition, in batches, with its offsets and producer state."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: list[StoredBatch] = []
        # last_offset of each batch, for bisect (kept in step with self.batches)
        self._last_offsets: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.producers: dict[int, ProducerEntry] = {}
        #: producer id -> first offset of its open transaction here
        self.open_transactions: dict[int, int] = {}
        #: aborted transactions, in the order of their markers
        self.aborted: list[AbortedTxn] = []
        self._listeners: set[Callable[[], None]] = set()

    # -- offsets ---------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The offset after the last record (every record is replicated at once)."""
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The offset below which no transaction is open: the first offset of the oldest
        open transaction, else the high watermark."""
        if self.open_transactions:
            return min(self.open_transactions.values())
        return self.log_end_offset

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in ``[start, end)`` (what a
        read_committed Fetch from ``start`` that returns data up to ``end`` is told)."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    @property
    def size_in_bytes(self) -> int:
        """Bytes of the batches kept."""
        return sum(len(b.data) for b in self.batches)

    # -- listeners (long polls) ------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` once at the next append (or truncation)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        """Forget a listener that was not called."""
        self._listeners.discard(listener)

    def _notify(self) -> None:
        listeners, self._listeners = self._listeners, set()
        for listener in listeners:
            listener()

    # -- writing -----------------------------------------------------------------------

    def append(
        self, records: bytes, *, leader_epoch: int, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    ) -> AppendResult:
        """Validate the batches of a Produce partition and append them.

        Returns an :class:`AppendResult`: ``CORRUPT_MESSAGE`` for a bad CRC or a buffer
        that is not whole batches, ``INVALID_RECORD`` for a batch that is not magic 2 or
        whose record count disagrees with its offsets, ``MESSAGE_TOO_LARGE`` for a batch
        over ``max_batch_bytes`` (the topic's ``max.message.bytes``),
        ``OUT_OF_ORDER_SEQUENCE_NUMBER`` and ``INVALID_PRODUCER_EPOCH`` for idempotent
        producers out of step. A duplicate of one of a producer's last five batches is not
        written again: its first offset is returned with no error, as Kafka does.
        """
        try:
            parsed = self._parse(records, max_batch_bytes)
        except CorruptRecordError as exc:
            return AppendResult(errors.CORRUPT_MESSAGE, message=str(exc))
        if isinstance(parsed, AppendResult):
            return parsed
        # Idempotence is checked batch by batch before anything is written: a request's
        # partition is all or nothing.
        first_offset = -1
        staged: list[tuple[RecordBatch, int]] = []  # (batch, producer id or -1)
        duplicate_offset: int | None = None
        for batch in parsed:
            outcome = self._check_sequence(batch)
            if isinstance(outcome, AppendResult):
                return outcome
            if outcome is not None:
                duplicate_offset = outcome
                continue
            staged.append((batch, batch.producer_id))
        if not staged and duplicate_offset is not None:
            return AppendResult(0, duplicate_offset, self.log_start_offset)
        for batch, producer_id in staged:
            base = self._write(batch, leader_epoch)
            if first_offset < 0:
                first_offset = base
            if batch.is_transactional and producer_id >= 0:
                self.open_transactions.setdefault(producer_id, base)
            if producer_id >= 0 and batch.base_sequence >= 0:
                entry = self.producers.get(producer_id)
                if entry is None or entry.epoch != batch.producer_epoch:
                    entry = ProducerEntry(batch.producer_epoch)
                    self.producers[producer_id] = entry
                last_seq = _next_sequence(batch.base_sequence, batch.record_count - 1)
                entry.batches.append((batch.base_sequence, last_seq, base))
                del entry.batches[:-PRODUCER_BATCHES_KEPT]
        self._notify()
        return AppendResult(0, first_offset, self.log_start_offset)

    def append_control(self, data: bytes, *, leader_epoch: int) -> int:
        """Append a batch the broker itself made (a transaction marker); return its offset."""
        (batch,) = list(iter_batches(data))
        base = self._write(batch, leader_epoch)
        self._notify()
        return base

    def write_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        leader_epoch: int,
        coordinator_epoch: int = 0,
        timestamp_ms: int,
    ) -> int:
        """End ``producer_id``'s transaction here: append a COMMIT or ABORT control batch
        (as the coordinator has the leader write it), close the open transaction (an
        abort is remembered for read_committed fetches) and take the marker's epoch as the
        producer's (a bumped epoch restarts its sequences). Return the marker's offset."""
        data = build_control_batch(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            base_offset=0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=timestamp_ms,
        )
        offset = self.append_control(data, leader_epoch=leader_epoch)
        first = self.open_transactions.pop(producer_id, None)
        if not commit and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, offset))
        entry = self.producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            self.producers[producer_id] = ProducerEntry(producer_epoch)
        return offset

    def _parse(self, records: bytes, max_batch_bytes: int) -> list[RecordBatch] | AppendResult:
        batches: list[RecordBatch] = []
        consumed = 0
        for batch in iter_batches(records, verify_crc=True):
            if batch.size_in_bytes > max_batch_bytes:
                return AppendResult(
                    errors.MESSAGE_TOO_LARGE,
                    message=f"batch of {batch.size_in_bytes} bytes is over {max_batch_bytes}",
                )
            if batch.magic != MAGIC:
                return AppendResult(
                    errors.INVALID_RECORD, message=f"magic {batch.magic} is not accepted"
                )
            if batch.record_count < 1 or batch.last_offset_delta != batch.record_count - 1:
                return AppendResult(
                    errors.INVALID_RECORD,
                    message=(
                        f"batch of {batch.record_count} records has last offset delta "
                        f"{batch.last_offset_delta}"
                    ),
                )
            if batch.is_control:
                return AppendResult(
                    errors.INVALID_RECORD, message="clients may not write control batches"
                )
            batches.append(batch)
            consumed += batch.size_in_bytes
        if not batches or consumed != len(records):
            return AppendResult(
                errors.CORRUPT_MESSAGE,
                message=f"{len(records) - consumed} bytes are not a whole record batch",
            )
        return batches

    def _check_sequence(self, batch: RecordBatch) -> AppendResult | int | None:
        """None: write it; an int: a duplicate, answered with that offset; else an error."""
        producer_id = batch.producer_id
        if producer_id < 0 or batch.base_sequence < 0:
            return None
        entry = self.producers.get(producer_id)
        epoch = batch.producer_epoch
        if entry is not None and epoch < entry.epoch:
            return AppendResult(
                errors.INVALID_PRODUCER_EPOCH,
                message=f"epoch {epoch} is older than {entry.epoch}",
            )
        if entry is None or epoch > entry.epoch:
            if batch.base_sequence != 0:
                return AppendResult(
                    errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=(
                        f"producer {producer_id} epoch {epoch}: first sequence "
                        f"{batch.base_sequence}, expected 0"
                    ),
                )
            return None
        last_seq = _next_sequence(batch.base_sequence, batch.record_count - 1)
        for first, last, offset in entry.batches:
            if first == batch.base_sequence and last == last_seq:
                return offset
        expected = _next_sequence(entry.last_sequence, 1)
        if batch.base_sequence != expected:
            return AppendResult(
                errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                message=(
                    f"producer {producer_id}: sequence {batch.base_sequence}, expected {expected}"
                ),
            )
        return None

    def _write(self, batch: RecordBatch, leader_epoch: int) -> int:
        base = self.log_end_offset
        # Base offset and leader epoch lie before the CRC's span: rewritten, CRC intact.
        data = bytearray(batch._buf[batch._start : batch._start + batch.size_in_bytes])
        _BASE_OFFSET.pack_into(data, 0, base)
        _LEADER_EPOCH.pack_into(data, _LEADER_EPOCH_AT, leader_epoch)
        stored = StoredBatch(
            base_offset=base,
            last_offset=base + batch.last_offset_delta,
            max_timestamp=batch.max_timestamp,
            record_count=batch.record_count,
            data=bytes(data),
            producer_id=batch.producer_id,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
        )
        self.batches.append(stored)
        self._last_offsets.append(stored.last_offset)
        self.log_end_offset = stored.last_offset + 1
        return base

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (-1: the high watermark) and drop the
        batches wholly below it; return the new log start offset.

        Raises ``ValueError`` for an offset above the high watermark.
        """
        if offset < 0:
            offset = self.high_watermark
        if offset > self.high_watermark:
            raise ValueError(f"offset {offset} is above the high watermark {self.high_watermark}")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            keep = bisect.bisect_left(self._last_offsets, offset)
            del self.batches[:keep]
            del self._last_offsets[:keep]
            self.aborted = [a for a in self.aborted if a.last_offset >= offset]
            self._notify()
        return self.log_start_offset

    # -- reading ---------------------------------------------------------------------

    def batch_index(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first after it)."""
        return bisect.bisect_left(self._last_offsets, offset)

    def read(self, offset: int, max_bytes: int, *, min_one: bool, upto: int | None = None) -> bytes:
        """The batches from the one holding ``offset``, at most ``max_bytes`` of them, and
        the first one whole even if larger when ``min_one`` (KIP-74). ``upto`` (an offset)
        stops before batches starting at or past it (the last stable offset)."""
        end = self.log_end_offset if upto is None else upto
        parts: list[bytes] = []
        size = 0
        for i in range(self.batch_index(offset), len(self.batches)):
            stored = self.batches[i]
            if stored.base_offset >= end:
                break
            n = len(stored.data)
            if size + n > max_bytes and not (min_one and not parts):
                break
            parts.append(stored.data)
            size += n
        return b"".join(parts)

    def iter_records(self) -> Iterator[Record]:
        """Every record of the log's data batches from the log start offset, in offset
        order (decompressed)."""
        start = self.log_start_offset
        for stored in self.batches:
            if stored.is_control:
                continue
            for batch in iter_batches(stored.data):
                for record in batch.records(self.topic, self.partition):
                    if record.offset >= start:
                        yield record

    def records(self) -> list[Record]:
        """Every record of the log's data batches (for tests)."""
        return list(self.iter_records())

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record whose timestamp is at least
        ``timestamp_ms``, or None. Batches are skipped by their max timestamp; only the
        batch that may hold the answer is decoded."""
        for stored in self.batches:
            if stored.is_control or stored.max_timestamp < timestamp_ms:
                continue
            for batch in iter_batches(stored.data):
                for record in batch.records(self.topic, self.partition):
                    if (
                        record.offset >= self.log_start_offset
                        and record.timestamp_ms >= timestamp_ms
                    ):
                        return record.offset, record.timestamp_ms
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the record with the largest timestamp (the first of
        equals), or None for an empty log (ListOffsets ``MAX_TIMESTAMP``, KIP-734)."""
        best: StoredBatch | None = None
        for stored in self.batches:
            if not stored.is_control and (
                best is None or stored.max_timestamp > best.max_timestamp
            ):
                best = stored
        if best is None:
            return None
        for batch in iter_batches(best.data):
            for record in batch.records(self.topic, self.partition):
                if record.timestamp_ms == best.max_timestamp:
                    return record.offset, record.timestamp_ms
        return best.last_offset, best.max_timestamp
