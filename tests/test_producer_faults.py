"""The producer under network faults (a fault proxy in front of the broker) and broker
failures: no duplicates, no gaps, nothing acknowledged lost, clear errors when giving up."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from producer_oracle import assert_exactly_once_in_order, read_all

from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.errors import KafkaTimeoutError
from aiostream_kafka.producer import Producer, ProducerClosedError
from aiostream_kafka.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
)
from aiostream_kafka.protocol.messages.elect_leaders import ElectLeadersRequest
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.probe import create_topic

pytestmark = [
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
        reason="fault tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
    ),
]


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("proxied",)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def proxied() -> AsyncIterator[KafkaCluster]:
    async with KafkaCluster(brokers=1, proxied=True) as cluster:
        yield cluster


async def _topic(cluster: KafkaCluster, name: str, partitions: int) -> str:
    topic = f"{name}-{os.getpid()}-{time.monotonic_ns()}"
    await create_topic(cluster.bootstrap_servers, topic, partitions, 1, None)
    return topic


async def _wait_for(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.0005)


def _assert_exactly_once_in_order(records, count: int) -> None:  # type: ignore[no-untyped-def]
    assert_exactly_once_in_order(records, range(count))


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_cutting_the_connection_with_5_requests_in_flight(proxied: KafkaCluster) -> None:
    topic = await _topic(proxied, "cut", 3)
    proxy = proxied.proxy(1)
    count = 30_000
    in_flight_at_cuts: list[int] = []
    proxy.delay_s = 0.01  # every chunk is held 10 ms: requests pile up in flight
    try:
        async with Producer(
            proxied.bootstrap_servers, batch_size=2048, linger_ms=1, retry_backoff_ms=20
        ) as producer:
            sender = producer._sender
            assert sender is not None
            connections_before = proxy.connections

            async def cutter() -> None:
                for _ in range(3):
                    await _wait_for(lambda: sender.in_flight == 5)
                    in_flight_at_cuts.append(sender.in_flight)
                    await proxy.cut()
                    await asyncio.sleep(0.3)

            cuts = asyncio.create_task(cutter())
            # Enqueued far faster than the delayed proxy lets through: a backlog keeps five
            # requests in flight, and the cutter cuts three times while they are.
            futures = [
                await producer.enqueue(topic, b"%d" % i, key=b"%d" % (i % 3)) for i in range(count)
            ]
            await cuts
            await producer.flush()
            pid_epoch = producer.producer_id_and_epoch
        assert all(f.exception() is None for f in futures)
    finally:
        proxy.delay_s = 0.0
    assert in_flight_at_cuts == [5, 5, 5]
    assert proxy.connections > connections_before  # it reconnected after the cuts
    assert pid_epoch[0] >= 0
    records = await read_all(proxied.bootstrap_servers, topic, 3)
    assert len(records) == count
    _assert_exactly_once_in_order(records, count)


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_close_with_timeout_fails_what_is_left(proxied: KafkaCluster) -> None:
    topic = await _topic(proxied, "close", 1)
    proxy = proxied.proxy(1)
    producer = Producer(proxied.bootstrap_servers)
    await producer.start()
    try:
        await producer.send(topic, b"warm-up")
        proxy.blackhole()
        futures = [await producer.enqueue(topic, b"x") for _ in range(20)]
        started = time.monotonic()
        await producer.close(timeout=0.5)
        assert time.monotonic() - started < 5
        for future in futures:
            with pytest.raises(ProducerClosedError, match="close timeout"):
                future.result()
        with pytest.raises(ProducerClosedError):
            await producer.send(topic, b"late")
    finally:
        proxy.restore()
        await producer.close()


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_buffer_memory_wait_times_out_after_max_block_ms(proxied: KafkaCluster) -> None:
    topic = await _topic(proxied, "block", 1)
    proxy = proxied.proxy(1)
    async with Producer(
        proxied.bootstrap_servers, buffer_memory=4096, batch_size=4096, max_block_ms=300
    ) as producer:
        await producer.send(topic, b"warm-up")
        proxy.blackhole()  # the next batch stays in flight, holding all the memory
        try:
            first = await producer.enqueue(topic, b"a" * 100)
            sender = producer._sender
            assert sender is not None
            await _wait_for(lambda: sender.in_flight == 1)
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="max_block_ms"):
                await producer.enqueue(topic, b"b" * 3900)
            assert 0.25 < time.monotonic() - started < 3
            assert producer.buffer_pool.queued == 0
        finally:
            proxy.restore()
        assert (await first).offset == 1


# -- a 3-broker cluster (three_brokers: tests/conftest.py) -----------------------


@pytest.mark.slow
@pytest.mark.real_broker(
    reason=(
        "partition reassignment (AlterPartitionReassignments) is not served by the fake; "
        "control.move_leader is its way"
    )
)
async def test_a_moved_leader_is_followed_from_the_produce_answer_kip_951(
    three_brokers: KafkaCluster,
) -> None:
    """Leadership moves (replicas reordered, preferred leader elected) while the old leader
    stays up: its NOT_LEADER_OR_FOLLOWER answer names the new leader (KIP-951), the
    producer follows the hint without waiting for a metadata refresh, and every record is
    written once, in order."""
    bs = three_brokers.bootstrap_servers
    topic = f"hinted-{os.getpid()}"
    tp = TopicPartition(topic, 0)
    async with Admin(bs) as admin:
        created = await admin.create_topics([NewTopic(topic, partitions=1, replication_factor=3)])
    description = created[topic]
    assert description is not None
    old_leader = description.partitions[0].leader
    replicas = list(description.partitions[0].replicas)
    new_order = [r for r in replicas if r != old_leader] + [old_leader]
    count = 2_000
    async with Producer(bs, metadata_max_age_ms=300_000) as producer:
        futures = [await producer.enqueue(topic, b"%d" % i, partition=0) for i in range(1000)]
        await producer.flush()
        assert producer.cluster.snapshot.partition(tp).leader == old_leader  # type: ignore[union-attr]
        control = Cluster(ClientConfig(bootstrap_servers=bs))
        try:
            await control.bootstrap()
            moved = await control.send(
                None,
                AlterPartitionReassignmentsRequest(
                    topics=[
                        AlterPartitionReassignmentsRequest.ReassignableTopic(
                            name=topic,
                            partitions=[
                                AlterPartitionReassignmentsRequest.ReassignablePartition(
                                    partition_index=0, replicas=new_order
                                )
                            ],
                        )
                    ]
                ),
            )
            assert moved.error_code == 0, moved
            for _ in range(100):  # the reassignment completes at once: same replica set
                elected = await control.send(
                    None,
                    ElectLeadersRequest(
                        election_type=0,  # preferred
                        topic_partitions=[
                            ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])
                        ],
                    ),
                )
                code = elected.replica_election_results[0].partition_result[0].error_code
                if code == 0:
                    break
                await asyncio.sleep(0.1)
            assert code == 0, elected
        finally:
            await control.close()
        hints_before = producer.cluster.leader_hints_applied
        futures += [
            await producer.enqueue(topic, b"%d" % i, partition=0) for i in range(1000, count)
        ]
        await producer.flush()
        assert producer.cluster.leader_hints_applied > hints_before
        assert producer.cluster.snapshot.partition(tp).leader == new_order[0]  # type: ignore[union-attr]
    assert all(f.exception() is None for f in futures)
    _assert_exactly_once_in_order(await read_all(bs, topic, 1), count)


@pytest.mark.slow
async def test_killing_the_leader_mid_stream_loses_nothing_acknowledged(
    three_brokers: KafkaCluster,
) -> None:
    bs = three_brokers.bootstrap_servers
    topic = "failover"
    async with Admin(bs) as admin:
        created = await admin.create_topics(
            [
                NewTopic(
                    topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"}
                )
            ]
        )
    description = created[topic]
    assert description is not None
    victim = description.partitions[0].leader
    count = 20_000
    async with Producer(bs, acks="all", delivery_timeout_ms=90_000) as producer:
        futures = []
        for i in range(count):
            futures.append(await producer.enqueue(topic, b"%d" % i, key=b"%d" % (i % 3)))
            if i % 200 == 0:
                await asyncio.sleep(0.01)  # ~1 s of steady stream
            if i == count // 3:
                unacknowledged_at_kill = sum(not f.done() for f in futures)
                await three_brokers.kill_broker(victim)
        await producer.flush()
        moved = producer.cluster.snapshot.partition(TopicPartition(topic, 0))
    assert unacknowledged_at_kill > 0  # the leader died with records on their way
    assert moved is not None and moved.leader not in (victim, -1)
    acknowledged = [i for i, f in enumerate(futures) if f.exception() is None]
    failed = [f.exception() for f in futures if f.exception() is not None]
    assert not failed, failed[:3]
    records = await read_all(bs, topic, 3)
    _assert_exactly_once_in_order(records, count)
    stored = {int(r.value) for r in records}  # type: ignore[arg-type]
    assert set(acknowledged) <= stored


async def test_order_is_kept_on_a_partition_the_leader_is_still_loading(
    kafka_cluster: KafkaCluster,
) -> None:
    """Producing right after CreateTopics: the leader may refuse the first batch
    (NOT_LEADER_OR_FOLLOWER while it loads the new partition) and accept the second one,
    since a leader without state for a producer id takes any sequence as its first. The
    first batch's retry would then be written after the second. Until a partition has
    acknowledged a batch of the current producer epoch, one batch at a time goes to it.
    (Before this rule, 5-15% of these rounds came back reordered.)"""
    bs = kafka_cluster.bootstrap_servers
    n, rounds = 500, 25
    for round_ in range(rounds):
        topic = await _topic(kafka_cluster, f"fresh-{round_}", 3)
        async with Producer(bs, batch_size=2048) as producer:
            if round_ % 2:
                await producer.send_batch(
                    topic, [b"v%d" % i for i in range(n)], [b"%d" % i for i in range(n)],
                    partition=2,
                )  # fmt: skip
            else:
                for i in range(n):
                    await producer.enqueue(topic, b"v%d" % i, key=b"%d" % i, partition=2)
        keys: list[bytes | None] = []
        async with Consumer(bs) as consumer:
            consumer.assign([TopicPartition(topic, 2)])
            async with asyncio.timeout(30):
                async for record in consumer.stream():
                    keys.append(record.key)
                    if len(keys) == n:
                        break
        assert keys == [b"%d" % i for i in range(n)], f"round {round_}: reordered"
