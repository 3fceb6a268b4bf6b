"""Share groups (KIP-932) in the FakeCluster (issue 34): our ShareConsumer against the
fake (round trip, RELEASE, the lock timeout, REJECT, the delivery count limit, two
members splitting partitions, read_committed), the share session rules on the wire, and
a share group's id refused to consumer and classic groups. No JVM: these run in the unit tier."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from typing import Any

import pytest
from helpers import eventually
from test_share_consumer import _group
from test_share_faults import _none_within, _take

from aiostream_kafka import AcknowledgeType, Producer, ShareConsumer, ShareRecord
from aiostream_kafka.admin import Admin
from aiostream_kafka.protocol.headers import decode_response, encode_request
from aiostream_kafka.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from aiostream_kafka.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from aiostream_kafka.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from aiostream_kafka.protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from aiostream_kafka.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from aiostream_kafka.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import FakeCluster
from aiostream_kafka.testing.fake import errors


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _produce(bs: str, topic: str, count: int, partitions: int = 1) -> None:
    async with Producer(bootstrap_servers=bs, linger_ms=2) as producer:
        for i in range(count):
            await producer.send(topic, b"%d" % i, partition=i % partitions)


async def test_one_member_takes_every_record_once_and_the_lag_ends_at_zero() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"), partitions=2)
        bs = cluster.bootstrap_servers
        group = await _group(bs)
        await _produce(bs, topic, 40, partitions=2)
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
            sc.subscribe([topic])
            got = await _take(sc, 40, 15.0)
            await sc.commit()
            assert sorted((r.partition, r.offset) for r in got) == sorted(
                (i % 2, i // 2) for i in range(40)
            )
            assert {r.delivery_count for r in got} == {1}
            async with Admin(bootstrap_servers=bs) as admin:
                lag = await eventually(
                    lambda: admin.share_group_lag(group), lambda lag: set(lag.values()) == {0}
                )
                assert set(lag) == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
                described = (await admin.describe_share_groups([group]))[group]
                assert described.state == "Stable" and described.assignor == "simple"
        async with Admin(bootstrap_servers=bs) as admin:
            listed = {g.group_id: g for g in await admin.list_consumer_groups(types=["share"])}
            assert listed[group].group_type == "share"


async def test_the_start_offset_is_latest_unless_the_group_says_earliest() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        await _produce(bs, topic, 3)
        group = await _group(bs, **{"share.auto.offset.reset": "latest"})
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
            sc.subscribe([topic])
            await eventually(lambda: _fetches(sc), lambda n: n > 0)
            assert await _none_within(sc, 0.5) == []
            await _produce(bs, topic, 1)
            (record,) = await _take(sc, 1, 15.0, accept=False)
            assert record.offset == 3  # written after the start: the only one delivered
            sc.acknowledge(record)
            await sc.commit()


async def _fetches(sc: ShareConsumer) -> int:
    return sc.fetches


async def test_release_redelivers_with_a_higher_count_and_reject_archives() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs)
        await _produce(bs, topic, 2)
        log: list[tuple[int, int, str]] = []
        async with ShareConsumer(
            bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit"
        ) as sc:
            sc.subscribe([topic])
            async with asyncio.timeout(15):
                async for record in sc:
                    if record.offset == 0 and record.delivery_count == 1:
                        sc.acknowledge(record, AcknowledgeType.RELEASE)
                        log.append((0, 1, "release"))
                    elif record.offset == 0:
                        sc.acknowledge(record, AcknowledgeType.ACCEPT)
                        log.append((0, record.delivery_count, "accept"))
                    else:
                        sc.acknowledge(record, AcknowledgeType.REJECT)
                        log.append((record.offset, record.delivery_count, "reject"))
                    if len(log) == 3:
                        break
            await sc.commit()
            assert await _none_within(sc, 0.5) == []
        assert sorted(log) == [(0, 1, "release"), (0, 2, "accept"), (1, 1, "reject")]
        sp = next(iter(cluster.state.share_groups.partitions[group].values()))
        assert (sp.start_offset, sp.inflight) == (2, {})


async def test_the_delivery_count_limit_archives_a_record_released_every_time() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs, **{"share.delivery.count.limit": "2"})
        await _produce(bs, topic, 2)
        counts: list[tuple[int, int]] = []
        async with ShareConsumer(
            bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit"
        ) as sc:
            sc.subscribe([topic])
            async with asyncio.timeout(15):
                async for record in sc:
                    counts.append((record.offset, record.delivery_count))
                    if record.offset == 0:
                        sc.acknowledge(record, AcknowledgeType.RELEASE)
                    else:
                        sc.acknowledge(record, AcknowledgeType.ACCEPT)
                    if len(counts) == 3:
                        break
            await sc.commit()
            assert await _none_within(sc, 0.5) == []
        assert sorted(counts) == [(0, 1), (0, 2), (1, 1)]
        sp = next(iter(cluster.state.share_groups.partitions[group].values()))
        assert sp.inflight == {} and sp.start_offset == 2  # offset 0 ARCHIVED


async def test_two_members_split_the_partitions() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"), partitions=4)
        bs = cluster.bootstrap_servers
        group = await _group(bs)
        async with (
            ShareConsumer(bootstrap_servers=bs, group_id=group) as a,
            ShareConsumer(bootstrap_servers=bs, group_id=group) as b,
        ):
            a.subscribe([topic])
            b.subscribe([topic])

            async def sizes() -> tuple[int, int]:
                return len(a.assignment), len(b.assignment)

            await eventually(sizes, lambda s: s == (2, 2))
            assert not set(a.assignment) & set(b.assignment)
            await _produce(bs, topic, 40, partitions=4)
            got_a: list[ShareRecord] = []
            got_b: list[ShareRecord] = []

            async def drain(sc: ShareConsumer, out: list[ShareRecord]) -> None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2.0):
                        async for record in sc:
                            out.append(record)

            await asyncio.gather(drain(a, got_a), drain(b, got_b))
            # Each record once over both (a fetch in flight when the assignment moved may
            # still acquire from a partition the member just lost, as on a real broker).
            both = sorted((r.partition, r.offset) for r in got_a + got_b)
            assert both == sorted((i % 4, i // 4) for i in range(40))
            assert got_a and got_b
            await asyncio.gather(a.commit(), b.commit())
            async with Admin(bootstrap_servers=bs) as admin:
                described = (await admin.describe_share_groups([group]))[group]
            assert len(described.members) == 2
            assert sorted(tp for m in described.members for tp in m.assignment) == [
                TopicPartition(topic, p) for p in range(4)
            ]


async def test_read_committed_share_groups_never_deliver_aborted_records() -> None:
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs, **{"share.isolation.level": "read_committed"})
        async with Producer(bs, transactional_id=_name("tid")) as producer:
            producer.begin_transaction()
            await producer.send(topic, b"aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"committed")
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
            sc.subscribe([topic])
            (record,) = await _take(sc, 1, 15.0, accept=False)
            assert record.value == b"committed"
            sc.acknowledge(record)
            await sc.commit()
            assert await _none_within(sc, 0.5) == []


# -- the wire ------------------------------------------------------------------------------


class _Wire:
    """One raw connection to a fake broker."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.correlation = reader, writer, 0

    async def send(self, request: Any, version: int) -> Any:
        self.correlation += 1
        self.writer.write(encode_request(request, version, self.correlation, "raw"))
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))[0]
        _, response = decode_response(request.API_KEY, version, await self.reader.readexactly(size))
        return response


def _fetch(
    group: str, member: str, epoch: int, topic_id: Any, acks: list[Any] | None = None
) -> Any:
    part = ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=acks or [])
    return ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0,
        min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
        topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[part])],
    )  # fmt: skip


async def test_share_sessions_on_the_wire() -> None:
    """Epoch 0 opens (no acknowledgements allowed), the next request carries epoch 1, a
    wrong epoch or a missing session is refused, acknowledging an offset not acquired is
    INVALID_RECORD_STATE, and closing the connection releases what the session held."""
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs)
        await _produce(bs, topic, 3)
        topic_id = cluster.state.topics[topic].topic_id
        host, port = bs.split(",")[0].rsplit(":", 1)
        member = str(uuid.uuid4())
        reader, writer = await asyncio.open_connection(host, int(port))
        wire = _Wire(reader, writer)
        try:
            joined = await wire.send(
                ShareGroupHeartbeatRequest(
                    group_id=group, member_id=member, member_epoch=0,
                    subscribed_topic_names=[topic],
                ),
                1,
            )  # fmt: skip
            assert isinstance(joined, ShareGroupHeartbeatResponse)
            assert joined.error_code == 0 and joined.member_epoch >= 1
            accept = [ShareFetchRequest.AcknowledgementBatch(
                first_offset=0, last_offset=0, acknowledge_types=[1])]  # fmt: skip
            opened_with_acks = await wire.send(_fetch(group, member, 0, topic_id, accept), 2)
            assert opened_with_acks.error_code == errors.INVALID_REQUEST
            no_session = await wire.send(_fetch(group, member, 1, topic_id), 2)
            assert no_session.error_code == errors.SHARE_SESSION_NOT_FOUND
            first = await wire.send(_fetch(group, member, 0, topic_id), 2)
            assert isinstance(first, ShareFetchResponse) and first.error_code == 0
            (part,) = first.responses[0].partitions
            assert [(a.first_offset, a.last_offset, a.delivery_count)
                    for a in part.acquired_records] == [(0, 2, 1)]  # fmt: skip
            assert first.acquisition_lock_timeout_ms == 30_000
            wrong = await wire.send(_fetch(group, member, 5, topic_id), 2)
            assert wrong.error_code == errors.INVALID_SHARE_SESSION_EPOCH
            acked = await wire.send(_fetch(group, member, 1, topic_id, accept), 2)
            assert acked.error_code == 0
            assert acked.responses[0].partitions[0].acknowledge_error_code == 0
            again = ShareAcknowledgeRequest(
                group_id=group, member_id=member, share_session_epoch=2,
                topics=[ShareAcknowledgeRequest.AcknowledgeTopic(
                    topic_id=topic_id,
                    partitions=[ShareAcknowledgeRequest.AcknowledgePartition(
                        partition_index=0,
                        acknowledgement_batches=[ShareAcknowledgeRequest.AcknowledgementBatch(
                            first_offset=0, last_offset=0, acknowledge_types=[1])],
                    )],
                )],
            )  # fmt: skip
            twice = await wire.send(again, 2)
            assert twice.responses[0].partitions[0].error_code == errors.INVALID_RECORD_STATE
            sp = cluster.state.share_groups.partitions[group][(topic_id, 0)]
            assert sorted(sp.inflight) == [1, 2]
        finally:
            writer.close()
        # The connection closed: its session ended, offsets 1 and 2 are AVAILABLE again.
        await eventually(
            lambda: _states(cluster, group, topic_id), lambda s: s == ["AVAILABLE"] * 2
        )


async def _states(cluster: FakeCluster, group: str, topic_id: Any) -> list[str]:
    sp = cluster.state.share_groups.partitions[group][(topic_id, 0)]
    return [sp.inflight[o].state for o in sorted(sp.inflight)]


async def test_an_unacknowledged_record_comes_back_after_the_lock_duration() -> None:
    """A member (on the raw wire: it never renews) acquires a record and goes quiet with
    its connection open: another member gets it once the 1 s lock ended, count 2."""
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs, **{"share.record.lock.duration.ms": "1000"})
        await _produce(bs, topic, 1)
        topic_id = cluster.state.topics[topic].topic_id
        host, port = bs.split(",")[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        loop = asyncio.get_running_loop()
        try:
            held = await _Wire(reader, writer).send(_fetch(group, "quiet", 0, topic_id), 2)
            taken_at = loop.time()
            (part,) = held.responses[0].partitions
            assert [(a.first_offset, a.delivery_count) for a in part.acquired_records] == [(0, 1)]
            assert held.acquisition_lock_timeout_ms == 1000
            async with ShareConsumer(bootstrap_servers=bs, group_id=group) as other:
                other.subscribe([topic])
                (again,) = await _take(other, 1, 15.0)
                waited = loop.time() - taken_at
                await other.commit()
        finally:
            writer.close()
        assert (again.offset, again.delivery_count) == (0, 2)
        assert 0.9 <= waited < 5.0, waited


async def test_a_share_group_s_id_is_refused_to_consumer_and_classic_groups() -> None:
    """As Kafka 4's group coordinator (one group per id, no conversion from a share
    group): while a share group holds the id, with members or empty, a KIP-848
    ConsumerGroupHeartbeat is answered GROUP_ID_NOT_FOUND ("is not a consumer group"),
    ConsumerGroupDescribe too, and a classic JoinGroup INCONSISTENT_GROUP_PROTOCOL with
    no member id; neither makes a group of its own. Once the share group is deleted the
    id is free for a consumer group."""
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = _name("share")
        host, port = bs.split(",")[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        wire = _Wire(reader, writer)
        member = str(uuid.uuid4())

        def consumer_heartbeat() -> ConsumerGroupHeartbeatRequest:
            return ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
                rebalance_timeout_ms=30_000, subscribed_topic_names=[topic],
                topic_partitions=[],
            )  # fmt: skip

        async def refused() -> None:
            beat = await wire.send(consumer_heartbeat(), 1)
            assert isinstance(beat, ConsumerGroupHeartbeatResponse)
            assert beat.error_code == errors.GROUP_ID_NOT_FOUND
            assert beat.error_message == f"Group {group} is not a consumer group"
            assert beat.member_id is None and beat.assignment is None
            described = await wire.send(ConsumerGroupDescribeRequest(group_ids=[group]), 1)
            assert isinstance(described, ConsumerGroupDescribeResponse)
            assert described.groups[0].error_code == errors.GROUP_ID_NOT_FOUND
            assert described.groups[0].error_message == f"Group {group} is not a consumer group"
            join = JoinGroupRequest(
                group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                member_id="", protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            )  # fmt: skip
            joined = await wire.send(join, 9)
            assert isinstance(joined, JoinGroupResponse)
            assert (joined.error_code, joined.member_id) == (
                errors.INCONSISTENT_GROUP_PROTOCOL,
                "",
            )
            assert group not in cluster.state.consumer_groups.groups
            assert group not in cluster.state.groups.groups

        try:
            beat = ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]
            )
            assert (await wire.send(beat, 1)).error_code == errors.NONE
            await refused()
            left = ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=-1)
            assert (await wire.send(left, 1)).error_code == errors.NONE
            assert cluster.state.share_groups.groups[group].state == "Empty"
            await refused()
            async with Admin(bootstrap_servers=bs) as admin:
                await admin.delete_consumer_groups([group])
            assert group not in cluster.state.share_groups.groups
            beat_after = await wire.send(consumer_heartbeat(), 1)
            assert beat_after.error_code == errors.NONE and beat_after.member_epoch >= 1
        finally:
            writer.close()


async def test_control_expire_member_removes_a_share_member_and_releases_its_records() -> None:
    """``control.expire_member`` serves share groups too: the member is gone as after a
    session timeout and the records it held are AVAILABLE again (delivery count 1)."""
    async with FakeCluster() as cluster:
        topic = cluster.create_topic(_name("t"))
        bs = cluster.bootstrap_servers
        group = await _group(bs)
        await _produce(bs, topic, 2)
        topic_id = cluster.state.topics[topic].topic_id
        host, port = bs.split(",")[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        wire = _Wire(reader, writer)
        member = str(uuid.uuid4())
        try:
            beat = ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=0, subscribed_topic_names=[topic]
            )
            assert (await wire.send(beat, 1)).error_code == errors.NONE
            held = await wire.send(_fetch(group, member, 0, topic_id), 2)
            assert held.responses[0].partitions[0].acquired_records[0].last_offset == 1
            assert await _states(cluster, group, topic_id) == ["ACQUIRED"] * 2
            cluster.control.expire_member(group, member)
            assert member not in cluster.state.share_groups.groups[group].members
            assert await _states(cluster, group, topic_id) == ["AVAILABLE"] * 2
            with pytest.raises(KeyError):
                cluster.control.expire_member(group, member)
        finally:
            writer.close()
