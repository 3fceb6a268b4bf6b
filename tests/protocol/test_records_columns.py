"""decode_columns: the columns equal what RecordBatch.records() gives, record by record."""

from __future__ import annotations

import random

import pytest

from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.protocol.compression import CompressionType, is_available
from aiostream_kafka.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    decode_columns,
    decode_record_headers,
    iter_batches,
)
from aiostream_kafka.structs import TimestampType

CODECS = [c for c in CompressionType if is_available(c)]


def _random_batch(rng: random.Random, codec: CompressionType, ts_type: TimestampType) -> bytes:
    builder = RecordBatchBuilder(1 << 30, timestamp_type=ts_type)
    for _ in range(rng.randint(1, 40)):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.choice([0, 1, 12, 13, 70, 9000]))
        value = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 100, 20000]))
        headers = [
            (f"h{j}-é", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 90)))
            for j in range(rng.choice([0, 0, 1, 70]))
        ]
        builder.append(key, value, headers, 1_700_000_000_000 + rng.randint(-(10**6), 10**10))
    return builder.build(base_offset=rng.randint(0, 2**40), compression=codec)


def _check(data: bytes) -> int:
    n = 0
    for batch in iter_batches(data):
        offsets, timestamps, keys, values, headers = decode_columns(batch)
        records = batch.records("t", 0)
        assert offsets == [r.offset for r in records]
        assert timestamps == [r.timestamp_ms for r in records]
        assert keys == [r.key for r in records]
        assert values == [r.value for r in records]
        assert headers == [list(r.headers) for r in records]
        n += len(records)
    return n


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("ts_type", list(TimestampType), ids=lambda t: t.name)
def test_decode_columns_equals_records(codec: CompressionType, ts_type: TimestampType) -> None:
    rng = random.Random(f"{codec}-{ts_type}")
    for _ in range(30):
        data = b"".join(_random_batch(rng, codec, ts_type) for _ in range(rng.randint(1, 3)))
        assert _check(data) > 0


def test_decode_columns_of_control_batch() -> None:
    data = build_control_batch(
        ControlRecordType.ABORT,
        base_offset=41,
        producer_id=7,
        producer_epoch=1,
        coordinator_epoch=3,
        timestamp_ms=1_700_000_000_000,
    )
    (batch,) = iter_batches(data)
    assert batch.is_control
    offsets, timestamps, keys, _values, headers = decode_columns(batch)
    assert offsets == [41] and timestamps == [1_700_000_000_000]
    assert keys == [b"\x00\x00\x00\x00"] and headers == [[]]
    assert _check(data) == 1


def test_decode_columns_rejects_corrupt_records() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"k", b"value", [("h", b"x")], 1)
    data = bytearray(builder.build())
    data[-1] ^= 0xFF  # the last header value byte: lengths still fit; break the count
    data[61] = 0x7F  # first record's length: far past the batch
    (batch,) = iter_batches(bytes(data), verify_crc=False)
    with pytest.raises(CorruptRecordError):
        decode_columns(batch)


def test_decode_record_headers() -> None:
    builder = RecordBatchBuilder()
    builder.append(None, b"v", [("a", b"1"), ("b", None)], 1)
    (batch,) = iter_batches(builder.build())
    (record,) = batch.records("t", 0)
    assert record.headers == [("a", b"1"), ("b", None)]
    with pytest.raises(CorruptRecordError):
        decode_record_headers(b"\x04\x02", 0, 2)  # two headers announced, one byte of them
