"""The fake broker's pure pieces: partition logs (offsets, validation, idempotence,
reads, timestamps) and fetch sessions."""

from __future__ import annotations

from aiostream_kafka.protocol.compression import CompressionType
from aiostream_kafka.protocol.records import RecordBatchBuilder, iter_batches
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.fetch_sessions import FetchSessionCache, SessionPartition
from aiostream_kafka.testing.fake.log import PartitionLog


def _batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    ts: int = 1000,
    compression: CompressionType = CompressionType.NONE,
) -> bytes:
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(None, value, None, ts + i)
    return builder.build(
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        compression=compression,
    )


def test_append_assigns_offsets_and_keeps_the_batch_valid() -> None:
    log = PartitionLog("t", 0)
    assert log.append(_batch([b"a", b"b"]), leader_epoch=3).base_offset == 0
    result = log.append(_batch([b"c"], compression=CompressionType.ZSTD), leader_epoch=3)
    assert (result.error_code, result.base_offset) == (errors.NONE, 2)
    assert log.high_watermark == 3
    stored = list(iter_batches(log.read(0, 1 << 20, min_one=True)))  # CRCs checked
    assert [b.base_offset for b in stored] == [0, 2]
    assert {b.partition_leader_epoch for b in stored} == {3}
    assert [(r.offset, r.value) for r in log.records()] == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_corrupt_truncated_and_oversized_batches_are_refused() -> None:
    log = PartitionLog("t", 0)
    good = _batch([b"x" * 100])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    assert log.append(bytes(flipped), leader_epoch=0).error_code == errors.CORRUPT_MESSAGE
    assert log.append(good[:-5], leader_epoch=0).error_code == errors.CORRUPT_MESSAGE
    assert log.append(good + b"\0\0", leader_epoch=0).error_code == errors.CORRUPT_MESSAGE
    big = log.append(good, leader_epoch=0, max_batch_bytes=100)
    assert big.error_code == errors.MESSAGE_TOO_LARGE
    assert log.high_watermark == 0


def test_idempotence_duplicates_gaps_and_epochs() -> None:
    log = PartitionLog("t", 0)
    first = _batch([b"a", b"b"], producer_id=7, epoch=0, sequence=0)
    assert log.append(first, leader_epoch=0).base_offset == 0
    second = _batch([b"c"], producer_id=7, epoch=0, sequence=2)
    assert log.append(second, leader_epoch=0).base_offset == 2
    # a resend of either of the last batches: answered with its offset, not written
    assert log.append(first, leader_epoch=0).base_offset == 0
    assert log.append(second, leader_epoch=0).base_offset == 2
    assert log.high_watermark == 3
    gap = _batch([b"d"], producer_id=7, epoch=0, sequence=5)
    assert log.append(gap, leader_epoch=0).error_code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = _batch([b"d"], producer_id=7, epoch=1, sequence=0)
    assert log.append(bumped, leader_epoch=0).base_offset == 3
    stale = _batch([b"e"], producer_id=7, epoch=0, sequence=3)
    assert log.append(stale, leader_epoch=0).error_code == errors.INVALID_PRODUCER_EPOCH
    fresh_not_zero = _batch([b"f"], producer_id=8, epoch=0, sequence=4)
    code = log.append(fresh_not_zero, leader_epoch=0).error_code
    assert code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [r.value for r in log.records()] == [b"a", b"b", b"c", b"d"]


def test_reads_are_bounded_but_return_one_whole_batch() -> None:
    log = PartitionLog("t", 0)
    for i in range(5):
        log.append(_batch([b"%d" % i * 200]), leader_epoch=0)
    one = len(log.batches[0].data)
    assert len(log.read(0, 10, min_one=True)) == one  # KIP-74: larger than the limit
    assert log.read(0, 10, min_one=False) == b""
    assert len(log.read(2, one * 2, min_one=False)) == one * 2
    assert [b.base_offset for b in iter_batches(log.read(3, 1 << 20, min_one=True))] == [3, 4]
    assert log.read(5, 1 << 20, min_one=True) == b""


def test_delete_records_timestamps_and_listeners() -> None:
    log = PartitionLog("t", 0)
    woken: list[int] = []
    log.add_listener(lambda: woken.append(1))
    log.append(_batch([b"a", b"b"], ts=1000), leader_epoch=0)
    log.append(_batch([b"c", b"d"], ts=5000), leader_epoch=0)
    assert woken == [1]  # called once, then forgotten
    log.append(_batch([b"e"], ts=2000), leader_epoch=0)
    assert woken == [1]
    assert log.offset_for_timestamp(1001) == (1, 1001)
    assert log.offset_for_timestamp(4000) == (2, 5000)
    assert log.offset_for_timestamp(9000) is None
    assert log.max_timestamp() == (3, 5001)
    assert log.delete_records(3) == 3
    assert len(log.batches) == 2  # the batch holding 3 stays, as in Kafka
    assert [r.offset for r in log.records()] == [3, 4]
    assert log.offset_for_timestamp(0) == (3, 5001)


def test_fetch_session_cache_creates_updates_and_evicts() -> None:
    cache = FetchSessionCache(capacity=2)
    first = cache.create()
    first.update([SessionPartition("t", 0, 5, 100), SessionPartition("t", 1, 0, 100)])
    first.partitions[("t", 0)].sent_high_watermark = 9
    first.update([SessionPartition("t", 0, 7, 200)])
    kept = first.partitions[("t", 0)]
    assert (kept.fetch_offset, kept.max_bytes, kept.sent_high_watermark) == (7, 200, 9)
    first.forget([("t", 1)])
    assert list(first.partitions) == [("t", 0)]
    second = cache.create()
    assert cache.get(first.session_id) is first  # now the most recently used
    cache.create()
    assert cache.get(second.session_id) is None and cache.get(first.session_id) is first
