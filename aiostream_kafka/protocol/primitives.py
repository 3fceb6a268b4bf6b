"""Readers and writers of the Kafka wire primitives, used by the generated message codec.

The generated code in :mod:`aiostream_kafka.protocol.messages` packs runs of fixed-width
fields with precompiled :class:`struct.Struct` objects itself; this module holds what is
variable-length: strings, bytes, array lengths, tagged-field sections and UUIDs.

Conventions:

* readers take ``(buf, pos)`` where ``buf`` is a byte :class:`memoryview` of the whole
  frame and ``pos`` an absolute offset; they return ``(value, new_pos)``;
* every declared length is checked against the bytes that remain *before* anything is
  sliced or allocated, so a 2 GB length in a 10-byte frame fails at once;
* readers raise :class:`~aiostream_kafka.errors.ProtocolError` for input they reject.
  They may also let ``struct.error``, ``IndexError`` or ``UnicodeDecodeError`` escape on
  truncated or invalid input; :meth:`Message.decode_from
  <aiostream_kafka.protocol.base.Message.decode_from>` turns those into ``ProtocolError``
  so that a decoder never raises anything else;
* writers append to a :class:`bytearray`.

"Compact" is the encoding of flexible versions (KIP-482): lengths are unsigned varints
of ``length + 1`` with ``0`` meaning null. Non-flexible versions use an int16 length for
strings and an int32 length for bytes and arrays, with ``-1`` meaning null.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError
from aiostream_kafka.protocol.varint import decode_unsigned_varint, encode_unsigned_varint

__all__ = [
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MAX_STRING_BYTES",
    "ZERO_UUID",
    "absent_field_error",
    "null_field_error",
    "read_array_length",
    "read_bytes",
    "read_bytes_view",
    "read_compact_array_length",
    "read_compact_bytes",
    "read_compact_bytes_view",
    "read_compact_nullable_array_length",
    "read_compact_nullable_bytes",
    "read_compact_nullable_bytes_view",
    "read_compact_nullable_number_array",
    "read_compact_nullable_string",
    "read_compact_number_array",
    "read_compact_string",
    "read_fixed_array",
    "read_nullable_array_length",
    "read_nullable_bytes",
    "read_nullable_bytes_view",
    "read_nullable_number_array",
    "read_nullable_string",
    "read_number_array",
    "read_string",
    "read_struct_marker",
    "read_tagged_fields",
    "read_unsigned_varint",
    "read_uuid",
    "read_uuid_array",
    "tagged_fields_unsupported_error",
    "uuid_from_bytes",
    "write_array_length",
    "write_bytes",
    "write_compact_array_length",
    "write_compact_bytes",
    "write_compact_nullable_bytes",
    "write_compact_nullable_string",
    "write_compact_string",
    "write_fixed_array",
    "write_nullable_bytes",
    "write_nullable_string",
    "write_string",
    "write_tagged_fields",
    "write_unsigned_varint",
]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")

#: Kafka refuses strings longer than this many UTF-8 bytes, in every version.
MAX_STRING_BYTES = 0x7FFF

#: The all-zero UUID, Kafka's default for ``uuid`` fields ("no topic id").
ZERO_UUID = UUID(int=0)
_ZERO_UUID_BYTES = bytes(16)

_NULL_INT16 = b"\xff\xff"
_NULL_INT32 = b"\xff\xff\xff\xff"

read_unsigned_varint = decode_unsigned_varint


def write_unsigned_varint(out: bytearray, value: int) -> None:
    """Append the unsigned varint of ``value`` to ``out``."""
    if 0 <= value < 0x80:
        out.append(value)
    else:
        out += encode_unsigned_varint(value)


def _too_long(what: str, length: int, pos: int, buf: memoryview) -> ProtocolError:
    return ProtocolError(
        f"{what} of {length} bytes at offset {pos} exceeds the {len(buf) - pos} bytes left"
    )


# --------------------------------------------------------------------------- strings


def _decode_utf8(buf: memoryview, pos: int, end: int) -> str:
    return str(buf[pos:end], "utf-8")


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    """Read a non-null int16-length string."""
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        raise ProtocolError("null string in a non-nullable field")
    end = pos + n
    if end > len(buf):
        raise _too_long("string", n, pos, buf)
    return _decode_utf8(buf, pos, end), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    """Read an int16-length string; length -1 is null."""
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _too_long("string", n, pos, buf)
    return _decode_utf8(buf, pos, end), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    """Read a non-null compact string."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        raise ProtocolError("null string in a non-nullable field")
    n -= 1
    if n > MAX_STRING_BYTES:
        raise ProtocolError(f"string length {n} exceeds {MAX_STRING_BYTES}")
    end = pos + n
    if end > len(buf):
        raise _too_long("string", n, pos, buf)
    return _decode_utf8(buf, pos, end), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    """Read a compact string; a length varint of 0 is null."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    n -= 1
    if n > MAX_STRING_BYTES:
        raise ProtocolError(f"string length {n} exceeds {MAX_STRING_BYTES}")
    end = pos + n
    if end > len(buf):
        raise _too_long("string", n, pos, buf)
    return _decode_utf8(buf, pos, end), end


def _utf8(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > MAX_STRING_BYTES:
        raise ValueError(
            f"string of {len(data)} UTF-8 bytes is longer than Kafka's {MAX_STRING_BYTES}"
        )
    return data


def write_string(out: bytearray, value: str) -> None:
    """Append a non-null int16-length string."""
    data = _utf8(value)
    out += INT16.pack(len(data))
    out += data


def write_nullable_string(out: bytearray, value: str | None) -> None:
    """Append an int16-length string, or -1 for ``None``."""
    if value is None:
        out += _NULL_INT16
        return
    data = _utf8(value)
    out += INT16.pack(len(data))
    out += data


def write_compact_string(out: bytearray, value: str) -> None:
    """Append a non-null compact string."""
    data = _utf8(value)
    n = len(data) + 1
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)
    out += data


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    """Append a compact string, or a 0 varint for ``None``."""
    if value is None:
        out.append(0)
        return
    data = _utf8(value)
    n = len(data) + 1
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)
    out += data


# --------------------------------------------------------------------------- bytes
# The ``_view`` readers return a memoryview slice of the frame instead of a copy; they
# are used for ``records`` fields and for ``zeroCopy`` bytes fields.


def _int32_length(buf: memoryview, pos: int) -> tuple[int, int]:
    (n,) = INT32.unpack_from(buf, pos)
    return n, pos + 4


def _compact_length(buf: memoryview, pos: int) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        return n - 1, pos + 1
    n, pos = decode_unsigned_varint(buf, pos)
    return n - 1, pos


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    """Read non-null int32-length bytes (a copy)."""
    n, pos = _int32_length(buf, pos)
    if n < 0:
        raise ProtocolError("null bytes in a non-nullable field")
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    """Read int32-length bytes (a copy); length -1 is null."""
    n, pos = _int32_length(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    """Read non-null compact bytes (a copy)."""
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise ProtocolError("null bytes in a non-nullable field")
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    """Read compact bytes (a copy); a length varint of 0 is null."""
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return bytes(buf[pos:end]), end


def read_bytes_view(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    """Like :func:`read_bytes`, returning a slice of ``buf`` without copying."""
    n, pos = _int32_length(buf, pos)
    if n < 0:
        raise ProtocolError("null bytes in a non-nullable field")
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return buf[pos:end], end


def read_nullable_bytes_view(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Like :func:`read_nullable_bytes`, returning a slice of ``buf`` without copying."""
    n, pos = _int32_length(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return buf[pos:end], end


def read_compact_bytes_view(buf: memoryview, pos: int) -> tuple[memoryview, int]:
    """Like :func:`read_compact_bytes`, returning a slice of ``buf`` without copying."""
    n, pos = _compact_length(buf, pos)
    if n < 0:
        raise ProtocolError("null bytes in a non-nullable field")
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return buf[pos:end], end


def read_compact_nullable_bytes_view(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Like :func:`read_compact_nullable_bytes`, returning a slice without copying."""
    n, pos = _compact_length(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _too_long("byte string", n, pos, buf)
    return buf[pos:end], end


BytesLike = bytes | bytearray | memoryview


def write_bytes(out: bytearray, value: BytesLike) -> None:
    """Append non-null int32-length bytes."""
    out += INT32.pack(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: BytesLike | None) -> None:
    """Append int32-length bytes, or -1 for ``None``."""
    if value is None:
        out += _NULL_INT32
        return
    out += INT32.pack(len(value))
    out += value


def write_compact_bytes(out: bytearray, value: BytesLike) -> None:
    """Append non-null compact bytes."""
    n = len(value) + 1
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: BytesLike | None) -> None:
    """Append compact bytes, or a 0 varint for ``None``."""
    if value is None:
        out.append(0)
        return
    n = len(value) + 1
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)
    out += value


# --------------------------------------------------------------------------- arrays


def read_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read a non-null int32 array length, checked against the bytes left."""
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        raise ProtocolError("null array in a non-nullable field")
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_nullable_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read an int32 array length; return -1 for null."""
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return -1, pos
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_compact_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read a non-null compact array length, checked against the bytes left."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        raise ProtocolError("null array in a non-nullable field")
    n -= 1
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def read_compact_nullable_array_length(buf: memoryview, pos: int) -> tuple[int, int]:
    """Read a compact array length; return -1 for null."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    n -= 1
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


def write_array_length(out: bytearray, n: int) -> None:
    """Append an int32 array length."""
    out += INT32.pack(n)


def write_compact_array_length(out: bytearray, n: int) -> None:
    """Append a compact array length (``n + 1``; pass -1 for null)."""
    n += 1
    if n < 0x80:
        out.append(n)
    else:
        out += encode_unsigned_varint(n)


# Precompiled structs for arrays of up to _CACHED_ARRAY_MAX numbers, per struct code.
_CACHED_ARRAY_MAX = 64
_ARRAY_STRUCTS: dict[str, dict[int, struct.Struct]] = {code: {} for code in "?bhHiIqd"}


def read_fixed_array(
    buf: memoryview, pos: int, n: int, code: str, size: int
) -> tuple[list[Any], int]:
    """Read ``n`` fixed-width big-endian numbers of struct ``code`` (``size`` bytes each)."""
    if n == 0:
        return [], pos
    end = pos + n * size
    if end > len(buf):
        raise _too_long("array", n * size, pos, buf)
    if n <= _CACHED_ARRAY_MAX:
        structs = _ARRAY_STRUCTS[code]
        packer = structs.get(n)
        if packer is None:
            packer = structs[n] = struct.Struct(f">{n}{code}")
        return list(packer.unpack_from(buf, pos)), end
    return list(struct.unpack_from(f">{n}{code}", buf, pos)), end


def read_number_array(buf: memoryview, pos: int, code: str, size: int) -> tuple[list[Any], int]:
    """Read a non-null int32-length array of fixed-width numbers (struct ``code``)."""
    (n,) = INT32.unpack_from(buf, pos)
    if n < 0:
        raise ProtocolError("null array in a non-nullable field")
    return read_fixed_array(buf, pos + 4, n, code, size)


def read_nullable_number_array(
    buf: memoryview, pos: int, code: str, size: int
) -> tuple[list[Any] | None, int]:
    """Read an int32-length array of fixed-width numbers; length -1 is null."""
    (n,) = INT32.unpack_from(buf, pos)
    if n < 0:
        return None, pos + 4
    return read_fixed_array(buf, pos + 4, n, code, size)


def read_compact_number_array(
    buf: memoryview, pos: int, code: str, size: int
) -> tuple[list[Any], int]:
    """Read a non-null compact array of fixed-width numbers (struct ``code``)."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        raise ProtocolError("null array in a non-nullable field")
    return read_fixed_array(buf, pos, n - 1, code, size)


def read_compact_nullable_number_array(
    buf: memoryview, pos: int, code: str, size: int
) -> tuple[list[Any] | None, int]:
    """Read a compact array of fixed-width numbers; a length varint of 0 is null."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = decode_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    return read_fixed_array(buf, pos, n - 1, code, size)


def write_fixed_array(out: bytearray, values: Sequence[int], code: str) -> None:
    """Append the elements of ``values`` as big-endian numbers of struct ``code``."""
    if values:
        out += struct.pack(f">{len(values)}{code}", *values)


# --------------------------------------------------------------------------- uuids


def uuid_from_bytes(raw: bytes) -> UUID:
    """Return the UUID of 16 raw bytes (the shared :data:`ZERO_UUID` for all zeros)."""
    if raw == _ZERO_UUID_BYTES:
        return ZERO_UUID
    return UUID(bytes=raw)


def read_uuid(buf: memoryview, pos: int) -> tuple[UUID, int]:
    """Read a 16-byte UUID."""
    end = pos + 16
    if end > len(buf):
        raise _too_long("uuid", 16, pos, buf)
    return uuid_from_bytes(bytes(buf[pos:end])), end


def read_uuid_array(buf: memoryview, pos: int, n: int) -> tuple[list[UUID], int]:
    """Read ``n`` consecutive UUIDs (the length was read by the caller)."""
    end = pos + 16 * n
    if end > len(buf):
        raise _too_long("array", 16 * n, pos, buf)
    raw = bytes(buf[pos:end])
    return [uuid_from_bytes(raw[i : i + 16]) for i in range(0, 16 * n, 16)], end


# --------------------------------------------------------------------------- structs


def read_struct_marker(buf: memoryview, pos: int) -> tuple[bool, int]:
    """Read the int8 presence marker of a nullable struct (KIP-893): negative is null."""
    (marker,) = INT8.unpack_from(buf, pos)
    return marker >= 0, pos + 1


# --------------------------------------------------------------------------- tagged fields


def read_tagged_fields(buf: memoryview, pos: int) -> tuple[dict[int, bytes], int]:
    """Read a tagged-field section in which no tag is known; keep every field raw."""
    if buf[pos] == 0:  # the common case: no tagged fields at all
        return {}, pos + 1
    count, pos = decode_unsigned_varint(buf, pos)
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = decode_unsigned_varint(buf, pos)
        size, pos = decode_unsigned_varint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise _too_long("tagged field", size, pos, buf)
        fields[tag] = bytes(buf[pos:end])
        pos = end
    return fields, pos


def write_tagged_fields(
    out: bytearray,
    unknown: dict[int, bytes],
    known: list[tuple[int, bytes | bytearray]] | None = None,
) -> None:
    """Append a tagged-field section: ``known`` fields (sorted by tag) and raw ``unknown``.

    Tags are written in ascending order, as Kafka writes them.
    """
    if not unknown:
        if not known:
            out.append(0)
            return
        items: list[tuple[int, bytes | bytearray]] = known
    else:
        merged: dict[int, bytes | bytearray] = dict(unknown)
        if known:
            for tag, data in known:
                if tag in merged:
                    raise ValueError(
                        f"unknown_tagged_fields holds tag {tag}, which is a known field here"
                    )
                merged[tag] = data
        items = sorted(merged.items())
    write_unsigned_varint(out, len(items))
    for tag, data in items:
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(data))
        out += data


# --------------------------------------------------------------------------- errors


def absent_field_error(struct_name: str, field: str) -> UnsupportedVersionError:
    """The error for a non-default, non-ignorable field that the version lacks."""
    return UnsupportedVersionError(
        f"{struct_name}.{field} holds a non-default value, but this version has no such "
        "field and it is not ignorable"
    )


def tagged_fields_unsupported_error(struct_name: str) -> UnsupportedVersionError:
    """The error for unknown tagged fields on a struct written in a non-flexible version."""
    return UnsupportedVersionError(
        f"{struct_name}.unknown_tagged_fields is not empty, but this version is not "
        "flexible and cannot carry tagged fields"
    )


def null_field_error(struct_name: str, field: str) -> ValueError:
    """The error for ``None`` in a field that is not nullable in the version."""
    return ValueError(f"{struct_name}.{field} is None, but it is not nullable in this version")
