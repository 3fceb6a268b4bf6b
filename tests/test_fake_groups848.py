"""FakeCluster KIP-848 groups (issue 34, part two): ConsumerGroupHeartbeat with member
epochs, the broker-side assignors, revocation before assignment, sessions; our
``Consumer(group_protocol="consumer")`` joins, rebalances and commits with member epochs,
and confluent-kafka's consumer (``group.protocol=consumer``) too. No JVM."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from aiostream_kafka import Consumer, Producer, TopicPartition
from aiostream_kafka.admin import Admin
from aiostream_kafka.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
)
from aiostream_kafka.testing import FakeCluster
from aiostream_kafka.testing.fake.consumer_groups import ConsumerGroupCoordinator

SETTINGS = {"group_protocol": "consumer", "max_poll_interval_ms": 20_000}


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _assigned(consumer: Consumer, want: int, timeout_s: float = 20.0) -> set[TopicPartition]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(consumer.assignment()) == want:
            return consumer.assignment()
        await asyncio.sleep(0.05)
    raise AssertionError(f"assignment {consumer.assignment()} never reached {want} partitions")


async def _pull(consumer: Consumer) -> None:
    async for _ in consumer.stream():
        pass


async def test_two_members_share_partitions_and_commit_with_member_epochs() -> None:
    async with FakeCluster(brokers=2) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=4)
        group = _name("g")
        async with Producer(bs) as producer:
            for i in range(8):
                await producer.send(topic, b"%d" % i, partition=i % 4)
        first = Consumer(bs, group_id=group, auto_offset_reset="earliest", **SETTINGS)  # type: ignore[arg-type]
        second = Consumer(bs, group_id=group, auto_offset_reset="earliest", **SETTINGS)  # type: ignore[arg-type]
        async with first:
            first.subscribe([topic])
            pulling = asyncio.ensure_future(_pull(first))
            await _assigned(first, 4)
            epoch_alone = cluster.state.consumer_groups.groups[group].group_epoch
            async with second:
                second.subscribe([topic])
                pulling2 = asyncio.ensure_future(_pull(second))
                a = await _assigned(first, 2)
                b = await _assigned(second, 2)
                assert a | b == {TopicPartition(topic, p) for p in range(4)} and not a & b
                described = cluster.state.consumer_groups.groups[group]
                assert described.group_epoch > epoch_alone
                assert {m.member_epoch for m in described.members.values()} == {
                    described.assignment_epoch
                }
                async with Admin(bs) as admin:
                    assert group in {g.group_id for g in await admin.list_consumer_groups()}
                # A commit carries the member epoch (OffsetCommit v9+).
                mine = sorted(b)[0]
                await second.commit({mine: 1})
                assert cluster.state.groups.committed(group)[(topic, mine.partition)].offset == 1
                pulling2.cancel()
            await _assigned(first, 4)  # the leaver's partitions come back
            pulling.cancel()
        assert cluster.state.consumer_groups.groups[group].state == "Empty"


async def test_a_member_that_stops_heartbeating_is_removed_after_its_session() -> None:
    """A member that goes silent is removed after the session timeout; its partitions go
    to the member still heartbeating."""
    async with FakeCluster(group_consumer_session_timeout_ms=1_000) as cluster:
        topic = cluster.create_topic(_name(), partitions=2)
        group = _name("g")
        silent = cluster.state.consumer_groups.heartbeat(
            group, "silent", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1_000,
            subscribed_names=[topic], subscribed_regex=None, server_assignor=None,
            owned=None, client_id="silent", client_host="/h", generate_member_id=False,
        )  # fmt: skip
        assert silent.assignment is not None and len(silent.assignment) == 1
        async with Consumer(cluster.bootstrap_servers, group_id=group, **SETTINGS) as consumer:  # type: ignore[arg-type]
            consumer.subscribe([topic])
            pulling = asyncio.ensure_future(_pull(consumer))
            await _assigned(consumer, 2, timeout_s=10)  # only once "silent" is gone
            assert "silent" not in cluster.state.consumer_groups.groups[group].members
            pulling.cancel()
        assert not cluster.state.consumer_groups.groups[group].members


async def test_revocation_comes_before_assignment_at_the_wire() -> None:
    """Unit view of the coordinator: a partition moves to a new member only once its
    owner reported giving it up; the owner keeps its epoch while it revokes."""
    topic_id = uuid.uuid4()
    topics = {"t": (topic_id, 2)}
    coordinator = ConsumerGroupCoordinator(
        lambda: topics, session_timeout_ms=45_000, heartbeat_interval_ms=1_000
    )

    def beat(member: str, epoch: int, owned: set[int] | None = None):  # type: ignore[no-untyped-def]
        return coordinator.heartbeat(
            "g", member, epoch, instance_id=None, rack_id=None, rebalance_timeout_ms=30_000,
            subscribed_names=["t"] if epoch == 0 else None, subscribed_regex=None,
            server_assignor=None, owned=None if owned is None else {topic_id: owned},
            client_id="c", client_host="/h", generate_member_id=False,
        )  # fmt: skip

    a = beat("A", 0)
    assert a.assignment == {topic_id: {0, 1}} and a.member_epoch == 1
    b = beat("B", 0)
    assert b.assignment == {} and b.member_epoch == 2  # what B gets is still A's
    a = beat("A", 1, {0, 1})
    assert a.member_epoch == 1 and a.assignment is not None and len(a.assignment[topic_id]) == 1
    kept = a.assignment[topic_id]
    b = beat("B", 2, set())
    assert b.assignment is None  # unchanged: A has not released yet
    a = beat("A", 1, set(kept))  # released
    assert a.member_epoch == 2
    b = beat("B", 2, set())
    assert b.assignment == {topic_id: {0, 1} - kept}
    stale = beat("A", 7, set(kept))  # an epoch the member never had
    assert stale.error_code == 110  # FENCED_MEMBER_EPOCH
    coordinator.close()


async def test_bad_first_heartbeats_are_refused() -> None:
    async with FakeCluster() as cluster:
        state = cluster.state
        assert (
            state.consumer_groups.heartbeat(
                "g", "m", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1,
                subscribed_names=None, subscribed_regex=None, server_assignor=None,
                owned=None, client_id="", client_host="", generate_member_id=False,
            ).error_code == 42  # INVALID_REQUEST
        )  # fmt: skip
        assert (
            state.consumer_groups.heartbeat(
                "g", "m", 0, instance_id=None, rack_id=None, rebalance_timeout_ms=1,
                subscribed_names=["t"], subscribed_regex=None, server_assignor="sticky",
                owned=None, client_id="", client_host="", generate_member_id=False,
            ).error_code == 112  # UNSUPPORTED_ASSIGNOR
        )  # fmt: skip
        assert ConsumerGroupHeartbeatRequest.API_KEY == 68


def test_confluent_kafka_consumer_protocol_group() -> None:
    confluent = pytest.importorskip("confluent_kafka")
    cluster = FakeCluster()
    cluster.start_blocking()
    try:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=2)
        producer = confluent.Producer({"bootstrap.servers": bs})
        for i in range(10):
            producer.produce(topic, b"%d" % i, partition=i % 2)
        assert producer.flush(15) == 0
        group = _name("g")
        consumer = confluent.Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            while len(got) < 10 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(int(v) for v in got) == list(range(10))
        committed = cluster.state.groups.committed(group)
        assert committed[(topic, 0)].offset == 5 and committed[(topic, 1)].offset == 5
    finally:
        cluster.stop_blocking()
