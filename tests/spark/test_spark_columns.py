"""The columnar decoding of the Spark reader, without Spark or a broker: the numpy decoder
against decode_columns, corrupt input, and the range fetcher's filing of a response
(control batches, aborted transactions, range bounds)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.protocol.compression import CompressionType, is_available
from aiostream_kafka.protocol.messages.fetch import FetchResponse
from aiostream_kafka.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
    decode_columns,
    iter_batches,
)
from aiostream_kafka.spark import columns
from aiostream_kafka.spark.fetch import RangeFetcher
from aiostream_kafka.spark.options import parse_source_options
from aiostream_kafka.structs import TimestampType, TopicPartition

CODECS = [c for c in CompressionType if is_available(c)]
LIMIT = 1 << 30


def _batch(rng: random.Random, base_offset: int, **kwargs: object) -> bytes:
    ts_type = rng.choice(list(TimestampType))
    builder = RecordBatchBuilder(LIMIT, timestamp_type=ts_type)
    for _ in range(rng.randint(1, 50)):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.choice([0, 1, 12, 13, 64, 9000]))
        value = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 12, 13, 100, 20000]))
        headers = [
            (f"h{j}", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 70)))
            for j in range(rng.choice([0, 0, 0, 2]))
        ]
        builder.append(key, value, headers, 1_700_000_000_000 + rng.randint(-(10**6), 10**10))
    return builder.build(base_offset=base_offset, compression=rng.choice(CODECS), **kwargs)  # type: ignore[arg-type]


needs_numpy_path = pytest.mark.skipif(
    not columns.available(), reason="pyarrow without binary_view casts"
)


@needs_numpy_path
@pytest.mark.parametrize("seed", range(8))
def test_numpy_decoder_equals_decode_columns(seed: int) -> None:
    rng = random.Random(seed)
    data = b"".join(_batch(rng, rng.randint(0, 2**40)) for _ in range(rng.randint(1, 12)))
    batches = list(iter_batches(data))
    expected: list[tuple[object, ...]] = []
    for b in batches:
        o, t, k, v, h = decode_columns(b)
        expected += zip(o, t, [int(b.timestamp_type)] * len(o), k, v, h, strict=True)
    for include_headers in (True, False):
        segments = [columns.Segment.of(b, LIMIT) for b in batches]
        cols = columns.decode_segments(segments, include_headers)
        headers = cols.headers if include_headers else [e[5] for e in expected]
        assert headers is not None
        if include_headers:  # no headers: None (null), where decode_columns gives []
            assert all(h is None or h for h in headers)
            headers = [h or [] for h in headers]
        got = list(
            zip(
                cols.offsets.tolist(),
                cols.timestamps.tolist(),
                cols.timestamp_types.tolist(),
                cols.keys.to_pylist(),
                cols.values.to_pylist(),
                headers,
                strict=True,
            )
        )
        assert got == expected


@needs_numpy_path
def test_numpy_decoder_refuses_corrupt_batches() -> None:
    rng = random.Random(99)
    builder = RecordBatchBuilder(LIMIT)
    for i in range(30):
        builder.append(b"k%d" % i, rng.randbytes(rng.randint(0, 300)), [("h", b"x")], i)
    data = builder.build()
    failures = 0
    for _ in range(400):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(61, len(mutated))] = rng.randrange(256)
        (batch,) = iter_batches(bytes(mutated), verify_crc=False)
        try:
            columns.decode_segments([columns.Segment.of(batch, LIMIT)], True)
        except CorruptRecordError:
            failures += 1
    assert failures > 10  # only CorruptRecordError; the rest changed bytes of values


def _fetcher(start: int, end: int, **options: str) -> RangeFetcher:
    opts = parse_source_options(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", **options}
    )
    return RangeFetcher(opts, TopicPartition("t", 0), start, end)


def _plain(base_offset: int, n: int, producer_id: int = -1, txn: bool = False) -> bytes:
    builder = RecordBatchBuilder(LIMIT)
    for i in range(n):
        builder.append(None, b"%d" % (base_offset + i), None, 1000 + i)
    return builder.build(
        base_offset=base_offset, producer_id=producer_id, producer_epoch=0, is_transactional=txn
    )


def _marker(kind: ControlRecordType, offset: int, producer_id: int) -> bytes:
    return build_control_batch(
        kind,
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=5000,
    )


def _file(f: RangeFetcher, data: bytes, aborted: list[tuple[int, int]]) -> list[int]:
    pd = FetchResponse.PartitionData(
        partition_index=0,
        high_watermark=10_000,
        last_stable_offset=10_000,
        records=data,
        aborted_transactions=[
            FetchResponse.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted
        ],
    )
    low = f.position
    kept = f._filter(data, pd)
    batch = f._to_arrow(kept, low) if kept else None
    return [] if batch is None else batch.column("offset").to_pylist()


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    # 0-2 plain; 3-4 txn of producer 7 (aborted), 5 its ABORT marker; 6-7 txn of 8,
    # 8 its COMMIT marker; 9-10 plain.
    data = b"".join(
        [
            _plain(0, 3),
            _plain(3, 2, producer_id=7, txn=True),
            _marker(ControlRecordType.ABORT, 5, 7),
            _plain(6, 2, producer_id=8, txn=True),
            _marker(ControlRecordType.COMMIT, 8, 8),
            _plain(9, 2),
        ]
    )
    committed = _fetcher(0, 11, **{"kafka.isolation.level": "read_committed"})
    assert _file(committed, data, [(7, 3)]) == [0, 1, 2, 6, 7, 9, 10]
    assert committed.position == 11
    uncommitted = _fetcher(0, 11)
    assert _file(uncommitted, data, [(7, 3)]) == [0, 1, 2, 3, 4, 6, 7, 9, 10]
    assert uncommitted.position == 11


def test_range_is_cut_at_both_ends_and_ends_at_a_position() -> None:
    data = _plain(0, 10) + _plain(10, 10)
    f = _fetcher(4, 13)
    assert _file(f, data, []) == list(range(4, 13))
    assert f.position == 20  # past the last batch read: the range is done
    # A range ending in a gap (a marker at its last offset) ends at the position.
    gap = _plain(0, 3) + _marker(ControlRecordType.COMMIT, 3, 1)
    g = _fetcher(0, 4)
    assert _file(g, gap, []) == [0, 1, 2]
    assert g.position == 4


def test_headers_column_is_null_for_records_without_headers() -> None:
    builder = RecordBatchBuilder(LIMIT)
    for i in range(4):
        builder.append(None, b"%d" % i, [("h", b"x%d" % i)] if i == 2 else None, 1000 + i)
    mixed = builder.build(base_offset=0)
    f = _fetcher(0, 4, includeHeaders="true")
    arrow = f._to_arrow(f._filter(mixed, _pd(mixed)), 0)
    assert arrow is not None
    assert arrow.column("headers").to_pylist() == [
        None,
        None,
        [{"key": "h", "value": b"x2"}],
        None,
    ]
    # no headers at all: an all-null column
    plain = _plain(0, 5)
    g = _fetcher(0, 5, includeHeaders="true")
    arrow = g._to_arrow(g._filter(plain, _pd(plain)), 0)
    assert arrow is not None
    assert arrow.column("headers").null_count == 5


def _pd(data: bytes) -> FetchResponse.PartitionData:
    return FetchResponse.PartitionData(
        partition_index=0, high_watermark=10_000, last_stable_offset=10_000, records=data
    )


def _offsets(f: RangeFetcher, data: bytes, low: int) -> list[list[int]]:
    """The offsets of each Arrow batch ``f`` makes of one response of ``data``."""
    kept = f._filter(data, _pd(data))
    return [b.column("offset").to_pylist() for b in f.arrow_batches(kept, low)]


@pytest.mark.parametrize("numpy_decoder", [True, False])
def test_a_response_is_decoded_in_runs_within_the_arrow_batch_limits(
    numpy_decoder: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if numpy_decoder and not columns.available():
        pytest.skip("pyarrow without binary_view casts")
    monkeypatch.setattr(columns, "available", lambda: numpy_decoder)
    # 12 Kafka batches of 10 records, values of 100 bytes: records sections ~1.2 KB each
    data = b"".join(_hundreds(10 * i) for i in range(12))
    by_records = _fetcher(5, 115, maxRecordsPerArrowBatch="25")
    runs = _offsets(by_records, data, 5)
    # runs of two Kafka batches (20 records <= 25); the first and last cut by the range
    assert [len(r) for r in runs] == [15, 20, 20, 20, 20, 15]
    assert [o for r in runs for o in r] == list(range(5, 115))
    by_bytes = _fetcher(0, 120, maxBytesPerArrowBatch="3000")
    runs = _offsets(by_bytes, data, 0)
    assert [len(r) for r in runs] == [20] * 6  # two ~1.2 KB sections fit 3000 bytes, not three
    assert [o for r in runs for o in r] == list(range(120))
    # a Kafka batch over the limits is decoded alone, handed out in slices of the records limit
    tiny = _fetcher(0, 120, maxRecordsPerArrowBatch="4", maxBytesPerArrowBatch="1")
    runs = _offsets(tiny, data, 0)
    assert [len(r) for r in runs] == [4, 4, 2] * 12
    assert [o for r in runs for o in r] == list(range(120))
    assert tiny.read == 120


def _hundreds(base_offset: int) -> bytes:
    builder = RecordBatchBuilder(LIMIT)
    for i in range(10):
        builder.append(None, b"x" * 100, None, 1000 + i)
    return builder.build(base_offset=base_offset)


def test_arrow_batch_limits_are_options_with_defaults() -> None:
    from aiostream_kafka.errors import ConfigError
    from aiostream_kafka.spark.options import (
        DEFAULT_MAX_BYTES_PER_ARROW_BATCH,
        DEFAULT_MAX_RECORDS_PER_ARROW_BATCH,
    )

    f = _fetcher(0, 1)
    assert (f.max_records, f.max_record_bytes) == (
        DEFAULT_MAX_RECORDS_PER_ARROW_BATCH,
        DEFAULT_MAX_BYTES_PER_ARROW_BATCH,
    )
    g = _fetcher(0, 1, maxRecordsPerArrowBatch="1000", maxBytesPerArrowBatch="65536")
    assert (g.max_records, g.max_record_bytes) == (1000, 65536)
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match="maxRecordsPerArrowBatch"):
            _fetcher(0, 1, maxRecordsPerArrowBatch=bad)
        with pytest.raises(ConfigError, match="maxBytesPerArrowBatch"):
            _fetcher(0, 1, maxBytesPerArrowBatch=bad)
