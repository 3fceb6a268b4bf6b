"""Unit tests of legacy message sets (magic 0 and 1) in aiostream_kafka.protocol.records:
decoded into Records through the same batch interface as v2 batches (no broker)."""

from __future__ import annotations

import struct

import pytest
from legacy_messages import Msg, message, message_set, wrapper

from aiostream_kafka.consumer.prefetch import inflate
from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.protocol.compression import (
    CompressionType,
    DecompressionLimitError,
    compress,
)
from aiostream_kafka.protocol.records import (
    LegacyBatch,
    RecordBatch,
    RecordBatchBuilder,
    decode_columns,
    iter_batches,
    read_records,
)
from aiostream_kafka.protocol.transactions import ReadCommittedFilter
from aiostream_kafka.structs import Record, TimestampType

pytest.importorskip("cramjam")

TS = 1_500_000_000_000
LEGACY_CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]
NO_TS = TimestampType.NO_TIMESTAMP_TYPE
GZIP = CompressionType.GZIP


def rec(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    ts: int = -1,
    ts_type: TimestampType = NO_TS,
) -> Record:
    return Record("t", 0, offset, ts, ts_type, key, value, [], None)


def decode(data: bytes, *, verify_crc: bool = True) -> list[Record]:
    out: list[Record] = []
    for batch in iter_batches(data, verify_crc=verify_crc):
        out += batch.records("t", 0)
    return out


# -- uncompressed ------------------------------------------------------------------------


def test_magic0_uncompressed_run_is_one_batch_with_gaps_and_nulls() -> None:
    msgs = [Msg(5, b"k5", b"v5"), Msg(6, None, b"v6"), Msg(9, b"k9", None), Msg(10, b"", b"")]
    data = message_set(msgs, magic=0)
    (batch,) = iter_batches(data)
    assert isinstance(batch, LegacyBatch) and isinstance(batch, RecordBatch)
    assert (batch.magic, batch.base_offset, batch.last_offset, batch.next_offset) == (0, 5, 10, 11)
    assert batch.record_count == 4
    assert batch.size_in_bytes == len(data)
    assert batch.compression == CompressionType.NONE
    assert not batch.is_control and not batch.is_transactional
    assert (batch.producer_id, batch.partition_leader_epoch) == (-1, -1)
    assert batch.timestamp_type == NO_TS
    assert batch.records("t", 0) == [
        rec(5, b"k5", b"v5"),
        rec(6, None, b"v6"),
        rec(9, b"k9", None),
        rec(10, b"", b""),
    ]
    assert batch.records("t", 0)[0].headers == []
    assert inflate(batch) is batch  # nothing to decompress: held as it came
    assert "LegacyBatch(magic=0, base_offset=5" in repr(batch)


def test_magic1_uncompressed_keeps_each_timestamp_and_type() -> None:
    create = message_set([Msg(0, b"a", b"1", TS), Msg(1, b"b", b"2", TS - 7)], magic=1)
    appended = message_set(
        [Msg(2, b"c", b"3", TS + 50), Msg(3, b"d", b"4", TS + 60)], magic=1, attributes=0x08
    )
    batches = list(iter_batches(create + appended))
    # CreateTime messages share a batch; LogAppendTime ones with different timestamps
    # cannot (a batch has one append time), so each is its own.
    assert [(b.base_offset, b.record_count) for b in batches] == [(0, 2), (2, 1), (3, 1)]
    assert [b.timestamp_type for b in batches] == [
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
        TimestampType.LOG_APPEND_TIME,
    ]
    assert (batches[0].base_timestamp, batches[0].max_timestamp) == (TS, TS)
    assert decode(create + appended) == [
        rec(0, b"a", b"1", TS, TimestampType.CREATE_TIME),
        rec(1, b"b", b"2", TS - 7, TimestampType.CREATE_TIME),
        rec(2, b"c", b"3", TS + 50, TimestampType.LOG_APPEND_TIME),
        rec(3, b"d", b"4", TS + 60, TimestampType.LOG_APPEND_TIME),
    ]


def test_a_long_run_is_cut_into_batches_of_about_64_kib() -> None:
    msgs = [Msg(i, None, bytes([i % 251]) * 1000) for i in range(300)]
    batches = list(iter_batches(message_set(msgs, magic=0)))
    assert len(batches) == 5
    assert all(b.size_in_bytes <= 64 * 1024 + 1100 for b in batches)
    assert [b.next_offset for b in batches[:-1]] == [b.base_offset for b in batches[1:]]
    assert [r.offset for b in batches for r in b.records("t", 0)] == list(range(300))


def test_magic_changes_and_v2_batches_follow_in_one_buffer() -> None:
    old = message_set([Msg(0, b"a", b"0")], magic=0)
    newer = message_set([Msg(1, b"b", b"1", TS)], magic=1)
    builder = RecordBatchBuilder()
    builder.append(b"c", b"2", [("h", b"x")], TS + 1)
    v2 = builder.build(base_offset=2)
    batches = list(iter_batches(old + newer + v2))
    assert [type(b).__name__ for b in batches] == ["LegacyBatch", "LegacyBatch", "RecordBatch"]
    assert read_records(old + newer + v2, "t", 0) == [
        rec(0, b"a", b"0"),
        rec(1, b"b", b"1", TS, TimestampType.CREATE_TIME),
        Record("t", 0, 2, TS + 1, TimestampType.CREATE_TIME, b"c", b"2", [("h", b"x")], None),
    ]


# -- compressed ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_magic1_wrapper_inner_offsets_are_relative(codec: CompressionType) -> None:
    inner = [Msg(0, b"k0", b"v0", TS), Msg(1, None, b"v1", TS + 1), Msg(2, b"k2", None, TS + 2)]
    data = wrapper(inner, codec, magic=1, offset=102, timestamp=TS + 2)
    (batch,) = iter_batches(data)
    assert isinstance(batch, LegacyBatch)
    # Known before decompressing: where the next fetch starts, the codec, the wire size.
    assert batch.next_offset == 103
    assert batch.compression == codec
    assert batch.size_in_bytes == len(data)
    records = batch.records("t", 0)
    assert records == [
        rec(100, b"k0", b"v0", TS, TimestampType.CREATE_TIME),
        rec(101, None, b"v1", TS + 1, TimestampType.CREATE_TIME),
        rec(102, b"k2", None, TS + 2, TimestampType.CREATE_TIME),
    ]
    # Decoding set the fields to the inner messages'.
    assert (batch.base_offset, batch.record_count, batch.next_offset) == (100, 3, 103)
    assert (batch.base_timestamp, batch.max_timestamp) == (TS, TS + 2)
    full = inflate(batch)
    assert isinstance(full, LegacyBatch)
    assert full.compression == CompressionType.NONE
    assert full.size_in_bytes == len(message_set(inner, magic=1))  # decompressed size
    assert (full.base_offset, full.next_offset, full.record_count) == (100, 103, 3)
    assert full.records("t", 0) == records


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_magic0_wrapper_inner_offsets_are_absolute(codec: CompressionType) -> None:
    # (lz4: written with the broken header checksum of KAFKA-3160, as magic 0 always was)
    inner = [Msg(40, b"a", b"x"), Msg(41, None, None), Msg(43, b"c", b"z" * 5000)]
    data = wrapper(inner, codec, magic=0, offset=43)
    (batch,) = iter_batches(data)
    assert batch.next_offset == 44
    assert batch.timestamp_type == NO_TS
    assert batch.records("t", 0) == [
        rec(40, b"a", b"x"),
        rec(41, None, None),
        rec(43, b"c", b"z" * 5000),
    ]
    assert (batch.base_offset, batch.record_count) == (40, 3)


def test_lz4_kafka_3160_checksum_is_accepted_for_magic0_only() -> None:
    inner = [Msg(0, None, b"lz4 " * 20, TS)]
    good0 = wrapper(inner, CompressionType.LZ4, magic=0, offset=0, kafka_3160_lz4=False)
    assert decode(good0)[0].value == b"lz4 " * 20  # a correct checksum is fine too
    broken1 = wrapper(inner, CompressionType.LZ4, magic=1, offset=0, kafka_3160_lz4=True)
    (batch,) = iter_batches(broken1)
    with pytest.raises(CorruptRecordError, match=r"legacy message at offset 0: .*lz4"):
        batch.records("t", 0)


def test_magic1_log_append_time_wrapper_stamps_every_inner_message() -> None:
    inner = [Msg(0, b"a", b"1", TS), Msg(1, b"b", b"2", TS + 5)]
    data = wrapper(
        inner, CompressionType.GZIP, magic=1, offset=11, timestamp=TS + 999, log_append_time=True
    )
    (batch,) = iter_batches(data)
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert decode(data) == [
        rec(10, b"a", b"1", TS + 999, TimestampType.LOG_APPEND_TIME),
        rec(11, b"b", b"2", TS + 999, TimestampType.LOG_APPEND_TIME),
    ]


def test_wrappers_and_plain_messages_interleave() -> None:
    data = (
        message_set([Msg(0, b"p", b"0", TS)], magic=1)
        + wrapper([Msg(0, None, b"1", TS), Msg(1, None, b"2", TS)], CompressionType.GZIP,
                  magic=1, offset=2, timestamp=TS)
        + message_set([Msg(3, b"q", b"3", TS)], magic=1)
        + wrapper([Msg(0, None, b"4", TS)], CompressionType.SNAPPY, magic=1, offset=4,
                  timestamp=TS)
    )  # fmt: skip
    batches = list(iter_batches(data))
    assert [b.next_offset for b in batches] == [1, 3, 4, 5]
    assert [r.offset for r in decode(data)] == [0, 1, 2, 3, 4]
    assert [r.value for r in decode(data)] == [b"0", b"1", b"2", b"3", b"4"]


def test_columnar_decoding_sees_the_same_records() -> None:
    data = message_set([Msg(7, b"k", b"v", TS), Msg(9, None, None, TS + 3)], magic=1)
    data += wrapper(
        [Msg(0, b"a", b"b", TS + 4), Msg(1, None, b"c", TS + 2)],
        CompressionType.LZ4,
        magic=1,
        offset=11,
        timestamp=TS + 4,
    )
    data += message_set([Msg(12, b"m0", b"x")], magic=0)
    for batch in iter_batches(data):
        expected = batch.records("t", 0)
        offsets, timestamps, keys, values, headers = decode_columns(batch)
        assert offsets == [r.offset for r in expected]
        assert timestamps == [r.timestamp_ms for r in expected]
        assert keys == [r.key for r in expected]
        assert values == [r.value for r in expected]
        assert headers == [[] for _ in expected]


def test_read_committed_filter_keeps_legacy_batches() -> None:
    data = wrapper([Msg(0, None, b"v", TS)], CompressionType.GZIP, magic=1, offset=3, timestamp=TS)
    (batch,) = iter_batches(data)
    assert not ReadCommittedFilter([]).skip(batch)


def test_decompression_of_a_wrapper_is_bounded() -> None:
    inner = [Msg(i, None, bytes(100_000), TS) for i in range(20)]
    data = wrapper(inner, CompressionType.GZIP, magic=1, offset=19, timestamp=TS)
    assert len(data) < 20_000
    (batch,) = iter_batches(data)
    with pytest.raises(DecompressionLimitError, match="legacy message at offset 19"):
        batch.records("t", 0, max_decompressed_bytes=1_000_000)
    assert len(batch.records("t", 0, max_decompressed_bytes=3_000_000)) == 20


# -- CRC ---------------------------------------------------------------------------------------


def test_bad_crc_of_a_plain_message_is_refused_after_the_good_ones() -> None:
    msgs = [Msg(0, b"a", b"good"), Msg(1, b"b", b"evil"), Msg(2, b"c", b"after")]
    data = bytearray(message_set(msgs, magic=0))
    data[data.index(b"evil")] ^= 0x20  # "Evil": the stored CRC no longer matches
    it = iter_batches(bytes(data))
    first = next(it)
    assert first.records("t", 0) == [rec(0, b"a", b"good")]  # what came before stays usable
    with pytest.raises(CorruptRecordError, match="legacy message at offset 1 failed its CRC"):
        next(it)
    # check_crcs off: everything decodes, the corrupt value as it is.
    (batch,) = iter_batches(bytes(data), verify_crc=False)
    assert [r.value for r in batch.records("t", 0)] == [b"good", b"Evil", b"after"]
    with pytest.raises(CorruptRecordError, match="offset 1 failed its CRC"):
        batch.verify_crc()
    assert batch.compute_crc() == batch.crc  # (the first message's)


def test_bad_crc_of_a_wrapper() -> None:
    data = bytearray(
        wrapper([Msg(0, None, b"v", TS)], CompressionType.GZIP, magic=1, offset=8, timestamp=TS)
    )
    data[20] ^= 0x01  # a bit of the wrapper's timestamp: covered by its CRC-32
    with pytest.raises(CorruptRecordError, match="legacy message at offset 8 failed its CRC"):
        list(iter_batches(bytes(data)))
    (batch,) = iter_batches(bytes(data), verify_crc=False)
    assert batch.compute_crc() != batch.crc
    with pytest.raises(CorruptRecordError, match="offset 8 failed its CRC"):
        batch.verify_crc()
    assert [r.value for r in batch.records("t", 0)] == [b"v"]


def test_bad_crc_of_an_inner_message_is_checked_with_the_wrapper() -> None:
    inner = bytearray(message_set([Msg(0, None, b"fine", TS), Msg(1, None, b"evil", TS)], magic=1))
    inner[inner.index(b"evil")] ^= 0x20
    data = message(5, None, compress(GZIP, bytes(inner)), magic=1, attributes=1, timestamp=TS)
    (batch,) = iter_batches(data)  # the wrapper's own CRC is right
    # (inner offsets of magic 1 are relative: the inner message at 1 is offset 5)
    with pytest.raises(
        CorruptRecordError, match="legacy message at offset 5: inner message at offset 1 failed"
    ):
        batch.records("t", 0)
    (batch,) = iter_batches(data, verify_crc=False)
    assert [r.value for r in batch.records("t", 0)] == [b"fine", b"Evil"]


# -- truncation and corruption ------------------------------------------------------------


def test_partial_trailing_message_is_ignored_at_every_cut() -> None:
    parts = [
        message_set([Msg(0, b"a", b"x" * 30, TS), Msg(1, None, b"y", TS)], magic=1),
        wrapper([Msg(0, b"b", b"z" * 40, TS), Msg(1, b"c", None, TS)], CompressionType.GZIP,
                magic=1, offset=3, timestamp=TS),
        message_set([Msg(4, None, b"w" * 10)], magic=0),
    ]  # fmt: skip
    data = b"".join(parts)
    # Where each top-level message ends, read from the buffer itself.
    bounds = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0]
        pos += 12 + size
        bounds.append(pos)
    counts = [1, 2, 4, 5]  # offsets decoded once each message is complete
    assert len(bounds) == len(counts)
    for cut in range(len(data) + 1):
        complete = sum(1 for b in bounds if b <= cut)
        want = counts[complete - 1] if complete else 0
        assert [r.offset for r in decode(data[:cut])] == list(range(want)), cut


@pytest.mark.parametrize(
    ("mutation", "match"),
    [
        ("size_small_v1", "impossible size 20"),
        ("key_length", "key length -2"),
        ("value_overrun", "does not match its size"),
    ],
)
def test_malformed_plain_messages(mutation: str, match: str) -> None:
    if mutation == "size_small_v1":
        # A magic 1 message needs 22 bytes after offset and size; claim 20 (>= the v0 14).
        body = struct.pack(">bB", 1, 0) + struct.pack(">q", TS) + struct.pack(">ii", -1, -1)
        data = struct.pack(">qi", 0, 20) + struct.pack(">I", 0) + body[:16]
        with pytest.raises(CorruptRecordError, match=match):
            list(iter_batches(data, verify_crc=False))
        return
    data = bytearray(message(0, b"key", b"value", magic=0))
    if mutation == "key_length":
        data[18:22] = struct.pack(">i", -2)
    else:
        data[25:29] = struct.pack(">i", 6)  # value length past the message's end
    (batch,) = iter_batches(bytes(data), verify_crc=False)
    with pytest.raises(CorruptRecordError, match=match):
        batch.records("t", 0)


def test_nested_compression_and_disordered_inner_offsets_are_corrupt() -> None:
    nested = wrapper([Msg(0, None, b"v", TS)], GZIP, magic=1, offset=0, timestamp=TS)
    outer = message(1, None, compress(CompressionType.GZIP, nested), magic=1, attributes=1)
    (batch,) = iter_batches(outer)
    with pytest.raises(CorruptRecordError, match="compressed inside a compressed message"):
        batch.records("t", 0)
    backwards = wrapper(
        [Msg(1, None, b"a", TS), Msg(0, None, b"b", TS)],
        CompressionType.GZIP,
        magic=1,
        offset=5,
        timestamp=TS,
    )
    (batch,) = iter_batches(backwards)
    with pytest.raises(CorruptRecordError, match="follows offset"):
        batch.records("t", 0)
    empty = message(3, None, compress(CompressionType.GZIP, b""), magic=1, attributes=1)
    (batch,) = iter_batches(empty)
    with pytest.raises(CorruptRecordError, match="holds no message"):
        batch.records("t", 0)
    truncated_inner = message_set([Msg(0, None, b"v" * 10, TS)], magic=1)[:-3]
    cut = message(4, None, compress(CompressionType.GZIP, truncated_inner), magic=1, attributes=1)
    (batch,) = iter_batches(cut)
    with pytest.raises(CorruptRecordError, match="truncated"):
        batch.records("t", 0)


def test_unknown_legacy_codec_is_corrupt() -> None:
    data = message(0, None, b"whatever", magic=1, attributes=4, timestamp=TS)  # zstd: v2 only
    (batch,) = iter_batches(data)
    with pytest.raises(CorruptRecordError, match="compression codec 4"):
        batch.records("t", 0)


def test_spark_columnar_segments_see_the_same_records() -> None:
    pytest.importorskip("pyarrow")
    from aiostream_kafka.spark import columns

    if not columns.available():
        pytest.skip("the numpy column decoder needs pyarrow >= 16 on a little-endian machine")
    data = message_set([Msg(3, b"k", b"v", TS), Msg(4, None, b"w", TS + 1)], magic=1)
    data += wrapper(
        [Msg(0, b"a", None, TS + 2), Msg(1, b"b", b"c", TS + 3)],
        CompressionType.GZIP,
        magic=1,
        offset=6,
        timestamp=TS + 3,
    )
    batches = list(iter_batches(data))
    expected = [r for b in iter_batches(data) for r in b.records("t", 0)]
    cols = columns.decode_segments([columns.Segment.of(b, 1 << 20) for b in batches], False)
    assert list(cols.offsets) == [r.offset for r in expected] == [3, 4, 5, 6]
    assert list(cols.timestamps) == [r.timestamp_ms for r in expected]
    assert cols.keys.to_pylist() == [r.key for r in expected]
    assert cols.values.to_pylist() == [r.value for r in expected]
