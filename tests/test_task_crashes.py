"""A bug in a background task is never only logged: it ends its owner and every caller
and iterator sees it (the crash policies stated at each TaskScope.spawn, issue 27).

Before the task scopes, a crash in a produce request's task was logged and its batch
waited for an answer that never came, and a crash in the committer ended auto-commit
silently while the consumer looked healthy."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from aiostream_kafka import Consumer
from aiostream_kafka.producer import Producer
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.pytest_plugin import NewTopic


async def test_a_crashing_produce_request_task_fails_the_producer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
        await producer.send(topic, b"before the bug")
        sender = producer._sender
        assert sender is not None

        async def broken(*args: object) -> None:
            raise RuntimeError("simulated bug in a request task")

        sender._produce = broken  # type: ignore[method-assign]
        with pytest.raises(Exception, match="simulated bug in a request task"):
            async with asyncio.timeout(10):  # not a wait for delivery_timeout_ms
                await producer.send(topic, b"lost to the bug, and told so")
        assert isinstance(producer.error, RuntimeError)


async def test_a_crashing_committer_fails_the_consumer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(20):
            await producer.enqueue(topic, b"%d" % i)
    async with Consumer(
        bootstrap,
        group_id=f"crash-{uuid.uuid4().hex[:8]}",
        enable_auto_commit=True,
        auto_commit_interval_ms=100,
        heartbeat_interval_ms=300,
        session_timeout_ms=6_000,
    ) as consumer:
        consumer.subscribe([topic])
        group = consumer.group
        assert group is not None

        def broken(owned: object) -> dict[object, object]:
            raise RuntimeError("simulated bug in the committer")

        group._pending_offsets = broken  # type: ignore[assignment,method-assign]
        with pytest.raises(RuntimeError, match="simulated bug in the committer"):
            async with asyncio.timeout(20):
                async for _record in consumer.stream():
                    await asyncio.sleep(0.05)  # auto-commit rounds meanwhile
        assert not consumer.health().healthy
