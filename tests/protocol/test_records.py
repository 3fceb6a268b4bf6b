"""Unit tests of aiostream_kafka.protocol.records: v2 record batches (no broker)."""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiostream_kafka.errors import CorruptRecordError, ProtocolError
from aiostream_kafka.protocol.compression import CompressionType, DecompressionLimitError
from aiostream_kafka.protocol.records import (
    HEADER_SIZE,
    ControlRecord,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    iter_batches,
    read_records,
    restamp_batch,
)
from aiostream_kafka.structs import Record, TimestampType

pytest.importorskip("cramjam")

CODECS = list(CompressionType)
COMPRESSED = CODECS[1:]
TS = 1_700_000_000_000

HeaderList = list[tuple[str, bytes | None]]
RecordSpec = tuple[bytes | None, bytes | None, HeaderList, int]


def build(
    specs: Sequence[RecordSpec],
    compression: CompressionType = CompressionType.NONE,
    **kwargs: Any,
) -> bytes:
    builder = RecordBatchBuilder(batch_size=1 << 30)
    for key, value, headers, ts in specs:
        builder.append(key, value, headers, ts)
    return builder.build(compression=compression, **kwargs)


def fix_crc(batch: bytearray) -> bytearray:
    """Recompute the CRC of a single batch, so a mutation reaches the record decoder."""
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return batch


SAMPLE: list[RecordSpec] = [
    (b"key-0", b"value-0", [], TS),
    (None, b"no key", [("trace", b"abc"), ("empty", b""), ("null", None)], TS + 3),
    (b"no value", None, [], TS + 1),
    (None, None, [("\u00e9t\u00e9", b"\xff\x00")], TS - 5),  # negative timestamp delta
    (b"", b"", [], TS + 100_000),  # multi-byte timestamp delta
    (b"k" * 200, b"v" * 20_000, [("big", b"h" * 300)], TS + 2),  # slow path: 3-byte lengths
]


def expected(
    specs: Sequence[RecordSpec],
    base_offset: int = 0,
    leader_epoch: int | None = None,
    topic: str = "t",
    partition: int = 0,
) -> list[Record]:
    return [
        Record(
            topic,
            partition,
            base_offset + i,
            ts,
            TimestampType.CREATE_TIME,
            key,
            value,
            list(headers),
            leader_epoch,
        )
        for i, (key, value, headers, ts) in enumerate(specs)
    ]


# -- golden bytes ----------------------------------------------------------------------


def test_golden_uncompressed_batch_written_from_the_spec() -> None:
    # Two records, written by hand from Kafka's "Message Format" documentation.
    record0 = bytes.fromhex(
        "10"  # length 8 (zig-zag 16)
        "00"  # attributes
        "00"  # timestampDelta 0
        "00"  # offsetDelta 0
        "02"
        "6b"  # keyLength 1, "k"
        "02"
        "76"  # valueLength 1, "v"
        "00"  # header count 0
    )
    record1 = bytes.fromhex(
        "1e"  # length 15
        "00"  # attributes
        "0a"  # timestampDelta 5
        "02"  # offsetDelta 1
        "01"  # keyLength -1: null key
        "0a"
        "68656c6c6f"  # valueLength 5, "hello"
        "02"  # 1 header
        "02"
        "68"  # header key length 1, "h"
        "02"
        "78"  # header value length 1, "x"
    )
    records = record0 + record1
    after_crc = (
        struct.pack(">h", 0)  # attributes: no compression, CreateTime, not transactional
        + struct.pack(">i", 1)  # lastOffsetDelta
        + struct.pack(">q", 1000)  # baseTimestamp
        + struct.pack(">q", 1005)  # maxTimestamp
        + struct.pack(">q", -1)  # producerId
        + struct.pack(">h", -1)  # producerEpoch
        + struct.pack(">i", -1)  # baseSequence
        + struct.pack(">i", 2)  # records count
        + records
    )
    golden = (
        struct.pack(">q", 0)  # baseOffset
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))  # batchLength
        + struct.pack(">i", -1)  # partitionLeaderEpoch
        + b"\x02"  # magic
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )
    assert len(golden) == 61 + 25

    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", None, 1000)
    builder.append(None, b"hello", [("h", b"x")], 1005)
    assert builder.size_in_bytes == len(golden)
    assert builder.build() == golden

    (batch,) = iter_batches(golden)
    assert batch.base_offset == 0
    assert batch.batch_length == len(golden) - 12
    assert batch.size_in_bytes == len(golden)
    assert batch.magic == 2
    assert batch.crc == crc32c(after_crc)
    assert batch.compression is CompressionType.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert not batch.is_transactional and not batch.is_control and not batch.has_delete_horizon
    assert (batch.last_offset_delta, batch.last_offset, batch.next_offset) == (1, 1, 2)
    assert (batch.base_timestamp, batch.max_timestamp) == (1000, 1005)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.record_count == 2
    assert batch.partition_leader_epoch == -1
    assert batch.records("orders", 3) == [
        Record("orders", 3, 0, 1000, TimestampType.CREATE_TIME, b"k", b"v", [], None),
        Record(
            "orders", 3, 1, 1005, TimestampType.CREATE_TIME, None, b"hello", [("h", b"x")], None
        ),
    ]
    assert "base_offset=0" in repr(batch)


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip(codec: CompressionType) -> None:
    data = build(
        SAMPLE,
        codec,
        base_offset=1000,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=9,
    )
    (batch,) = iter_batches(data)
    assert batch.compression is codec
    assert batch.attributes & 0x07 == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 40)
    assert batch.partition_leader_epoch == 9
    assert batch.base_timestamp == TS and batch.max_timestamp == TS + 100_000
    assert batch.next_offset == 1000 + len(SAMPLE)
    assert batch.records("t", 0) == expected(SAMPLE, 1000, leader_epoch=9)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_empty_batch(codec: CompressionType) -> None:
    builder = RecordBatchBuilder()
    assert builder.record_count == 0 and builder.size_in_bytes == HEADER_SIZE
    data = builder.build(compression=codec)
    (batch,) = iter_batches(data)
    assert batch.record_count == 0
    assert batch.records("t", 0) == []
    assert batch.last_offset_delta == -1 and batch.next_offset == 0


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_many_small_records_use_three_byte_offset_deltas(codec: CompressionType) -> None:
    specs: list[RecordSpec] = [(None, str(i).encode(), [], TS + i // 100) for i in range(10_000)]
    (batch,) = iter_batches(build(specs, codec))
    assert batch.records("t", 0) == expected(specs)


def test_record_sizes_around_the_fast_path_limits() -> None:
    # varint width boundaries: 63/64 (1->2 bytes), 8191/8192 (2->3 bytes)
    sizes = [0, 1, 62, 63, 64, 65, 100, 8180, 8191, 8192, 8200, 70_000]
    specs: list[RecordSpec] = []
    for i, n in enumerate(sizes):
        specs.append((b"k" * (n % 70), b"v" * n, [], TS + (n if i % 2 else -n)))
        specs.append((None, b"w" * n, [("h", b"x" * (n % 100))] if i % 3 == 0 else [], TS))
    data = build(specs)
    assert read_records(data, "t", 0) == expected(specs)


def test_timestamp_deltas_of_every_width() -> None:
    deltas = [0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8193, 1 << 20, 1 << 40, -(1 << 40)]
    specs: list[RecordSpec] = [(None, b"v", [], TS + d) for d in deltas]
    assert read_records(build(specs), "t", 0) == expected(specs)


def test_log_append_time_uses_max_timestamp_for_every_record() -> None:
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    for i in range(5):
        builder.append(None, b"v", None, TS + i)
    (batch,) = iter_batches(builder.build())
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    recs = batch.records("t", 0)
    assert [r.timestamp_ms for r in recs] == [TS + 4] * 5
    assert {r.timestamp_type for r in recs} == {TimestampType.LOG_APPEND_TIME}


def test_default_timestamp_is_now() -> None:
    builder = RecordBatchBuilder()
    before = time.time_ns() // 1_000_000
    builder.append(None, b"v")
    after = time.time_ns() // 1_000_000
    assert before <= builder.base_timestamp <= after
    assert builder.max_timestamp == builder.base_timestamp


def test_append_accepts_buffers_and_bytes_header_names() -> None:
    builder = RecordBatchBuilder()
    assert (
        builder.append(bytearray(b"k"), memoryview(b"value"), [(b"raw", bytearray(b"1"))], TS) == 0
    )
    assert builder.append(None, b"x", None, TS) == 1
    (rec, _) = read_records(builder.build(), "t", 0)
    assert (rec.key, rec.value, rec.headers) == (b"k", b"value", [("raw", b"1")])


def test_multiple_batches_and_leader_epoch() -> None:
    first = build(SAMPLE[:2], base_offset=0, partition_leader_epoch=4)
    second = build(SAMPLE[2:4], CompressionType.ZSTD, base_offset=2)
    batches = list(iter_batches(first + second))
    assert [b.base_offset for b in batches] == [0, 2]
    recs = read_records(first + second, "t", 0)
    assert [r.offset for r in recs] == [0, 1, 2, 3]
    assert [r.leader_epoch for r in recs] == [4, 4, None, None]


def test_input_may_be_bytearray_or_memoryview() -> None:
    data = build(SAMPLE[:3])
    assert read_records(bytearray(data), "t", 0) == read_records(memoryview(data), "t", 0)


# -- builder: size tracking and late producer state -------------------------------------


def test_has_room_for_follows_batch_size() -> None:
    builder = RecordBatchBuilder(batch_size=250)
    assert builder.batch_size == 250
    assert builder.has_room_for(None, b"x" * 1000)  # the first record always fits
    builder.append(None, b"x" * 100, None, TS)
    assert builder.size_in_bytes == HEADER_SIZE + 2 + 1 + 1 + 1 + 1 + 2 + 100 + 1  # 170
    assert not builder.is_full()
    assert builder.has_room_for(None, b"y")
    assert not builder.has_room_for(None, b"y" * 100)
    assert not builder.has_room_for(b"k", b"y", [("header", b"z" * 90)])
    builder.append(None, b"y" * 100, None, TS)
    assert builder.is_full()
    assert builder.record_count == 2


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_rebuild_and_restamp_producer_state(codec: CompressionType) -> None:
    builder = RecordBatchBuilder()
    for key, value, headers, ts in SAMPLE:
        builder.append(key, value, headers, ts)
    draft = builder.build(compression=codec)
    final = builder.build(5, 1234, 7, 99, True, codec)  # compressed payload reused
    assert (
        restamp_batch(
            draft,
            base_offset=5,
            producer_id=1234,
            producer_epoch=7,
            base_sequence=99,
            is_transactional=True,
        )
        == final
    )
    (batch,) = iter_batches(final)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 7, 99)
    assert batch.is_transactional and batch.base_offset == 5
    assert restamp_batch(final, is_transactional=False, partition_leader_epoch=3) == builder.build(
        5, 1234, 7, 99, False, codec, partition_leader_epoch=3
    )
    # appending after a build invalidates the cached compressed records
    builder.append(None, b"late", None, TS)
    assert read_records(builder.build(compression=codec), "t", 0)[-1].value == b"late"


def test_restamp_rejects_non_batches() -> None:
    with pytest.raises(CorruptRecordError):
        restamp_batch(b"short")
    data = build(SAMPLE[:1])
    with pytest.raises(CorruptRecordError):
        restamp_batch(data + b"extra", producer_id=1)
    with pytest.raises(ValueError):
        restamp_batch(data, producer_epoch=1 << 20)


# -- corruption, truncation, unknown formats --------------------------------------------


def test_bad_crc_is_refused_naming_the_offset() -> None:
    data = bytearray(build(SAMPLE[:2], base_offset=42))
    data[-3] ^= 0x01
    with pytest.raises(CorruptRecordError, match="offset 42"):
        list(iter_batches(bytes(data)))
    # verify_crc=False hands the (corrupt) batch out anyway
    (batch,) = iter_batches(bytes(data), verify_crc=False)
    with pytest.raises(CorruptRecordError):
        batch.verify_crc()
    assert batch.compute_crc() != batch.crc


def test_partial_trailing_batch_is_ignored_at_every_cut() -> None:
    first = build(SAMPLE[:2])
    second = build(SAMPLE[2:4], CompressionType.LZ4, base_offset=2)
    data = first + second
    for cut in range(len(data) + 1):
        batches = list(iter_batches(data[:cut]))
        complete = (cut >= len(first)) + (cut == len(data))
        assert len(batches) == complete, cut
        for batch in batches:
            batch.records("t", 0)


def test_lying_batch_length_is_a_partial_batch_not_an_allocation() -> None:
    data = bytearray(build(SAMPLE[:1]))
    data[8:12] = (0x7FFFFFFF).to_bytes(4, "big")
    assert list(iter_batches(bytes(data))) == []


@pytest.mark.parametrize("length", [-1, 0, 13])
def test_impossible_batch_length(length: int) -> None:
    data = bytearray(build(SAMPLE[:1]))
    data[8:12] = length.to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError, match="impossible length"):
        list(iter_batches(bytes(data)))


def test_unknown_magic_is_corrupt() -> None:
    data = bytearray(build(SAMPLE[:1]))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        list(iter_batches(bytes(data)))


def test_lying_record_count() -> None:
    for count in (-1, 0, 1, 3, 1 << 30):
        data = bytearray(build(SAMPLE[:2]))
        data[57:61] = count.to_bytes(4, "big", signed=True)
        (batch,) = iter_batches(bytes(fix_crc(data)))
        with pytest.raises(CorruptRecordError):
            batch.records("t", 0)


def test_decompression_bomb_batch_is_bounded() -> None:
    specs: list[RecordSpec] = [(None, bytes(100_000), [], TS) for _ in range(40)]  # ~4 MB
    data = build(specs, CompressionType.ZSTD)
    assert len(data) < 10_000
    (batch,) = iter_batches(data)
    with pytest.raises(DecompressionLimitError, match="offset 0"):
        batch.records("t", 0, max_decompressed_bytes=1_000_000)
    assert len(batch.records("t", 0, max_decompressed_bytes=5_000_000)) == 40
    with pytest.raises(DecompressionLimitError):
        read_records(data, "t", 0, max_decompressed_bytes=1_000_000)


def test_corrupt_compressed_payload() -> None:
    data = bytearray(build(SAMPLE[:3], CompressionType.GZIP))
    data[70:74] = b"\xde\xad\xbe\xef"
    (batch,) = iter_batches(bytes(fix_crc(data)))
    with pytest.raises(CorruptRecordError):
        batch.records("t", 0)


def test_header_key_must_be_utf8() -> None:
    data = bytearray(build([(None, b"v", [("\u00e9", b"x")], TS)]))
    at = bytes(data).index("\u00e9".encode())
    data[at] = 0xFF
    (batch,) = iter_batches(bytes(fix_crc(data)))
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        batch.records("t", 0)


# -- control records (KIP-98) -----------------------------------------------------------


@pytest.mark.parametrize("kind", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch(kind: ControlRecordType) -> None:
    data = build_control_batch(
        kind,
        base_offset=10,
        producer_id=5,
        producer_epoch=1,
        coordinator_epoch=7,
        timestamp_ms=TS,
        partition_leader_epoch=2,
    )
    (batch,) = iter_batches(data)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.next_offset) == (5, 1, 11)
    assert batch.control_records() == [ControlRecord(10, TS, 0, kind, 7)]
    (raw,) = batch.records("t", 0)
    assert raw.key == struct.pack(">hh", 0, kind)  # version 0, type
    assert raw.value == struct.pack(">hi", 0, 7)  # EndTxnMarker version 0, coordinator epoch
    # read_records skips control batches
    normal = build(SAMPLE[:1], base_offset=11)
    assert [r.offset for r in read_records(data + normal, "t", 0)] == [11]


def _as_control_batch(data: bytes) -> bytes:
    raw = bytearray(data)
    attributes = int.from_bytes(raw[21:23], "big") | 0x30
    raw[21:23] = attributes.to_bytes(2, "big")
    return bytes(fix_crc(raw))


def test_other_control_types_and_malformed_markers() -> None:
    other = _as_control_batch(build([(struct.pack(">hh", 0, 3), b"snapshot", [], TS)]))
    (batch,) = iter_batches(other)
    (rec,) = batch.control_records()
    assert rec.type == 3 and rec.coordinator_epoch is None

    for key, value in [(b"\x00", b""), (struct.pack(">hh", 0, 1), b"\x00")]:
        (batch,) = iter_batches(_as_control_batch(build([(key, value, [], TS)])))
        with pytest.raises(CorruptRecordError):
            batch.control_records()
    (plain,) = iter_batches(build(SAMPLE[:1]))
    with pytest.raises(ProtocolError, match="not a control batch"):
        plain.control_records()


# -- byte compatibility with aiokafka ---------------------------------------------------

_AIOKAFKA_CODECS = {
    CompressionType.NONE: 0,
    CompressionType.GZIP: 1,
    CompressionType.SNAPPY: 2,
    CompressionType.LZ4: 3,
    CompressionType.ZSTD: 4,
}
# aiokafka's builder takes no null header values
AK_SAMPLE: list[RecordSpec] = [
    (k, v, [(n, hv) for n, hv in h if hv is not None], ts) for k, v, h, ts in SAMPLE
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_aiokafka_built_batches_decode_identically(codec: CompressionType) -> None:
    from aiokafka.record.default_records import (  # type: ignore[import-untyped]
        DefaultRecordBatch,
        DefaultRecordBatchBuilder,
    )

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=_AIOKAFKA_CODECS[codec],
        is_transactional=1,
        producer_id=99,
        producer_epoch=4,
        base_sequence=17,
        batch_size=1 << 30,
    )
    for offset, (key, value, headers, ts) in enumerate(AK_SAMPLE):
        builder.append(offset, timestamp=ts, key=key, value=value, headers=headers)
    data = bytes(builder.build())

    (batch,) = iter_batches(data)
    theirs = DefaultRecordBatch(data)
    assert batch.compression == theirs.compression_type == codec
    assert batch.is_transactional and theirs.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (99, 4, 17)
    assert batch.last_offset_delta == theirs.last_offset_delta
    assert batch.max_timestamp == theirs.max_timestamp
    ours = batch.records("t", 0)
    assert ours == expected(AK_SAMPLE)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        (r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in ours
    ]
    # uncompressed, both builders produce the very same bytes
    if codec is CompressionType.NONE:
        assert (
            build(
                AK_SAMPLE,
                codec,
                producer_id=99,
                producer_epoch=4,
                base_sequence=17,
                is_transactional=True,
            )
            == data
        )


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_our_batches_decode_identically_with_aiokafka(codec: CompressionType) -> None:
    from aiokafka.record.default_records import (
        DefaultRecordBatch,
    )
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]

    data = build(SAMPLE, codec, base_offset=500, producer_id=3, producer_epoch=2, base_sequence=1)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert (
        theirs.base_offset,
        theirs.producer_id,
        theirs.producer_epoch,
        theirs.base_sequence,
    ) == (500, 3, 2, 1)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert got == [
        (r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in expected(SAMPLE, 500)
    ]
    # the pure-Python reader of aiokafka agrees too (it has its own varint code)
    records = MemoryRecords(data + build(SAMPLE[:1], codec, base_offset=600))
    count = 0
    while (batch := records.next_batch()) is not None:
        count += sum(1 for _ in batch)
    assert count == len(SAMPLE) + 1


def test_aiokafka_control_batch_parsing_agrees() -> None:
    from aiokafka.record.control_record import ABORT_MARKER  # type: ignore[import-untyped]
    from aiokafka.record.control_record import (
        ControlRecord as AkControl,
    )
    from aiokafka.record.default_records import DefaultRecordBatch

    data = build_control_batch(
        ControlRecordType.ABORT,
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=3,
        timestamp_ms=TS,
    )
    theirs = DefaultRecordBatch(data)
    assert theirs.is_control_batch
    assert AkControl.parse(next(theirs).key) == ABORT_MARKER


# -- fuzzing: only ProtocolError may escape ---------------------------------------------

_headers = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3
)
_record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=80)),
    st.one_of(st.none(), st.binary(max_size=200)),
    _headers,
    st.integers(TS - 100_000, TS + 100_000),
)
FUZZ = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _decode_all(data: bytes, verify_crc: bool = True) -> int:
    n = 0
    for batch in iter_batches(data, verify_crc=verify_crc):
        n += len(batch.records("t", 0, max_decompressed_bytes=1 << 20))
        if batch.is_control:
            batch.control_records(max_decompressed_bytes=1 << 20)
    return n


@FUZZ
@given(
    specs=st.lists(_record, max_size=30),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 1 << 40),
)
def test_fuzz_round_trip(specs: list[RecordSpec], codec: CompressionType, base_offset: int) -> None:
    data = build(specs, codec, base_offset=base_offset)
    assert read_records(data, "t", 0) == expected(specs, base_offset)


@FUZZ
@given(
    specs=st.lists(_record, min_size=1, max_size=12), codec=st.sampled_from(CODECS), data=st.data()
)
def test_fuzz_bit_flips_raise_only_protocol_errors(
    specs: list[RecordSpec], codec: CompressionType, data: st.DataObject
) -> None:
    blob = bytearray(build(specs, codec))
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    if data.draw(st.booleans()):
        blob = fix_crc(blob)  # let the mutation through to the record decoder
    try:
        _decode_all(bytes(blob))
    except ProtocolError:
        pass


@FUZZ
@given(
    specs=st.lists(_record, min_size=1, max_size=12), codec=st.sampled_from(CODECS), data=st.data()
)
def test_fuzz_structural_lies_raise_only_protocol_errors(
    specs: list[RecordSpec], codec: CompressionType, data: st.DataObject
) -> None:
    """Overwrite one header field or one record byte with an extreme value, CRC fixed."""
    blob = bytearray(build(specs, codec))
    target = data.draw(st.sampled_from(["count", "attributes", "record", "length"]))
    if target == "count":
        blob[57:61] = data.draw(st.integers(-(1 << 31), (1 << 31) - 1)).to_bytes(
            4, "big", signed=True
        )
    elif target == "attributes":
        blob[21:23] = data.draw(st.integers(0, 0xFFFF)).to_bytes(2, "big")
    elif target == "length":
        blob[8:12] = data.draw(st.integers(-(1 << 31), (1 << 31) - 1)).to_bytes(
            4, "big", signed=True
        )
    elif len(blob) > HEADER_SIZE:
        i = data.draw(st.integers(HEADER_SIZE, len(blob) - 1))
        blob[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE, 0x03]))
    try:
        _decode_all(bytes(fix_crc(blob)))
    except ProtocolError:
        pass


@FUZZ
@given(junk=st.binary(max_size=400), prefix=st.booleans())
def test_fuzz_random_bytes_raise_only_protocol_errors(junk: bytes, prefix: bool) -> None:
    if prefix:  # a plausible v2 header followed by junk
        junk = struct.pack(">qiib", 0, len(junk) + 9, 0, 2) + junk
    for verify in (True, False):
        try:
            _decode_all(junk, verify_crc=verify)
        except ProtocolError:
            pass


def test_truncated_batches_with_verify_off_raise_only_protocol_errors() -> None:
    # Every truncation of the record section, with the batch length patched to match,
    # so the decoder meets a short buffer rather than a partial batch.
    full = build(SAMPLE[:4])
    for cut in range(HEADER_SIZE, len(full)):
        blob = bytearray(full[:cut])
        blob[8:12] = (cut - 12).to_bytes(4, "big")
        (batch,) = iter_batches(bytes(blob), verify_crc=False)
        with pytest.raises(CorruptRecordError):
            batch.records("t", 0)


def test_record_batch_is_exported() -> None:
    assert RecordBatch.__slots__


@FUZZ
@given(
    values=st.lists(
        st.one_of(st.binary(max_size=40), st.integers(7990, 9000).map(lambda n: b"v" * n)),
        min_size=1,
        max_size=40,
    ),
    deltas=st.lists(
        st.one_of(st.integers(-3, 3), st.integers(-(1 << 40), 1 << 40), st.integers(8000, 9000)),
        min_size=40,
        max_size=40,
    ),
    lead=st.integers(0, 3),
    first_offset=st.sampled_from([0, 8190]),
)
def test_extend_values_encodes_exactly_like_append(
    values: list[bytes], deltas: list[int], lead: int, first_offset: int
) -> None:
    """The producer's bulk path (keyless, headerless records encoded in one pass) gives the
    very bytes of one ``append`` per record, whatever the value sizes, timestamp deltas
    (negative, huge, past the two-byte varints) and offset deltas (past 8,192)."""
    base = 1_700_000_000_000
    stamps = [base + d for d in deltas[: len(values)]]
    one, bulk = RecordBatchBuilder(1 << 30), RecordBatchBuilder(1 << 30)
    for i in range(first_offset + lead):  # records already in the batch, appended singly
        one.append(b"k", b"x", [("h", b"1")], base + i)
        bulk.append(b"k", b"x", [("h", b"1")], base + i)
    for value, ts in zip(values, stamps, strict=True):
        one.append(None, value, None, ts)
    bulk.extend_values(values, stamps)
    assert bulk.record_count == one.record_count
    assert bulk.build(producer_id=7, base_sequence=3) == one.build(producer_id=7, base_sequence=3)
