"""``Producer.enqueue_nowait()`` against a real broker (issue 32): no coroutine and no
future; BufferFullError at once when ``buffer_memory`` is full and ``wait_for_buffer()``;
``on_delivery`` with the outcome; failures without a callback never lost silently
(``flush()``/``close()`` raise ``RecordsNotDeliveredError``); records of a topic whose
metadata is not known yet held in order."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

import pytest

from aiostream_kafka import (
    BufferFullError,
    Consumer,
    Producer,
    RecordMetadata,
    RecordsNotDeliveredError,
    TopicPartition,
)
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


async def _read(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple[int, bytes]]:
    """(partition, value) of the first ``count`` records, in offset order per partition."""
    out: list[tuple[int, bytes]] = []
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        async with asyncio.timeout(60):
            async for record in consumer.stream():
                out.append((record.partition, record.value or b""))
                if len(out) == count:
                    break
    return out


def test_enqueue_nowait_is_a_plain_call() -> None:
    assert not inspect.iscoroutinefunction(Producer.enqueue_nowait)


async def test_records_arrive_in_order_with_callbacks_and_without(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    outcomes: list[tuple[RecordMetadata | None, BaseException | None]] = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        await producer.partitions_for(topic)  # metadata known: nothing is held
        for i in range(3000):
            if i % 3 == 0:
                producer.enqueue_nowait(topic, b"%d" % i)  # keyless, no callback
            elif i % 3 == 1:
                producer.enqueue_nowait(
                    topic, b"%d" % i, key=b"k%d" % (i % 10), headers=[("h", b"x")],
                    on_delivery=lambda md, err: outcomes.append((md, err)),
                )  # fmt: skip
            else:
                producer.enqueue_nowait(topic, b"%d" % i, partition=2)
        await producer.flush()
        assert len(outcomes) == 1000
        assert all(err is None and md is not None and md.offset >= 0 for md, err in outcomes)
    got = await _read(bootstrap, topic, 3, 3000)
    assert sorted(int(v) for _, v in got) == list(range(3000))
    on_two = [int(v) for p, v in got if p == 2 and int(v) % 3 == 2]
    assert on_two == sorted(on_two)  # one partition's records in the order enqueued


async def test_a_full_buffer_raises_at_once_and_wait_for_buffer_waits_for_room(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    accepted = 0
    async with Producer(
        bootstrap_servers=bootstrap, buffer_memory=64 * 1024, batch_size=16 * 1024,
        linger_ms=5_000, max_block_ms=5_000,
    ) as producer:  # fmt: skip
        await producer.partitions_for(topic)
        value = b"x" * 1000
        started = time.monotonic()
        with pytest.raises(BufferFullError, match="buffer_memory"):
            for _ in range(1000):
                producer.enqueue_nowait(topic, value)
                accepted += 1
        assert time.monotonic() - started < 1.0  # at once, never a silent wait
        assert 30 <= accepted < 100  # about 64 KiB of 1 KB records
        async with asyncio.timeout(10):
            await producer.wait_for_buffer()  # the sender frees memory for a waiter
        producer.enqueue_nowait(topic, value)
        accepted += 1
        await producer.flush()
    got = await _read(bootstrap, topic, 1, accepted)
    assert len(got) == accepted  # nothing refused was buffered, nothing accepted lost


async def test_failures_without_a_callback_are_raised_by_flush_and_close(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(config={"max.message.bytes": "1000"})
    seen: list[BaseException | None] = []
    producer = Producer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.partitions_for(topic)
        producer.enqueue_nowait(topic, b"ok")
        producer.enqueue_nowait(topic, b"x" * 5000)  # the broker refuses it
        producer.enqueue_nowait(topic, b"y" * 5000)
        producer.enqueue_nowait(topic, b"z" * 5000, on_delivery=lambda md, err: seen.append(err))
        with pytest.raises(RecordsNotDeliveredError) as raised:
            await producer.flush()
        assert raised.value.count == 2
        assert type(raised.value.first_error).__name__ == "MessageTooLargeError"
        assert len(seen) == 1 and seen[0] is not None  # the callback got its error
        await producer.flush()  # reported once: nothing new
        producer.enqueue_nowait(topic, b"w" * 5000)
    finally:
        with pytest.raises(RecordsNotDeliveredError) as at_close:
            await producer.close()
    assert at_close.value.count == 1
    assert any(
        "enqueue_nowait() without on_delivery failed" in r.getMessage() for r in caplog.records
    )


async def test_records_wait_in_order_for_their_topic_s_metadata(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    missing = f"{topic}-missing"
    errors: list[BaseException | None] = []
    async with Producer(bootstrap_servers=bootstrap, max_block_ms=2_000) as producer:
        for i in range(500):  # the first ones wait for the metadata, the rest behind them
            producer.enqueue_nowait(topic, b"%d" % i, partition=0)
        producer.enqueue_nowait(missing, b"lost", on_delivery=lambda md, err: errors.append(err))
        producer.enqueue_nowait(missing, b"lost too")
        with pytest.raises(RecordsNotDeliveredError) as raised:
            await producer.flush()
        assert raised.value.count == 1
        assert type(raised.value.first_error).__name__ == "UnknownTopicOrPartitionError"
        assert len(errors) == 1 and type(errors[0]).__name__ == "UnknownTopicOrPartitionError"
    got = await _read(bootstrap, topic, 1, 500)
    assert [int(v) for _, v in got] == list(range(500))


async def test_held_records_past_their_bound_wait_for_buffer_waits_for_them(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """More records for a topic whose metadata is unknown than its bound (a quarter of
    buffer_memory) hold: BufferFullError, then wait_for_buffer() waits until the held ones
    are appended (it returned at once, so a retry loop spun forever without yielding),
    and the held records are appended on the metadata fetched once, not a refresh each."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    value = b"v" * 1000
    async with Producer(bootstrap_servers=bootstrap, buffer_memory=1 << 20) as producer:
        refreshes = 0
        refresh = producer.cluster.refresh

        async def counted(*args: object, **kwargs: object) -> object:
            nonlocal refreshes
            refreshes += 1
            return await refresh(*args, **kwargs)  # type: ignore[arg-type]

        producer.cluster.refresh = counted  # type: ignore[method-assign]
        full = 0
        for i in range(2000):  # 2 MB: eight times the bound of the held records
            while True:
                try:
                    producer.enqueue_nowait(topic, value, key=b"%d" % i)
                    break
                except BufferFullError:
                    full += 1
                    assert full < 1000, "wait_for_buffer() returned without room"
                    await producer.wait_for_buffer()
        await producer.flush()
        assert full >= 1
        assert refreshes < 50, refreshes
    assert len(await _read(bootstrap, topic, 1, 2000)) == 2000


async def test_a_callback_that_raises_is_logged_and_the_producer_goes_on(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()

    def broken(md: RecordMetadata | None, err: BaseException | None) -> None:
        raise RuntimeError("a bug in the application's callback")

    async with Producer(bootstrap_servers=bootstrap) as producer:
        producer.enqueue_nowait(topic, b"a", on_delivery=broken)
        await producer.flush()
        md = await producer.send(topic, b"b")
    assert md.offset == 1
    assert any("on_delivery callback raised" in r.getMessage() for r in caplog.records)


async def test_a_pipeline_past_the_held_bound_waits_and_loses_nothing(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Records for a topic the producer has no metadata of yet fill the held share of
    buffer_memory: BufferFullError, and wait_for_buffer() waits (yielding to the loop, so
    the held records go out) instead of returning at once into a busy loop. Found by
    ``make demo``: it spun at 100 % CPU."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    count, refused = 20_000, 0
    async with Producer(bootstrap_servers=bootstrap, buffer_memory=256 * 1024) as producer:
        async with asyncio.timeout(60):
            for i in range(count):
                while True:
                    try:
                        producer.enqueue_nowait(topic, b"%d" % i, key=b"k%d" % (i % 50))
                        break
                    except BufferFullError:
                        refused += 1
                        await producer.wait_for_buffer()
            await producer.flush()
    assert refused > 0  # the bound was reached
    got = await _read(bootstrap, topic, 2, count)
    assert sorted(int(v) for _, v in got) == list(range(count))
