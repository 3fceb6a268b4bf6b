"""Legacy message sets (magic 0 and 1, written before Kafka 0.11), read as record batches.

Brokers return old messages as stored, and compacted topics of clusters upgraded from old
versions still hold them. :func:`~aiostream_kafka.protocol.records.iter_batches` presents
them as :class:`LegacyBatch`, a :class:`~aiostream_kafka.protocol.records.RecordBatch`
subclass, so every reader of v2 batches handles them unchanged. A legacy message is::

    offset int64 | messageSize int32 | crc uint32 (CRC-32 of the rest) | magic int8
    attributes int8 (bits 0-2 codec: gzip 1, snappy 2, lz4 3; bit 3 timestamp type, magic 1)
    timestamp int64 (magic 1 only) | keyLength int32 (-1 = null) | key
    valueLength int32 (-1 = null) | value

and a compressed one (a *wrapper*) holds in its value a message set of inner messages,
whose offsets are absolute (magic 0) or relative to the first (magic 1; the wrapper's
offset is then the last inner message's). A partial trailing legacy message is ignored
like any partial batch. Only reading: the client never writes this format.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

from aiostream_kafka.errors import CorruptRecordError, ProtocolError
from aiostream_kafka.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    decompress,
    repair_lz4_header_checksum,
)
from aiostream_kafka.protocol.records.record_batch import (
    _CODEC_MASK,
    _LOG_OVERHEAD,
    _TIMESTAMP_TYPE_BIT,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RecordBatch,
)
from aiostream_kafka.protocol.varint import encode_varint, encode_varlong
from aiostream_kafka.structs import Record, TimestampType

_LEGACY_MIN_LENGTH: Final = 14  # smallest v0 message: crc, magic, attributes, key, value
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


__all__ = ["LegacyBatch"]
