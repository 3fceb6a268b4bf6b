"""The Admin client's share group calls (issue 29, item 5), against a real 4.3.1 broker
(share groups are on by default there). The share group is run by confluent-kafka's
preview ``ShareConsumer`` (explicit acknowledgements): configured through
``incremental_alter_configs`` on its GROUP resource, then described, its share-partition
start offsets and lag listed, listed by type, and its offsets altered and deleted once its
member has left (refused with ``NonEmptyGroupError`` while it has one)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from helpers import eventually

from aiostream_kafka import Producer
from aiostream_kafka.admin import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ShareGroupDescription,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopicFactory = Callable[..., Awaitable[str]]

# A dev dependency (pyproject: confluent-kafka>=2.16, whose preview ShareConsumer makes the
# share group here): a missing one fails the module rather than skipping it.
import confluent_kafka  # noqa: E402

assert hasattr(confluent_kafka, "ShareConsumer"), "confluent-kafka >= 2.16 is needed here"


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def admin(kafka_cluster: KafkaCluster) -> AsyncIterator[Admin]:
    async with Admin(kafka_cluster.bootstrap_servers, default_api_timeout_ms=20_000) as client:
        yield client


class ShareMember:
    """A confluent-kafka ``ShareConsumer`` whose calls run in a worker thread, one at a
    time (the consumer is not thread-safe)."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.lock = asyncio.Lock()

    async def call(self, fn: Callable[[], Any]) -> Any:
        async with self.lock:
            return await asyncio.to_thread(fn)

    async def accept(self, count: int, timeout_s: float = 60) -> list[tuple[int, int]]:
        """Poll until ``count`` records came, accepting each, then commit the
        acknowledgements; returns the (partition, offset) of each record."""
        seen: list[tuple[int, int]] = []
        async with asyncio.timeout(timeout_s):
            while len(seen) < count:
                batch = await self.call(lambda: self.consumer.poll(1.0))
                for message in batch or ():
                    if message.error() is not None:
                        continue
                    seen.append((message.partition(), message.offset()))
                    self.consumer.acknowledge(message)
        await self.call(lambda: self.consumer.commit_sync(30))
        return seen


@contextlib.asynccontextmanager
async def share_member(
    bootstrap: str, group: str, topics: list[str], **config: Any
) -> AsyncIterator[ShareMember]:
    """A confluent-kafka share consumer of ``group`` subscribed to ``topics`` (explicit
    acknowledgements); closed on exit (it leaves the group), also when the test fails."""
    member = ShareMember(
        confluent_kafka.ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
                **config,
            }
        )
    )
    try:
        member.consumer.subscribe(topics)
        yield member
    finally:
        await asyncio.wait_for(member.call(member.consumer.close), 30)


async def _described(admin: Admin, group: str) -> ShareGroupDescription | None:
    """The description of share group ``group``, or None until it exists."""
    try:
        return (await admin.describe_share_groups([group]))[group]
    except ec.GroupIdNotFoundError:
        return None


async def test_share_group_configs_described_offsets_lag_alter_and_delete(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group, client_id = _name("share"), _name("cfk-share")

    # The group's configs, set before it exists (a GROUP resource needs no group yet).
    resource = ConfigResource(ConfigResourceType.GROUP, group)
    await admin.incremental_alter_configs(
        {
            resource: [
                AlterConfigOp("share.auto.offset.reset", "earliest"),
                AlterConfigOp("share.record.lock.duration.ms", "20000"),
                AlterConfigOp("share.delivery.count.limit", "3"),
            ]
        }
    )
    keys = [
        "share.auto.offset.reset",
        "share.record.lock.duration.ms",
        "share.delivery.count.limit",
    ]
    configs = await eventually(
        lambda: admin.describe_configs([resource], keys=keys),
        lambda c: (
            c[resource].get("share.delivery.count.limit") is not None
            and c[resource]["share.delivery.count.limit"].value == "3"
        ),
    )
    assert {k: configs[resource][k].value for k in keys} == {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "20000",
        "share.delivery.count.limit": "3",
    }
    # Out of range (the limit is 2-10 on 4.3.1): refused, nothing changed.
    with pytest.raises(ec.InvalidConfigError):
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp("share.delivery.count.limit", "1")]}
        )

    # Records written before the member joins: only "earliest" delivers them.
    async with Producer(bs) as producer:
        for i in range(4):
            await producer.send(topic, f"0-{i}".encode(), partition=0)
        for i in range(10):
            await producer.send(topic, f"1-{i}".encode(), partition=1)

    with pytest.raises(ec.GroupIdNotFoundError):
        await admin.describe_share_groups([_name("no-such-share-group")])

    async with share_member(bs, group, [topic], **{"client.id": client_id}) as member:
        seen = await member.accept(14)
        assert sorted(seen) == [(0, o) for o in range(4)] + [(1, o) for o in range(10)]

        described = await eventually(
            lambda: _described(admin, group),
            lambda d: d is not None and d.state == "Stable" and len(d.members) == 1,
        )
        assert described is not None
        assert described.group_id == group
        assert described.coordinator == await admin.find_coordinator(group)
        assert described.group_epoch >= 1 and described.assignment_epoch >= 1
        assert described.assignor == "simple"
        m = described.members[0]
        assert m.member_id and m.member_epoch >= 1
        assert (m.client_id, m.subscribed_topics) == (client_id, [topic])
        assert "127.0.0.1" in m.host
        assert m.assignment == [p0, p1]

        # Listed as a share group, and only under that type.
        assert group in {g.group_id for g in await admin.list_consumer_groups(types=["share"])}
        assert group not in {
            g.group_id for g in await admin.list_consumer_groups(types=["consumer", "classic"])
        }
        listed = {g.group_id: g for g in await admin.list_consumer_groups()}
        assert listed[group].group_type == "share"

        # Six more records on partition 0, not fetched: they are the lag.
        async with Producer(bs) as producer:
            for i in range(4, 10):
                await producer.send(topic, f"0-{i}".encode(), partition=0)

        # Measured on 4.3.1: the start offsets stay where the group began (0) while the
        # records after them are accepted; the broker's lag counts what is not done with.
        offsets = await eventually(
            lambda: admin.list_share_group_offsets(group),
            lambda o: {tp: i.lag for tp, i in o.items()} == {p0: 6, p1: 0},
        )
        assert {tp: i.start_offset for tp, i in offsets.items()} == {p0: 0, p1: 0}
        assert offsets[p0].leader_epoch is not None and offsets[p0].leader_epoch >= 0
        # Not the high watermark less the start offset (10 and 10): the broker's count.
        assert await admin.share_group_lag(group) == {p0: 6, p1: 0}
        only = await admin.list_share_group_offsets(group, [p1])
        assert list(only) == [p1] and only[p1].lag == 0

        # A group with a member refuses both changes of its offsets.
        with pytest.raises(ec.NonEmptyGroupError):
            await admin.alter_share_group_offsets(group, {p0: 0})
        with pytest.raises(ec.NonEmptyGroupError):
            await admin.delete_share_group_offsets(group, [topic])

    # The member left: the group is empty, its offsets can be changed.
    empty = await eventually(
        lambda: _described(admin, group),
        lambda d: d is not None and d.state == "Empty" and not d.members,
    )
    assert empty is not None
    await admin.alter_share_group_offsets(group, {p0: 1, p1: 7})
    altered = await admin.list_share_group_offsets(group)
    assert {tp: i.start_offset for tp, i in altered.items()} == {p0: 1, p1: 7}
    assert await admin.share_group_lag(group) == {p0: 9, p1: 3}
    # An offset past the end is taken as given; the broker gives no lag for it, the
    # high watermark tells: nothing to deliver.
    await admin.alter_share_group_offsets(group, {p1: 50})
    past = await admin.list_share_group_offsets(group, [p1])
    assert (past[p1].start_offset, past[p1].lag) == (50, None)
    assert (await admin.share_group_lag(group))[p1] == 0
    await admin.alter_share_group_offsets(group, {p1: 7})

    # A new member takes the records from the altered start offsets on.
    async with share_member(bs, group, [topic]) as member:
        again = await member.accept(12)
        assert sorted(again) == [(0, o) for o in range(1, 10)] + [(1, o) for o in range(7, 10)]
    await eventually(
        lambda: _described(admin, group),
        lambda d: d is not None and not d.members,
    )
    assert await admin.share_group_lag(group) == {p0: 0, p1: 0}

    with pytest.raises(ec.UnknownTopicOrPartitionError, match="no-such-topic"):
        await admin.delete_share_group_offsets(group, [_name("no-such-topic")])
    await admin.delete_share_group_offsets(group, [topic])
    assert await admin.list_share_group_offsets(group) == {}
    assert await admin.share_group_lag(group) == {}
    # An unknown group has no offsets (no error), and no lag.
    assert await admin.list_share_group_offsets(_name("no-such-share-group")) == {}


async def test_share_group_calls_check_their_arguments(admin: Admin) -> None:
    with pytest.raises(TypeError, match=r'describe_share_groups\(\["g"\]\)'):
        await admin.describe_share_groups("g")
    with pytest.raises(TypeError, match="delete_share_group_offsets"):
        await admin.delete_share_group_offsets("g", "t")
    with pytest.raises(TypeError, match="mapping"):
        await admin.alter_share_group_offsets("g", [TopicPartition("t", 0)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list_share_group_offsets"):
        await admin.list_share_group_offsets("g", TopicPartition("t", 0))  # type: ignore[arg-type]
    assert await admin.list_share_group_offsets("g", []) == {}
    await admin.alter_share_group_offsets("g", {})
    await admin.delete_share_group_offsets("g", [])
