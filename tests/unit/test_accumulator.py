"""The record accumulator on its own: records join the open batch of their partition until
it is full, a new batch first reserves its memory (waiting FIFO, up to a deadline), callers
that waited join a batch opened meanwhile, retries go back in sequence order, and failed
or finished batches return their memory."""

from __future__ import annotations

import asyncio

import pytest

from aiostream_kafka.errors import KafkaError, KafkaTimeoutError
from aiostream_kafka.producer.accumulator import Accumulator, record_size_upper_bound
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.structs import TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def accumulator(batch_size: int = 1_000, memory: int = 10_000) -> Accumulator:
    return Accumulator(batch_size, 60_000, BufferPool(memory), asyncio.get_running_loop())


async def test_records_join_the_open_batch_until_the_next_does_not_fit() -> None:
    acc = accumulator(batch_size=1_000)
    assert acc.try_append(TP, None, b"x", None, 1) is None  # no batch yet: never waits
    _, first = await acc.append_new(TP, None, b"a" * 100, None, 1, 1.0)
    acc.wakeup.clear()
    joined = 1
    while acc.try_append(TP, None, b"a" * 100, None, 1) is not None:
        joined += 1
    assert 5 <= joined <= 9  # about batch_size / record size, never past batch_size
    assert first.record_count == joined and first.closed  # full: closed for the sender
    assert first.size_in_bytes <= 1_000
    assert acc.wakeup.is_set()  # the sender may take it now
    _, second = await acc.append_new(TP, None, b"a" * 100, None, 1, 1.0)
    assert list(acc.batches[TP]) == [first, second] and not second.closed


async def test_a_new_batch_reserves_its_memory_and_finishing_returns_it() -> None:
    acc = accumulator(batch_size=1_000, memory=10_000)
    _, batch = await acc.append_new(TP, None, b"v", None, 1, 1.0)
    assert acc.pool.available == 9_000 and batch in acc.incomplete
    # The first record of a batch is always taken, whatever its size (memory as needed).
    big = b"b" * 3_000
    _, large = await acc.append_new(OTHER, None, big, None, 1, 1.0)
    assert large.record_count == 1
    assert acc.pool.available == 9_000 - record_size_upper_bound(None, big, None)
    acc.finish(batch)
    acc.finish(batch)  # twice: released once
    acc.finish(large)
    assert acc.pool.available == 10_000 and not acc.incomplete


async def test_callers_wait_for_memory_in_order_and_time_out_naming_the_budget() -> None:
    acc = accumulator(batch_size=1_000, memory=1_000)
    _, held = await acc.append_new(TP, None, b"v", None, 1, 1.0)
    acc.wakeup.clear()
    order: list[str] = []

    async def append(tp: TopicPartition, name: str) -> None:
        await acc.append_new(tp, None, b"v", None, 1, 5.0)
        order.append(name)

    first = asyncio.create_task(append(OTHER, "first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(append(TopicPartition("t", 2), "second"))
    await asyncio.sleep(0)
    assert acc.pool.queued == 2 and acc.wakeup.is_set()  # the sender sends everything now
    acc.finish(held)
    async with asyncio.timeout(1):
        await first
    assert order == ["first"] and not second.done()  # FIFO: one batch of memory at a time
    acc.finish(acc.batches[OTHER][0])
    async with asyncio.timeout(1):
        await second
    assert order == ["first", "second"]
    with pytest.raises(KafkaTimeoutError, match="buffer_memory=1000"):
        await acc.append_new(OTHER, None, b"v", None, 1, 0.02)


async def test_a_caller_that_waited_joins_a_batch_opened_meanwhile() -> None:
    acc = accumulator(batch_size=1_000, memory=2_000)
    _, a = await acc.append_new(OTHER, None, b"v", None, 1, 1.0)
    _, b = await acc.append_new(TopicPartition("t", 2), None, b"v", None, 1, 1.0)
    waiters = [asyncio.create_task(acc.append_new(TP, None, b"v", None, 1, 5.0)) for _ in range(2)]
    await asyncio.sleep(0)
    acc.finish(a)
    acc.finish(b)
    async with asyncio.timeout(1):
        results = await asyncio.gather(*waiters)
    (_, first), (_, second) = results
    assert first is second and first.record_count == 2  # one batch, not two
    assert acc.pool.available == 1_000  # the second caller's reservation went back


async def test_a_retried_batch_goes_back_in_sequence_order_ahead_of_unsent_ones() -> None:
    acc = accumulator()
    batches = []
    for _ in range(3):
        _, batch = await acc.append_new(TP, None, b"v", None, 1, 1.0)
        batches.append(batch)
    unsent = batches[2]
    dq = acc.batches[TP]
    dq.clear()
    dq.append(unsent)  # 0 and 1 were sent (sequences 0, 1); 2 never was
    batches[0].base_sequence, batches[1].base_sequence = 0, 1
    acc.requeue(batches[1])
    acc.requeue(batches[0])
    assert list(dq) == [batches[0], batches[1], unsent]
    assert batches[0].closed and batches[1].closed  # no record joins a batch being retried


async def test_fail_all_fails_every_queued_record_and_frees_memory() -> None:
    acc = accumulator(batch_size=1_000, memory=10_000)
    futures = [(await acc.append_new(TP, None, b"v", None, 1, 1.0))[0]]
    futures.append(acc.try_append(TP, None, b"w", None, 1))  # type: ignore[arg-type]
    futures.append((await acc.append_new(OTHER, None, b"v", None, 1, 1.0))[0])
    error = KafkaError("producer closed")
    assert acc.fail_all(error) == 3
    assert all(f.exception() is error for f in futures)
    assert acc.pool.available == 10_000 and not acc.incomplete


async def test_batch_calls_reserve_less_once_memory_is_half_used() -> None:
    acc = accumulator(batch_size=100_000, memory=200_000)
    assert acc.reservation(100, wanted=500) == 100_000  # memory plentiful: a full batch
    acc.pool.try_reserve(150_000)
    assert acc.reservation(100, wanted=500) == 16_384  # not below the default batch size
    assert acc.reservation(100, wanted=30_000) == 30_000
    assert acc.reservation(120_000, wanted=500) == 120_000  # the first record always fits


async def test_open_reserved_joins_a_batch_with_room_and_returns_the_reservation() -> None:
    acc = accumulator(batch_size=1_000, memory=10_000)
    _, open_batch = await acc.append_new(TP, None, b"v", None, 1, 1.0)
    assert acc.pool.try_reserve(1_000)
    assert acc.open_reserved(TP, 1_000, lambda batch: True) is open_batch
    assert acc.pool.available == 9_000
    assert acc.pool.try_reserve(500)
    fresh = acc.open_reserved(TP, 500, lambda batch: False)
    assert fresh is not open_batch and open_batch.closed
    assert fresh.batch_size == 500 and fresh.reserved == 500  # holds what it reserved
