"""The per-record path of the compiled build (producer/append.py) on its own, in whichever
build runs: records reach the batch of the partition ``enqueue`` would choose, keyed
records are deferred and encoded as ``append`` encodes them, what it does not take goes
to the producer's own path untouched, and the CreateTime stamp is shared only within a
short run of one loop turn."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from aiostream_kafka.producer.accumulator import Accumulator
from aiostream_kafka.producer.append import REUSE_MAX, Appender, StampClock
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.delivery import Unwatched
from aiostream_kafka.producer.partitioner import partition_for_key
from aiostream_kafka.protocol.records import iter_batches
from aiostream_kafka.structs import TopicPartition


def _cluster(partitions: int) -> Any:
    meta = SimpleNamespace(error_code=0, partitions={p: None for p in range(partitions)})
    return SimpleNamespace(snapshot=SimpleNamespace(topics={"t": meta}))


def _appender(batch_size: int = 1_000, memory: int = 100_000, partitions: int = 4) -> Any:
    loop = asyncio.get_running_loop()
    acc = Accumulator(batch_size, 60_000, BufferPool(memory), loop)
    slow: list[tuple[Any, ...]] = []

    async def slow_enqueue(*args: Any) -> asyncio.Future[Any]:
        slow.append(("enqueue", *args))
        future: asyncio.Future[Any] = loop.create_future()
        return future

    appender = Appender(
        acc,
        _cluster(partitions),
        {},
        {},
        Unwatched(),
        batch_size,
        loop,
        lambda *args: slow.append(args),
        slow_enqueue,
    )
    appender.open = appender.fast = True
    return appender, acc, slow


def _records(acc: Accumulator, tp: TopicPartition) -> list[tuple[Any, Any, int]]:
    out = []
    for batch in acc.batches.get(tp, ()):
        batch.flush_pending()
        (built,) = iter_batches(batch.builder.build())
        out += [(r.key, r.value, r.timestamp_ms) for r in built.records(tp.topic, tp.partition)]
    return out


async def test_keyed_records_reach_their_partition_encoded_as_append_encodes() -> None:
    appender, acc, slow = _appender()
    keys = [b"user-%d" % i for i in range(40)] + [b"k" * 70]  # and a key past 64 bytes
    sent: dict[int, list[tuple[bytes, bytes]]] = {}
    for i, key in enumerate(keys * 3):
        value = b"v%d" % i
        appender.enqueue_nowait("t", value, key)
        sent.setdefault(partition_for_key(key, 4), []).append((key, value))
    appender.enqueue_nowait("t", b"mixed", None, None, 2)  # an explicit partition
    sent[2].append((None, b"mixed"))  # type: ignore[arg-type]
    assert slow == []
    for p in range(4):
        got = _records(acc, TopicPartition("t", p))
        assert [(k, v) for k, v, _ in got] == sent[p]
        batches = list(acc.batches[TopicPartition("t", p)])
        assert all(b.size_in_bytes <= 1_000 for b in batches)  # batch_size kept
        assert all(b.closed for b in batches[:-1])


async def test_what_it_does_not_take_goes_to_the_producer_path() -> None:
    appender, acc, slow = _appender()
    appender.enqueue_nowait("t", b"keyless, no sticky batch yet")
    appender.enqueue_nowait("t", "not bytes", b"k")
    appender.enqueue_nowait("t", b"v", b"k", [("h", b"x")])
    appender.enqueue_nowait("unknown", b"v", b"k")
    appender.enqueue_nowait("t", b"v", None, None, 9)  # no such partition
    appender.held["t"] = object()  # records wait for the topic: keep their order
    appender.enqueue_nowait("t", b"v", b"k")
    del appender.held["t"]
    appender.open = False  # closed, or transactional outside a transaction
    appender.enqueue_nowait("t", b"v", b"k")
    assert len(slow) == 7
    assert acc.batches == {}
    assert appender.enqueue_now("t", b"v", b"k", None, None, None) is None


async def test_enqueue_leaves_a_new_batch_to_the_producer_path() -> None:
    """``enqueue`` opens a batch itself (and yields to the loop then): the appender only
    joins open ones, and learns a partition's open batch from the accumulator."""
    appender, acc, _ = _appender()
    tp = TopicPartition("t", partition_for_key(b"k", 4))
    assert appender.enqueue_now("t", b"v", b"k", None, None, None) is None
    assert acc.batches == {}
    acc.append_new_nowait(tp, b"k", b"first", None, 1, Unwatched())
    future = appender.enqueue_now("t", b"second", b"k", None, None, None)
    assert isinstance(future, asyncio.Future) and not future.done()
    (batch,) = acc.batches[tp]
    assert batch.futures[-1] is future
    batch.complete(100, -1)
    assert future.result().offset == 101 and future.result().partition == tp.partition


async def test_the_enqueue_coroutine_takes_what_it_can_and_awaits_the_producer_path() -> None:
    """``Appender.enqueue`` (the producer's ``enqueue`` when compiled) returns the record's
    future when the record joins an open batch, and otherwise awaits the producer's own
    path with the same arguments."""
    appender, acc, slow = _appender()
    tp = TopicPartition("t", partition_for_key(b"k", 4))
    first = await appender.enqueue("t", b"v", b"k")  # no open batch: the producer's path
    assert slow == [("enqueue", "t", b"v", b"k", None, None, None)]
    assert isinstance(first, asyncio.Future) and acc.batches == {}
    acc.append_new_nowait(tp, b"k", b"first", None, 1, Unwatched())
    second = await appender.enqueue("t", b"second", key=b"k")
    (batch,) = acc.batches[tp]
    assert batch.futures[-1] is second and len(slow) == 1
    await appender.enqueue("t", b"h", b"k", [("h", b"1")])  # headers: the producer's path
    assert slow[-1] == ("enqueue", "t", b"h", b"k", [("h", b"1")], None, None)
    batch.complete(7, -1)
    assert second.result().offset == 8


async def test_a_full_buffer_goes_to_the_producer_path() -> None:
    appender, acc, slow = _appender(batch_size=1_000, memory=1_000)
    while not slow:
        appender.enqueue_nowait("t", b"x" * 300, b"k")
    assert len(acc.batches[TopicPartition("t", partition_for_key(b"k", 4))]) == 1


async def test_the_stamp_is_shared_within_a_short_run_of_one_loop_turn() -> None:
    clock = StampClock(asyncio.get_running_loop())
    first = clock.now_ms()
    assert abs(first - time.time_ns() // 1_000_000) <= 1
    for _ in range(200):  # a fast run: sharing grows, never past REUSE_MAX records
        clock.now_ms()
    assert 0 < clock.reuse <= REUSE_MAX
    assert clock.left <= REUSE_MAX
    await asyncio.sleep(0.02)  # the loop turned: the next record reads the clock
    assert clock.left == 0
    assert clock.now_ms() >= first + 20
    time.sleep(0.002)  # noqa: ASYNC251 -- a caller stalling the loop between appends
    for _ in range(REUSE_MAX + 1):  # the stale stamp lasts at most REUSE_MAX records
        clock.now_ms()
    assert clock.reuse == 0  # and the slow run stops the sharing
    assert clock.now_ms() >= first + 22


async def test_an_unwatched_success_costs_no_object_and_a_failure_is_counted() -> None:
    appender, acc, _ = _appender()
    for i in range(5):
        appender.enqueue_nowait("t", b"v%d" % i, b"k")
    (batch,) = acc.batches[TopicPartition("t", partition_for_key(b"k", 4))]
    batch.complete(0, -1)  # nothing to resolve
    assert appender.unwatched.take() is None
    (other,) = [
        acc.append_new_nowait(TopicPartition("t", 3), None, b"x", None, 1, appender.unwatched)
    ]
    assert other is not None
    other.fail(KeyError("boom"))  # type: ignore[arg-type]
    error = appender.unwatched.take()
    assert error is not None and "1" in str(error)
