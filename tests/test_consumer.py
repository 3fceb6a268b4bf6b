"""The consumer against the real broker: every claim is checked on records a peer client
(confluent-kafka, aiokafka) wrote, so these tests depend on no producer of ours."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import KEEP_OLD_RECORDS, eventually

from aiostream_kafka import ConfigError, CorruptRecordError
from aiostream_kafka.admin import Admin
from aiostream_kafka.admin import NewTopic as NewTopic_
from aiostream_kafka.consumer import (
    Consumer,
    ConsumerStateError,
    LogTruncationError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
    TopicDeletedError,
)
from aiostream_kafka.consumer.engine import FetchEngine
from aiostream_kafka.consumer.partition import Chunk
from aiostream_kafka.net.connection import BrokerConnection, ConnectionSettings
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.serde import json_deserializer, str_deserializer
from aiostream_kafka.structs import Record, TimestampType, TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


# -- test data, written by peer clients --------------------------------------------------


def produce_bulk(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    *,
    value_size: int = 100,
    start: int = 0,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write ``count`` records round-robin over ``partitions`` with confluent-kafka (fast,
    librdkafka). Record i (from ``start``) goes to partition i % partitions and its value
    starts with i, zero-padded, so readers can check order and completeness."""
    import confluent_kafka

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": 16384,  # the Java client's default; librdkafka's is 1 MB
        "acks": "all",
        "enable.idempotence": True,  # keeps production order through retries
    }
    settings.update(extra or {})
    producer = confluent_kafka.Producer(settings)
    pad = b"." * max(0, value_size - 10)
    failures: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for i in range(start, start + count):
        while True:
            try:
                producer.produce(
                    topic, value=b"%010d" % i + pad, partition=i % partitions, on_delivery=report
                )
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(60)
    assert remaining == 0 and not failures, (remaining, failures[:3])


async def produce(bootstrap: str, topic: str, count: int, partitions: int, **kw: Any) -> None:
    await asyncio.to_thread(produce_bulk, bootstrap, topic, count, partitions, **kw)


def index_of(record: Record) -> int:
    return int(record.value[:10])


async def take(iterator: AsyncIterator[Record], count: int, within: float = 30) -> list[Record]:
    out: list[Record] = []
    async with asyncio.timeout(within):
        while len(out) < count:
            out.append(await anext(iterator))
    return out


def check_in_order(records: Sequence[Record], partitions: int, start_index: int = 0) -> None:
    """Per partition: offsets consecutive from the first, values in production order."""
    seen: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        seen[r.partition].append(r)
    for p, recs in seen.items():
        first = recs[0].offset
        assert [r.offset for r in recs] == list(range(first, first + len(recs))), p
        expected = [start_index + p + partitions * (r.offset) for r in recs]
        assert [index_of(r) for r in recs] == expected, p


def tps(topic: str, count: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


def engine_of(consumer: Consumer) -> FetchEngine:
    return consumer._engine


async def _position(consumer: Consumer, tp: TopicPartition) -> int | None:
    return consumer.position(tp)


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"auto_offset_reset": "smallest"}, "auto_offset_reset"),
        ({"isolation_level": "committed"}, "isolation_level"),
        ({"max_prefetch_batches": 0}, "max_prefetch_batches"),
        ({"max_prefetch_bytes": -1}, "max_prefetch_bytes"),
        ({"max_prefetch_bytes": 100_000, "max_partition_fetch_bytes": 200_000}, ">="),
        ({"poll_interval_ms": "50"}, "poll_interval_ms"),
        ({"value_deserializer": "utf-8"}, "value_deserializer"),
        ({"fetch_max_wait_ms": -5}, "fetch_max_wait_ms"),
        ({"enable_auto_commit": True}, "group_id"),
        ({"request_timeout_ms": 0}, "request_timeout_ms"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_invalid_config_raises_config_error_before_io(options: dict[str, Any], needle: str) -> None:
    # Port 1 has no broker: constructing must not try to connect.
    with pytest.raises(ConfigError, match=needle):
        Consumer("127.0.0.1:1", **options)


def test_bad_bootstrap_and_group_settings_are_refused_before_io() -> None:
    with pytest.raises(ConfigError):
        Consumer("no-port-here")
    with pytest.raises(ConfigError, match="needs a group_id"):
        Consumer("127.0.0.1:1", session_timeout_ms=10_000)
    with pytest.raises(ConfigError, match="partition_assignment_strategy"):
        Consumer("127.0.0.1:1", group_id="g", partition_assignment_strategy="sticky-ish")
    with pytest.raises(ConfigError, match="heartbeat_interval_ms"):
        Consumer("127.0.0.1:1", group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=6000)
    with pytest.raises(ConfigError, match="subscribe"):
        Consumer("127.0.0.1:1").subscribe(["t"])


async def test_iterating_before_start_or_mixing_iterators_is_refused(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    consumer = Consumer(kafka_cluster.bootstrap_servers)
    with pytest.raises(ConsumerStateError, match="not started"):
        await anext(consumer.stream())
    await consumer.close()
    topic = await new_topic()
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign(tps(topic, 1))
        consumer.partitioned_stream()
        with pytest.raises(ConsumerStateError, match="partitioned_stream"):
            await anext(consumer.stream())
        with pytest.raises(ConsumerStateError, match="not assigned"):
            consumer.seek(TopicPartition(topic, 7), 0)
        with pytest.raises(ValueError):
            consumer.assign([("x", -1)])  # type: ignore[list-item]


# -- reading everything, in order, once ----------------------------------------------------


async def test_reads_500k_records_over_12_partitions_exactly_once_in_order(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=12)
    total = 500_000
    await produce(kafka_cluster.bootstrap_servers, topic, total, 12)
    next_offset = [0] * 12
    started = time.monotonic()
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign(tps(topic, 12))
        count = 0
        async with asyncio.timeout(120):
            async for record in consumer.stream():
                p = record.partition
                # exactly once and in order: each partition's offsets are 0, 1, 2, ...
                assert record.offset == next_offset[p], (p, record.offset, next_offset[p])
                assert index_of(record) == p + 12 * record.offset
                next_offset[p] += 1
                count += 1
                if count == total:
                    break
        elapsed = time.monotonic() - started
        assert next_offset == [total // 12 + (1 if p < total % 12 else 0) for p in range(12)]
        assert [consumer.position(tp) for tp in tps(topic, 12)] == next_offset
        metrics = consumer.metrics()
        assert metrics.refetched_bytes == 0 and metrics.dropped_bytes == 0
        assert metrics.full_fetches >= 1 and metrics.incremental_fetches >= 1  # KIP-227
        # Nothing more arrives: the iterator waits rather than inventing records.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await anext(consumer.stream())
    print(f"500k records in {elapsed:.1f}s ({total / elapsed:,.0f} records/s)")


async def test_batches_are_one_partition_per_fetch_with_deserializers(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    from aiokafka import AIOKafkaProducer

    topic = await new_topic(partitions=3, config=KEEP_OLD_RECORDS)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers)
    await producer.start()
    try:
        for i in range(300):
            await producer.send(
                topic,
                json.dumps({"i": i}).encode(),
                key=f"k{i}".encode(),
                partition=i % 3,
                timestamp_ms=1_700_000_000_000 + i,
                headers=[("h", b"v%d" % i), ("empty", b"")],
            )
        await producer.flush()
    finally:
        await producer.stop()
    async with Consumer(
        kafka_cluster.bootstrap_servers,
        key_deserializer=str_deserializer(),
        value_deserializer=json_deserializer(),
    ) as consumer:
        consumer.assign(tps(topic, 3))
        got: list[Record] = []
        async with asyncio.timeout(30):
            async for batch in consumer.batches():
                assert batch and len({r.partition for r in batch}) == 1
                offsets = [r.offset for r in batch]
                assert offsets == sorted(offsets)
                got += batch
                if len(got) == 300:
                    break
    assert sorted(r.value["i"] for r in got) == list(range(300))
    for r in got:
        i = r.value["i"]
        assert r.key == f"k{i}" and r.partition == i % 3 and r.offset == i // 3
        assert r.timestamp_ms == 1_700_000_000_000 + i
        assert r.timestamp_type == TimestampType.CREATE_TIME
        assert r.headers == [("h", b"v%d" % i), ("empty", b"")]
        assert r.leader_epoch is not None


async def test_concurrent_iterators_share_the_records_each_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=4)
    await produce(kafka_cluster.bootstrap_servers, topic, 20_000, 4)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign(tps(topic, 4))
        got: list[Record] = []
        batches: list[list[Record]] = []

        async def one_by_one() -> None:
            async for record in consumer.stream():
                got.append(record)
                if len(got) % 100 == 0:
                    await asyncio.sleep(0)  # let the other iterator in
                if len(got) + sum(map(len, batches)) >= 20_000:
                    return

        async def by_batch() -> None:
            async for batch in consumer.batches():
                batches.append(batch)
                await asyncio.sleep(0)
                if len(got) + sum(map(len, batches)) >= 20_000:
                    return

        tasks = [asyncio.create_task(one_by_one()), asyncio.create_task(by_batch())]
        try:
            async with asyncio.timeout(60):
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        everything = got + [r for b in batches for r in b]
        assert batches and got
        assert sorted(index_of(r) for r in everything) == list(range(20_000))


async def test_a_failing_deserializer_stops_at_the_record_and_seek_skips_it(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic()
    await produce(kafka_cluster.bootstrap_servers, topic, 10, 1)

    def picky(data: bytes | None) -> int:
        value = int(bytes(data or b"")[:10])
        if value == 4:
            raise ValueError("four is not allowed")
        return value

    async with Consumer(kafka_cluster.bootstrap_servers, value_deserializer=picky) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        stream = consumer.stream()
        assert [r.value for r in await take(stream, 4)] == [0, 1, 2, 3]
        with pytest.raises(RecordDeserializationError, match="offset 4") as info:
            await anext(stream)
        assert info.value.offset == 4 and isinstance(info.value.__cause__, ValueError)
        assert consumer.position(tp) == 4
        with pytest.raises(RecordDeserializationError):  # still there
            await anext(consumer.stream())
        consumer.seek(tp, 5)
        assert [r.value for r in await take(consumer.stream(), 5)] == [5, 6, 7, 8, 9]


# -- backpressure ------------------------------------------------------------------------


async def test_partitioned_stream_a_stalled_partition_never_stops_the_others(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=4)
    per_partition = 4_000
    await produce(kafka_cluster.bootstrap_servers, topic, 4 * per_partition, 4, value_size=1024)
    budget = 512 * 1024
    async with Consumer(
        kafka_cluster.bootstrap_servers,
        max_prefetch_bytes=budget,
        max_partition_fetch_bytes=64 * 1024,
        max_prefetch_batches=2,
    ) as consumer:
        consumer.assign(tps(topic, 4))
        engine = engine_of(consumer)
        metrics = consumer.metrics()
        iterators = {}
        async for tp, records in consumer.partitioned_stream():
            iterators[tp.partition] = records
            if len(iterators) == 4:
                break
        peaks = []

        async def drain(p: int) -> list[Record]:
            got = []
            async for record in iterators[p]:
                got.append(record)
                peaks.append(metrics.prefetched_bytes)
                if len(got) == per_partition:
                    return got
            raise AssertionError("ended early")

        # Partition 0 is never read while the others are read to the end.
        async with asyncio.timeout(60):
            results = await asyncio.gather(*(drain(p) for p in (1, 2, 3)))
        for got in results:
            check_in_order(got, 4)
            assert len(got) == per_partition
        stalled = engine.partitions[TopicPartition(topic, 0)]
        assert len(stalled.queue) <= 2  # max_prefetch_batches
        assert stalled.queued_bytes > 0  # it did prefetch, then stopped
        assert max(peaks) <= budget
        assert metrics.prefetched_bytes_peak <= budget  # the gauge, at every admission
        fetches = metrics.fetch_requests
        await asyncio.sleep(0.5)  # a stalled partition is not fetched again (left the session)
        assert len(stalled.queue) <= 2
        assert metrics.partitions_forgotten >= 1
        # ...and nothing it prefetched is lost: it reads to the end once drained.
        async with asyncio.timeout(30):
            got0 = await drain(0)
        check_in_order(got0, 4)
        assert got0[0].offset == 0
        assert metrics.refetched_bytes == 0 and metrics.discarded_bytes == 0
        assert metrics.prefetched_bytes_peak <= budget
        assert fetches <= metrics.fetch_requests


@pytest.mark.parametrize("codec", ["lz4", "gzip"])
async def test_compressed_data_counts_decompressed_bytes_against_the_budget(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, codec: str
) -> None:
    topic = await new_topic(partitions=2)
    count = 20_000  # 1 KiB values that compress about 30 to 1
    await produce(
        kafka_cluster.bootstrap_servers,
        topic,
        count,
        2,
        value_size=1024,
        extra={"compression.type": codec},
    )
    budget = 1024 * 1024
    async with Consumer(
        kafka_cluster.bootstrap_servers,
        max_prefetch_bytes=budget,
        max_partition_fetch_bytes=256 * 1024,
    ) as consumer:
        consumer.assign(tps(topic, 2))
        got = await take(consumer.stream(), count)
        check_in_order(got, 2)
        assert sorted(index_of(r) for r in got) == list(range(count))
        metrics = consumer.metrics()
        # The budget is spent in decompressed bytes, several times what crossed the wire...
        assert metrics.fetched_bytes > 5 * metrics.fetched_batch_wire_bytes
        # ...and never exceeded, although one compressed fetch inflates to many budgets.
        assert metrics.prefetched_bytes_peak <= budget
        assert engine_of(consumer).buffer.expansion > 5


@pytest.mark.real_broker(
    reason="client quotas (AlterClientQuotas) and throttling are not served by the fake"
)
async def test_broker_throttling_is_honoured(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    from aiostream_kafka.protocol.messages.alter_client_quotas import (
        AlterClientQuotasRequest as Alter,
    )

    topic = await new_topic()
    await produce(kafka_cluster.bootstrap_servers, topic, 1_000, 1, value_size=200)
    client_id = f"throttled-{uuid.uuid4().hex[:8]}"
    async with Consumer(
        kafka_cluster.bootstrap_servers,
        client_id=client_id,
        max_partition_fetch_bytes=64 * 1024,
    ) as consumer:
        quota = Alter(
            entries=[
                Alter.EntryData(
                    entity=[Alter.EntityData(entity_type="client-id", entity_name=client_id)],
                    ops=[Alter.OpData(key="consumer_byte_rate", value=15_000.0)],
                )
            ]
        )
        response = await consumer.cluster.send(None, quota)
        assert all(e.error_code == 0 for e in response.entries)  # type: ignore[attr-defined]
        await asyncio.sleep(1)  # quotas travel through the metadata log
        consumer.assign(tps(topic, 1))
        metrics = consumer.metrics()
        reader = asyncio.create_task(take(consumer.stream(), 1_000, within=60))
        try:
            async with asyncio.timeout(30):
                while not metrics.throttled_responses:  # noqa: ASYNC110 -- timing it
                    await asyncio.sleep(0.002)
                throttled_at = time.monotonic()
                throttle_ms = metrics.throttle_time_ms
                requests = metrics.fetch_requests
                while metrics.fetch_requests == requests:  # noqa: ASYNC110
                    await asyncio.sleep(0.002)
                gap_ms = (time.monotonic() - throttled_at) * 1000
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        # The next round waited out the throttle time (KIP-219: the broker answers at once
        # and expects the client to hold back). Unthrottled it would follow within a few
        # ms; the margin covers noticing the throttled response late on a loaded machine.
        assert throttle_ms > 0
        assert gap_ms >= 0.5 * throttle_ms, (gap_ms, throttle_ms)


async def test_pause_scenario_of_kafka_7548_fetches_nothing_twice(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Seed 001: 10 partitions, 9 paused at random before every take of one record. Paused
    partitions keep what they prefetched, so every byte is fetched once."""
    topic = await new_topic(partitions=10)
    await produce(kafka_cluster.bootstrap_servers, topic, 30_000, 10)
    partitions = tps(topic, 10)
    rng = random.Random(7548)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign(partitions)
        engine = engine_of(consumer)
        metrics = consumer.metrics()
        stream = consumer.stream()
        got: list[Record] = []
        async with asyncio.timeout(60):
            for _ in range(15_000):
                active = rng.choice(partitions)
                consumer.pause(*[tp for tp in partitions if tp != active])
                consumer.resume(active)
                record = await anext(stream)
                assert record.partition == active.partition
                got.append(record)
        check_in_order(got, 10)
        for tp in partitions:
            assert consumer.position(tp) == max(
                (r.offset + 1 for r in got if r.partition == tp.partition), default=0
            )
        buffered = sum(
            item.wire
            for ps in engine.partitions.values()
            for item in [*ps.queue, ps.head_chunk]
            if isinstance(item, Chunk)
        )
        fetched = metrics.fetched_batch_wire_bytes
        assert metrics.refetched_bytes == 0
        assert metrics.dropped_bytes == 0 and metrics.discarded_bytes == 0
        assert fetched / (metrics.delivered_wire_bytes + buffered) == 1.0
        print(f"pause scenario: {metrics.fetch_requests} fetches, {fetched} bytes fetched")


async def test_pause_keeps_prefetched_records_and_resume_continues(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    await produce(kafka_cluster.bootstrap_servers, topic, 2_000, 2)
    p0, p1 = tps(topic, 2)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign([p0, p1])
        stream = consumer.stream()
        first = await take(stream, 10)
        paused = first[0].partition
        tp = p0 if paused == 0 else p1
        consumer.pause(tp)
        assert consumer.paused() == {tp}
        during = await take(stream, 1_000 - sum(r.partition != paused for r in first))
        assert all(r.partition != paused for r in during)
        with pytest.raises(TimeoutError):  # only the paused partition has records left
            async with asyncio.timeout(0.5):
                await anext(stream)
        consumer.resume(tp)
        rest = await take(stream, 2_000 - len(first) - len(during))
        check_in_order(first + during + rest, 2)
        assert sorted(index_of(r) for r in first + during + rest) == list(range(2_000))
        assert consumer.metrics().discarded_bytes == 0


# -- positions ---------------------------------------------------------------------------


async def test_seek_seek_to_beginning_end_and_offsets_for_times(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    from aiokafka import AIOKafkaProducer

    topic = await new_topic(config=KEEP_OLD_RECORDS)
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers)
    await producer.start()
    try:
        for i in range(100):
            await producer.send(topic, b"%d" % i, partition=0, timestamp_ms=base + i * 10)
        await producer.flush()
        async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
            consumer.assign([tp])
            assert [r.offset for r in await take(consumer.stream(), 5)] == [0, 1, 2, 3, 4]
            consumer.seek(tp, 42)
            assert consumer.position(tp) == 42
            assert (await anext(consumer.stream())).offset == 42
            await consumer.seek_to_end(tp)
            assert consumer.position(tp) == 100
            await producer.send_and_wait(topic, b"new", partition=0, timestamp_ms=base + 5000)
            assert (await take(consumer.stream(), 1))[0].value == b"new"
            await consumer.seek_to_beginning()
            assert (await anext(consumer.stream())).offset == 0
            found = await consumer.offsets_for_times({tp: base + 255})
            assert found[tp] is not None and found[tp].offset == 26
            assert found[tp].timestamp_ms == base + 260
            assert (await consumer.offsets_for_times({tp: base + 10_000}))[tp] is None
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 101}
            assert consumer.highwater(tp) == 101
            with pytest.raises(ec.UnknownTopicOrPartitionError):
                await consumer.end_offsets([TopicPartition(topic, 3)])
    finally:
        await producer.stop()


async def test_auto_offset_reset_latest_and_none(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic()
    tp = TopicPartition(topic, 0)
    await produce(kafka_cluster.bootstrap_servers, topic, 50, 1)
    async with Consumer(kafka_cluster.bootstrap_servers, auto_offset_reset="latest") as consumer:
        consumer.assign([tp])
        stream = consumer.stream()
        waiter = asyncio.ensure_future(anext(stream))
        assert await eventually(lambda: _position(consumer, tp), lambda p: p is not None) == 50
        await produce(kafka_cluster.bootstrap_servers, topic, 1, 1, start=50)
        async with asyncio.timeout(10):
            record = await waiter
        assert record.offset == 50 and index_of(record) == 50
    async with Consumer(kafka_cluster.bootstrap_servers, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartitionError, match="seek"):
            async with asyncio.timeout(10):
                await anext(consumer.stream())
        with pytest.raises(NoOffsetForPartitionError):  # until a seek
            await anext(consumer.stream())
        consumer.seek(tp, 10)
        assert (await anext(consumer.stream())).offset == 10


async def test_offset_out_of_range_resets_or_raises(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic()
    tp = TopicPartition(topic, 0)
    await produce(kafka_cluster.bootstrap_servers, topic, 100, 1)
    async with Admin(kafka_cluster.bootstrap_servers) as admin:
        await admin.delete_records({tp: 60})
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 10)  # below the log start now: reset to earliest
        async with asyncio.timeout(10):
            assert (await anext(consumer.stream())).offset == 60
        consumer.seek(tp, 500)  # past the end
        await produce(kafka_cluster.bootstrap_servers, topic, 1, 1, start=100)
        async with asyncio.timeout(10):
            assert (await anext(consumer.stream())).offset == 60
    async with Consumer(kafka_cluster.bootstrap_servers, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 10)
        with pytest.raises(ec.OffsetOutOfRangeError, match=r"\[0\].*fetch offset 10"):
            async with asyncio.timeout(10):
                await anext(consumer.stream())
        consumer.seek(tp, 99)
        assert (await anext(consumer.stream())).offset == 99


async def test_read_committed_skips_aborted_transactions_and_markers(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    import confluent_kafka

    topic = await new_topic()
    tp = TopicPartition(topic, 0)

    def write() -> None:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": kafka_cluster.bootstrap_servers,
                "transactional.id": f"tx-{uuid.uuid4().hex}",
            }
        )
        producer.init_transactions(60)
        plain = confluent_kafka.Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers})
        for n, outcome in enumerate(["commit", "abort", "commit", "abort"]):
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, value=f"{outcome}-{n}-{i}".encode(), partition=0)
            producer.flush()
            plain.produce(topic, value=f"plain-{n}".encode(), partition=0)
            plain.flush()
            if outcome == "commit":
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)

    await asyncio.to_thread(write)
    # 4 x (5 transactional + 1 plain + 1 marker) = 28 offsets
    async with Admin(kafka_cluster.bootstrap_servers) as admin:
        from aiostream_kafka.admin import OffsetSpec

        # The transaction coordinator writes the last marker after abort returns.
        async def latest() -> int:
            return (await admin.list_offsets({tp: OffsetSpec.latest()}))[tp].offset

        end = await eventually(latest, lambda offset: offset == 28, 15)
    assert end == 28
    committed = [f"commit-{n}-{i}" for n in (0, 2) for i in range(5)] + [
        f"plain-{n}" for n in range(4)
    ]
    everything = committed + [f"abort-{n}-{i}" for n in (1, 3) for i in range(5)]
    for level, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        async with Consumer(kafka_cluster.bootstrap_servers, isolation_level=level) as consumer:
            consumer.assign([tp])
            got = await take(consumer.stream(), len(expected), within=20)
            assert sorted(r.value.decode() for r in got) == sorted(expected), level
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets))
            with pytest.raises(TimeoutError):  # no control record leaks out
                async with asyncio.timeout(0.5):
                    await anext(consumer.stream())
            assert consumer.position(tp) == 28  # past the last marker
            if level == "read_committed":
                await consumer.seek_to_end(tp)
                assert consumer.position(tp) == 28
                assert consumer.last_stable_offset(tp) == 28


async def test_kip_320_validation_detects_a_truncated_log(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """After a leader change the position is checked with OffsetForLeaderEpoch. An unclean
    election cannot be staged on one broker, so the consumer is made to believe it fetched
    up to offset 50 in epoch 0 of a log that ends at 10: the broker's answer (epoch 0 ends
    at 10) is a truncation."""
    topic = await new_topic()
    tp = TopicPartition(topic, 0)
    await produce(kafka_cluster.bootstrap_servers, topic, 10, 1)
    for policy in ("earliest", "none"):
        async with Consumer(kafka_cluster.bootstrap_servers, auto_offset_reset=policy) as consumer:
            consumer.assign([tp])
            if policy == "none":
                consumer.seek(tp, 0)
            assert len(await take(consumer.stream(), 10)) == 10
            engine = engine_of(consumer)
            ps = engine.partitions[tp]
            assert ps.fetch_epoch == 0
            engine.reposition(ps, 50, 0)
            ps.validating = True
            engine.resolver.wake()
            if policy == "earliest":
                await produce(kafka_cluster.bootstrap_servers, topic, 1, 1, start=10)
                record = await anext(consumer.stream())
                assert record.offset == 10  # continued where the logs agree
            else:
                with pytest.raises(LogTruncationError) as info:
                    async with asyncio.timeout(10):
                        await anext(consumer.stream())
                assert info.value.offset == 11  # where epoch 0 ends (one more record now)
            assert consumer.metrics().log_truncations == 1


# -- bad input ---------------------------------------------------------------------------


def _corrupt_batch_on_disk(cluster: KafkaCluster, topic: str, target_offset: int) -> int:
    """Flip the last byte of the batch holding ``target_offset`` in the broker's segment
    file (the broker serves what is on disk; it does not re-check CRCs on fetch). Returns
    the base offset of that batch."""
    assert cluster.directory is not None
    (segment,) = (cluster.directory / "node-1" / "data" / f"{topic}-0").glob("*.log")
    data = bytearray(Path(segment).read_bytes())
    pos = 0
    while pos + 12 <= len(data):
        base = int.from_bytes(data[pos : pos + 8], "big")
        length = int.from_bytes(data[pos + 8 : pos + 12], "big")
        last = base + int.from_bytes(data[pos + 23 : pos + 27], "big")
        end = pos + 12 + length
        if base <= target_offset <= last:
            with open(segment, "r+b") as f:
                f.seek(end - 1)
                f.write(bytes([data[end - 1] ^ 0xFF]))
            return base
        pos = end
    raise AssertionError(f"no batch holds offset {target_offset}")


@pytest.mark.real_broker(reason="corrupts a segment file of a local broker's log on disk")
async def test_a_corrupt_batch_raises_crc_error_naming_partition_and_offset(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    if kafka_cluster.directory is not None:
        await _corrupt_batch_scenario(kafka_cluster, await new_topic())
        return
    # The session cluster is someone else's (KAFKA_BOOTSTRAP_SERVERS): damage the log of
    # a local broker of our own instead.
    async with KafkaCluster(brokers=1, source="local") as own:
        async with Admin(own.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic_("corrupt", partitions=1, replication_factor=1)])
        await _corrupt_batch_scenario(own, "corrupt")


async def _corrupt_batch_scenario(kafka_cluster: KafkaCluster, topic: str) -> None:
    assert kafka_cluster.directory is not None, "the local broker's directory is unknown"
    from aiokafka import AIOKafkaProducer

    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers)
    await producer.start()
    try:
        for batch in range(3):  # three batches of 10 records
            for i in range(10):
                await producer.send(topic, b"v%d" % (batch * 10 + i), partition=0)
            await producer.flush()
    finally:
        await producer.stop()
    base = _corrupt_batch_on_disk(kafka_cluster, topic, 15)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign([tp])
        stream = consumer.stream()
        before = await take(stream, base)
        assert [r.offset for r in before] == list(range(base))
        with pytest.raises(CorruptRecordError) as info:
            async with asyncio.timeout(10):
                await anext(stream)
        message = str(info.value)
        assert topic in message and "[0]" in message and f"offset {base}" in message
        assert "CRC" in message
        assert consumer.position(tp) == base
        with pytest.raises(CorruptRecordError):  # fetched again: still corrupt
            async with asyncio.timeout(10):
                await anext(consumer.stream())
        consumer.seek(tp, 20)  # skip the damaged batch
        assert [r.offset for r in await take(consumer.stream(), 10)] == list(range(20, 30))


async def test_deleting_the_topic_while_consuming_raises_a_typed_error(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    await produce(kafka_cluster.bootstrap_servers, topic, 100, 2)
    async with Consumer(
        kafka_cluster.bootstrap_servers, missing_topic_timeout_ms=1_000
    ) as consumer:
        consumer.assign(tps(topic, 2))
        stream = consumer.stream()
        await take(stream, 100)
        async with Admin(kafka_cluster.bootstrap_servers) as admin:
            await admin.delete_topics([topic])
        started = time.monotonic()
        with pytest.raises(ec.UnknownTopicOrPartitionError, match="deleted") as info:
            async with asyncio.timeout(30):
                await anext(stream)
        assert isinstance(info.value, TopicDeletedError) and not info.value.retriable
        assert time.monotonic() - started < 20
        assert info.value.topic_partition in tps(topic, 2)
        with pytest.raises(TopicDeletedError):  # again, until the partitions are revoked
            await anext(stream)
        consumer.unassign()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await anext(stream)


async def test_assigning_an_unknown_topic_or_partition_raises_a_clear_error(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic()
    async with Consumer(
        kafka_cluster.bootstrap_servers, missing_topic_timeout_ms=1_000
    ) as consumer:
        consumer.assign([TopicPartition("no-such-topic-" + uuid.uuid4().hex, 0)])
        with pytest.raises(ec.UnknownTopicOrPartitionError, match="does not exist"):
            async with asyncio.timeout(20):
                await anext(consumer.stream())
        consumer.assign([TopicPartition(topic, 3)])
        with pytest.raises(TopicDeletedError, match="only 1 partition"):
            async with asyncio.timeout(20):
                await anext(consumer.stream())


# -- fetch sessions, assignment changes, lifecycle -----------------------------------------


async def test_fetch_sessions_are_incremental_and_survive_a_session_reset(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=4)
    await produce(kafka_cluster.bootstrap_servers, topic, 4_000, 4)
    async with Consumer(
        kafka_cluster.bootstrap_servers, max_partition_fetch_bytes=16_384
    ) as consumer:
        consumer.assign(tps(topic, 4))
        engine = engine_of(consumer)
        metrics = consumer.metrics()
        stream = consumer.stream()
        got = await take(stream, 1_000)
        assert metrics.full_fetches == 1 and metrics.incremental_fetches >= 1
        (fetcher,) = engine.fetchers.values()
        assert fetcher.session.session_id != 0
        # Put the session out of step: the broker answers INVALID_FETCH_SESSION_EPOCH and
        # the fetcher starts a new session; no record is lost or repeated.
        fetcher.session.epoch += 1000
        got += await take(stream, 3_000)
        check_in_order(got, 4)
        assert sorted(index_of(r) for r in got) == list(range(4_000))
        assert metrics.session_resets >= 1
        assert metrics.full_fetches == 2  # one new session, then incremental again
        assert metrics.incremental_fetches > 2
        assert fetcher.session.session_id != 0 and fetcher.session.epoch >= 1
        # Demand decides membership: paused partitions leave the session...
        p0, p1, p2, p3 = tps(topic, 4)
        await consumer.seek_to_beginning()
        consumer.pause(p0, p1)
        assert {r.partition for r in await take(stream, 600)} == {2, 3}
        assert set(fetcher.session.partitions) <= {p2, p3}
        # ...and rejoin when resumed.
        consumer.resume(p0, p1)
        assert {r.partition for r in await take(stream, 2_000)} >= {0, 1}
        assert {p0, p1} <= set(fetcher.session.partitions) | set(consumer.paused())
        session_id, epoch = fetcher.session.session_id, fetcher.session.epoch
    # Closing the consumer closed the session on the broker (KIP-227 epoch -1).
    host, _, port = kafka_cluster.bootstrap_servers.split(",")[0].rpartition(":")
    conn = await BrokerConnection.open(host, int(port), ConnectionSettings())
    try:
        probe = FetchRequest(max_wait_ms=0, session_id=session_id, session_epoch=epoch)
        response = await conn.request(probe)
        assert isinstance(response, FetchResponse)
        assert response.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND
    finally:
        await conn.close()


@pytest.mark.parametrize("version", [4, 7, 12])
async def test_older_fetch_versions_topic_names_and_no_sessions(
    kafka_cluster: KafkaCluster,
    new_topic: NewTopic,
    monkeypatch: pytest.MonkeyPatch,
    version: int,
) -> None:
    """v13+ name topics by id (the default against Kafka 4); v7-v12 by name; v4-v6 have no
    fetch sessions at all. Pausing makes partitions leave and rejoin sessions by name."""
    from aiostream_kafka.consumer.fetcher import Fetcher

    monkeypatch.setattr(Fetcher, "version_cap", version)
    topic = await new_topic(partitions=3)
    await produce(kafka_cluster.bootstrap_servers, topic, 3_000, 3)
    async with Consumer(
        kafka_cluster.bootstrap_servers, max_partition_fetch_bytes=8_192
    ) as consumer:
        consumer.assign(tps(topic, 3))
        stream = consumer.stream()
        got = await take(stream, 500)
        consumer.pause(TopicPartition(topic, got[-1].partition))
        got += await take(stream, 500)
        consumer.resume(*consumer.paused())
        got += await take(stream, 2_000)
        check_in_order(got, 3)
        assert sorted(index_of(r) for r in got) == list(range(3_000))
        metrics = consumer.metrics()
        if version < 7:
            assert metrics.incremental_fetches == 0
        else:
            assert metrics.incremental_fetches > 0 and metrics.partitions_forgotten > 0


async def test_runtime_assignment_changes_end_revoked_iterators(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=3)
    await produce(kafka_cluster.bootstrap_servers, topic, 300, 3)
    p0, p1, p2 = tps(topic, 3)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign([p0, p1])
        outer = consumer.partitioned_stream()
        first = dict([await anext(outer), await anext(outer)])
        assert set(first) == {p0, p1}
        assert [r.offset for r in await take(first[p0], 3)] == [0, 1, 2]
        consumer.assign([p1, p2])  # p0 revoked, p2 added
        with pytest.raises(StopAsyncIteration):
            await anext(first[p0])
        tp, records = await anext(outer)
        assert tp == p2
        assert [index_of(r) for r in await take(records, 100)] == [2 + 3 * i for i in range(100)]
        async with asyncio.timeout(10):
            batches = [b async for b in _batches_until(first[p1], 100)]
        assert [r.offset for b in batches for r in b] == list(range(100))
        consumer.assign([p0])  # assigned again: a fresh state, from auto_offset_reset
        tp, records = await anext(outer)
        assert tp == p0 and (await anext(records)).offset == 0


async def _batches_until(records: Any, count: int) -> AsyncIterator[list[Record]]:
    seen = 0
    async for batch in records.batches():
        yield batch
        seen += len(batch)
        if seen >= count:
            return


async def test_close_ends_waiting_iterators(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic()
    consumer = Consumer(kafka_cluster.bootstrap_servers)
    await consumer.start()
    consumer.assign(tps(topic, 1))

    async def read_all() -> list[Record]:
        return [r async for r in consumer.stream()]

    reader = asyncio.create_task(read_all())
    await asyncio.sleep(0.3)
    assert not reader.done()
    await consumer.close()
    async with asyncio.timeout(5):
        assert await reader == []
    await consumer.close()  # idempotent


async def test_a_dying_background_task_surfaces_on_the_iterators(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiostream_kafka.consumer import fetcher as fetcher_module

    topic = await new_topic()
    await produce(kafka_cluster.bootstrap_servers, topic, 10, 1)

    def broken(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("fetcher bug")

    monkeypatch.setattr(fetcher_module.Fetcher, "_file", broken)
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign(tps(topic, 1))
        with pytest.raises(RuntimeError, match="fetcher bug"):
            async with asyncio.timeout(10):
                await anext(consumer.stream())
        with pytest.raises(RuntimeError, match="fetcher bug"):
            await anext(consumer.batches())


async def test_empty_rounds_are_paced_by_the_long_poll_and_poll_interval(
    kafka_cluster: KafkaCluster, new_topic: Callable[..., Awaitable[str]]
) -> None:
    """Rounds that find nothing are spaced by the broker's long poll (no extra pause on
    top of it), by ``poll_interval_ms`` when that is shorter, and not at all when the
    consumer asks for no long poll (``fetch_max_wait_ms=0``: it wants records at once)."""
    topic = await new_topic(partitions=1)
    tp = TopicPartition(topic, 0)

    async def rounds_in(seconds: float, **options: Any) -> int:
        async with Consumer(kafka_cluster.bootstrap_servers, **options) as consumer:
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            await asyncio.sleep(0.5)  # connected, positioned, polling
            before = consumer.metrics().fetch_requests
            await asyncio.sleep(seconds)
            return consumer.metrics().fetch_requests - before

    long_poll = await rounds_in(2.0, fetch_max_wait_ms=400, poll_interval_ms=50)
    assert 2 <= long_poll <= 7  # about one per 400 ms long poll, no 50 ms pause added
    paced = await rounds_in(2.0, fetch_max_wait_ms=400, poll_interval_ms=1000)
    assert 2 <= paced <= 7  # the interval never exceeds the long poll
    eager = await rounds_in(1.0, fetch_max_wait_ms=0, poll_interval_ms=50)
    assert eager > 40  # no 50 ms pause: records are fetched as soon as they exist
