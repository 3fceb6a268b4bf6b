"""KIP-848 (``group_protocol="consumer"``) against the real broker: joining, reconciling,
commits with the member epoch, fencing, broker-side regex, static members, leaving, and
the option checks.

Each group gets the broker-side settings a test needs through the group configs
``consumer.heartbeat.interval.ms`` / ``consumer.session.timeout.ms`` (the test broker lowers
their minimums; the defaults stay 5 s and 45 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from helpers import eventually

from aiostream_kafka import ConfigError, Consumer, Producer, TopicPartition
from aiostream_kafka.admin import Admin
from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

HEARTBEAT_MS = 300
SESSION_MS = 3_000
OPTIONS: dict[str, object] = {"group_protocol": "consumer", "metadata_max_age_ms": 1_000}


def _group() -> str:
    return f"kip848-{uuid.uuid4().hex[:10]}"


async def _group_settings(
    bootstrap: str, group: str, heartbeat_ms: int = HEARTBEAT_MS, session_ms: int = SESSION_MS
) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp("consumer.heartbeat.interval.ms", str(heartbeat_ms)),
                    AlterConfigOp("consumer.session.timeout.ms", str(session_ms)),
                ]
            }
        )


async def _produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(start, start + count):
            await producer.enqueue(topic, value=b"%d" % i, key=b"%d" % i)
        await producer.flush()


class Member:
    """A KIP-848 member that records what it processed (committing as it goes)."""

    def __init__(self, name: str, bootstrap: str, group: str, seen: list, **kw: object) -> None:
        self.name, self.seen = name, seen
        self.consumer = Consumer(bootstrap, group_id=group, **{**OPTIONS, **kw})  # type: ignore[arg-type]
        self.task: asyncio.Task[None] | None = None
        self.revoked: list[TopicPartition] = []
        self.lost: list[TopicPartition] = []
        self.assigned: list[TopicPartition] = []

    async def start(self, topics: list[str] | None = None, pattern: str | None = None) -> None:
        await self.consumer.start()

        async def on_assigned(tps: frozenset[TopicPartition]) -> None:
            self.assigned.extend(tps)

        async def on_revoked(tps: frozenset[TopicPartition]) -> None:
            self.revoked.extend(tps)

        async def on_lost(tps: frozenset[TopicPartition]) -> None:
            self.lost.extend(tps)

        self.consumer.subscribe(
            topics or [], pattern=pattern, on_assigned=on_assigned, on_revoked=on_revoked,
            on_lost=on_lost,
        )  # fmt: skip
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        stream = self.consumer.committing(self.consumer.stream(), every=100, within_s=0.3)
        async for record in stream:
            self.seen.append((self.name, record.topic, record.partition, record.offset))

    async def stop(self) -> None:
        await self.consumer.drain(timeout=5)
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def _stable(*members: Member, timeout_s: float = 30, partitions: int | None = None) -> None:
    """Every member stable and owning something (with ``partitions``: that many in all,
    each owned once): the broker hands partitions over in steps, one heartbeat each."""

    async def states() -> list[tuple[str, frozenset[TopicPartition]]]:
        return [(m.consumer.health().state, m.consumer.health().assignment) for m in members]

    def settled(s: list[tuple[str, frozenset[TopicPartition]]]) -> bool:
        owned = [a for _, a in s]
        if not all(state == "stable" and a for state, a in s):
            return False
        return partitions is None or (
            sum(map(len, owned)) == partitions == len(frozenset().union(*owned))
        )

    await eventually(states, settled, timeout_s)


def test_classic_only_options_are_refused_before_any_io() -> None:
    for name, value, replacement in (
        ("session_timeout_ms", 10_000, "consumer.session.timeout.ms"),
        ("heartbeat_interval_ms", 1_000, "consumer.heartbeat.interval.ms"),
        ("partition_assignment_strategy", "range", "group_remote_assignor"),
    ):
        with pytest.raises(ConfigError, match=replacement):
            Consumer("127.0.0.1:1", group_id="g", group_protocol="consumer", **{name: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="classic"):
        Consumer("127.0.0.1:1", group_id="g", group_protocol="kip848")
    with pytest.raises(ConfigError, match='group_protocol="consumer"'):
        Consumer("127.0.0.1:1", group_id="g", group_remote_assignor="uniform")
    with pytest.raises(ConfigError, match="group_id"):
        Consumer("127.0.0.1:1", group_protocol="consumer")
    # The classic protocol stays the default; the new one is accepted with its assignor.
    Consumer("127.0.0.1:1", group_id="g", group_protocol="consumer", group_remote_assignor="range")


async def test_members_join_reconcile_and_leave_under_load_losing_nothing(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=6)
    group = _group()
    await _group_settings(bootstrap, group)
    seen: list[tuple[str, str, int, int]] = []
    first = Member("m0", bootstrap, group, seen)
    await first.start([topic])
    await _stable(first)
    health = first.consumer.health()
    assert health.member_epoch is not None and health.member_epoch > 0
    assert health.generation == health.member_epoch
    assert len(health.assignment) == 6
    total = 6_000
    producing = asyncio.create_task(_produce(bootstrap, topic, total))
    second, third = Member("m1", bootstrap, group, seen), Member("m2", bootstrap, group, seen)
    await second.start([topic])
    await third.start([topic])
    await _stable(first, second, third, partitions=6)
    await producing
    await second.stop()  # leaves with epoch -1: its partitions go to the others
    await _stable(first, third, partitions=6)
    await _produce(bootstrap, topic, total, start=total)

    async def distinct() -> int:
        return len({(t, p, o) for _, t, p, o in seen})

    await eventually(distinct, lambda n: n >= 2 * total, timeout_s=60)
    await first.stop()
    await third.stop()
    counts = Counter((t, p, o) for _, t, p, o in seen)
    assert len(counts) == 2 * total
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates == 0, f"{duplicates} records delivered twice with graceful members"
    assert first.lost == [] and third.lost == []
    # The group's committed offsets reach the end of every partition.
    async with Admin(bootstrap_servers=bootstrap) as admin:
        lag = await admin.consumer_group_lag(group)
    assert lag and all(v == 0 for v in lag.values()), lag


async def test_a_second_member_with_the_same_instance_id_fences_nobody_silently(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Two static members with one group_instance_id: the broker refuses the second
    (UNRELEASED_INSTANCE_ID while the first holds it): a typed error, never two owners."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group)
    seen: list[tuple[str, str, int, int]] = []
    first = Member("a", bootstrap, group, seen, group_instance_id="instance-1")
    await first.start([topic])
    await _stable(first)
    second = Member("b", bootstrap, group, seen, group_instance_id="instance-1")
    await second.start([topic])

    async def second_state() -> str:
        return second.consumer.health().state

    await eventually(second_state, lambda s: s in ("failed", "fenced"), timeout_s=20)
    error = second.consumer.health().error
    assert error is not None and "instance" in str(error).lower(), error
    assert first.consumer.health().state == "stable"
    await second.consumer.close()
    if second.task is not None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await second.task
    await first.stop()


async def test_an_expired_session_loses_the_partitions_and_joins_with_a_new_id(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """The member cannot heartbeat past its session (its heartbeats are held): the broker
    removes it; its next heartbeat gets UNKNOWN_MEMBER_ID, it runs on_lost and joins again
    at epoch 0 under a fresh member id, and gets the partitions back."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group, session_ms=1_500)
    seen: list[tuple[str, str, int, int]] = []
    member = Member("a", bootstrap, group, seen)
    await member.start([topic])
    await _stable(member)
    membership = member.consumer.group.coordinator  # type: ignore[union-attr]
    member_id = membership.member_id
    real = membership._heartbeat  # type: ignore[attr-defined]

    async def held() -> None:
        await asyncio.sleep(3.0)  # past the 1.5 s session
        await real()

    membership._heartbeat = held  # type: ignore[attr-defined]
    await asyncio.sleep(0.5)
    membership._heartbeat = real  # type: ignore[attr-defined]

    async def lost() -> list[TopicPartition]:
        return member.lost

    await eventually(lost, lambda x: len(x) == 2, timeout_s=20)
    await _stable(member, partitions=2)
    assert membership.member_id != member_id
    await member.stop()


async def test_a_fenced_epoch_loses_the_partitions_and_rejoins_with_the_same_id(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """A heartbeat with an epoch the broker does not expect is answered
    FENCED_MEMBER_EPOCH: the member runs on_lost, keeps its member id, joins again at
    epoch 0 and gets its partitions back."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group)
    seen: list[tuple[str, str, int, int]] = []
    member = Member("a", bootstrap, group, seen)
    await member.start([topic])
    await _stable(member, partitions=2)
    membership = member.consumer.group.coordinator  # type: ignore[union-attr]
    member_id = membership.member_id
    membership._epoch += 10  # type: ignore[attr-defined]

    async def lost() -> list[TopicPartition]:
        return member.lost

    await eventually(lost, lambda x: len(x) == 2, timeout_s=20)
    await _stable(member, partitions=2)
    assert membership.member_id == member_id
    assert member.consumer.health().member_epoch > 0  # type: ignore[operator]
    await member.stop()


async def test_a_commit_with_a_stale_epoch_lands_once_the_epoch_moves(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group)
    await _produce(bootstrap, topic, 10)
    consumer = Consumer(bootstrap, group_id=group, **OPTIONS)  # type: ignore[arg-type]
    async with consumer:
        consumer.subscribe([topic])
        stream = consumer.stream()
        for _ in range(10):
            await asyncio.wait_for(anext(stream), 20)
        membership = consumer.group.coordinator  # type: ignore[union-attr]
        offsets = membership.offsets

        class StaleOnce:
            """The membership, except that the first commit carries the previous epoch
            (as one built just before a heartbeat answer moved the epoch on)."""

            def __init__(self, real: object) -> None:
                self.real, self.reads = real, 0

            def __getattr__(self, name: str) -> object:
                return getattr(self.real, name)

            @property
            def generation(self) -> int:
                self.reads += 1
                epoch: int = self.real.generation  # type: ignore[attr-defined]
                return epoch - 1 if self.reads == 1 else epoch

        stale = StaleOnce(offsets._member)
        offsets._member = stale
        tp = TopicPartition(topic, 0)
        try:
            await consumer.commit({tp: 3})
        finally:
            offsets._member = stale.real
        assert stale.reads == 2  # refused once (STALE_MEMBER_EPOCH), then landed
    async with Admin(bootstrap_servers=bootstrap) as admin:
        committed = await admin.list_consumer_group_offsets(group)
    assert committed[tp].offset == 3


async def test_a_pattern_is_evaluated_by_the_broker_and_picks_up_new_topics(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    prefix = f"rx{uuid.uuid4().hex[:6]}"
    first = await new_topic(name=f"{prefix}-a", partitions=1)
    await _produce(bootstrap, first, 5)
    group = _group()
    await _group_settings(bootstrap, group)
    seen: list[tuple[str, str, int, int]] = []
    member = Member("a", bootstrap, group, seen)
    await member.start(pattern=rf"{prefix}-.*")

    async def topics() -> set[str]:
        return {t for _, t, _, _ in seen}

    await eventually(topics, lambda t: t == {first}, timeout_s=40)
    later = await new_topic(name=f"{prefix}-b", partitions=1)
    await _produce(bootstrap, later, 5)
    # The broker re-resolves the regex at most every 10 s (Kafka 4.x).
    await eventually(topics, lambda t: t == {first, later}, timeout_s=60)
    # Whole-name matching: a topic with the prefix only inside its name is not taken.
    assert member.consumer.subscription() == {first, later}
    await member.stop()


async def test_a_static_member_keeps_its_partitions_over_a_restart(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Closing a static member leaves with epoch -2: the broker keeps its assignment for
    the session, and the same instance id coming back gets the same partitions."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    group = _group()
    await _group_settings(bootstrap, group, session_ms=20_000)
    seen: list[tuple[str, str, int, int]] = []
    a = Member("a", bootstrap, group, seen, group_instance_id="static-a")
    b = Member("b", bootstrap, group, seen, group_instance_id="static-b")
    await a.start([topic])
    await b.start([topic])
    await _stable(a, b, partitions=4)
    before = a.consumer.health().assignment
    assert before
    await a.stop()
    await asyncio.sleep(2 * HEARTBEAT_MS / 1000)
    assert b.consumer.health().assignment.isdisjoint(before)  # nothing moved to b
    again = Member("a2", bootstrap, group, seen, group_instance_id="static-a")
    await again.start([topic])
    await _stable(again, b, partitions=4)
    assert again.consumer.health().assignment == before
    await again.stop()
    await b.stop()


async def test_a_member_that_stops_pulling_leaves_and_rejoins(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group)
    await _produce(bootstrap, topic, 10)
    consumer = Consumer(bootstrap, group_id=group, max_poll_interval_ms=1_500, **OPTIONS)  # type: ignore[arg-type]
    lost: list[TopicPartition] = []

    async def on_lost(tps: frozenset[TopicPartition]) -> None:
        lost.extend(tps)

    async with consumer:
        consumer.subscribe([topic], on_lost=on_lost)
        stream = consumer.stream()
        await asyncio.wait_for(anext(stream), 20)

        async def reason() -> str | None:
            return consumer.health().reason

        await eventually(reason, lambda r: r is not None and "left the group" in r, 20)

        async def lost_now() -> list[TopicPartition]:
            return sorted(lost)

        # on_lost runs right after the member leaves (a loaded machine: a moment later)
        want = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        await eventually(lost_now, lambda got: got == want, 10)
        assert consumer.health().assignment == frozenset()
        # Asking again rejoins; the records come again from the committed offsets.
        await asyncio.wait_for(anext(stream), 30)
        await eventually(reason, lambda r: r is None, 20)


async def test_health_and_group_metadata_carry_the_member_epoch(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    group = _group()
    await _group_settings(bootstrap, group)
    async with Consumer(bootstrap, group_id=group, **OPTIONS) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])
        health = consumer.health()

        async def state() -> str:
            return consumer.health().state

        await eventually(state, lambda s: s == "stable", 20)
        health = consumer.health()
        metadata = consumer.group_metadata()
        assert health.member_epoch == metadata.generation_id > 0
        assert metadata.member_id == health.member_id


CLASSIC = {"group_protocol": "classic", "session_timeout_ms": 6_000, "heartbeat_interval_ms": 300}


async def _group_type(bootstrap: str, group: str) -> str:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return (await admin.describe_consumer_groups([group]))[group].type


@pytest.mark.real_broker(
    reason="converts a classic group to a consumer group and back online (KIP-848 "
    "migration); the fake keeps the two kinds of group apart"
)
async def test_a_rolling_upgrade_to_the_consumer_protocol_and_back_loses_nothing(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Online migration (the broker's group.consumer.migration.policy, bidirectional by
    default): classic members of ours are replaced one by one by consumer-protocol members
    under continuous produce -- the first new member converts the group -- and then back,
    the last consumer-protocol member leaving converts it to classic again. Graceful
    members throughout: nothing lost; delivered twice only what a classic member had not
    committed when the conversion back fenced its generation."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=6)
    group = _group()
    await _group_settings(bootstrap, group)
    seen: list[tuple[str, str, int, int]] = []
    total = 12_000

    async def produce() -> None:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            for i in range(total):
                await producer.enqueue(topic, value=b"%d" % i, key=b"%d" % i)
                if i % 200 == 199:
                    await asyncio.sleep(0.1)  # ~2,000 records/s for ~6 s
            await producer.flush()

    c0, c1 = (Member(f"c{i}", bootstrap, group, seen, **CLASSIC) for i in range(2))
    await c0.start([topic])
    await c1.start([topic])
    await _stable(c0, c1, partitions=6)
    assert await _group_type(bootstrap, group) == "classic"
    producing = asyncio.create_task(produce())
    n0 = Member("n0", bootstrap, group, seen)
    await n0.start([topic])
    await _stable(c0, c1, n0, partitions=6)
    assert await _group_type(bootstrap, group) == "consumer"  # converted by the first
    await c0.stop()
    n1 = Member("n1", bootstrap, group, seen)
    await n1.start([topic])
    await c1.stop()
    await _stable(n0, n1, partitions=6)
    # ... and back: classic members join the consumer group, the consumer ones leave.
    c2 = Member("c2", bootstrap, group, seen, **CLASSIC)
    await c2.start([topic])
    await _stable(n0, n1, c2, partitions=6)
    await n0.stop()
    c3 = Member("c3", bootstrap, group, seen, **CLASSIC)
    await c3.start([topic])
    await n1.stop()
    await _stable(c2, c3, partitions=6)

    async def group_type() -> str:
        return await _group_type(bootstrap, group)

    await eventually(group_type, lambda t: t == "classic", 20)  # converted back
    await producing

    async def distinct() -> int:
        return len({(t, p, o) for _, t, p, o in seen})

    await eventually(distinct, lambda n: n >= total, timeout_s=60)
    await c2.stop()
    await c3.stop()
    counts = Counter((t, p, o) for _, t, p, o in seen)
    assert len(counts) == total  # nothing lost
    # Delivered twice only where a classic member lost its partitions: converting the group
    # back starts a classic rebalance under a new generation, so the classic members'
    # heartbeats get ILLEGAL_GENERATION and what they processed since their last commit
    # (committing() every 0.3 s here) comes again -- as with the Java client.
    lost = {tp for m in (c0, c1, c2, c3) for tp in m.lost}
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert all(TopicPartition(t, p) in lost for t, p, _ in duplicates), (
        f"{len(duplicates)} records delivered twice outside lost partitions: {list(duplicates)[:5]}"
    )
    for m in (n0, n1):
        assert m.lost == []  # the consumer-protocol members never lost anything


_KILLED_MEMBER = """
import asyncio, sys
from aiostream_kafka import Consumer

async def main():
    bootstrap, group, topic = sys.argv[1:4]
    async with Consumer(bootstrap, group_id=group, group_protocol="consumer") as consumer:
        async def on_assigned(tps):
            print("assigned", len(tps), flush=True)
        consumer.subscribe([topic], on_assigned=on_assigned)
        async for record in consumer.stream():
            pass

asyncio.run(main())
"""


async def test_a_killed_member_s_partitions_move_after_the_session_timeout(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """A member in another process is SIGKILLed (no leave): the broker gives its
    partitions to the survivor once the group's session timeout (2 s here) has passed;
    records produced meanwhile are all read."""
    import signal
    import sys

    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    group = _group()
    await _group_settings(bootstrap, group, session_ms=2_000)
    seen: list[tuple[str, str, int, int]] = []
    survivor = Member("s", bootstrap, group, seen)
    await survivor.start([topic])
    await _stable(survivor, partitions=4)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_MEMBER, bootstrap, group, topic,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line.startswith(b"assigned")

        async def owned() -> int:
            return len(survivor.consumer.health().assignment)

        await eventually(owned, lambda n: 0 < n < 4, 20)
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await process.wait()
        await _produce(bootstrap, topic, 400)
        await eventually(owned, lambda n: n == 4, 30)
        moved_after = time.monotonic() - killed_at
        # Not before the session ended (heartbeats of the dead member stop at once); soon after.
        assert 1.5 <= moved_after <= 10, moved_after

        async def offsets() -> int:
            return len({(p, o) for _, _, p, o in seen})

        await eventually(offsets, lambda n: n >= 400, 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    await survivor.stop()


async def test_a_cancelled_member_leaves_at_once_and_partitioned_streams_follow_the_moves(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Cancelling the task inside ``async with Consumer(...)`` closes it: the member
    leaves with epoch -1, so its partitions move at once, not after the (20 s) session.
    The other member reads with ``partitioned_stream()``: a partition iterator per
    partition it gets, its client rack sent to the broker."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    group = _group()
    await _group_settings(bootstrap, group, session_ms=20_000)
    await _produce(bootstrap, topic, 400)
    ready = asyncio.Event()

    async def doomed() -> None:
        async with Consumer(bootstrap, group_id=group, **OPTIONS) as consumer:  # type: ignore[arg-type]
            consumer.subscribe([topic])
            async for _ in consumer.stream():
                ready.set()

    seen: dict[int, set[int]] = {}
    streams: list[int] = []
    async with Consumer(bootstrap, group_id=group, client_rack="rack-b", **OPTIONS) as other:  # type: ignore[arg-type]
        other.subscribe([topic])

        async def read_partitions() -> None:
            async def one(tp: TopicPartition, records: object) -> None:
                async for record in records:  # type: ignore[attr-defined]
                    seen.setdefault(record.partition, set()).add(record.offset)

            async with asyncio.TaskGroup() as tasks:
                async for tp, records in other.partitioned_stream():
                    streams.append(tp.partition)
                    tasks.create_task(one(tp, records))

        reader = asyncio.create_task(read_partitions())
        victim = asyncio.create_task(doomed())
        await asyncio.wait_for(ready.wait(), 30)

        async def owned() -> int:
            return len(other.health().assignment)

        await eventually(owned, lambda n: 0 < n < 4, 20)
        victim.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await victim
        cancelled_at = time.monotonic()
        await eventually(owned, lambda n: n == 4, 15)
        assert time.monotonic() - cancelled_at < 10  # the leave, not the 20 s session

        async def total() -> int:
            return sum(len(v) for v in seen.values())

        await eventually(total, lambda n: n >= 400, 30)
        assert sorted(set(streams)) == [0, 1, 2, 3]
        async with Admin(bootstrap_servers=bootstrap) as admin:
            described = (await admin.describe_consumer_groups([group]))[group]
        assert described.type == "consumer"
        assert [m.rack for m in described.members] == ["rack-b"]
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def test_a_long_on_revoked_at_close_keeps_the_session_and_its_commit_lands(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """close() gives the partitions up while the heartbeats go on: an ``on_revoked`` that
    takes longer than the session (3 s against 1.5 s) still commits, as a member."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = _group()
    await _group_settings(bootstrap, group, session_ms=1_500)
    await _produce(bootstrap, topic, 20)
    outcome: list[object] = []
    consumer = Consumer(bootstrap, group_id=group, **OPTIONS)  # type: ignore[arg-type]

    async def on_revoked(tps: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(3.0)
        try:
            await consumer.commit()
            outcome.append("committed")
        except Exception as exc:  # what the test reports
            outcome.append(exc)

    async with consumer:
        consumer.subscribe([topic], on_revoked=on_revoked)
        stream = consumer.stream()
        for _ in range(20):
            await asyncio.wait_for(anext(stream), 20)
    assert outcome == ["committed"]
    async with Admin(bootstrap_servers=bootstrap) as admin:
        committed = await admin.list_consumer_group_offsets(group)
    assert sum(om.offset for om in committed.values()) == 20
