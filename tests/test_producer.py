"""The producer against a real broker: delivery, API, bad input, memory bound, lifecycle."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpers import KEEP_OLD_RECORDS
from producer_oracle import assert_exactly_once_in_order, read_all

from aiostream_kafka.errors import ConfigError, KafkaTimeoutError
from aiostream_kafka.producer import Producer, ProducerClosedError, ProducerRecord
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.protocol.error_codes import (
    MessageTooLargeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from aiostream_kafka.serde import json_deserializer, json_serializer, str_serializer
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

# -- configuration (no broker) ----------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"acks": "2"},
        {"acks": True},
        {"linger_ms": -1},
        {"batch_size": "16k"},
        {"buffer_memory": 0},
        {"compression_type": "brotli"},
        {"max_in_flight_requests_per_connection": 0},
        {"enable_idempotence": True, "acks": 1},
        {"enable_idempotence": True, "max_in_flight_requests_per_connection": 6},
        {"enable_idempotence": "yes"},
        {"delivery_timeout_ms": 1000},  # < linger_ms + request_timeout_ms
        {"key_serializer": "utf-8"},
        {"no_such_option": 1},
        {"request_timeout_ms": 0},
    ],
)
def test_invalid_config_is_refused_before_any_io(options: dict[str, object]) -> None:
    # An address nothing listens on: a ConfigError must come before any connection attempt.
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:1", **options)


def test_config_defaults_follow_kafka_4() -> None:
    config = ProducerConfig()
    assert config.linger_ms == 5 and config.batch_size == 16384
    assert config.required_acks == -1 and config.idempotent
    assert config.max_in_flight_requests_per_connection == 5
    # Idempotence is dropped, not refused, when other settings rule it out implicitly.
    assert not ProducerConfig(acks=1).idempotent
    assert ProducerConfig(acks="0").required_acks == 0


def test_record_too_large_alias() -> None:
    assert RecordTooLargeError is MessageTooLargeError
    assert RecordTooLargeError.error_code == 10


# -- the buffer pool (no broker: its contract is local) ---------------------------------


async def test_buffer_pool_serves_waiters_in_fifo_order() -> None:
    pool = BufferPool(100)
    pool.try_reserve(100)
    order: list[str] = []

    async def take(name: str, size: int) -> None:
        await pool.reserve(size, 5)
        order.append(name)

    big = asyncio.create_task(take("big", 80))
    await asyncio.sleep(0)
    small = asyncio.create_task(take("small", 10))
    await asyncio.sleep(0)
    pool.release(30)  # enough for "small", but "big" waits first: nobody overtakes it
    await asyncio.sleep(0.01)
    assert order == [] and pool.queued == 2
    pool.release(70)
    await asyncio.gather(big, small)
    assert order == ["big", "small"] and pool.used == 90


async def test_a_cancelled_waiter_takes_nothing_and_blocks_nobody() -> None:
    pool = BufferPool(100)
    pool.try_reserve(100)
    big = asyncio.create_task(pool.reserve(90, 5))
    await asyncio.sleep(0)
    small = asyncio.create_task(pool.reserve(10, 5))
    await asyncio.sleep(0)
    pool.release(20)
    await asyncio.sleep(0.01)
    assert not small.done()  # queued behind "big"
    big.cancel()
    await asyncio.sleep(0.01)
    assert small.done() and big.cancelled() is not False
    assert pool.used == 90 and pool.queued == 0

    # Cancelled in the same instant it was served: the memory goes back to the pool.
    pool2 = BufferPool(10)
    pool2.try_reserve(10)
    waiter = asyncio.create_task(pool2.reserve(10, 5))
    await asyncio.sleep(0)
    pool2.release(10)  # served...
    waiter.cancel()  # ...and cancelled before it ran
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pool2.used == 0 and pool2.queued == 0


async def test_buffer_pool_times_out_with_kafka_timeout_error() -> None:
    pool = BufferPool(10)
    pool.try_reserve(10)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="max_block_ms"):
        await pool.reserve(5, 0.05)
    assert time.monotonic() - started < 1
    assert pool.queued == 0
    pool.release(10)
    assert pool.used == 0


# -- against the broker -------------------------------------------------------------------


async def test_send_returns_metadata_after_the_ack(kafka_cluster: KafkaCluster, new_topic) -> None:
    topic = await new_topic(partitions=2, config=KEEP_OLD_RECORDS)
    async with Producer(kafka_cluster.bootstrap_servers) as producer:
        first = await producer.send(topic, b"v1", key=b"k", headers=[("h", b"x")], partition=1)
        second = await producer.send(topic, b"v2", partition=1, timestamp_ms=1_700_000_000_000)
        assert (first.topic, first.partition, first.offset) == (topic, 1, 0)
        assert (second.partition, second.offset, second.timestamp_ms) == (1, 1, 1_700_000_000_000)
        assert abs(first.timestamp_ms - time.time() * 1000) < 60_000
        pid, epoch = producer.producer_id_and_epoch
        assert pid >= 0 and epoch >= 0  # idempotent by default
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 2)
    assert [(r.partition, r.offset, r.key, r.value, r.headers) for r in records] == [
        (1, 0, b"k", b"v1", (("h", b"x"),)),
        (1, 1, None, b"v2", ()),
    ]
    assert records[1].timestamp_ms == 1_700_000_000_000


async def test_enqueue_returns_before_the_ack_and_futures_resolve_in_order(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=200) as producer:
        futures = [await producer.enqueue(topic, value=str(i).encode()) for i in range(100)]
        assert not any(f.done() for f in futures)  # lingering: nothing sent yet
        await producer.flush()  # sends at once, does not wait out linger_ms
        assert all(f.done() for f in futures)
        assert [f.result().offset for f in futures] == list(range(100))


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_settings(kafka_cluster: KafkaCluster, new_topic, acks: object) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, acks=acks) as producer:
        metas = await asyncio.gather(*(producer.send(topic, b"x") for _ in range(50)))
    if acks == 0:
        assert all(m.offset == -1 for m in metas)
    else:
        assert sorted(m.offset for m in metas) == list(range(50))
    assert len(await read_all(kafka_cluster.bootstrap_servers, topic, 1)) == 50


async def test_serializers(kafka_cluster: KafkaCluster, new_topic) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(
        kafka_cluster.bootstrap_servers,
        key_serializer=str_serializer(),
        value_serializer=json_serializer(),
    ) as producer:
        await producer.send(topic, {"a": [1, 2], "ü": None}, key="clé")
        await producer.send(topic, None, key=None)  # None stays Kafka's null
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert records[0].key == "clé".encode()
    assert json_deserializer()(records[0].value) == {"a": [1, 2], "ü": None}
    assert json.loads(records[0].value or b"") == {"a": [1, 2], "ü": None}
    assert records[1].key is None and records[1].value is None


async def test_bad_input_fails_at_the_call_and_only_that_record(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(
        kafka_cluster.bootstrap_servers, max_request_size=10_000, max_block_ms=800
    ) as producer:
        good = await producer.enqueue(topic, b"before")
        with pytest.raises(TypeError, match="value_serializer"):
            await producer.send(topic, "text without a serializer")
        with pytest.raises(TypeError, match="key"):
            await producer.send(topic, b"v", key=42)
        with pytest.raises(TypeError, match="header"):
            await producer.send(topic, b"v", headers=[("h", "not bytes")])  # type: ignore[list-item]
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send(topic, b"x" * 20_000)
        with pytest.raises(RecordTooLargeError):
            await producer.enqueue(topic, b"x" * 9_000, headers=[("h", b"y" * 2_000)])
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="max_block_ms"):
            await producer.send("no-such-topic-" + topic, b"v")
        assert 0.7 < time.monotonic() - started < 5
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 5"):
            await producer.send(topic, b"v", partition=5)
        after = await producer.send(topic, b"after")
        assert (await good).offset == 0 and after.offset == 1
    with pytest.raises(ProducerClosedError, match="closed"):
        await producer.send(topic, b"late")
    with pytest.raises(ProducerClosedError):
        await producer.enqueue(topic, b"late")
    not_started = Producer(kafka_cluster.bootstrap_servers)
    with pytest.raises(RuntimeError, match="not started"):
        await not_started.send(topic, b"v")


async def test_tiny_buffer_memory_makes_enqueue_wait_within_the_bound(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=2)
    total = 64 * 1024
    async with Producer(
        kafka_cluster.bootstrap_servers, buffer_memory=total, batch_size=16 * 1024, linger_ms=20
    ) as producer:
        pool = producer.buffer_pool
        peak = 0
        saw_waiters = False
        stop = False

        async def watch() -> None:
            nonlocal peak, saw_waiters
            while not stop:
                peak = max(peak, pool.used)
                saw_waiters = saw_waiters or pool.queued > 0
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        waited = 0.0
        futures = []
        for i in range(3000):
            started = time.perf_counter()
            futures.append(await producer.enqueue(topic, value=b"%06d" % i + b"x" * 1000))
            waited = max(waited, time.perf_counter() - started)
            assert pool.used <= total
        # Concurrent appenders queue for memory too, and are served.
        extra = await asyncio.gather(*(producer.send(topic, b"y" * 1000) for _ in range(200)))
        stop = True
        await watcher
        metas = [await f for f in futures]
    assert peak <= total and saw_waiters
    assert waited > 0.001  # some enqueue really waited for memory
    assert len(extra) == 200 and len({(m.partition, m.offset) for m in metas}) == 3000
    assert pool.used == 0  # everything returned


async def test_a_record_larger_than_buffer_memory_is_refused(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, buffer_memory=4096) as producer:
        with pytest.raises(RecordTooLargeError, match="buffer_memory"):
            await producer.send(topic, b"x" * 5000)
        assert (await producer.send(topic, b"x" * 100)).offset == 0


async def test_pipe_yields_in_order_with_bounded_work(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=3)
    pulled = 0
    yielded = 0
    max_ahead = 0

    async def source():  # type: ignore[no-untyped-def]
        nonlocal pulled
        for i in range(5000):
            pulled += 1
            yield ProducerRecord(topic, value=str(i).encode(), key=str(i % 17).encode())

    async with Producer(kafka_cluster.bootstrap_servers) as producer:
        metas = []
        async for meta in producer.pipe(source(), max_in_flight=100):
            yielded += 1
            max_ahead = max(max_ahead, pulled - yielded)
            metas.append(meta)
    assert len(metas) == 5000
    assert max_ahead <= 100
    records = {int(r.value): r for r in await read_all(kafka_cluster.bootstrap_servers, topic, 3)}  # type: ignore[arg-type]
    for i, meta in enumerate(metas):  # the i-th result is the i-th record's
        assert (records[i].partition, records[i].offset) == (meta.partition, meta.offset)


async def test_close_delivers_everything_buffered(kafka_cluster: KafkaCluster, new_topic) -> None:
    topic = await new_topic(partitions=1)
    producer = Producer(kafka_cluster.bootstrap_servers, linger_ms=60_000)
    await producer.start()
    futures = [await producer.enqueue(topic, b"x") for _ in range(10)]
    await producer.close()  # does not wait out linger_ms
    assert [f.result().offset for f in futures] == list(range(10))
    await producer.close()  # idempotent
    assert producer.closed


# -- idempotence: recovering sequences by bumping the epoch (KIP-360) -------------------------


async def test_out_of_order_sequence_is_recovered_by_an_epoch_bump(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """The broker refuses a batch whose sequence leaves a gap nothing can fill; the producer
    bumps its epoch and resends, without the user restarting it, exactly once, in order."""
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers) as producer:
        for i in range(10):
            await producer.send(topic, b"%d" % i)
        before = producer.producer_id_and_epoch
        idem = producer._idempotence
        assert idem is not None
        state = idem.partitions[TopicPartition(topic, 0)]
        state.next_sequence += 7  # as if 7 records had been lost in between
        futures = [await producer.enqueue(topic, b"%d" % i) for i in range(10, 200)]
        metas = [await f for f in futures]
        after = producer.producer_id_and_epoch
    assert after[0] == before[0] and after[1] == before[1] + 1  # same id, epoch + 1
    assert [m.offset for m in metas] == list(range(10, 200))
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert_exactly_once_in_order(records, range(200))


async def test_a_refused_batch_fails_only_its_records(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """A batch the broker refuses for good (larger than the topic's max.message.bytes)
    fails with RecordTooLargeError; the batches in flight behind it, refused as out of
    order meanwhile, are resent under a new epoch and written exactly once, in order."""
    topic = await new_topic(partitions=1, config={"max.message.bytes": "3000"})
    async with Producer(kafka_cluster.bootstrap_servers, batch_size=1500, linger_ms=20) as producer:
        futures = {}
        for i in range(300):
            value = b"%d" % i
            if i == 100:
                value += b"|" + b"x" * 4000  # alone in its batch, over the topic's limit
            futures[i] = await producer.enqueue(topic, value)
        await producer.flush()
    with pytest.raises(RecordTooLargeError, match=f"{topic}-0"):
        futures[100].result()
    for i, future in futures.items():
        if i != 100:
            assert future.exception() is None, (i, future.exception())
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert_exactly_once_in_order(records, [i for i in range(300) if i != 100])


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_batch_over_the_topic_limit_is_split_and_delivered_in_order(
    kafka_cluster: KafkaCluster, new_topic, idempotent: bool
) -> None:
    """The broker refuses our 16 KiB batches (the topic's max.message.bytes is 2,000): the
    producer splits them until they fit, and every record arrives exactly once, in order,
    with its key, headers and timestamp. (Without idempotence, order across retries needs
    one request in flight, as with the Java client.)"""
    topic = await new_topic(partitions=1, config={"max.message.bytes": "2000", **KEEP_OLD_RECORDS})
    async with Producer(
        kafka_cluster.bootstrap_servers,
        linger_ms=50,
        enable_idempotence=idempotent,
        max_in_flight_requests_per_connection=5 if idempotent else 1,
    ) as producer:
        futures = [
            await producer.enqueue(
                topic,
                b"%0100d" % i,
                key=b"k%d" % i,
                headers=[("i", b"%d" % i)],
                partition=0,
                timestamp_ms=1_700_000_000_000 + i,
            )
            for i in range(600)
        ]
        metas = [await f for f in futures]
    assert [m.offset for m in metas] == list(range(600))
    assert [m.timestamp_ms for m in metas] == [1_700_000_000_000 + i for i in range(600)]
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert_exactly_once_in_order(records, range(600))
    for r in records:
        i = int(r.value)
        assert r.key == b"k%d" % i
        assert r.headers == (("i", b"%d" % i),)
        assert r.timestamp_ms == 1_700_000_000_000 + i


async def test_an_awaited_send_does_not_wait_out_the_linger(
    kafka_cluster: KafkaCluster, new_topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`await send()` in a loop (aiokafka's `send_and_wait` habit): once the event loop has
    gone a whole turn with no record appended while a send is awaited, the open batches go
    at once instead of after `linger_ms`; concurrent awaited sends still share a batch,
    and records only enqueued still linger."""
    from aiostream_kafka.producer.accumulator import ProducerBatch
    from aiostream_kafka.producer.sender import Sender

    # Counted where the (interpreted) sender completes a batch: ProducerBatch is a native
    # class in the compiled build, whose methods cannot be patched.
    completed: list[int] = []
    original = Sender._succeed

    def counting(
        self: Sender, batch: ProducerBatch, base_offset: int, log_append_time_ms: int
    ) -> None:
        completed.append(batch.record_count)
        original(self, batch, base_offset, log_append_time_ms)

    monkeypatch.setattr(Sender, "_succeed", counting)
    topic = await new_topic(partitions=2)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=3000) as producer:
        await producer.send(topic, b"warm-up")  # the topic's metadata is known now
        started = time.monotonic()
        for i in range(4):
            await producer.send(topic, b"keyless-%d" % i)
            await producer.send(topic, b"keyed-%d" % i, key=b"k%d" % i)
            await producer.send_record(ProducerRecord(topic, b"record-%d" % i, partition=1))
        sequential = time.monotonic() - started
        # 12 sends, each would have waited out the 3 s linger before.
        assert sequential < 2.5, sequential

        completed.clear()
        started = time.monotonic()
        metas = await asyncio.gather(
            *(producer.send(topic, b"burst-%d" % i, partition=0) for i in range(50))
        )
        assert time.monotonic() - started < 2.5
        assert [m.offset for m in metas] == list(range(metas[0].offset, metas[0].offset + 50))
        assert completed == [50], completed  # one batch: the burst was not cut short

        future = await producer.enqueue(topic, b"lingering", partition=0)
        await asyncio.sleep(1.0)
        assert not future.done(), "an enqueued record no longer waits for linger_ms"
        assert (await future).offset == metas[-1].offset + 1
