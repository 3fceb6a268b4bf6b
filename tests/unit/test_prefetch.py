"""PrefetchBuffer on its own: the byte budget (reserved, held, released), the merged
iterators' round-robin of partitions with data, errors queued behind data, and the wake-ups
it gives the scheduler (``on_room``) and the iterators."""

from __future__ import annotations

import asyncio

import pytest

from aiostream_kafka.consumer.errors import CorruptPartitionDataError
from aiostream_kafka.consumer.partition import Chunk, PartitionState, PendingError
from aiostream_kafka.consumer.prefetch import PrefetchBuffer
from aiostream_kafka.errors import KafkaError, ProtocolError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.records import RecordBatchBuilder, iter_batches
from aiostream_kafka.structs import TopicPartition


class Rooms:
    """Counts the buffer's ``on_room`` calls (the scheduler's wake)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def chunk(base: int, count: int, start: int | None = None) -> Chunk:
    """A chunk of one batch holding offsets ``base .. base + count - 1``, fetched at
    ``start`` (default ``base``)."""
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(None, b"v%d" % (base + i), None, 1_000 + i)
    (batch,) = iter_batches(builder.build(base_offset=base))
    size = batch.size_in_bytes
    return Chunk([batch], base if start is None else start, base + count, size, size)


def make(max_bytes: int = 10_000) -> tuple[PrefetchBuffer, Rooms, PartitionState, PartitionState]:
    rooms = Rooms()
    buffer = PrefetchBuffer(max_bytes, 2, rooms)
    return (
        buffer,
        rooms,
        PartitionState(TopicPartition("t", 0), None),
        PartitionState(TopicPartition("t", 1), None),
    )


def test_the_budget_counts_reserved_and_held_bytes_and_returns_them() -> None:
    buffer, rooms, ps, _ = make(10_000)
    buffer.reserve(4_000)
    assert buffer.free() == 6_000
    c = chunk(0, 3)
    buffer.add_chunk(ps, c)
    buffer.unreserve(4_000)  # the round's response was admitted
    assert buffer.free() == 10_000 - c.size and ps.queued_bytes == c.size
    assert rooms.count == 1
    assert buffer.load_head(ps)
    assert buffer.free() == 10_000 - c.size  # the head chunk still holds its bytes
    ps.head_index = len(ps.head)
    buffer.finish_head(ps)
    assert buffer.free() == 10_000 and ps.queued_bytes == 0
    assert buffer.metrics.delivered_bytes == c.size
    assert buffer.metrics.prefetched_bytes_peak == c.size


def test_records_before_the_fetch_offset_are_dropped_on_decoding() -> None:
    buffer, _, ps, _ = make()
    buffer.add_chunk(ps, chunk(10, 5, start=12))  # the batch begins before the offset asked
    assert buffer.load_head(ps)
    assert [r.offset for r in ps.head] == [12, 13, 14]
    assert ps.delivered_position() == 12
    ps.head_index = 3
    assert not buffer.load_head(ps)  # used up, nothing queued
    assert buffer.used == 0


def test_partitions_with_data_are_handed_out_round_robin() -> None:
    buffer, _, p0, p1 = make()
    buffer.add_chunk(p0, chunk(0, 1))
    buffer.add_chunk(p0, chunk(1, 1))
    buffer.add_chunk(p1, chunk(0, 1))
    order = []
    while (ps := buffer.next_ready()) is not None:
        order.append(ps.tp.partition)
        assert buffer.load_head(ps)
        ps.head_index = len(ps.head)
        buffer.finish_head(ps)
        buffer.rotate(ps)
    assert order == [0, 1, 0]


def test_a_paused_partition_keeps_its_data_and_resuming_delivers_it() -> None:
    buffer, rooms, p0, _ = make()
    buffer.add_chunk(p0, chunk(0, 2))
    p0.paused = True
    assert buffer.next_ready() is None  # not handed out, not dropped
    assert p0.queued_bytes > 0 and len(p0.queue) == 1
    before = rooms.count
    p0.paused = False
    buffer.resumed(p0)
    assert buffer.next_ready() is p0
    assert rooms.count == before + 1  # the scheduler looks again (the partition may fetch)


async def test_new_data_wakes_waiting_iterators_and_wake_all_wakes_them_too() -> None:
    buffer, _, p0, _ = make()
    p0.event = asyncio.Event()
    waiter = asyncio.create_task(buffer.wait_data())
    await asyncio.sleep(0)
    assert not waiter.done()
    buffer.add_chunk(p0, chunk(0, 1))
    async with asyncio.timeout(1):
        await waiter
    assert p0.event.is_set()  # the partition's own iterator too
    waiter = asyncio.create_task(buffer.wait_data())
    await asyncio.sleep(0)
    buffer.wake_all()
    async with asyncio.timeout(1):
        await waiter


def test_a_queued_error_is_raised_after_the_data_before_it() -> None:
    buffer, _, ps, _ = make()
    buffer.add_chunk(ps, chunk(0, 2))
    error = ec.OffsetOutOfRangeError("out of range")
    buffer.add_error(ps, PendingError(error, 2))
    assert ps.blocked and not ps.fetchable(2)
    assert buffer.load_head(ps) and [r.offset for r in ps.head] == [0, 1]
    ps.head_index = 2
    for _ in range(2):  # not retriable: raised on every attempt until a seek
        with pytest.raises(KafkaError, match="out of range"):
            buffer.load_head(ps)
    assert ps.blocked and len(ps.queue) == 1
    # A retry error is raised once, then the partition may fetch again.
    buffer.discard(ps)
    buffer.add_error(ps, PendingError(KafkaError("corrupt"), 2, retry=True))
    with pytest.raises(KafkaError, match="corrupt"):
        buffer.load_head(ps)
    assert not ps.queue and not ps.blocked
    assert not buffer.load_head(ps)


def test_discard_releases_the_queue_and_the_head() -> None:
    buffer, rooms, ps, _ = make()
    first, second = chunk(0, 3), chunk(3, 3)
    buffer.add_chunk(ps, first)
    buffer.add_chunk(ps, second)
    assert buffer.load_head(ps)
    before = rooms.count
    buffer.discard(ps)
    assert buffer.used == 0 and ps.queued_bytes == 0 and not ps.queue and not ps.head
    assert buffer.metrics.discarded_bytes == first.size + second.size
    assert rooms.count == before + 1


def test_a_corrupt_chunk_is_dropped_and_fetched_again_from_its_offset() -> None:
    buffer, _, ps, _ = make()
    good = chunk(0, 2)
    bad = chunk(2, 2)

    class Broken:  # a batch whose records do not decode
        def records(self, topic: str, partition: int) -> list[object]:
            raise ProtocolError("bad varint")

    bad.batches = [Broken()]  # type: ignore[list-item]
    buffer.add_chunk(ps, good)
    buffer.add_chunk(ps, bad)
    ps.fetch_position = 4
    assert buffer.load_head(ps)
    ps.head_index = 2
    generation = ps.generation
    with pytest.raises(CorruptPartitionDataError):
        buffer.load_head(ps)
    assert ps.fetch_position == 2 and ps.generation == generation + 1
    assert buffer.used == 0 and not ps.queue


def test_the_expansion_ratio_rises_at_once_and_falls_slowly() -> None:
    buffer, _, _, _ = make()
    buffer.observe_expansion(100, 400)
    assert buffer.expansion == 4.0
    buffer.observe_expansion(100, 100)
    assert buffer.expansion == pytest.approx(3.7)
    buffer.observe_expansion(100, 50)  # never below 1: data is not smaller than the wire
    assert 1.0 <= buffer.expansion < 3.7
    buffer.observe_expansion(0, 10)  # nothing on the wire: ignored
    assert buffer.expansion < 3.7


def test_partitioned_mode_wakes_the_partition_but_not_the_merged_rotation() -> None:
    buffer, _, ps, _ = make()
    buffer.merged = False
    ps.event = asyncio.Event()
    buffer.add_chunk(ps, chunk(0, 1))
    assert ps.event.is_set() and buffer.next_ready() is None
