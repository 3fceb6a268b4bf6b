"""Kafka record batches, message format v2 ("magic 2"): writing and reading, sans-IO.

Layout of a batch (all integers big-endian; see Kafka's "Message Format" documentation)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 = 2
    crc uint32  -- CRC-32C of everything from attributes to the end of the batch
    attributes int16  -- bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control,
                         6 hasDeleteHorizonMs (KIP-534)
    lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordsCount int32
    records  -- compressed as one stream when the codec is not NONE

and of a record (zig-zag varints)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value
    headerCount varint | headers: keyLength varint, key (UTF-8), valueLength varint, value

Writing: :class:`RecordBatchBuilder` encodes each record as it is appended (the producer's
hot path) and frames, compresses and checksums them in :meth:`RecordBatchBuilder.build`.
Producer id, epoch and sequence are known only when the sender drains the batch, and may
change on retry after an epoch bump, so :meth:`~RecordBatchBuilder.build` keeps the
compressed records and :func:`restamp_batch` re-stamps an already built batch, in both
cases recomputing only the header and the CRC.

Reading: :class:`RecordBatch` is one batch's header inside a fetched buffer (see
:func:`~aiostream_kafka.protocol.records.iter_batches`); :meth:`RecordBatch.records`
decodes a whole batch into :class:`~aiostream_kafka.structs.Record` objects with the bulk
decoder (:mod:`~aiostream_kafka.protocol.records.bulk_decode`); decompression is bounded by
``max_decompressed_bytes``. :meth:`RecordBatch.control_records` decodes transaction
markers (KIP-98) for ``read_committed`` filtering.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from crc32c import crc32c

from aiostream_kafka.errors import CorruptRecordError, ProtocolError
from aiostream_kafka.protocol import fastrecords as _fastrecords
from aiostream_kafka.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    compress,
    decompress,
)
from aiostream_kafka.protocol.records.bulk_decode import _DECODE
from aiostream_kafka.protocol.varint import encode_varint, encode_varlong
from aiostream_kafka.structs import Record, TimestampType

MAGIC: Final = 2
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc | attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_PREFIX: Final = struct.Struct(">qiibI")  # 21 bytes, not covered by the CRC
_OFFSET_LENGTH: Final = struct.Struct(">qi")
_CRC_COVERED: Final = struct.Struct(">hiqqqhii")  # 40 bytes, covered by the CRC
HEADER_SIZE: Final = 61
"""Size of a v2 batch header, i.e. of an empty batch."""
_LOG_OVERHEAD: Final = 12  # baseOffset + batchLength, outside batchLength
_MIN_BATCH_LENGTH: Final = HEADER_SIZE - _LOG_OVERHEAD  # 49
_MAGIC_AT: Final = 16
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21

_CODEC_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_DELETE_HORIZON_BIT: Final = 0x40


class ControlRecordType(IntEnum):
    """Type of a control record (KIP-98): the key's second int16."""

    ABORT = 0
    COMMIT = 1


@dataclass(slots=True, frozen=True)
class ControlRecord:
    """A record of a control batch: a transaction marker or another broker-written marker.

    ``type`` is a :class:`ControlRecordType` for ABORT/COMMIT, else the raw int (KRaft
    writes other types). ``coordinator_epoch`` is set for ABORT/COMMIT markers only.
    """

    offset: int
    timestamp_ms: int
    version: int
    type: ControlRecordType | int
    coordinator_epoch: int | None


# ---------------------------------------------------------------------------------------
# varint tables of the writer

# Zig-zag encodings of 0 .. 8191: every non-negative int that fits in 1 or 2 varint bytes.
# A tuple lookup is several times faster than encoding, and covers the lengths and deltas
# of typical records.
_ZZ_LIMIT: Final = 8192
_ZZ: Final[tuple[bytes, ...]] = tuple(
    bytes((i << 1,)) if i < 64 else bytes(((i << 1) & 0x7F | 0x80, i >> 6))
    for i in range(_ZZ_LIMIT)
)


# The producer's bulk encoder (RecordBatchBuilder.extend_values) joins these: a record's
# attributes byte (0) with its timestamp delta, and its offset delta with a null key (-1).
_ATTRS_TSD: Final[tuple[bytes, ...]] = tuple(b"\x00" + z for z in _ZZ)
_OD_NULL_KEY: Final[tuple[bytes, ...]] = tuple(z + b"\x01" for z in _ZZ)


# The bulk encoder of keyless, headerless records: the typed loop when compiled (about 3x),
# else RecordBatchBuilder.extend_values' own interpreter-tuned loop.
_ENCODE = _fastrecords.encode_values if _fastrecords.COMPILED else None
_ENCODE_KEYED = _fastrecords.encode_keyed if _fastrecords.COMPILED else None
_ENCODE_PAIRS = _fastrecords.encode_pairs if _fastrecords.COMPILED else None


# ---------------------------------------------------------------------------------------
# writing


def _encode_headers(headers: Sequence[tuple[str | bytes, bytes | bytearray | None]]) -> bytes:
    zz = _ZZ
    n = len(headers)
    parts: list[bytes | bytearray] = [zz[n] if n < _ZZ_LIMIT else encode_varint(n)]
    append = parts.append
    for name, value in headers:
        raw = name.encode() if isinstance(name, str) else name
        n = len(raw)
        append(zz[n] if n < _ZZ_LIMIT else encode_varint(n))
        append(raw)
        if value is None:
            append(b"\x01")
        else:
            n = len(value)
            append(zz[n] if n < _ZZ_LIMIT else encode_varint(n))
            append(value)
    return b"".join(parts)


def _record_size_upper_bound(
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str | bytes, bytes | bytearray | None]] | None,
) -> int:
    # length 5 + attributes 1 + timestampDelta 10 + offsetDelta 5 + keyLength 5
    # + valueLength 5 + headerCount 5 = 36 bytes of worst-case framing.
    size = 36
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


class RecordBatchBuilder:
    """Accumulates records into a v2 record batch; the producer's open batch.

    ``append`` encodes the record immediately, so :attr:`size_in_bytes` is the exact size
    of the uncompressed batch built so far; a producer closes the batch once
    :meth:`has_room_for` says no (Java's ``batch.size`` semantics: the first record is
    always accepted, whatever its size).

    Timestamps: the first record's timestamp is the batch's base timestamp; deltas may be
    negative. ``timestamp_type`` LOG_APPEND_TIME is only meaningful for brokers and tests.
    """

    __slots__ = (
        "_base_ts",
        "_batch_size",
        "_buf",
        "_cache",
        "_cache_count",
        "_count",
        "_max_ts",
        "_timestamp_type",
    )

    def __init__(
        self,
        batch_size: int = 16384,
        *,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    ) -> None:
        self._batch_size = batch_size
        self._timestamp_type = timestamp_type
        self._buf = bytearray()
        self._count = 0
        self._base_ts = NO_TIMESTAMP
        self._max_ts = NO_TIMESTAMP
        # (codec, level) -> compressed records, valid while _count == _cache_count (so
        # append, the hot path, never has to touch the cache)
        self._cache: dict[tuple[int, int | None], bytes] = {}
        self._cache_count = 0

    @property
    def record_count(self) -> int:
        """Number of records appended."""
        return self._count

    @property
    def size_in_bytes(self) -> int:
        """Exact size of the batch if built now without compression."""
        return HEADER_SIZE + len(self._buf)

    @property
    def base_timestamp(self) -> int:
        """Timestamp of the first record, or -1 when empty."""
        return self._base_ts

    @property
    def max_timestamp(self) -> int:
        """Largest record timestamp, or -1 when empty."""
        return self._max_ts

    @property
    def batch_size(self) -> int:
        """The size bound in bytes given at construction."""
        return self._batch_size

    def is_full(self) -> bool:
        """Return whether the batch has reached ``batch_size`` bytes."""
        return HEADER_SIZE + len(self._buf) >= self._batch_size

    def has_room_for(
        self,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str | bytes, bytes | bytearray | None]] | None = None,
    ) -> bool:
        """Return whether a record fits within ``batch_size`` (always true when empty)."""
        if not self._count:
            return True
        size = HEADER_SIZE + len(self._buf) + _record_size_upper_bound(key, value, headers)
        return size <= self._batch_size

    def append(
        self,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str | bytes, bytes | bytearray | None]] | None = None,
        timestamp_ms: int | None = None,
    ) -> int:
        """Encode a record at the end of the batch and return its offset delta.

        ``timestamp_ms`` defaults to the current wall-clock time. Header names are ``str``
        (encoded as UTF-8) or ``bytes``. Size limits are the caller's business
        (:meth:`has_room_for`).
        """
        od = self._count
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        if od:
            tsd = timestamp_ms - self._base_ts
            if timestamp_ms > self._max_ts:
                self._max_ts = timestamp_ms
        else:
            self._base_ts = self._max_ts = timestamp_ms
            tsd = 0
        zz = _ZZ
        # Hot path: every varint comes from the lookup table unless it is large.
        tsb = zz[tsd] if 0 <= tsd < 8192 else encode_varlong(tsd)
        odb = zz[od] if od < 8192 else encode_varint(od)
        if key is None:
            kb = b"\x01"
            key = b""
        else:
            n = len(key)
            kb = zz[n] if n < 8192 else encode_varint(n)
        if value is None:
            vb = b"\x01"
            value = b""
        else:
            n = len(value)
            vb = zz[n] if n < 8192 else encode_varint(n)
        body = b"".join(
            (
                b"\x00",
                tsb,
                odb,
                kb,
                key,
                vb,
                value,
                _encode_headers(headers) if headers else b"\x00",
            )
        )
        n = len(body)
        buf = self._buf
        buf += zz[n] if n < 8192 else encode_varint(n)
        buf += body
        self._count = od + 1
        return od

    def extend_values(self, values: Sequence[bytes], timestamps: Sequence[int]) -> None:
        """Append keyless, headerless records: ``append(None, values[i], None,
        timestamps[i])`` for each ``i``, in one pass (the producer's hot path defers
        encoding to here).

        When every value is under 8,000 bytes, every timestamp within 8.192 s after the
        batch's first and the offset deltas under 8,192 (the usual case), the range checks
        are made once for all and every varint of a record is a table lookup; otherwise
        each record goes through :meth:`append`.
        """
        count = len(values)
        if not count:
            return
        od = self._count
        if not od:
            self._base_ts = self._max_ts = timestamps[0]
        base = self._base_ts
        if _ENCODE is not None and type(values) is list and type(timestamps) is list:
            # compiled: the checks run in the encoding loop (None: one failed, the general
            # path below)
            done = _ENCODE(self._buf, values, timestamps, base, od, _ZZ, _ATTRS_TSD, _OD_NULL_KEY)
            if done is not None:
                self._count, high = done
                if high > self._max_ts:
                    self._max_ts = high
                return
        low, high = min(timestamps), max(timestamps)
        sizes = list(map(len, values))
        if high > self._max_ts:
            self._max_ts = high
        small = max(sizes) < 8000
        if small and low >= base and high - base < _ZZ_LIMIT and od + count <= _ZZ_LIMIT:
            zz = _ZZ
            heads = _ATTRS_TSD
            deltas = _OD_NULL_KEY
            parts: list[bytes] = []
            add = parts.extend
            for value, ts, n in zip(values, timestamps, sizes, strict=True):
                head = heads[ts - base]
                delta = deltas[od]
                vlen = zz[n]
                # length: attributes+timestampDelta, offsetDelta+key, valueLength, value and
                # headerCount (the last b"\x00")
                length = zz[len(head) + len(delta) + len(vlen) + n + 1]
                add((length, head, delta, vlen, value, b"\x00"))
                od += 1
            self._buf += b"".join(parts)
            self._count = od
            return
        for value, ts in zip(values, timestamps, strict=True):
            self.append(None, value, None, ts)

    def extend_pairs(
        self, keys: list[bytes | None], values: list[bytes], timestamps: list[int]
    ) -> None:
        """Append headerless records: ``append(keys[i], values[i], None, timestamps[i])``
        for each ``i`` (the producer's compiled per-record path defers keyed records'
        encoding to here). Compiled, one pass
        (:func:`~aiostream_kafka.protocol.fastrecords.encode_pairs`) when every record is
        within its tables; otherwise record by record."""
        count = len(values)
        if not count:
            return
        od = self._count
        if not od:
            self._base_ts = self._max_ts = timestamps[0]
        if _ENCODE_PAIRS is not None:
            done = _ENCODE_PAIRS(
                self._buf, keys, values, timestamps, self._base_ts, od, _ZZ, _ATTRS_TSD
            )
            if done is not None:
                self._count, high = done
                if high > self._max_ts:
                    self._max_ts = high
                return
        for key, value, ts in zip(keys, values, timestamps, strict=True):
            self.append(key, value, None, ts)

    def extend_keyed(
        self, keys: list[Any], values: list[Any], start: int, end: int, timestamp_ms: int
    ) -> int:
        """Append records ``start .. end - 1`` of ``keys``/``values`` (no headers, all with
        ``timestamp_ms``) while the batch stays within ``batch_size`` (the first record of
        an empty batch is always taken); return how many were appended.

        The batch API's path for keyed records: compiled, one call encodes a batch's worth
        (:func:`~aiostream_kafka.protocol.fastrecords.encode_keyed`); otherwise, and for a
        record outside its tables, record by record with :meth:`append`.
        """
        od = self._count
        if _ENCODE_KEYED is not None:
            base = self._base_ts if od else timestamp_ms
            tsd = timestamp_ms - base
            if 0 <= tsd < _ZZ_LIMIT:
                room = self._batch_size - HEADER_SIZE - len(self._buf)
                head = _ATTRS_TSD[tsd]
                count = _ENCODE_KEYED(self._buf, keys, values, start, end, head, od, room, _ZZ)
                if count >= 0:
                    if count:
                        if not od:
                            self._base_ts = self._max_ts = timestamp_ms
                        elif timestamp_ms > self._max_ts:
                            self._max_ts = timestamp_ms
                        self._count = od + count
                    return count
        i = start
        while i < end:
            key, value = keys[i], values[i]
            if self._count and not self.has_room_for(key, value):
                break
            self.append(key, value, None, timestamp_ms)
            i += 1
        return i - start

    @property
    def records_buffer(self) -> bytearray:
        """The uncompressed records section appended so far (not a copy), for compressing
        it elsewhere (a worker thread) while nothing is appended: see
        :meth:`set_compressed`. A buffer a codec is reading cannot be resized, so an append
        meanwhile raises ``BufferError`` rather than corrupt anything."""
        return self._buf

    def set_compressed(
        self,
        compression: CompressionType | int,
        compression_level: int | None,
        records: bytes,
        record_count: int,
    ) -> bool:
        """Keep ``records``, the records section compressed elsewhere with ``compression``
        at ``compression_level`` when the batch held ``record_count`` records, so that
        :meth:`build` with that codec and level only frames it. Returns False, keeping
        nothing, if records were appended since."""
        if record_count != self._count:
            return False
        if self._cache_count != self._count:
            self._cache.clear()
            self._cache_count = self._count
        self._cache[int(compression), compression_level] = records
        return True

    def build(
        self,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        compression: CompressionType | int = CompressionType.NONE,
        *,
        compression_level: int | None = None,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    ) -> bytes:
        """Return the encoded batch, CRC included.

        May be called again (e.g. with a new producer epoch/sequence on retry): the records
        are compressed once and only the 61-byte header and the CRC are recomputed.
        Raises ``CompressionUnavailableError`` if the codec's library is missing.
        """
        codec = int(compression)
        payload: bytes | bytearray
        if codec == CompressionType.NONE:
            payload = self._buf
        else:
            if self._cache_count != self._count:
                self._cache.clear()
                self._cache_count = self._count
            cached = self._cache.get((codec, compression_level))
            if cached is None:
                cached = compress(codec, self._buf, level=compression_level)
                self._cache[codec, compression_level] = cached
            payload = cached
        attributes = codec
        if self._timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_BIT
        if is_transactional:
            attributes |= _TRANSACTIONAL_BIT
        return _frame(
            base_offset,
            partition_leader_epoch,
            attributes,
            self._count - 1,
            self._base_ts,
            self._max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            self._count,
            payload,
        )


def _frame(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    payload: bytes | bytearray,
) -> bytes:
    try:
        covered = _CRC_COVERED.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        crc = crc32c(payload, crc32c(covered))
        prefix = _PREFIX.pack(
            base_offset, _MIN_BATCH_LENGTH + len(payload), partition_leader_epoch, MAGIC, crc
        )
    except struct.error as exc:
        raise ValueError(f"record batch header field out of range: {exc}") from None
    return b"".join((prefix, covered, payload))


def restamp_batch(
    batch: bytes | bytearray | memoryview,
    *,
    producer_id: int | None = None,
    producer_epoch: int | None = None,
    base_sequence: int | None = None,
    is_transactional: bool | None = None,
    base_offset: int | None = None,
    partition_leader_epoch: int | None = None,
) -> bytes:
    """Return a copy of one built batch with header fields replaced and the CRC recomputed.

    Fields left ``None`` keep their value. The records (compressed or not) are not
    re-encoded. Raises ``CorruptRecordError`` if ``batch`` is not one v2 batch.
    """
    out = bytearray(batch)
    if len(out) < HEADER_SIZE or out[_MAGIC_AT] != MAGIC:
        raise CorruptRecordError("not a v2 record batch")
    if int.from_bytes(out[8:12], "big", signed=True) + _LOG_OVERHEAD != len(out):
        raise CorruptRecordError("batch length does not match the buffer")
    try:
        if base_offset is not None:
            struct.pack_into(">q", out, 0, base_offset)
        if partition_leader_epoch is not None:
            struct.pack_into(">i", out, 12, partition_leader_epoch)
        if is_transactional is not None:
            attributes = int.from_bytes(out[21:23], "big") & ~_TRANSACTIONAL_BIT
            if is_transactional:
                attributes |= _TRANSACTIONAL_BIT
            struct.pack_into(">H", out, 21, attributes)
        if producer_id is not None:
            struct.pack_into(">q", out, 43, producer_id)
        if producer_epoch is not None:
            struct.pack_into(">h", out, 51, producer_epoch)
        if base_sequence is not None:
            struct.pack_into(">i", out, 53, base_sequence)
    except struct.error as exc:
        raise ValueError(f"record batch header field out of range: {exc}") from None
    struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def build_control_batch(
    control_type: ControlRecordType | int,
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Return a transactional control batch holding one ABORT or COMMIT marker.

    Brokers write these; the client needs them for tests and mock brokers.
    """
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, coordinator_epoch)
    builder = RecordBatchBuilder()
    builder.append(key, value, None, timestamp_ms)
    payload = bytes(builder._buf)
    attributes = _TRANSACTIONAL_BIT | _CONTROL_BIT
    return _frame(
        base_offset,
        partition_leader_epoch,
        attributes,
        0,
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        NO_SEQUENCE,
        1,
        payload,
    )


# ---------------------------------------------------------------------------------------
# reading


class RecordBatch:
    """One v2 record batch inside a fetched buffer; header fields are plain attributes.

    Holds a reference to the buffer, not a copy. Obtain instances from
    :func:`iter_batches`.
    """

    __slots__ = (
        "_buf",
        "_start",
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "batch_length",
        "crc",
        "last_offset_delta",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "record_count",
    )

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def __init__(self, buf: bytes, start: int) -> None:
        """Parse the header of the batch at ``buf[start:]`` (which must be complete)."""
        self._buf = buf
        self._start = start
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc) = (
            _PREFIX.unpack_from(buf, start)
        )
        (
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.record_count,
        ) = _CRC_COVERED.unpack_from(buf, start + _ATTRIBUTES_AT)

    @property
    def compression(self) -> CompressionType | int:
        """Codec of the records (bits 0-2); an unknown id is returned as an int."""
        codec = self.attributes & _CODEC_MASK
        return CompressionType(codec) if codec <= 4 else codec

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME or LOG_APPEND_TIME (bit 3)."""
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """Whether the batch belongs to a transaction (bit 4)."""
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        """Whether this is a control batch (bit 5), e.g. a transaction marker."""
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """Whether base_timestamp is the compaction delete horizon (bit 6, KIP-534).

        The log cleaner then rewrites the record deltas against it, so record timestamps
        are still ``base_timestamp + delta``.
        """
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def size_in_bytes(self) -> int:
        """Size of the whole batch on the wire, header included."""
        return self.batch_length + _LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """Offset of the last record the batch was written with (even if compacted away)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset to fetch after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    def compute_crc(self) -> int:
        """Return the CRC-32C of the batch's bytes from attributes to the end."""
        start = self._start
        view = memoryview(self._buf)[start + _ATTRIBUTES_AT : start + self.size_in_bytes]
        return crc32c(view)

    def verify_crc(self) -> None:
        """Raise ``CorruptRecordError`` naming the offset if the stored CRC is wrong."""
        actual = self.compute_crc()
        if actual != self.crc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} failed its CRC check "
                f"(stored {self.crc:#010x}, computed {actual:#010x})"
            )

    def records_payload(
        self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> bytes:
        """Return the (decompressed) records section."""
        start = self._start + HEADER_SIZE
        end = self._start + self.size_in_bytes
        codec = self.attributes & _CODEC_MASK
        if codec == 0:
            return self._buf[start:end]
        try:
            return decompress(
                codec,
                memoryview(self._buf)[start:end],
                max_decompressed_bytes=max_decompressed_bytes,
            )
        except ProtocolError as exc:
            exc.args = (f"record batch at offset {self.base_offset}: {exc}",)
            raise

    def records_span(
        self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> tuple[bytes, int, int]:
        """Where the records section is: ``(buffer, start, end)``, the batch's own buffer
        when uncompressed (no copy), else the decompressed section."""
        if self.attributes & _CODEC_MASK:
            payload = self.records_payload(max_decompressed_bytes)
            return payload, 0, len(payload)
        return self._buf, self._start + HEADER_SIZE, self._start + self.size_in_bytes

    def records(
        self,
        topic: str,
        partition: int,
        *,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    ) -> list[Record]:
        """Decode every record of the batch into :class:`~aiostream_kafka.structs.Record`.

        Offsets are ``base_offset + offsetDelta``; timestamps are ``base_timestamp + delta``
        or, for LOG_APPEND_TIME batches, ``max_timestamp`` for every record;
        ``leader_epoch`` is the batch's partition leader epoch (``None`` when -1).
        Control batches decode too (their keys/values are the raw markers).
        Raises ``CorruptRecordError`` on malformed records, ``DecompressionLimitError``
        past ``max_decompressed_bytes``.
        """
        buf, pos, end = self.records_span(max_decompressed_bytes)
        ple = self.partition_leader_epoch
        if not self.attributes & _TIMESTAMP_TYPE_BIT:
            return _DECODE(
                buf,
                pos,
                end,
                self.record_count,
                topic,
                partition,
                self.base_offset,
                self.base_timestamp,
                TimestampType.CREATE_TIME,
                None if ple < 0 else ple,
            )
        # LOG_APPEND_TIME: the broker's append time, max_timestamp, stands for every record.
        out = _DECODE(
            buf,
            pos,
            end,
            self.record_count,
            topic,
            partition,
            self.base_offset,
            self.base_timestamp,
            TimestampType.LOG_APPEND_TIME,
            None if ple < 0 else ple,
        )
        max_ts = self.max_timestamp
        for rec in out:
            rec.timestamp_ms = max_ts
        return out

    def control_records(
        self, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> list[ControlRecord]:
        """Decode the records of a control batch (KIP-98 markers).

        Raises ``ProtocolError`` if this is not a control batch, ``CorruptRecordError`` if a
        control key is shorter than 4 bytes or an ABORT/COMMIT value shorter than 6.
        """
        if not self.is_control:
            raise ProtocolError(f"batch at offset {self.base_offset} is not a control batch")
        out = []
        for rec in self.records("", -1, max_decompressed_bytes=max_decompressed_bytes):
            key = rec.key
            if key is None or len(key) < 4:
                raise CorruptRecordError(f"control record at offset {rec.offset}: short key")
            version, ctype = struct.unpack_from(">hh", key)
            coordinator_epoch: int | None = None
            kind: ControlRecordType | int = ctype
            if ctype in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                kind = ControlRecordType(ctype)
                value = rec.value
                if value is None or len(value) < 6:
                    raise CorruptRecordError(
                        f"transaction marker at offset {rec.offset}: short value"
                    )
                coordinator_epoch = struct.unpack_from(">i", value, 2)[0]
            out.append(
                ControlRecord(rec.offset, rec.timestamp_ms, version, kind, coordinator_epoch)
            )
        return out

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, records={self.record_count}, "
            f"last_offset_delta={self.last_offset_delta}, compression={self.compression!r}, "
            f"size={self.size_in_bytes}, control={self.is_control}, "
            f"transactional={self.is_transactional}, producer_id={self.producer_id})"
        )


__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "ControlRecord",
    "ControlRecordType",
    "RecordBatch",
    "RecordBatchBuilder",
    "build_control_batch",
    "restamp_batch",
]
