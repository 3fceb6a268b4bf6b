"""FakeCluster under a ManualClock (issue 34, "deterministic time"): group sessions,
the initial rebalance delay, transaction timeouts, and share groups' acquisition locks and
member sessions run out exactly when the test advances the cluster's clock, never on real
time; the timestamps the fake stamps are the clock's. And aiokafka's transactions against
the fake. No JVM: these run in the unit tier.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest
from helpers import eventually, read_records

from aiostream_kafka import (
    InvalidProducerEpochError,
    Producer,
    TransactionAbortableError,
    TransactionState,
)
from aiostream_kafka.admin import Admin
from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from aiostream_kafka.protocol.headers import decode_response, encode_request
from aiostream_kafka.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiostream_kafka.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from aiostream_kafka.protocol.messages.offset_commit import OffsetCommitRequest
from aiostream_kafka.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from aiostream_kafka.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from aiostream_kafka.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from aiostream_kafka.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from aiostream_kafka.protocol.records import iter_batches
from aiostream_kafka.protocol.records.record_batch import ControlRecordType
from aiostream_kafka.testing import FakeCluster
from aiostream_kafka.testing.fake import ManualClock
from aiostream_kafka.testing.fake.clock import RealClock

START_MS = 1_700_000_000_000
NONE = 0
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
#: Bound on one request's answer (a join waits for its rebalance).
ANSWER_TIMEOUT_S = 10.0


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait (real time) until ``check()`` holds: a request reached the fake's state."""

    async def probe() -> bool:
        return check()

    await eventually(probe, bool, timeout_s)


class _Wire:
    """One client connection to the fake, sending requests and reading their answers in
    order (a member per connection: a JoinGroup holds its connection until answered)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self._address = cluster.bootstrap_servers.split(",")[0]
        self._correlation = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> _Wire:
        host, _, port = self._address.rpartition(":")
        self._reader, self._writer = await asyncio.open_connection(host, int(port))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            self._writer.close()

    async def request(self, request: Any, version: int) -> Any:
        assert self._reader is not None and self._writer is not None
        self._correlation += 1
        self._writer.write(encode_request(request, version, self._correlation, "clock-test"))
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            size = struct.unpack(">i", await self._reader.readexactly(4))[0]
            correlation, response = decode_response(
                request.API_KEY, version, await self._reader.readexactly(size)
            )
        assert correlation == self._correlation
        return response


async def _join(
    wire: _Wire, group: str, member_id: str = "", *, session_ms: int, rebalance_ms: int = 5_000
) -> JoinGroupResponse:
    """JoinGroup v9 (a new member first gets its id with MEMBER_ID_REQUIRED)."""
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
    )
    response = await wire.request(request, 9)
    if response.error_code == MEMBER_ID_REQUIRED and not member_id:
        request.member_id = response.member_id
        response = await wire.request(request, 9)
    assert isinstance(response, JoinGroupResponse)
    return response


async def _sync(
    wire: _Wire, group: str, joined: JoinGroupResponse, assignments: dict[str, bytes]
) -> SyncGroupResponse:
    request = SyncGroupRequest(
        group_id=group,
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in assignments.items()
        ],
    )
    response = await wire.request(request, 5)
    assert isinstance(response, SyncGroupResponse)
    return response


async def _heartbeat(wire: _Wire, group: str, joined: JoinGroupResponse, generation: int) -> int:
    request = HeartbeatRequest(group_id=group, generation_id=generation, member_id=joined.member_id)
    response = await wire.request(request, 4)
    assert isinstance(response, HeartbeatResponse)
    return response.error_code


async def _describe(wire: _Wire, group: str) -> DescribeGroupsResponse.DescribedGroup:
    response = await wire.request(DescribeGroupsRequest(groups=[group]), 5)
    assert isinstance(response, DescribeGroupsResponse)
    return response.groups[0]


# -- the clock itself --------------------------------------------------------------------


def test_manual_clock_runs_due_timers_in_order_and_those_they_schedule() -> None:
    clock = ManualClock(start_ms=START_MS)
    ran: list[tuple[str, float]] = []

    def note(name: str) -> None:
        ran.append((name, clock.monotonic()))
        if name == "b":
            clock.call_later(0.5, note, "from-b")  # due at 2.5: inside the advance
            clock.call_later(5.0, note, "late")  # due at 7.0: after it

    clock.call_later(3.0, note, "c")
    clock.call_later(2.0, note, "b")
    clock.call_later(1.0, note, "a")
    dropped = clock.call_later(1.5, note, "cancelled")
    dropped.cancel()
    clock.call_later(3.0, note, "c2")  # same due time as "c": scheduled order
    assert clock.monotonic() == 0.0 and clock.wall_ms() == START_MS
    assert clock.advance(0.999) == 0 and ran == []
    assert clock.advance(2.5) == 5
    assert ran == [("a", 1.0), ("b", 2.0), ("from-b", 2.5), ("c", 3.0), ("c2", 3.0)]
    assert clock.monotonic() == pytest.approx(3.499)
    assert clock.wall_ms() == START_MS + 3499
    assert clock.pending() == [7.0]
    assert clock.advance(10) == 1 and ran[-1] == ("late", 7.0)
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_advance_time_needs_a_manual_clock() -> None:
    async with FakeCluster() as cluster:
        assert isinstance(cluster.clock, RealClock)
        with pytest.raises(RuntimeError, match="ManualClock"):
            cluster.advance_time(1)


# -- classic groups ------------------------------------------------------------------------


async def test_a_silent_classic_member_is_removed_exactly_when_the_clock_passes_its_session() -> (
    None
):
    """Two members; one stops heartbeating. Real time passing does not remove it (its
    session is 300 ms and the test sleeps longer); advancing the clock to just before
    its session ends does not either; just past it, it is removed, the group rebalances
    and the other member (heartbeating) is told to rejoin and then leads alone."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock, group_min_session_timeout_ms=100) as cluster:
        group = _name("g")
        async with _Wire(cluster) as silent, _Wire(cluster) as live, _Wire(cluster) as admin:
            a = await _join(silent, group, session_ms=300)
            assert a.error_code == NONE and a.generation_id == 1 and a.leader == a.member_id
            assert (await _sync(silent, group, a, {a.member_id: b"all"})).error_code == NONE
            # A second member joins; the first rejoins as its client would.
            b_joining = asyncio.ensure_future(_join(live, group, session_ms=60_000))
            await _until(lambda: cluster.state.groups.groups[group].state == "PreparingRebalance")
            assert await _heartbeat(silent, group, a, 1) == REBALANCE_IN_PROGRESS
            a = await _join(silent, group, a.member_id, session_ms=300)
            b = await b_joining
            assert a.generation_id == b.generation_id == 2 and a.leader == a.member_id
            split = {a.member_id: b"p0", b.member_id: b"p1"}
            assert (await _sync(silent, group, a, split)).error_code == NONE
            assert (await _sync(live, group, b, {})).assignment == b"p1"
            # From here the first member is silent.
            await asyncio.sleep(0.6)  # twice its session, in real time
            described = await _describe(admin, group)
            assert described.group_state == "Stable" and len(described.members) == 2
            assert cluster.advance_time(0.299) == 0
            assert await _heartbeat(live, group, b, 2) == NONE
            assert a.member_id in cluster.state.groups.groups[group].members
            cluster.advance_time(0.002)
            described = await _describe(admin, group)
            assert described.group_state == "PreparingRebalance"
            assert [m.member_id for m in described.members] == [b.member_id]
            assert await _heartbeat(live, group, b, 2) == REBALANCE_IN_PROGRESS
            b = await _join(live, group, b.member_id, session_ms=60_000)
            assert b.generation_id == 3 and b.leader == b.member_id
            assert [m.member_id for m in b.members] == [b.member_id]


async def test_the_initial_rebalance_delay_and_rebalance_timeout_follow_the_clock() -> None:
    """The first join of an empty group waits ``group.initial.rebalance.delay.ms`` of the
    cluster's clock; a member that does not rejoin is dropped when the rebalance timeout
    passes on that clock."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock, group_initial_rebalance_delay_ms=3_000) as cluster:
        group = _name("g")
        async with _Wire(cluster) as first, _Wire(cluster) as second:
            joining = asyncio.ensure_future(
                _join(first, group, session_ms=60_000, rebalance_ms=20_000)
            )
            await _until(
                lambda: (
                    group in cluster.state.groups.groups
                    and any(
                        m.join_future for m in cluster.state.groups.groups[group].members.values()
                    )
                )
            )
            await asyncio.sleep(0.2)
            assert not joining.done()  # real time does not end the delay
            cluster.advance_time(2.9)
            await asyncio.sleep(0.05)
            assert not joining.done()
            cluster.advance_time(0.2)
            a = await joining
            assert a.generation_id == 1
            assert (await _sync(first, group, a, {a.member_id: b"x"})).error_code == NONE
            # A newcomer starts a rebalance the first member never rejoins: it is dropped
            # when its rebalance timeout (20 s) has passed on the clock.
            joining = asyncio.ensure_future(_join(second, group, session_ms=60_000))
            await _until(lambda: cluster.state.groups.groups[group].state == "PreparingRebalance")
            cluster.advance_time(19.9)
            await asyncio.sleep(0.05)
            assert not joining.done()
            cluster.advance_time(0.2)
            b = await joining
            assert b.generation_id == 2 and [m.member_id for m in b.members] == [b.member_id]


# -- KIP-848 groups ----------------------------------------------------------------------


async def _beat(
    wire: _Wire,
    group: str,
    member_id: str,
    epoch: int,
    topic: str | None = None,
    owned: list[ConsumerGroupHeartbeatRequest.TopicPartitions] | None = None,
) -> ConsumerGroupHeartbeatResponse:
    request = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000 if epoch == 0 else -1,
        subscribed_topic_names=[topic] if topic is not None else None,
        topic_partitions=owned if owned is not None else ([] if epoch == 0 else None),
    )
    response = await wire.request(request, 1)
    assert isinstance(response, ConsumerGroupHeartbeatResponse)
    assert response.error_code == NONE, response.error_message
    return response


def _owned(
    response: ConsumerGroupHeartbeatResponse,
) -> list[ConsumerGroupHeartbeatRequest.TopicPartitions]:
    assert response.assignment is not None
    return [
        ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t.topic_id, partitions=t.partitions)
        for t in response.assignment.topic_partitions
    ]


async def test_a_silent_kip848_member_is_removed_exactly_when_the_clock_passes_its_session() -> (
    None
):
    """KIP-848: a member that stops heartbeating stays for the whole session timeout of
    the cluster's clock (45 s, Kafka's default) and is removed just past it; its
    partition then goes to the member still heartbeating."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock) as cluster:
        topic = cluster.create_topic(_name(), partitions=2)
        group = _name("g")
        silent_id, live_id = str(uuid.uuid4()), str(uuid.uuid4())
        async with _Wire(cluster) as silent, _Wire(cluster) as live:
            s = await _beat(silent, group, silent_id, 0, topic)
            assert s.assignment is not None
            first = await _beat(live, group, live_id, 0, topic)
            # The silent member gives up one partition for the newcomer (one heartbeat).
            s = await _beat(silent, group, silent_id, s.member_epoch, owned=_owned(s))
            kept = sum(len(t.partitions) for t in _owned(s))
            assert kept == 1
            s = await _beat(silent, group, silent_id, s.member_epoch, owned=_owned(s))
            epoch = first.member_epoch
            got = await _beat(live, group, live_id, epoch, owned=[])
            assert sum(len(t.partitions) for t in _owned(got)) == 1
            owned, epoch = _owned(got), got.member_epoch
            # From here the first member is silent; the other heartbeats every 30 s.
            assert cluster.advance_time(30) == 0
            await _beat(live, group, live_id, epoch, owned=owned)
            cluster.advance_time(14.9)
            members = cluster.state.consumer_groups.groups[group].members
            assert silent_id in members
            cluster.advance_time(0.2)
            assert silent_id not in members and live_id in members
            got = await _beat(live, group, live_id, epoch, owned=owned)
            assert got.member_epoch > epoch
            assert sum(len(t.partitions) for t in _owned(got)) == 2


# -- share groups (KIP-932) -------------------------------------------------------------
# The members are raw connections: they heartbeat, fetch and acknowledge only when the test
# says so (our ShareConsumer heartbeats and renews on real time).


async def _share_group(cluster: FakeCluster, **configs: str) -> str:
    """A share group id with its group configs set (IncrementalAlterConfigs)."""
    group = _name("share")
    settings = {"share.auto.offset.reset": "earliest", **configs}
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp(k, v) for k, v in settings.items()
                ]
            }
        )
    return group


async def _produce(cluster: FakeCluster, topic: str, partition: int, count: int) -> None:
    async with Producer(cluster.bootstrap_servers, linger_ms=0) as producer:
        for i in range(count):
            await producer.send(topic, b"%d" % i, partition=partition)


async def _share_beat(
    wire: _Wire, group: str, member_id: str, epoch: int, topic: str | None = None
) -> ShareGroupHeartbeatResponse:
    request = ShareGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        subscribed_topic_names=[topic] if topic is not None else None,
    )
    response = await wire.request(request, 1)
    assert isinstance(response, ShareGroupHeartbeatResponse)
    assert response.error_code == NONE, response.error_message
    return response


def _assigned(response: ShareGroupHeartbeatResponse) -> list[int]:
    assert response.assignment is not None
    return sorted(p for t in response.assignment.topic_partitions for p in t.partitions)


async def _share_fetch(
    wire: _Wire, group: str, member_id: str, epoch: int, topic_id: uuid.UUID, partition: int
) -> list[tuple[int, int, int]]:
    """One ShareFetch of one partition (no wait): the acquired ``(first, last, count)``."""
    request = ShareFetchRequest(
        group_id=group,
        member_id=member_id,
        share_session_epoch=epoch,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=100,
        batch_size=100,
        topics=[
            ShareFetchRequest.FetchTopic(
                topic_id=topic_id,
                partitions=[ShareFetchRequest.FetchPartition(partition_index=partition)],
            )
        ],
    )
    response = await wire.request(request, 2)
    assert isinstance(response, ShareFetchResponse) and response.error_code == NONE
    (part,) = response.responses[0].partitions
    assert part.error_code == NONE, part.error_message
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records]


def _in_flight(
    cluster: FakeCluster, group: str, topic_id: uuid.UUID, partition: int
) -> dict[int, tuple[str, int]]:
    """The share partition's records in flight: offset -> (state, delivery count)."""
    sp = cluster.state.share_groups.partitions[group][(topic_id, partition)]
    return {o: (r.state, r.delivery_count) for o, r in sorted(sp.inflight.items())}


async def _share_describe(wire: _Wire, group: str) -> ShareGroupDescribeResponse.DescribedGroup:
    response = await wire.request(ShareGroupDescribeRequest(group_ids=[group]), 1)
    assert isinstance(response, ShareGroupDescribeResponse)
    (described,) = response.groups
    assert described.error_code == NONE, described.error_message
    return described


async def test_acquired_share_records_come_back_exactly_when_the_clock_passes_their_lock() -> None:
    """A member acquires three records under a 1 s acquisition lock and neither
    acknowledges nor renews them. Real time passing (longer than the lock) does not
    release them; advancing the clock to just before the lock ends does not either; just
    past it they are AVAILABLE again (delivery count 1) while the member is still in the
    group, and its next fetch acquires them again, delivery count 2."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock) as cluster:
        topic = cluster.create_topic(_name())
        topic_id = cluster.state.topics[topic].topic_id
        group = await _share_group(cluster, **{"share.record.lock.duration.ms": "1000"})
        await _produce(cluster, topic, 0, 3)
        member = str(uuid.uuid4())
        async with _Wire(cluster) as wire:
            joined = await _share_beat(wire, group, member, 0, topic)
            assert _assigned(joined) == [0]
            assert await _share_fetch(wire, group, member, 0, topic_id, 0) == [(0, 2, 1)]
            acquired = {o: ("ACQUIRED", 1) for o in range(3)}
            assert _in_flight(cluster, group, topic_id, 0) == acquired
            await asyncio.sleep(1.2)  # longer than the lock, in real time
            assert _in_flight(cluster, group, topic_id, 0) == acquired
            assert cluster.advance_time(0.999) == 0
            assert _in_flight(cluster, group, topic_id, 0) == acquired
            assert cluster.advance_time(0.002) == 1  # the lock, not the session (45 s)
            assert _in_flight(cluster, group, topic_id, 0) == {
                o: ("AVAILABLE", 1) for o in range(3)
            }
            assert member in cluster.state.share_groups.groups[group].members
            assert await _share_fetch(wire, group, member, 1, topic_id, 0) == [(0, 2, 2)]
            assert _in_flight(cluster, group, topic_id, 0) == {o: ("ACQUIRED", 2) for o in range(3)}


async def test_a_silent_share_member_is_removed_exactly_when_the_clock_passes_its_session() -> None:
    """Two share members split two partitions; one acquires records (under a lock longer
    than the session) and stops heartbeating. It stays for the whole
    ``share.session.timeout.ms`` of the cluster's clock (45 s, Kafka's default) and is
    removed just past it: ShareGroupDescribe then lists only the other member, its records
    are AVAILABLE again before their lock ended, and the other member is given both
    partitions."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock) as cluster:
        topic = cluster.create_topic(_name(), partitions=2)
        topic_id = cluster.state.topics[topic].topic_id
        group = await _share_group(cluster, **{"share.record.lock.duration.ms": "60000"})
        # The simple assignor deals partitions over the sorted member ids.
        silent_id, live_id = sorted(str(uuid.uuid4()) for _ in range(2))
        async with _Wire(cluster) as silent, _Wire(cluster) as live:
            s = await _share_beat(silent, group, silent_id, 0, topic)
            assert _assigned(s) == [0, 1]
            got = await _share_beat(live, group, live_id, 0, topic)
            assert _assigned(got) == [1]
            s = await _share_beat(silent, group, silent_id, s.member_epoch)
            assert _assigned(s) == [0]
            await _produce(cluster, topic, 0, 2)
            assert await _share_fetch(silent, group, silent_id, 0, topic_id, 0) == [(0, 1, 1)]
            # From here the first member is silent; the other heartbeats at 30 s.
            assert cluster.advance_time(30) == 0
            got = await _share_beat(live, group, live_id, got.member_epoch)
            assert cluster.advance_time(14.9) == 0
            described = await _share_describe(live, group)
            assert sorted(m.member_id for m in described.members) == [silent_id, live_id]
            assert _in_flight(cluster, group, topic_id, 0) == {
                0: ("ACQUIRED", 1),
                1: ("ACQUIRED", 1),
            }
            epoch = described.group_epoch
            assert cluster.advance_time(0.2) == 1  # the silent member's session
            described = await _share_describe(live, group)
            assert [m.member_id for m in described.members] == [live_id]
            assert described.group_epoch > epoch and described.group_state == "Stable"
            assert _in_flight(cluster, group, topic_id, 0) == {
                0: ("AVAILABLE", 1),
                1: ("AVAILABLE", 1),
            }
            got = await _share_beat(live, group, live_id, got.member_epoch)
            assert _assigned(got) == [0, 1]
            assert await _share_fetch(live, group, live_id, 0, topic_id, 0) == [(0, 1, 2)]


# -- transactions ------------------------------------------------------------------------


async def test_a_transaction_times_out_only_when_the_clock_passes_its_timeout() -> None:
    """The coordinator aborts an open transaction (ABORT marker, epoch bumped) exactly
    when the cluster's clock passes ``transaction_timeout_ms``; its start time and the
    marker's timestamp are the clock's wall time."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock) as cluster:
        topic = cluster.create_topic(_name())
        bs = cluster.bootstrap_servers
        log = cluster.state.require_partition(topic, 0).log
        async with Producer(bs, transactional_id="tid-clock", transaction_timeout_ms=10_000) as p:
            cluster.advance_time(1)
            p.begin_transaction()
            await p.send(topic, b"timed-out")
            txn = cluster.state.transactions.transactions["tid-clock"]
            assert txn.state == "Ongoing" and txn.started_at_ms == START_MS + 1_000
            epoch = txn.producer_epoch
            await asyncio.sleep(0.3)  # real time is not the coordinator's
            cluster.advance_time(9.999)
            assert txn.state == "Ongoing" and txn.timed_out == 0
            assert not any(b.is_control for b in log.batches)
            cluster.advance_time(0.002)
            assert txn.state == "CompleteAbort" and txn.timed_out == 1
            assert txn.producer_epoch == epoch + 1
            [marker] = [b for b in log.batches if b.is_control]
            [batch] = iter_batches(marker.data)
            assert batch.control_records()[0].type == ControlRecordType.ABORT
            assert batch.max_timestamp == START_MS + 11_000
            with pytest.raises(InvalidProducerEpochError):
                await p.send(topic, b"too-late")
            with pytest.raises(TransactionAbortableError):
                await p.commit_transaction()
            await p.abort_transaction()
            assert p.transaction_state is TransactionState.READY
            async with p.transaction():
                await p.send(topic, b"after")
        committed = await read_records(bs, topic, 1, "read_committed")
        assert [r.value for r in committed] == [b"after"]


async def test_commit_timestamps_come_from_the_clock() -> None:
    """OffsetCommit stores the clock's wall time as the commit time; the request log
    stamps requests with it too."""
    clock = ManualClock(start_ms=START_MS)
    async with FakeCluster(clock=clock) as cluster:
        topic = cluster.create_topic(_name())
        group = _name("g")
        cluster.advance_time(42.5)
        request = OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=7
                        )
                    ],
                )
            ],
        )
        async with _Wire(cluster) as wire:
            response = await wire.request(request, 8)
        assert response.topics[0].partitions[0].error_code == NONE
        committed = cluster.state.groups.committed(group)[(topic, 0)]
        assert committed.offset == 7 and committed.commit_time_ms == START_MS + 42_500
        assert cluster.control.requests("OffsetCommit")[-1].at == (START_MS + 42_500) / 1000


def test_advance_time_from_the_test_thread_runs_timers_on_the_cluster_thread() -> None:
    """``start_blocking()``: ``advance_time`` from the test's thread runs the due timers
    on the cluster's own thread and returns once they ran."""
    import threading

    cluster = FakeCluster(clock=ManualClock(start_ms=START_MS))
    cluster.start_blocking()
    try:
        ran_on: list[str] = []
        cluster.call(
            lambda: cluster.clock.call_later(
                5, lambda: ran_on.append(threading.current_thread().name)
            )
        )
        assert cluster.advance_time(4.9) == 0 and ran_on == []
        assert cluster.advance_time(0.2) == 1
        assert ran_on == ["fake-kafka"]
        assert cluster.call(cluster.clock.wall_ms) == START_MS + 5_100
    finally:
        cluster.stop_blocking()
