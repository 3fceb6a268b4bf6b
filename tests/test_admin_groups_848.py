"""The Admin client's group calls on groups of both protocols (issue 28, item 4), against a
real 4.3.1 broker: a KIP-848 ("consumer") group run by confluent-kafka
(``group.protocol=consumer``, librdkafka 2.12+) beside a classic group of our own Consumer.
``describe_consumer_groups`` tells their types apart and describes the consumer group with
ConsumerGroupDescribe (epochs, assignor, member epoch, rack, subscription, assignment and
target assignment); ``list_consumer_groups(types=...)`` filters by type; the lag helpers
work for both."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from helpers import eventually

from aiostream_kafka import Consumer, Producer
from aiostream_kafka.admin import Admin, ConsumerGroupDescription
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopicFactory = Callable[..., Awaitable[str]]

confluent_kafka = pytest.importorskip("confluent_kafka")


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def admin(kafka_cluster: KafkaCluster) -> AsyncIterator[Admin]:
    async with Admin(kafka_cluster.bootstrap_servers, default_api_timeout_ms=20_000) as client:
        yield client


class Member:
    """A confluent-kafka consumer and the lock that keeps its calls one at a time (each
    runs in a worker thread: the background poll, and the test's calls)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.lock = asyncio.Lock()

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (a call on the consumer) in a thread, between polls."""
        async with self.lock:
            return await asyncio.to_thread(fn)


@contextlib.asynccontextmanager
async def consumer_protocol_member(
    bootstrap: str, group: str, topics: list[str], **config: Any
) -> AsyncIterator[Member]:
    """A confluent-kafka consumer in ``group`` under the KIP-848 protocol, subscribed to
    ``topics`` (a name starting with ``^`` is a regex), polled in the background; closed
    on exit (also when the test fails)."""
    member = Member(
        confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **config,
            }
        )
    )
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            await member.call(lambda: member.consumer.poll(0.1))

    task: asyncio.Task[None] | None = None
    try:
        member.consumer.subscribe(topics)
        task = asyncio.create_task(poll())
        yield member
    finally:
        stop.set()
        if task is not None:
            await asyncio.wait_for(task, 10)
        await asyncio.wait_for(asyncio.to_thread(member.consumer.close), 30)


async def _describe(admin: Admin, group: str) -> ConsumerGroupDescription:
    return (await admin.describe_consumer_groups([group]))[group]


async def _joined(admin: Admin, group: str) -> ConsumerGroupDescription | None:
    """The description of ``group``, or None until its first member joined."""
    try:
        return await _describe(admin, group)
    except ec.GroupIdNotFoundError:
        return None


async def test_both_group_types_described_listed_and_their_lag(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    tps = [TopicPartition(topic, p) for p in range(4)]
    async with Producer(bs) as producer:
        for p in range(4):
            for i in range(5):
                await producer.send(topic, f"{p}-{i}".encode(), partition=p)

    modern, classic = _name("g848"), _name("gclassic")
    instance, client_id = _name("inst"), _name("cfk")
    async with (
        consumer_protocol_member(
            bs,
            modern,
            [topic],
            **{
                "group.instance.id": instance,
                "client.rack": "rack-a",
                "client.id": client_id,
                "group.remote.assignor": "range",
            },
        ) as member,
        Consumer(bs, group_id=classic, enable_auto_commit=False) as ours,
    ):
        ours.subscribe([topic])
        seen = 0
        async with asyncio.timeout(60):
            async for _ in ours.stream():
                seen += 1
                if seen == 20:
                    break
        await ours.commit({tps[0]: 5, tps[1]: 4, tps[2]: 1, tps[3]: 0})

        # The consumer group, once its member owns every partition (Stable).
        described = await eventually(
            lambda: _joined(admin, modern),
            lambda d: (
                d is not None
                and d.state == "Stable"
                and len(d.members) == 1
                and d.members[0].assignment == tps
            ),
            timeout_s=30,
        )
        assert described is not None and described.type == "consumer"
        assert (described.protocol_type, described.protocol) == ("consumer", "range")
        assert described.coordinator == await admin.find_coordinator(modern)
        assert described.group_epoch is not None and described.group_epoch >= 1
        assert described.assignment_epoch == described.group_epoch
        m = described.members[0]
        assert m.member_epoch == described.group_epoch
        assert (m.group_instance_id, m.rack, m.client_id) == (instance, "rack-a", client_id)
        assert "127.0.0.1" in m.host
        assert (m.subscribed_topics, m.subscribed_topic_regex) == ([topic], None)
        assert m.target_assignment == tps
        assert m.member_type == "consumer"
        assert m.member_id  # the id the client generated

        # The classic group: the classic description, the new fields left at their defaults.
        old = await _describe(admin, classic)
        assert (old.type, old.protocol_type, old.state) == ("classic", "consumer", "Stable")
        assert old.protocol in ("range", "cooperative-sticky", "roundrobin", "sticky")
        assert (old.group_epoch, old.assignment_epoch) == (None, None)
        assert len(old.members) == 1 and sorted(old.members[0].assignment) == tps
        assert old.members[0].member_epoch is None and old.members[0].target_assignment is None

        # Both at once, each by its own request.
        both = await admin.describe_consumer_groups([modern, classic])
        assert (both[modern].type, both[classic].type) == ("consumer", "classic")

        # The listing: each type, both, and every group.
        def ids(listings: list[Any]) -> set[str]:
            return {g.group_id for g in listings} & {modern, classic}

        assert ids(await admin.list_consumer_groups(types=["consumer"])) == {modern}
        assert ids(await admin.list_consumer_groups(types=["classic"])) == {classic}
        assert ids(await admin.list_consumer_groups(types=["Consumer", "CLASSIC"])) == {
            modern,
            classic,
        }
        assert ids(await admin.list_consumer_groups(types=["share"])) == set()
        listed = {g.group_id: g for g in await admin.list_consumer_groups()}
        assert (listed[modern].group_type, listed[classic].group_type) == ("consumer", "classic")
        with pytest.raises(ValueError, match="consumers"):
            await admin.list_consumer_groups(types=["consumers"])

        # The lag helpers for both: commits of the consumer-protocol member (OffsetCommit
        # with its member epoch) and of ours.
        await member.call(
            lambda: member.consumer.commit(
                offsets=[
                    confluent_kafka.TopicPartition(topic, 0, 2),
                    confluent_kafka.TopicPartition(topic, 1, 5),
                    confluent_kafka.TopicPartition(topic, 3, 3),
                ],
                asynchronous=False,
            ),
        )
        committed = await admin.list_consumer_group_offsets(modern)
        assert {tp: om.offset for tp, om in committed.items()} == {
            tps[0]: 2,
            tps[1]: 5,
            tps[3]: 3,
        }
        only = await admin.list_consumer_group_offsets(modern, [tps[3]])
        assert {tp: om.offset for tp, om in only.items()} == {tps[3]: 3}
        assert await admin.consumer_group_lag(modern) == {tps[0]: 3, tps[1]: 0, tps[3]: 2}
        assert await admin.consumer_group_lag(classic) == {
            tps[0]: 0,
            tps[1]: 1,
            tps[2]: 4,
            tps[3]: 5,
        }

    # A static member that closed stays in the group for its session, at epoch -2.
    away = await eventually(
        lambda: _describe(admin, modern),
        lambda d: len(d.members) == 1 and d.members[0].member_epoch == -2,
    )
    assert away.type == "consumer" and away.members[0].group_instance_id == instance


async def test_a_regex_subscription_is_described_as_the_brokers_pattern(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    prefix = _name("rx")
    topic = await new_topic(partitions=2, name=f"{prefix}-a")
    group = _name("g848rx")
    async with consumer_protocol_member(kafka_cluster.bootstrap_servers, group, [f"^{prefix}-.*"]):
        # The broker resolves a regex asynchronously (first assignment ~5 s).
        described = await eventually(
            lambda: _joined(admin, group),
            lambda d: d is not None and len(d.members) == 1 and len(d.members[0].assignment) == 2,
            timeout_s=30,
        )
    assert described is not None and described.type == "consumer"
    m = described.members[0]
    assert m.subscribed_topic_regex is not None and prefix in m.subscribed_topic_regex
    assert m.subscribed_topics == []
    assert m.assignment == [TopicPartition(topic, 0), TopicPartition(topic, 1)]


async def test_an_unknown_group_is_not_found_by_either_describe(admin: Admin) -> None:
    group = _name("nobody")
    with pytest.raises(ec.GroupIdNotFoundError, match=group):
        await admin.describe_consumer_groups([group])
