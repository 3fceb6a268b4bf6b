"""The bulk record decoder: the records section of a v2 batch into Record objects.

The consumer's hot loop. :func:`_decode_records` is written for CPython's interpreter;
:mod:`aiostream_kafka.protocol.fastrecords` holds the same loop typed for mypyc, and
``_DECODE`` is whichever of the two runs faster in this process (the compiled one when the
compiled build is in use). :meth:`RecordBatch.records
<aiostream_kafka.protocol.records.RecordBatch.records>` calls ``_DECODE``; the columnar
readers (:func:`~aiostream_kafka.protocol.records.decode_columns`, the Spark data source)
use the record-at-a-time :func:`_decode_record_slow` and :func:`decode_record_headers`.

Performance notes: interpreted, per record the decoder costs about one Record construction
plus ~50 interpreter operations (see :func:`_decode_records`), measured by
``benchmarks/codec_bench.py`` against aiokafka's compiled decoder.

Errors: malformed input raises :class:`~aiostream_kafka.errors.CorruptRecordError`, never
``IndexError``, ``struct.error`` or ``UnicodeDecodeError``; no allocation is sized from an
unchecked length field.
"""

from __future__ import annotations

import struct
from typing import Final

from aiostream_kafka.errors import CorruptRecordError, ProtocolError
from aiostream_kafka.protocol import fastrecords as _fastrecords
from aiostream_kafka.protocol.varint import decode_varint, decode_varlong
from aiostream_kafka.structs import Header, Record, TimestampType

_MIN_RECORD_SIZE: Final = 7  # length, attributes, ts delta, offset delta, key, value, headers


# ---------------------------------------------------------------------------------------
# varint helpers for the slow paths (the hot loops inline the 1- and 2-byte cases)


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


__all__ = ["decode_record_headers"]
