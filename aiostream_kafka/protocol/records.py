"""Kafka record batches (message format v2, "magic 2"), sans-IO.

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

Reading: :func:`iter_batches` walks the ``records`` bytes of a Fetch response partition,
verifies each batch's CRC and stops silently at a truncated trailing batch (brokers cut
responses at the fetch size limit). :meth:`RecordBatch.records` decodes a whole batch into
:class:`~aiostream_kafka.structs.Record` objects in one tight loop; decompression is bounded
by ``max_decompressed_bytes``. :meth:`RecordBatch.control_records` decodes transaction
markers (KIP-98) for ``read_committed`` filtering.

Legacy message sets (magic 0 and 1, written before Kafka 0.11) are decoded too: brokers
return them as stored, and compacted topics of clusters upgraded from old versions still
hold them. :func:`iter_batches` presents them as :class:`LegacyBatch`, a
:class:`RecordBatch` subclass, so every reader of v2 batches handles them unchanged. A
legacy message is::

    offset int64 | messageSize int32 | crc uint32 (CRC-32 of the rest) | magic int8
    attributes int8 (bits 0-2 codec: gzip 1, snappy 2, lz4 3; bit 3 timestamp type, magic 1)
    timestamp int64 (magic 1 only) | keyLength int32 (-1 = null) | key
    valueLength int32 (-1 = null) | value

and a compressed one (a *wrapper*) holds in its value a message set of inner messages,
whose offsets are absolute (magic 0) or relative to the first (magic 1; the wrapper's
offset is then the last inner message's). A partial trailing legacy message is ignored
like any partial batch.

Performance notes: the decoder is pure Python; per record it costs about one Record
construction plus ~50 interpreter operations (see :func:`_decode_records`), measured by
``benchmarks/codec_bench.py`` against aiokafka's compiled decoder.

Errors: any malformed input raises :class:`~aiostream_kafka.errors.ProtocolError` or its
subclass :class:`~aiostream_kafka.errors.CorruptRecordError`, never ``IndexError``,
``struct.error`` or ``UnicodeDecodeError``; no allocation is sized from an unchecked
length field.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator, Sequence
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
    repair_lz4_header_checksum,
)
from aiostream_kafka.protocol.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)
from aiostream_kafka.structs import Header, Record, TimestampType

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
_LEGACY_MIN_LENGTH: Final = 14  # smallest v0 message: crc, magic, attributes, key, value
_MAGIC_AT: Final = 16
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
_MIN_RECORD_SIZE: Final = 7  # length, attributes, ts delta, offset delta, key, value, headers

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
# varint helpers for the slow paths (the hot loops inline the 1- and 2-byte cases)

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


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return decode_varint(buf, pos)
    except ProtocolError as exc:
        raise CorruptRecordError(str(exc)) from None


def _read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        return decode_varlong(buf, pos)
    except ProtocolError as exc:
        raise CorruptRecordError(str(exc)) from None


def _read_length(buf: bytes, pos: int) -> tuple[int, int]:
    """Read a nullable length: -1 for null, else >= 0."""
    length, pos = _read_varint(buf, pos)
    if length < -1:
        raise CorruptRecordError(f"negative length {length}")
    return length, pos


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


# ---------------------------------------------------------------------------------------
# legacy message sets (magic 0 and 1)

# offset int64 | messageSize int32 | crc uint32 | magic int8 | attributes int8
_LEGACY_HEAD: Final = struct.Struct(">qiIBB")
_LEGACY_HEAD_SIZE: Final = 18
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_LEGACY_V0_MIN_SIZE: Final = 14  # crc, magic, attributes, key length, value length
_LEGACY_V1_MIN_SIZE: Final = 22  # ... and the timestamp
_LEGACY_CRC_FROM: Final = 16  # the CRC-32 covers magic .. end of the message
# A run of consecutive uncompressed legacy messages is presented as one batch; it ends
# after this many bytes, so that a batch stays the unit of budget admission it is for v2.
_LEGACY_RUN_BYTES: Final = 64 * 1024
_LEGACY_CODECS: Final = (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4)


def _legacy_timestamp(
    magic: int, raw: int, attributes: int, wrapper_type: TimestampType | None, wrapper_ts: int
) -> tuple[int, TimestampType]:
    """The timestamp and type a consumer sees for one legacy message (as Java does).

    Magic 0 has none (-1, NO_TIMESTAMP_TYPE). Magic 1 has its own unless it sits inside a
    compressed magic 1 wrapper: then the type is the wrapper's and, for LOG_APPEND_TIME,
    so is the timestamp (the broker stamps only the wrapper).
    """
    if magic == 0:
        return NO_TIMESTAMP, TimestampType.NO_TIMESTAMP_TYPE
    if wrapper_type is None:
        if attributes & _TIMESTAMP_TYPE_BIT:
            return raw, TimestampType.LOG_APPEND_TIME
        return raw, TimestampType.CREATE_TIME
    if wrapper_type == TimestampType.LOG_APPEND_TIME:
        return wrapper_ts, wrapper_type
    return raw, wrapper_type


class _LegacyRun:
    """What a scan of consecutive legacy messages found (see :func:`_scan_legacy`)."""

    __slots__ = ("base_ts", "count", "crc", "end", "first", "last", "magic", "max_ts")

    def __init__(self) -> None:
        self.end = 0
        self.count = 0
        self.first = -1
        self.last = -1
        self.base_ts = NO_TIMESTAMP
        self.max_ts = NO_TIMESTAMP
        self.magic = -1
        self.crc = 0


def _scan_legacy(
    buf: bytes,
    start: int,
    limit: int,
    *,
    verify: bool,
    inner: bool,
    wrapper_type: TimestampType | None = None,
    wrapper_ts: int = NO_TIMESTAMP,
    shift: int = 0,
    what: str = "legacy message",
) -> _LegacyRun:
    """Walk legacy messages from ``buf[start]`` (a complete message) up to ``limit``.

    Top level (``inner`` false): a compressed message (a wrapper) stands alone; otherwise
    the run takes the following uncompressed messages of the same magic and attributes
    (for LOG_APPEND_TIME, the same timestamp too) with increasing offsets, up to about
    ``_LEGACY_RUN_BYTES``. Anything else -- a partial message, a failed CRC, a bad size --
    ends the run *after* at least one message, and is met (and reported) as the first
    message of the next one, so that the good messages before it are not lost.

    ``inner``: the decompressed value of a wrapper; every byte must be a complete,
    uncompressed message with increasing offsets, or the data is corrupt. Error messages
    name a message as ``what`` at its stored offset plus ``shift``.

    Raises ``CorruptRecordError`` for a bad first message (top level) or any bad message
    (inner), with ``verify`` for a CRC-32 mismatch too.
    """
    run = _LegacyRun()
    unpack = _LEGACY_HEAD.unpack_from
    view = memoryview(buf)
    pos = start
    attrs0 = -1
    ts0 = NO_TIMESTAMP

    def corrupt(offset: int, problem: str) -> CorruptRecordError:
        return CorruptRecordError(f"{what} at offset {offset + shift} {problem}")

    while limit - pos >= _LEGACY_HEAD_SIZE:
        offset, size, crc, magic, attributes = unpack(buf, pos)
        end = pos + _LOG_OVERHEAD + size
        if (
            run.count
            and not inner
            and (
                end > limit
                or magic != run.magic
                or attributes != attrs0
                or offset <= run.last
                or pos - start >= _LEGACY_RUN_BYTES
            )
        ):
            break
        if magic not in (0, 1):
            if run.count and not inner:
                break
            raise corrupt(offset, f"has magic {magic}")
        if size < (_LEGACY_V0_MIN_SIZE if magic == 0 else _LEGACY_V1_MIN_SIZE) or end > limit:
            if run.count and not inner:
                break
            raise corrupt(offset, "is truncated" if end > limit else f"has impossible size {size}")
        if verify:
            actual = zlib.crc32(view[pos + _LEGACY_CRC_FROM : end])
            if actual != crc:
                if run.count and not inner:
                    break
                raise corrupt(
                    offset, f"failed its CRC check (stored {crc:#010x}, computed {actual:#010x})"
                )
        raw_ts = _INT64.unpack_from(buf, pos + _LEGACY_HEAD_SIZE)[0] if magic else NO_TIMESTAMP
        if inner:
            if attributes & _CODEC_MASK:
                raise corrupt(offset, "is compressed inside a compressed message")
            if run.count and offset <= run.last:
                raise corrupt(offset, f"follows offset {run.last} in the same compressed message")
        elif run.count and attributes & _TIMESTAMP_TYPE_BIT and raw_ts != ts0:
            break
        ts, _ = _legacy_timestamp(magic, raw_ts, attributes, wrapper_type, wrapper_ts)
        if not run.count:
            run.first = offset
            run.base_ts = run.max_ts = ts
            run.magic = magic
            run.crc = crc
            attrs0 = attributes
            ts0 = raw_ts
        elif ts > run.max_ts:
            run.max_ts = ts
        run.count += 1
        run.last = offset
        pos = end
        if not inner and attributes & _CODEC_MASK:
            break
    if inner and (pos != limit or not run.count):
        raise CorruptRecordError(
            "compressed legacy message holds no message"
            if not run.count
            else "compressed legacy message ends with a truncated message"
        )
    run.end = pos
    return run


def _decode_legacy(
    buf: bytes,
    pos: int,
    end: int,
    topic: str,
    partition: int,
    shift: int,
    wrapper_type: TimestampType | None,
    wrapper_ts: int,
) -> list[Record]:
    """Decode the uncompressed legacy messages in ``buf[pos:end]`` (already scanned: each
    is complete) into Records; offsets are ``shift`` + the stored ones."""
    out: list[Record] = []
    append = out.append
    unpack = _LEGACY_HEAD.unpack_from
    unpack_i = _INT32.unpack_from
    unpack_q = _INT64.unpack_from
    no_type = TimestampType.NO_TIMESTAMP_TYPE
    key: bytes | None
    value: bytes | None
    try:
        while pos < end:
            offset, size, _crc, magic, attributes = unpack(buf, pos)
            mend = pos + _LOG_OVERHEAD + size
            p = pos + _LEGACY_HEAD_SIZE
            if magic == 0:
                ts = NO_TIMESTAMP
                ts_type = no_type
            else:
                ts, ts_type = _legacy_timestamp(
                    magic, unpack_q(buf, p)[0], attributes, wrapper_type, wrapper_ts
                )
                p += 8
            n = unpack_i(buf, p)[0]
            p += 4
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"legacy message at offset {offset}: key length {n}")
                key = None
            else:
                key = buf[p : p + n]
                p += n
            n = unpack_i(buf, p)[0]
            p += 4
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"legacy message at offset {offset}: value length {n}")
                value = None
            else:
                value = buf[p : p + n]
                p += n
            if p != mend:
                raise CorruptRecordError(
                    f"legacy message at offset {offset} does not match its size {size}"
                )
            append(Record(topic, partition, offset + shift, ts, ts_type, key, value, [], None))
            pos = mend
    except struct.error:
        raise CorruptRecordError("truncated legacy message") from None
    return out


def _encode_v2_records(records: list[Record], base_offset: int, base_ts: int) -> bytes:
    """Encode ``records`` as the records section of a v2 batch (no headers): the legacy
    messages seen by columnar readers, which decode only that format."""
    parts: list[bytes] = []
    add = parts.append
    for rec in records:
        key, value = rec.key, rec.value
        body = b"".join(
            (
                b"\x00",
                encode_varlong(rec.timestamp_ms - base_ts),
                encode_varint(rec.offset - base_offset),
                b"\x01" if key is None else encode_varint(len(key)) + key,
                b"\x01" if value is None else encode_varint(len(value)) + value,
                b"\x00",
            )
        )
        add(encode_varint(len(body)))
        add(body)
    return b"".join(parts)


class LegacyBatch(RecordBatch):
    """Legacy messages (magic 0 or 1, the format before Kafka 0.11) as a record batch.

    :func:`iter_batches` yields one for each compressed legacy message (a *wrapper*, whose
    value is a message set of inner messages) and one for each run of consecutive
    uncompressed messages, so that code written for v2 batches reads them unchanged: header
    fields hold what a v2 batch would (no producer id, epoch, sequence or leader epoch:
    all -1; never transactional, never control), :meth:`records` decodes them into
    :class:`~aiostream_kafka.structs.Record` (no headers; magic 0 records have timestamp -1
    and ``TimestampType.NO_TIMESTAMP_TYPE``), and :attr:`size_in_bytes` is the size on the
    wire. ``crc`` and :meth:`compute_crc` are the first message's CRC-32 (not CRC-32C);
    :meth:`verify_crc` checks every message.

    A wrapper's ``next_offset`` (its offset + 1: a wrapper carries the offset of its last
    inner message) is known at once; its first offset and record count are not, until it
    is decompressed. Before that ``base_offset`` is the wrapper's offset and
    ``record_count`` 1; :meth:`inflate` (also called by :meth:`records`,
    :meth:`records_payload` and :meth:`records_span`) sets ``base_offset``,
    ``last_offset_delta``, ``record_count``, ``base_timestamp`` and ``max_timestamp`` to
    what the inner messages hold. Inner offsets are absolute for magic 0 and relative to
    the first one for magic 1 (absolute = wrapper offset - last relative + relative).

    :meth:`records_payload` and :meth:`records_span` give the messages *re-encoded* as a
    v2 records section (offset and timestamp deltas against ``base_offset`` and
    ``base_timestamp``), for the columnar readers that decode only that format.
    """

    __slots__ = ("_end", "_inner", "_shift", "_verify", "_wrapper_ts", "_wrapper_type")

    def __init__(
        self,
        buf: bytes,
        start: int,
        run: _LegacyRun,
        attributes: int,
        *,
        verify: bool,
        shift: int = 0,
        wrapper_type: TimestampType | None = None,
        wrapper_ts: int = NO_TIMESTAMP,
    ) -> None:
        """A batch over the scanned legacy messages ``run`` at ``buf[start:run.end]``
        (use :func:`iter_batches`)."""
        self._buf = buf
        self._start = start
        self._end = run.end
        self._inner: LegacyBatch | None = None
        self._shift = shift
        self._verify = verify
        self._wrapper_type = wrapper_type
        self._wrapper_ts = wrapper_ts
        self.base_offset = run.first + shift
        self.last_offset_delta = run.last - run.first
        self.record_count = run.count
        self.base_timestamp = run.base_ts
        self.max_timestamp = run.max_ts
        self.magic = run.magic
        self.crc = run.crc
        self.attributes = attributes
        self.batch_length = run.end - start - _LOG_OVERHEAD
        self.partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE

    @property
    def size_in_bytes(self) -> int:
        """Size of the messages on the wire (decompressed, for an inflated wrapper)."""
        return self._end - self._start

    @property
    def timestamp_type(self) -> TimestampType:
        """NO_TIMESTAMP_TYPE for magic 0, else CREATE_TIME or LOG_APPEND_TIME (bit 3)."""
        if self.magic == 0 and self._wrapper_type is None:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    def compute_crc(self) -> int:
        """Return the CRC-32 of the first message (from its magic to its end)."""
        start = self._start
        size = _INT32.unpack_from(self._buf, start + 8)[0]
        end = min(start + _LOG_OVERHEAD + size, self._end)
        return zlib.crc32(memoryview(self._buf)[start + _LEGACY_CRC_FROM : end])

    def verify_crc(self) -> None:
        """Raise ``CorruptRecordError`` naming the offset if a message's CRC-32 is wrong
        (for a wrapper, its own: it covers the compressed inner messages)."""
        if self.attributes & _CODEC_MASK:
            actual = self.compute_crc()
            if actual != self.crc:
                raise CorruptRecordError(
                    f"legacy message at offset {self.next_offset - 1} failed its CRC check "
                    f"(stored {self.crc:#010x}, computed {actual:#010x})"
                )
            return
        _scan_legacy(self._buf, self._start, self._end, verify=True, inner=True, shift=self._shift)

    def inflate(self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> LegacyBatch:
        """Return the batch of the inner messages of a wrapper (decompressed once, then
        remembered), or this batch when it is not compressed. Updates this batch's offset,
        count and timestamp fields to the inner messages' (see the class doc).

        Raises ``CorruptRecordError`` for corrupt compressed data or inner messages (with
        their CRC-32 checked when this batch came from ``iter_batches(verify_crc=True)``),
        ``DecompressionLimitError`` past ``max_decompressed_bytes``.
        """
        codec = self.attributes & _CODEC_MASK
        if not codec:
            return self
        if self._inner is not None:
            return self._inner
        wrapper_offset = self.next_offset - 1
        where = f"legacy message at offset {wrapper_offset}"
        if codec not in _LEGACY_CODECS:
            raise CorruptRecordError(f"{where} uses compression codec {codec}")
        buf = self._buf
        start = self._start
        p = start + _LEGACY_HEAD_SIZE + (8 if self.magic else 0)
        try:
            n = _INT32.unpack_from(buf, p)[0]
            p += 4 + max(n, 0)
            n = _INT32.unpack_from(buf, p)[0]
            p += 4
        except struct.error:
            raise CorruptRecordError(f"{where} is truncated") from None
        if n < 0 or p + n != self._end:
            raise CorruptRecordError(f"{where} has a compressed value of length {n}")
        value: bytes | memoryview = memoryview(buf)[p : p + n]
        try:
            if codec == CompressionType.LZ4 and self.magic == 0:
                value = repair_lz4_header_checksum(value)
            data = decompress(codec, value, max_decompressed_bytes=max_decompressed_bytes)
        except ProtocolError as exc:
            exc.args = (f"{where}: {exc}",)
            raise
        wrapper_type: TimestampType | None = None
        wrapper_ts = NO_TIMESTAMP
        if self.magic == 1:
            wrapper_type = self.timestamp_type
            wrapper_ts = self.base_timestamp
        try:
            run = _scan_legacy(
                data,
                0,
                len(data),
                verify=self._verify,
                inner=True,
                wrapper_type=wrapper_type,
                wrapper_ts=wrapper_ts,
                what="inner message",
            )
        except ProtocolError as exc:
            exc.args = (f"{where}: {exc}",)
            raise
        # Magic 1 inner offsets are relative: the wrapper carries the last one's absolute.
        shift = wrapper_offset - run.last if self.magic == 1 else 0
        inner = LegacyBatch(
            data,
            0,
            run,
            self.attributes & ~_CODEC_MASK,
            verify=self._verify,
            shift=shift,
            wrapper_type=wrapper_type,
            wrapper_ts=wrapper_ts,
        )
        inner.magic = self.magic
        self._inner = inner
        self.base_offset = inner.base_offset
        self.last_offset_delta = wrapper_offset - inner.base_offset
        self.record_count = inner.record_count
        self.base_timestamp = inner.base_timestamp
        self.max_timestamp = inner.max_timestamp
        return inner

    def records(
        self,
        topic: str,
        partition: int,
        *,
        max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    ) -> list[Record]:
        """Decode every message into :class:`~aiostream_kafka.structs.Record` (the inner
        messages of a wrapper, decompressing it first)."""
        batch = self.inflate(max_decompressed_bytes)
        return _decode_legacy(
            batch._buf,
            batch._start,
            batch._end,
            topic,
            partition,
            batch._shift,
            batch._wrapper_type,
            batch._wrapper_ts,
        )

    def records_payload(
        self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> bytes:
        """The messages re-encoded as a v2 records section (see the class doc)."""
        records = self.records("", -1, max_decompressed_bytes=max_decompressed_bytes)
        return _encode_v2_records(records, self.base_offset, self.base_timestamp)

    def records_span(
        self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    ) -> tuple[bytes, int, int]:
        """``(payload, 0, len(payload))`` of :meth:`records_payload`."""
        payload = self.records_payload(max_decompressed_bytes)
        return payload, 0, len(payload)

    def __repr__(self) -> str:
        return (
            f"LegacyBatch(magic={self.magic}, base_offset={self.base_offset}, "
            f"records={self.record_count}, last_offset_delta={self.last_offset_delta}, "
            f"compression={self.compression!r}, size={self.size_in_bytes})"
        )


def iter_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[RecordBatch]:
    """Yield the complete record batches in a Fetch response's ``records`` bytes.

    A truncated batch at the end (the broker stops at the fetch size limit) ends the
    iteration silently. Each batch's CRC is checked unless ``verify_crc`` is false.
    ``data`` other than ``bytes`` is copied once so records can be sliced as ``bytes``.

    Legacy messages (magic 0 and 1) come as :class:`LegacyBatch` instances: one per
    compressed message, one per run of uncompressed ones (their CRC-32 checked likewise).

    Raises ``CorruptRecordError`` (bad CRC, impossible lengths, unknown magic).
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    n = len(buf)
    pos = 0
    while n - pos > _MAGIC_AT:
        base_offset, length = _OFFSET_LENGTH.unpack_from(buf, pos)
        magic = buf[pos + _MAGIC_AT]
        if length < _LEGACY_MIN_LENGTH:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} has impossible length {length}"
            )
        end = pos + _LOG_OVERHEAD + length
        if end > n:
            return  # partial trailing batch
        if magic != MAGIC:
            if magic in (0, 1):
                run = _scan_legacy(buf, pos, n, verify=verify_crc, inner=False)
                attributes = buf[pos + _LEGACY_HEAD_SIZE - 1]
                attributes &= _CODEC_MASK | _TIMESTAMP_TYPE_BIT if magic else _CODEC_MASK
                yield LegacyBatch(buf, pos, run, attributes, verify=verify_crc)
                pos = run.end
                continue
            raise CorruptRecordError(f"record batch at offset {base_offset} has magic {magic}")
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} has impossible length {length}"
            )
        batch = RecordBatch(buf, pos)
        if verify_crc:
            batch.verify_crc()
        yield batch
        pos = end


def read_records(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode the records of every complete, non-control batch in ``data``.

    A convenience for ``read_uncommitted`` consumption and tests; a ``read_committed``
    consumer iterates :func:`iter_batches` to drop aborted transactions.
    """
    out: list[Record] = []
    for batch in iter_batches(data):
        if not batch.attributes & _CONTROL_BIT:
            out += batch.records(topic, partition, max_decompressed_bytes=max_decompressed_bytes)
    return out


def _decode_headers(buf: bytes, pos: int, rend: int) -> tuple[list[Header], int]:
    """Decode the header count and headers at ``pos``; return ``(headers, new_pos)``.

    1-byte varints (names and values under 64 bytes, fewer than 64 headers) are decoded
    inline; others through the generic varint reader.
    """
    b = buf[pos]
    if b < 0x80 and not b & 1:
        count = b >> 1
        pos += 1
    else:
        count, pos = _read_varint(buf, pos)
    # Each header takes at least 2 bytes: a count past that is a lie; refuse before looping.
    if count < 0 or count > (rend - pos) >> 1:
        raise CorruptRecordError(f"invalid header count {count}")
    headers: list[Header] = []
    append = headers.append
    value: bytes | None
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80 and not b & 1:
                pos += 1
                p = pos + (b >> 1)
            else:
                n, pos = _read_varint(buf, pos)
                if n < 0:
                    raise CorruptRecordError(f"invalid header key length {n}")
                p = pos + n
            if p > rend:
                raise CorruptRecordError("header key overruns its record")
            name = buf[pos:p].decode()
            b = buf[p]
            if b < 0x80:
                if b & 1:
                    if b != 1:
                        raise CorruptRecordError("negative header value length")
                    value = None
                    pos = p + 1
                else:
                    pos = p + 1 + (b >> 1)
                    value = buf[p + 1 : pos]
            else:
                n, p = _read_length(buf, p)
                if n < 0:
                    value = None
                    pos = p
                else:
                    pos = p + n
                    value = buf[p:pos]
            if pos > rend:
                raise CorruptRecordError("header value overruns its record")
            append((name, value))
    except UnicodeDecodeError:
        raise CorruptRecordError("header key is not UTF-8") from None
    return headers, pos


# The hot loop reads the first bytes of each record with one struct call (several times
# cheaper than indexing bytes one at a time) and decodes 1- and 2-byte varints from that
# tuple through lookup tables. 10 bytes cover the most the fast path reads: length (2) +
# attributes + timestamp delta (2) + offset delta (2) + null key (1) + value length (2).
_WINDOW: Final = 10
_unpack_window = struct.Struct(f"{_WINDOW}B").unpack_from
_TABLE_SIZE: Final = 1 << 14  # every raw value of a 1- or 2-byte varint
# raw varint -> zig-zag decoded value
_UNZIGZAG: Final[tuple[int, ...]] = tuple((r >> 1) ^ -(r & 1) for r in range(_TABLE_SIZE))
_BAD_LENGTH: Final = -(1 << 40)
# raw varint -> length: >= 0, -1 for null, _BAD_LENGTH for any other negative value
# (even raws decode to r >> 1: reuse the int objects of _UNZIGZAG)
_LENGTH: Final[tuple[int, ...]] = tuple(
    _UNZIGZAG[r] if not r & 1 else (-1 if r == 1 else _BAD_LENGTH) for r in range(_TABLE_SIZE)
)


def _decode_record_slow(
    buf: bytes, pos: int, end: int
) -> tuple[int, int, int, bytes | None, bytes | None, list[Header]]:
    """Decode one record at ``pos`` (ending by ``end``) with no assumption on varint widths.

    Returns ``(record_end, timestamp_delta, offset_delta, key, value, headers)``.
    """
    length, pos = _read_varint(buf, pos)
    rend = pos + length
    if length < 0 or rend > end:
        raise CorruptRecordError(f"invalid record length {length}")
    tsd, pos = _read_varlong(buf, pos + 1)  # after the attributes byte
    od, pos = _read_varint(buf, pos)
    n, pos = _read_length(buf, pos)
    key = None
    if n >= 0:
        key = buf[pos : pos + n]
        pos += n
    n, pos = _read_length(buf, pos)
    value = None
    if n >= 0:
        value = buf[pos : pos + n]
        pos += n
    headers, pos = _decode_headers(buf, pos, rend)
    if pos != rend:
        raise CorruptRecordError(f"record with offset delta {od} does not match its length")
    return rend, tsd, od, key, value, headers


def _decode_records(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    topic: str,
    partition: int,
    base_offset: int,
    base_ts: int,
    ts_type: TimestampType,
    leader_epoch: int | None,
) -> list[Record]:
    """Decode ``count`` records in ``buf[pos:end]`` into a list of Record.

    The consumer's hot loop, written for CPython's interpreter: locals only; varints of
    1-2 bytes decoded inline from a struct-unpacked window through lookup tables; key and
    value sliced straight from the buffer; Record built as ``object.__new__`` plus an
    explicit ``__init__`` call, which the interpreter inlines (a class call cannot be).
    Anything unusual (longer varints, records of 8 KiB and more, the last bytes of the
    buffer) goes through :func:`_decode_record_slow`.

    Bounds: the record count is checked against the bytes available before looping; every
    record must end exactly where its length says and the last one exactly at ``end``;
    indexing past the buffer raises IndexError, caught once outside the loop. Nothing
    allocates more than the buffer holds.
    """
    if count < 0 or count > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"batch at offset {base_offset} claims {count} records in {end - pos} bytes"
        )
    out: list[Record] = []
    append = out.append
    cls = Record
    unpack = _unpack_window
    unzz = _UNZIGZAG
    length = _LENGTH
    headers: list[Header]
    key: bytes | None
    value: bytes | None
    c = 0
    try:
        for _ in range(count):
            try:
                h = unpack(buf, pos)
            except struct.error:  # fewer than _WINDOW bytes left in the buffer
                h = _SLOW_WINDOW
            # Every branch below either decodes a field from the window or gives up on
            # the fast path by setting i = 0, which sends the record to the slow decoder.
            # -- length (1-2 bytes); i indexes the timestamp delta, after the attributes
            b = h[0]
            if b < 0x80:
                rend = pos + 1 + length[b]
                i = 2
            else:
                c = h[1]
                if c < 0x80:
                    rend = pos + 2 + length[b + (c << 7) - 0x80]
                    i = 3
                else:
                    i = 0
            # -- timestamp delta (1-2 bytes)
            b = h[i]
            if i == 0:
                pass
            elif b < 0x80:
                tsd = unzz[b]
                i += 1
            else:
                c = h[i + 1]
                if c < 0x80:
                    tsd = unzz[b + (c << 7) - 0x80]
                    i += 2
                else:
                    i = 0
            # -- offset delta (1-2 bytes)
            if i:
                b = h[i]
                if b < 0x80:
                    od = unzz[b]
                    i += 1
                else:
                    c = h[i + 1]
                    if c < 0x80:
                        od = unzz[b + (c << 7) - 0x80]
                        i += 2
                    else:
                        i = 0
            # -- key, then the value length (from the window when the key is null)
            if i:
                b = h[i]
                if b == 1:
                    key = None
                    p = pos + i + 2
                    b = h[i + 1]
                    if b > 0x7F:
                        c = h[i + 2]
                        b = b + (c << 7) - 0x80 if c < 0x80 else -1
                        p += 1
                elif b < 0x80 and not b & 1:
                    p = pos + i + 1
                    n = b >> 1
                    key = buf[p : p + n]
                    p += n + 1
                    b = buf[p - 1]
                    if b > 0x7F:
                        c = buf[p]
                        b = b + (c << 7) - 0x80 if c < 0x80 else -1
                        p += 1
                else:
                    b = -1
                if b < 0:
                    i = 0
            if not i:
                rend, tsd, od, key, value, headers = _decode_record_slow(buf, pos, end)
                pos = rend
                obj = cls(
                    topic,
                    partition,
                    base_offset + od,
                    base_ts + tsd,
                    ts_type,
                    key,
                    value,
                    headers,
                    leader_epoch,
                )
                append(obj)
                continue
            # -- value
            n = length[b]
            if n >= 0:
                value = buf[p : p + n]
                p += n
            elif n == -1:
                value = None
            else:
                raise CorruptRecordError(f"negative value length in batch {base_offset}")
            # -- headers
            if buf[p]:
                headers, p = _decode_headers(buf, p, rend)
            else:
                p += 1
                headers = []
            if p != rend:
                raise CorruptRecordError(
                    f"record at offset {base_offset + od} does not match its length"
                )
            pos = p
            obj = cls(
                topic,
                partition,
                base_offset + od,
                base_ts + tsd,
                ts_type,
                key,
                value,
                headers,
                leader_epoch,
            )
            append(obj)
    except IndexError:
        raise CorruptRecordError(f"truncated record in batch at offset {base_offset}") from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} does not end after its {count} records"
        )
    return out


# A window that fails every fast-path test: h[0] > 0x7F with h[1] > 0x7F sets i = 0.
_SLOW_WINDOW: Final = (0xFF,) * _WINDOW

# The record decoder: the typed loop when the compiled build is in use (several times
# faster compiled), else the interpreter-tuned one above (faster interpreted).
_DECODE = _fastrecords.decode_records if _fastrecords.COMPILED else _decode_records
# The bulk encoder of keyless, headerless records: the typed loop when compiled (about 3x),
# else RecordBatchBuilder.extend_values' own interpreter-tuned loop.
_ENCODE = _fastrecords.encode_values if _fastrecords.COMPILED else None
_ENCODE_KEYED = _fastrecords.encode_keyed if _fastrecords.COMPILED else None


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
    "LegacyBatch",
    "RecordBatch",
    "RecordBatchBuilder",
    "build_control_batch",
    "iter_batches",
    "read_records",
    "restamp_batch",
]


# ---------------------------------------------------------------------------------------
# reading into columns (for columnar consumers such as the Spark data source)


def decode_record_headers(buf: bytes, pos: int, end: int) -> tuple[list[Header], int]:
    """Decode the header count and headers of one record at ``buf[pos:]``, which must
    not go past ``end`` (the record's end); return ``(headers, position after them)``.

    Raises ``CorruptRecordError`` for malformed headers (bad lengths, a key that is not
    UTF-8, headers running past ``end``).
    """
    try:
        return _decode_headers(buf, pos, end)
    except IndexError:
        raise CorruptRecordError("truncated record headers") from None


def decode_columns(
    batch: RecordBatch, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[list[Header]]]:
    """Decode every record of ``batch`` into columns: ``(offsets, timestamps, keys,
    values, headers)``, lists in record order, without building a Record per row.

    The values are those :meth:`RecordBatch.records` gives each record (``offset``,
    ``timestamp_ms`` -- ``max_timestamp`` for LOG_APPEND_TIME batches --, ``key``,
    ``value``, ``headers``); the timestamp type is the batch's. Control batches decode too.

    Raises ``CorruptRecordError`` on malformed records, ``DecompressionLimitError`` past
    ``max_decompressed_bytes``.
    """
    buf, pos, end = batch.records_span(max_decompressed_bytes)
    count = batch.record_count
    base_offset = batch.base_offset
    if count < 0 or count > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"batch at offset {base_offset} claims {count} records in {end - pos} bytes"
        )
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[Header]] = []
    base_ts = batch.base_timestamp
    decode = _decode_record_slow
    try:
        for _ in range(count):
            pos, tsd, od, key, value, hdrs = decode(buf, pos, end)
            offsets.append(base_offset + od)
            timestamps.append(base_ts + tsd)
            keys.append(key)
            values.append(value)
            headers.append(hdrs)
    except IndexError:
        raise CorruptRecordError(f"truncated record in batch at offset {base_offset}") from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} does not end after its {count} records"
        )
    if batch.attributes & _TIMESTAMP_TYPE_BIT:
        timestamps = [batch.max_timestamp] * count
    return offsets, timestamps, keys, values, headers


__all__ += ["decode_columns", "decode_record_headers"]
