"""Variable-length integers of the Kafka protocol.

Two encodings exist on the wire:

* unsigned varints (LEB128, 7 bits per byte, least significant group first), used by
  flexible message versions for compact lengths and tagged-field headers;
* signed varints/varlongs, zig-zag mapped to unsigned first, used inside records
  (magic 2) for lengths, deltas and header counts.

Decoders take ``(buf, pos)`` and return ``(value, new_pos)``; they raise
:class:`~aiostream_kafka.errors.ProtocolError` on truncated or over-long input and never
any other exception.
"""

from __future__ import annotations

from aiostream_kafka.errors import ProtocolError

_MAX_VARINT_BYTES = 5  # 32-bit values
_MAX_VARLONG_BYTES = 10  # 64-bit values


def encode_unsigned_varint(value: int) -> bytes:
    """Return the unsigned-varint encoding of ``0 <= value < 2**32``."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint must be >= 0, got {value}")
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes) at ``pos``; return ``(value, new_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise ProtocolError("truncated varint") from None
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    end = pos + _MAX_VARINT_BYTES
    pos += 1
    while pos < end:
        try:
            b = buf[pos]
        except IndexError:
            raise ProtocolError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result >= 1 << 32:
                raise ProtocolError("varint exceeds 32 bits")
            return result, pos
        shift += 7
    raise ProtocolError("varint longer than 5 bytes")


def _decode_unsigned_long(
    buf: bytes | bytearray | memoryview, pos: int, limit: int
) -> tuple[int, int]:
    result = 0
    shift = 0
    end = pos + limit
    while pos < end:
        try:
            b = buf[pos]
        except IndexError:
            raise ProtocolError("truncated varint") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise ProtocolError(f"varint longer than {limit} bytes")


def encode_varint(value: int) -> bytes:
    """Return the zig-zag signed varint encoding of a 32-bit ``value``."""
    return encode_unsigned_varint_long(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Return the zig-zag signed varint encoding of a 64-bit ``value``."""
    return encode_unsigned_varint_long(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def encode_unsigned_varint_long(value: int) -> bytes:
    """Return the unsigned-varint encoding of ``0 <= value < 2**64``."""
    if 0 <= value < 0x80:
        return bytes((value,))
    if value < 0:
        raise ValueError(f"unsigned varint must be >= 0, got {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag signed 32-bit varint at ``pos``; return ``(value, new_pos)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise ProtocolError("truncated varint") from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _decode_unsigned_long(buf, pos, _MAX_VARINT_BYTES)
    if raw >= 1 << 32:
        raise ProtocolError("varint exceeds 32 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag signed 64-bit varint at ``pos``; return ``(value, new_pos)``."""
    raw, pos = _decode_unsigned_long(buf, pos, _MAX_VARLONG_BYTES)
    if raw >= 1 << 64:
        raise ProtocolError("varlong exceeds 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos
