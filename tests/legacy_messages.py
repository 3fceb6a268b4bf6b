"""A small, independent encoder of legacy message sets (magic 0 and 1, before Kafka 0.11),
for the tests of their decoding: the unit tests build them by hand, the broker tests
produce them with Produce v2 (the last version that carries them).

Layout of one message (big-endian)::

    offset int64 | messageSize int32 | crc uint32 (CRC-32 from magic to the end)
    magic int8 | attributes int8 | timestamp int64 (magic 1 only)
    keyLength int32 (-1 = null) | key | valueLength int32 (-1 = null) | value

A compressed message ("wrapper") has a null key and the compressed message set of its
inner messages as value; attributes bits 0-2 name the codec (gzip 1, snappy 2, lz4 3) and,
for magic 1, bit 3 the timestamp type.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from aiostream_kafka.protocol.compression import CompressionType, compress, lz4_header_checksum

LOG_APPEND_TIME_BIT = 0x08


@dataclass(frozen=True)
class Msg:
    """One legacy message to encode: its offset as stored and its fields."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = -1  # magic 1 only


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    *,
    magic: int,
    attributes: int = 0,
    timestamp: int = -1,
) -> bytes:
    """Encode one legacy message (offset and size included)."""
    body = struct.pack(">bB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _bytes(key) + _bytes(value)
    payload = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(payload)) + payload


def message_set(msgs: list[Msg], *, magic: int, attributes: int = 0) -> bytes:
    """Encode uncompressed messages one after the other."""
    return b"".join(
        message(m.offset, m.key, m.value, magic=magic, attributes=attributes, timestamp=m.timestamp)
        for m in msgs
    )


def wrapper(
    inner: list[Msg],
    codec: CompressionType,
    *,
    magic: int,
    offset: int,
    timestamp: int = -1,
    log_append_time: bool = False,
    kafka_3160_lz4: bool | None = None,
) -> bytes:
    """Encode a compressed message holding ``inner`` (offsets as given: absolute for
    magic 0, relative for magic 1, as brokers store them) at ``offset``.

    lz4 frames of magic 0 get the header checksum Kafka's old writer computed (KAFKA-3160)
    unless ``kafka_3160_lz4`` says otherwise.
    """
    value = compress(codec, message_set(inner, magic=magic))
    if codec == CompressionType.LZ4 and (magic == 0 if kafka_3160_lz4 is None else kafka_3160_lz4):
        frame = bytearray(value)
        flg = frame[4]
        hc_at = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        frame[hc_at] = lz4_header_checksum(frame, broken=True)
        assert frame[hc_at] != value[hc_at], "the broken checksum must differ here"
        value = bytes(frame)
    attributes = int(codec) | (LOG_APPEND_TIME_BIT if log_append_time else 0)
    return message(offset, None, value, magic=magic, attributes=attributes, timestamp=timestamp)
