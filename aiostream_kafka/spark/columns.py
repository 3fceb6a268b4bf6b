"""Record batches decoded straight into Arrow columns, many batches at once, with numpy.

The consumer decodes each record into a Python :class:`~aiostream_kafka.structs.Record`
(several microseconds a record); the Spark reader needs columns, not objects. Here the
(decompressed) ``records`` sections of many v2 batches are joined into one buffer and:

1. one loop per record finds where each record starts (a record's length is a varint,
   so the next start depends on the previous one): in the compiled build the typed
   :func:`~aiostream_kafka.protocol.fastrecords.record_starts` (about 60 ns a record),
   else an interpreter-tuned Python loop (about 700 ns) that decodes 1- and 2-byte
   lengths inline and anything longer through the generic varint reader;
2. every field (length, timestamp delta, offset delta, key and value lengths, header
   count) is then decoded for all records at once with numpy, one varint byte per pass;
3. keys and values become Arrow ``binary_view`` arrays pointing into the buffer (16-byte
   views: length plus inline bytes up to 12, else a prefix and an offset), which Arrow
   casts to plain ``binary`` in C++ (one ``memcpy`` per value).

Every record must end exactly where its length says and every batch exactly at the end of
its records section (else :class:`~aiostream_kafka.errors.CorruptRecordError`); no read
goes past the buffer, which carries 16 zero bytes of padding for the varint passes.
Headers are decoded (in Python, per record that has any) only when asked for; otherwise
they are skipped by the record's length. A record without headers has ``None`` (the
built-in source's null), not an empty list.

:func:`available` says whether this pyarrow/numpy can do it (``binary_view`` casts need
pyarrow 16 or later, and the views are written little-endian); the reader otherwise falls
back to :func:`aiostream_kafka.protocol.records.decode_columns`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from aiostream_kafka.errors import CorruptRecordError, ProtocolError
from aiostream_kafka.protocol import fastrecords
from aiostream_kafka.protocol.records import RecordBatch, decode_record_headers
from aiostream_kafka.protocol.varint import decode_varint
from aiostream_kafka.structs import Header

__all__ = ["DecodedColumns", "Segment", "available", "decode_segments"]

_PAD = 16
_INLINE = 12  # binary_view: values of up to 12 bytes are stored in the view itself
_MIN_RECORD_SIZE = 7
_LOG_APPEND_BIT = 0x08


@dataclass(slots=True)
class Segment:
    """The records section of one batch, ready to decode: ``payload`` (decompressed),
    ``count`` records, the batch's base offset and timestamps and timestamp type."""

    payload: bytes
    count: int
    base_offset: int
    base_timestamp: int
    max_timestamp: int
    log_append_time: bool

    @classmethod
    def of(cls, batch: RecordBatch, max_decompressed_bytes: int) -> Segment:
        """The segment of ``batch`` (decompressing it)."""
        return cls(
            batch.records_payload(max_decompressed_bytes),
            batch.record_count,
            batch.base_offset,
            batch.base_timestamp,
            batch.max_timestamp,
            bool(batch.attributes & _LOG_APPEND_BIT),
        )


@dataclass(slots=True)
class DecodedColumns:
    """The records of some segments, column by column (Arrow arrays, numpy for the rest)."""

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms
    timestamp_types: np.ndarray  # int32
    keys: pa.Array  # binary
    values: pa.Array  # binary
    headers: list[list[Header] | None] | None  # only when asked for; None: no headers

    def __len__(self) -> int:
        return len(self.offsets)


def _probe() -> bool:
    if sys.byteorder != "little":
        return False
    try:
        views = np.zeros((1, 16), np.uint8)
        views.view(np.int32)[0, 0] = 1
        views[0, 4] = 0x61
        arr = pa.Array.from_buffers(
            pa.binary_view(), 1, [None, pa.py_buffer(views), pa.py_buffer(b"")]
        )
        return bool(arr.cast(pa.binary()).to_pylist() == [b"a"])
    except (AttributeError, NotImplementedError, pa.ArrowException):
        return False


_AVAILABLE = _probe()


def available() -> bool:
    """Whether the numpy decoder works with this pyarrow (>= 16) on this machine."""
    return _AVAILABLE


def _corrupt(what: str) -> CorruptRecordError:
    return CorruptRecordError(f"corrupt record batch: {what}")


def _record_starts(buf: bytes, end: int, count: int, base: int, out: list[int]) -> None:
    """Append ``base`` plus the start of each of the ``count`` records in ``buf[:end]``
    to ``out``; the last record must end exactly at ``end``. (The interpreter-tuned walk;
    the compiled build uses :func:`~aiostream_kafka.protocol.fastrecords.record_starts`.)"""
    if count < 0 or count > end // _MIN_RECORD_SIZE:
        raise _corrupt(f"{count} records claimed in {end} bytes")
    append = out.append
    pos = 0
    try:
        for _ in range(count):
            append(base + pos)
            b = buf[pos]
            if b < 0x80:
                if b & 1:
                    raise _corrupt("negative record length")
                pos += 1 + (b >> 1)
                continue
            c = buf[pos + 1]
            if c < 0x80:
                raw = (b & 0x7F) | (c << 7)
                if raw & 1:
                    raise _corrupt("negative record length")
                pos += 2 + (raw >> 1)
                continue
            length, p = decode_varint(buf, pos)
            if length < 0:
                raise _corrupt("negative record length")
            pos = p + length
    except (IndexError, ProtocolError):
        raise _corrupt("truncated record") from None
    if pos != end:
        raise _corrupt(f"records do not end with their batch ({pos} != {end})")


_walk = fastrecords.record_starts if fastrecords.COMPILED else _record_starts


def _varint(a: np.ndarray, p: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode the zig-zag varint at each position ``p`` of ``a``: (values int64, new p)."""
    b = a[p]
    raw = (b & 0x7F).astype(np.uint64)
    q = p + 1
    going = np.flatnonzero(b & 0x80)
    shift = 7
    while going.size:
        if shift >= 7 * max_bytes:
            raise _corrupt("varint too long")
        pos = q[going]
        b = a[pos]
        raw[going] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        q[going] = pos + 1
        going = going[(b & 0x80) != 0]
        shift += 7
    value = (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)
    return value, q


def _binary(a: np.ndarray, data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A ``binary`` array of ``a[starts[i] : starts[i] + lengths[i]]`` (null for -1)."""
    n = len(starts)
    valid = lengths >= 0
    ln = np.where(valid, lengths, 0).astype(np.int32)
    views = np.zeros((n, 16), np.uint8)
    # Inline bytes for every view (zero past the length), then the long ones get their
    # buffer index (0) and offset in place of bytes 4..11 of that.
    inline = a[starts[:, None] + np.arange(_INLINE)]
    inline[np.arange(_INLINE)[None, :] >= ln[:, None]] = 0
    views[:, 4:] = inline
    v32 = views.view(np.int32)
    v32[:, 0] = ln
    long = np.flatnonzero(ln > _INLINE)
    v32[long, 2] = 0
    v32[long, 3] = starts[long]
    nulls = int(n - np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    arr = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), data], null_count=nulls
    )
    return arr.cast(pa.binary())


def decode_segments(segments: Sequence[Segment], include_headers: bool) -> DecodedColumns:
    """Decode the records of ``segments`` (in order) into columns.

    Raises:
        CorruptRecordError: a malformed record (lengths that do not add up, a negative
            length other than -1 for null, an overlong varint, bad headers).
    """
    try:
        return _decode(segments, include_headers)
    except IndexError:  # a varint pass ran past the padding: garbage lengths
        raise _corrupt("truncated record") from None


def _decode(segments: Sequence[Segment], include_headers: bool) -> DecodedColumns:
    parts: list[bytes] = []
    starts_list: list[int] = []
    counts: list[int] = []
    at = 0
    for seg in segments:
        parts.append(seg.payload)
        _walk(seg.payload, len(seg.payload), seg.count, at, starts_list)
        at += len(seg.payload)
        counts.append(seg.count)
    parts.append(bytes(_PAD))
    joined = b"".join(parts)
    a = np.frombuffer(joined, np.uint8)
    data = pa.py_buffer(joined)
    n = len(starts_list)
    starts = np.array(starts_list, np.int64)
    # Record ends: the next record's start, or the segment's end.
    seg_ends = np.cumsum(np.array([len(s.payload) for s in segments], np.int64))
    rend = np.empty(n, np.int64)
    rend[:-1] = starts[1:]
    if n:
        last = np.cumsum(np.array(counts, np.int64)) - 1
        nonempty = np.array(counts, np.int64) > 0
        rend[last[nonempty]] = seg_ends[nonempty]
    _, p = _varint(a, starts, 5)  # length (checked by the walk)
    p += 1  # attributes
    tsd, p = _varint(a, p, 10)
    od, p = _varint(a, p, 5)
    klen, p = _varint(a, p, 5)
    if n and (klen.min() < -1 or (p + np.maximum(klen, 0) > rend).any()):
        raise _corrupt("bad key length")
    kstart = p
    p = p + np.maximum(klen, 0)
    vlen, p = _varint(a, p, 5)
    if n and (vlen.min() < -1 or (p + np.maximum(vlen, 0) > rend).any()):
        raise _corrupt("bad value length")
    vstart = p
    p = p + np.maximum(vlen, 0)
    hstart = p
    hcount, p = _varint(a, p, 5)
    if n and hcount.min() < 0:
        raise _corrupt("negative header count")
    plain = hcount == 0
    if not bool((p[plain] == rend[plain]).all()) or bool((p > rend).any()):
        raise _corrupt("a record does not match its length")
    headers: list[list[Header] | None] | None = None
    if include_headers:
        headers = [None] * n  # a record without headers: null, as the built-in source
        for i in np.flatnonzero(~plain).tolist():
            hs, hend = decode_record_headers(joined, int(hstart[i]), int(rend[i]))
            if hend != rend[i]:
                raise _corrupt("a record does not match its length")
            headers[i] = hs
    cnt = np.array(counts, np.int64)
    offsets = np.repeat(np.array([s.base_offset for s in segments], np.int64), cnt) + od
    timestamps = np.repeat(np.array([s.base_timestamp for s in segments], np.int64), cnt) + tsd
    log_append = np.repeat(np.array([s.log_append_time for s in segments], np.bool_), cnt)
    if log_append.any():
        max_ts = np.repeat(np.array([s.max_timestamp for s in segments], np.int64), cnt)
        timestamps = np.where(log_append, max_ts, timestamps)
    return DecodedColumns(
        offsets=offsets,
        timestamps=timestamps,
        timestamp_types=log_append.astype(np.int32),
        keys=_binary(a, data, kstart, klen),
        values=_binary(a, data, vstart, vlen),
        headers=headers,
    )
