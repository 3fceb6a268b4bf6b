"""The records of a v2 batch decoded by a plain typed loop, for the compiled build.

:func:`decode_records` does what ``records._decode_records`` does -- same arguments, same
results, same errors -- written for mypyc rather than for the interpreter: byte indexing
on ``bytes`` (a C array read once compiled), a simple varint loop on native ints, no
lookup tables, no struct windows, the :class:`~aiostream_kafka.structs.Record`
constructor called directly (a native class once compiled). Interpreted, this loop is
slower than the interpreter-tuned one, so ``records.py`` uses it only when this module
runs compiled (:data:`COMPILED`).

Bounds, as the interpreted loop: the record count is checked against the bytes available
before looping; every record must end where its length says and the last one exactly at
``end``; an index past the buffer is a truncated record.
"""

from __future__ import annotations

from typing import Final

from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.structs import Header, Record, TimestampType

# Whether this module runs compiled (mypyc replaces the function's code, not the source
# text: ``__file__`` tells, see aiostream_kafka._native).
COMPILED: Final[bool] = not __file__.endswith(".py")

# A record takes at least 7 bytes: length, attributes, timestamp delta, offset delta, key
# length, value length and header count of one byte each.
_MIN_RECORD_SIZE: Final = 7


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zig-zag varint (at most 10 bytes) at ``pos``: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of its record")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def _headers(buf: bytes, pos: int, rend: int) -> tuple[list[Header], int]:
    count, pos = _varint(buf, pos, rend)
    if count < 0 or count > (rend - pos) >> 1:
        raise CorruptRecordError(f"invalid header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        n, pos = _varint(buf, pos, rend)
        if n < 0 or pos + n > rend:
            raise CorruptRecordError(f"invalid header key length {n}")
        try:
            name = buf[pos : pos + n].decode()
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not UTF-8") from None
        pos += n
        n, pos = _varint(buf, pos, rend)
        value: bytes | None = None
        if n >= 0:
            if pos + n > rend:
                raise CorruptRecordError("header value overruns its record")
            value = buf[pos : pos + n]
            pos += n
        elif n != -1:
            raise CorruptRecordError("negative header value length")
        headers.append((name, value))
    return headers, pos


def decode_records(
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
    """Decode ``count`` records in ``buf[pos:end]`` (see the module doc)."""
    if count < 0 or count > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"batch at offset {base_offset} claims {count} records in {end - pos} bytes"
        )
    out: list[Record] = []
    for _ in range(count):
        length, p = _varint(buf, pos, end)
        rend = p + length
        if length < 0 or rend > end:
            raise CorruptRecordError(f"invalid record length {length}")
        p += 1  # attributes
        tsd, p = _varint(buf, p, rend)
        od, p = _varint(buf, p, rend)
        n, p = _varint(buf, p, rend)
        key: bytes | None = None
        if n >= 0:
            if p + n > rend:
                raise CorruptRecordError(f"key overruns its record in batch {base_offset}")
            key = buf[p : p + n]
            p += n
        elif n != -1:
            raise CorruptRecordError(f"negative key length in batch {base_offset}")
        n, p = _varint(buf, p, rend)
        value: bytes | None = None
        if n >= 0:
            if p + n > rend:
                raise CorruptRecordError(f"value overruns its record in batch {base_offset}")
            value = buf[p : p + n]
            p += n
        elif n != -1:
            raise CorruptRecordError(f"negative value length in batch {base_offset}")
        if p >= rend:
            raise CorruptRecordError(f"truncated record in batch at offset {base_offset}")
        headers: list[Header]
        if buf[p] == 0:
            headers = []
            p += 1
        else:
            headers, p = _headers(buf, p, rend)
        if p != rend:
            raise CorruptRecordError(
                f"record at offset {base_offset + od} does not match its length"
            )
        pos = p
        out.append(
            Record(
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
        )
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} does not end after its {count} records"
        )
    return out


def encode_values(
    buf: bytearray,
    values: list[bytes],
    timestamps: list[int],
    base_ts: int,
    offset_delta: int,
    zz: tuple[bytes, ...],
    heads: tuple[bytes, ...],
    deltas: tuple[bytes, ...],
) -> tuple[int, int] | None:
    """Append keyless, headerless records to ``buf`` (what
    ``RecordBatchBuilder.extend_values`` does on its fast path); return the offset delta
    after the last one and the largest timestamp, or None, with ``buf`` untouched, when a
    record is outside the tables: a value of 8,000 bytes or more, a ``timestamps[i] -
    base_ts`` outside ``0 .. len(heads) - 1``, or an offset delta past ``len(deltas) - 1``
    (the caller then takes the general path).

    ``zz`` holds the zig-zag varints of 0 .. 8191, ``heads`` the attributes byte with each
    timestamp delta, ``deltas`` each offset delta with a null key: the tables of
    ``records.py``, passed in rather than built twice. Compiled, the loop (checks included)
    runs about 3x the interpreter-tuned one, which the pure build keeps."""
    n = len(values)
    od = offset_delta
    if od + n > len(deltas):
        return None
    limit = len(heads)
    high = base_ts
    parts: list[bytes] = []
    i = 0
    while i < n:
        value = values[i]
        size = len(value)
        ts = timestamps[i]
        tsd = ts - base_ts
        if size >= 8000 or tsd < 0 or tsd >= limit:
            return None
        if ts > high:
            high = ts
        head = heads[tsd]
        delta = deltas[od]
        vlen = zz[size]
        # length, attributes + timestamp delta, offset delta + key, value length, value,
        # header count (0)
        parts.append(zz[len(head) + len(delta) + len(vlen) + size + 1])
        parts.append(head)
        parts.append(delta)
        parts.append(vlen)
        parts.append(value)
        parts.append(b"\x00")
        od += 1
        i += 1
    buf += b"".join(parts)
    return od, high


def encode_pairs(
    buf: bytearray,
    keys: list[bytes | None],
    values: list[bytes],
    timestamps: list[int],
    base_ts: int,
    offset_delta: int,
    zz: tuple[bytes, ...],
    heads: tuple[bytes, ...],
) -> tuple[int, int] | None:
    """:func:`encode_values` for records with a key each (``bytes`` or None; no headers):
    what ``RecordBatchBuilder.extend_pairs`` does on its fast path, for the producer's
    per-record path when it defers keyed records' encoding. Returns the offset delta after
    the last record and the largest timestamp, or None, with ``buf`` untouched, when a key
    or value is 8,000 bytes or more, a timestamp delta is outside ``0 .. len(heads) - 1``
    or an offset delta past ``len(zz) - 1``."""
    n = len(values)
    od = offset_delta
    limit = len(zz)
    if od + n > limit or len(keys) != n:
        return None
    tlimit = len(heads)
    high = base_ts
    parts: list[bytes] = []
    i = 0
    while i < n:
        key = keys[i]
        value = values[i]
        size = len(value)
        ts = timestamps[i]
        tsd = ts - base_ts
        if size >= 8000 or tsd < 0 or tsd >= tlimit:
            return None
        if ts > high:
            high = ts
        head = heads[tsd]
        delta = zz[od]
        vlen = zz[size]
        if key is None:
            kb = b"\x01"
            kn = 0
        else:
            kn = len(key)
            if kn >= 8000:
                return None
            kb = zz[kn]
        body = len(head) + len(delta) + len(kb) + kn + len(vlen) + size + 1
        if body >= limit:
            return None
        parts.append(zz[body])
        parts.append(head)
        parts.append(delta)
        parts.append(kb)
        if key is not None:
            parts.append(key)
        parts.append(vlen)
        parts.append(value)
        parts.append(b"\x00")
        od += 1
        i += 1
    buf += b"".join(parts)
    return od, high


def encode_keyed(
    buf: bytearray,
    keys: list[object],
    values: list[object],
    start: int,
    end: int,
    head: bytes,
    offset_delta: int,
    room: int,
    zz: tuple[bytes, ...],
) -> int:
    """Append records ``start .. end - 1`` of ``keys``/``values`` (``bytes`` or None; no
    headers; one timestamp, whose attributes byte and delta are ``head``) to ``buf`` while
    they fit in ``room`` bytes (the first always does when ``offset_delta`` is 0); return
    how many were appended, or -1, with ``buf`` untouched, when a key or value is not
    ``bytes``/None, is 8,000 bytes or more, or an offset delta would pass ``len(zz) - 1``
    (the caller then appends record by record). What ``RecordBatchBuilder.extend_keyed``
    does on its fast path."""
    od = offset_delta
    limit = len(zz)
    used = 0
    parts: list[bytes] = []
    i = start
    while i < end:
        key = keys[i]
        value = values[i]
        if od >= limit:
            return -1
        body = len(head) + 1 + 1  # head, header count, and the offset delta's first byte
        if od >= 64:  # a zig-zag varint of 64 .. 8191 takes two bytes
            body += 1
        if key is None:
            kb = b"\x01"
            kn = 0
        elif isinstance(key, bytes):
            kn = len(key)
            if kn >= 8000:
                return -1
            kb = zz[kn]
        else:
            return -1
        if value is None:
            vb = b"\x01"
            vn = 0
        elif isinstance(value, bytes):
            vn = len(value)
            if vn >= 8000:
                return -1
            vb = zz[vn]
        else:
            return -1
        body += len(kb) + kn + len(vb) + vn
        if body >= limit:
            return -1
        lb = zz[body]
        if used + len(lb) + body > room and (i > start or od > 0):
            break
        used += len(lb) + body
        parts.append(lb)
        parts.append(head)
        parts.append(zz[od])
        parts.append(kb)
        if key is not None:
            parts.append(key)
        parts.append(vb)
        if value is not None:
            parts.append(value)
        parts.append(b"\x00")
        od += 1
        i += 1
    buf += b"".join(parts)
    return i - start


def record_starts(buf: bytes, end: int, count: int, base: int, out: list[int]) -> None:
    """Append ``base`` plus the start of each of the ``count`` records in ``buf[:end]``
    to ``out`` (a record's first field is its length, a zig-zag varint); the last record
    must end exactly at ``end``. The Spark reader's record walk
    (``aiostream_kafka.spark.columns``) for the compiled build: same results, same errors.

    Raises:
        CorruptRecordError: more records claimed than the bytes can hold, a negative or
            overlong length, a record past ``end``, or records that stop short of it.
    """
    if count < 0 or count > end // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"corrupt record batch: {count} records claimed in {end} bytes")
    if end > len(buf):
        raise CorruptRecordError("corrupt record batch: truncated record")
    pos = 0
    i = 0
    while i < count:
        if pos >= end:
            raise CorruptRecordError("corrupt record batch: truncated record")
        out.append(base + pos)
        b = buf[pos]
        if b < 0x80:
            if b & 1:
                raise CorruptRecordError("corrupt record batch: negative record length")
            pos += 1 + (b >> 1)
        else:
            # A signed 32-bit varint: at most 5 bytes, below 2**32 raw (as decode_varint).
            raw = 0
            shift = 0
            while True:
                if pos >= end or shift > 28:
                    raise CorruptRecordError("corrupt record batch: truncated record")
                b = buf[pos]
                pos += 1
                raw |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            if raw >= 1 << 32:
                raise CorruptRecordError("corrupt record batch: truncated record")
            if raw & 1:
                raise CorruptRecordError("corrupt record batch: negative record length")
            pos += raw >> 1
        i += 1
    if pos != end:
        raise CorruptRecordError(
            f"corrupt record batch: records do not end with their batch ({pos} != {end})"
        )
