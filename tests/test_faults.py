"""Faults on a real 3-broker cluster: brokers killed while requests are in flight."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest
from helpers import eventually

from aiostream_kafka.admin import Admin, NewTopic, OffsetSpec
from aiostream_kafka.errors import NetworkError
from aiostream_kafka.net import Lane
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
        reason="fault tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
    ),
]


def _long_poll(topic: str, topic_id: object, partition: int, epoch: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=10_000,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                topic_id=topic_id,  # type: ignore[arg-type]
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=partition,
                        current_leader_epoch=epoch,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


async def test_killing_the_leader_mid_request(three_brokers: KafkaCluster) -> None:
    async with Admin(three_brokers.bootstrap_servers, default_api_timeout_ms=60_000) as admin:
        topic = "moving-leaders"
        created = await admin.create_topics([NewTopic(topic, partitions=3, replication_factor=3)])
        description = created[topic]
        assert description is not None
        tp = TopicPartition(topic, 0)
        old = description.partitions[0]
        cluster = admin.cluster

        # Long polls parked at the leader of partition 0 when it dies.
        conn = await cluster.connection(old.leader, Lane.FETCH)
        # Right after creation a leader may answer NOT_LEADER_OR_FOLLOWER for a moment;
        # wait until it serves the partition, so that the long polls below park.
        ready = _long_poll(topic, description.topic_id, 0, old.leader_epoch)
        ready.max_wait_ms = 0
        for _ in range(200):
            answer = await conn.request(ready)
            assert isinstance(answer, FetchResponse)
            if answer.responses[0].partitions[0].error_code == 0:
                break
            await asyncio.sleep(0.05)
        request = _long_poll(topic, description.topic_id, 0, old.leader_epoch)
        in_flight = [
            asyncio.create_task(conn.request(request, timeout_ms=30_000)) for _ in range(5)
        ]
        await asyncio.sleep(0.3)
        assert conn.in_flight == 5 and not any(t.done() for t in in_flight)

        await three_brokers.kill_broker(old.leader)
        results = await asyncio.gather(*in_flight, return_exceptions=True)
        assert all(isinstance(r, NetworkError) and r.retriable for r in results), results
        assert conn.closed

        # Admin calls retry through the election: the next answer comes from the new leader.
        latest = await admin.list_offsets({tp: OffsetSpec.latest()})
        assert latest[tp].offset == 0
        moved = cluster.snapshot.partition(tp)
        assert moved is not None
        assert moved.leader != old.leader and moved.leader >= 0
        assert moved.leader_epoch > old.leader_epoch

        # And a fresh request to the new leader succeeds.
        new_conn = await cluster.connection(moved.leader, Lane.FETCH)
        request = _long_poll(topic, description.topic_id, 0, moved.leader_epoch)
        request.max_wait_ms = 0
        response = await new_conn.request(request)
        assert isinstance(response, FetchResponse)
        assert response.responses[0].partitions[0].error_code == 0

        # The killed broker's address is backed off, not hammered.
        dead = cluster.snapshot.brokers.get(old.leader)
        if dead is not None:
            with pytest.raises(NetworkError):
                await cluster.connection(old.leader, Lane.CONTROL)

        await three_brokers.start_broker(old.leader)
        back = await admin.describe_topics([topic])
        assert all(len(p.replicas) == 3 for p in back[topic].partitions)


async def test_metadata_survives_losing_the_bootstrap_broker(three_brokers: KafkaCluster) -> None:
    """Bootstrap through one broker, lose it: metadata comes from the brokers learned."""
    first = three_brokers.bootstrap_servers.split(",")[0]
    async with Admin(first, default_api_timeout_ms=60_000) as admin:
        before = await admin.describe_cluster()
        assert len(before.brokers) == 3
        await admin.cluster.refresh()
        await three_brokers.stop_broker(1)
        try:
            snapshot = await admin.cluster.refresh()
            assert snapshot.brokers  # answered by broker 2 or 3
            topics = await admin.list_topics()
            assert isinstance(topics, dict)
        finally:
            await three_brokers.start_broker(1)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_group_survives_losing_its_coordinator(
    three_brokers: KafkaCluster, protocol: str
) -> None:
    """Under both group protocols (KIP-848's group state lives in __consumer_offsets too:
    the new coordinator loads it and the member goes on with its epoch)."""
    from aiostream_kafka import Consumer, Producer
    from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType

    bootstrap = three_brokers.bootstrap_servers
    topic = f"group-coordinator-loss-{protocol}"
    group_id = f"survivors-{protocol}"
    settings: dict[str, object] = {
        "max_poll_interval_ms": 30_000,
        "default_api_timeout_ms": 60_000,
        "group_protocol": protocol,
    }
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions=4, replication_factor=3)])
        if protocol == "classic":
            settings.update(session_timeout_ms=6_000, heartbeat_interval_ms=300)
        else:  # the same timings, as the group's configs
            await admin.incremental_alter_configs(
                {
                    ConfigResource(ConfigResourceType.GROUP, group_id): [
                        AlterConfigOp("consumer.heartbeat.interval.ms", "300"),
                        AlterConfigOp("consumer.session.timeout.ms", "6000"),
                    ]
                }
            )
    seen: set[tuple[int, int]] = set()
    async with (
        Producer(bootstrap_servers=bootstrap) as producer,
        Consumer(bootstrap, group_id=group_id, **settings) as consumer,  # type: ignore[arg-type]
    ):
        consumer.subscribe([topic])

        async def consume() -> None:
            async for record in consumer.committing(consumer.stream(), every=50, within_s=0.5):
                seen.add((record.partition, record.offset))

        task = asyncio.create_task(consume())
        for i in range(200):
            await producer.send(topic, value=b"%d" % i, key=b"%d" % i)
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 200, 30)
        group = consumer.group
        assert group is not None
        coordinator_node = await group.coordinator.coordinator_node()  # type: ignore[union-attr]
        await three_brokers.kill_broker(coordinator_node)
        try:
            for i in range(200, 400):
                await producer.send(topic, value=b"%d" % i, key=b"%d" % i)
            # The group moves to a new coordinator and the records keep coming.
            await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n >= 400, 60)
            await eventually(lambda: asyncio.sleep(0, consumer.health()),
                             lambda h: h.state == "stable" and h.healthy, 60)  # fmt: skip
            # (The id is forgotten after any error and looked up again: ask for it.)
            now = await group.coordinator.coordinator_node()  # type: ignore[union-attr]
            assert now != coordinator_node
            await consumer.commit()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            # Restarted whatever happened: the next test needs the three brokers.
            await three_brokers.start_broker(coordinator_node)
