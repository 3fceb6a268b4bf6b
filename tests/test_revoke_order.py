"""The order of a revocation (issue 28): delivery of the revoked partitions stops first,
the records the application holds are finished, ``on_revoked`` runs while the partitions
are still owned, then the pending commit, then they are dropped.

Real broker, cooperative-sticky (the default assignor), two members of one group."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

from helpers import eventually

from aiostream_kafka import Consumer, Producer, TopicPartition
from aiostream_kafka.admin import Admin
from aiostream_kafka.structs import Record
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

SETTINGS = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 300,
    "max_poll_interval_ms": 20_000,
    "metadata_max_age_ms": 1_000,
    "auto_offset_reset": "earliest",
}


def _group() -> str:
    return f"rv-{uuid.uuid4().hex[:10]}"


async def _produce(bootstrap: str, topic: str, count: int, partitions: int, pad: int = 0) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        futures = [
            await producer.enqueue(topic, value=b"%d" % i + b"." * pad, partition=i % partitions)
            for i in range(count)
        ]
        await producer.flush()
        assert all(f.exception() is None for f in futures)


async def _owns(consumer: Consumer, count: int) -> frozenset[TopicPartition]:
    health = await eventually(
        lambda: asyncio.sleep(0, consumer.health()),
        lambda h: h.state == "stable" and len(h.assignment) == count,
        30,
    )
    return health.assignment


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_no_record_of_a_revoked_partition_is_handed_out_while_its_commit_runs(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Defect 1, deterministic: the revoke's OffsetCommit is slowed down by 1 s; the first
    member (``stream()``, auto-commit) keeps reading meanwhile. Nothing of the revoked
    partition may be handed out after the revoke started, and the new owner starts right
    after the last record the first member had."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    # 1 KB records, 64 KiB a partition's fetch: the stream turns from one partition to the
    # other every ~60 records, so both are being handed out when the revoke starts.
    await _produce(bootstrap, topic, 4_000, partitions=2, pad=1_000)
    group = _group()
    settings = {
        **SETTINGS,
        "enable_auto_commit": True,
        "auto_commit_interval_ms": 3_600_000,
        "max_partition_fetch_bytes": 65_536,
    }
    handed: list[tuple[TopicPartition, int, float]] = []
    revoke_started: list[tuple[frozenset[TopicPartition], float]] = []
    async with Consumer(bootstrap, group_id=group, **settings) as first:  # type: ignore[arg-type]
        first.subscribe([topic])
        await _owns(first, 2)
        member = first.group
        assert member is not None
        revoke = member.partitions_revoked
        commit = member.coordinator.offsets.commit

        async def noted_revoke(partitions: frozenset[TopicPartition]) -> None:
            revoke_started.append((partitions, time.monotonic()))
            await revoke(partitions)

        async def slow_commit(offsets: dict[TopicPartition, object]) -> None:
            if revoke_started:
                await asyncio.sleep(1.0)
            await commit(offsets)  # type: ignore[arg-type]

        member.partitions_revoked = noted_revoke  # type: ignore[method-assign]
        member.coordinator.offsets.commit = slow_commit  # type: ignore[method-assign]

        async def read() -> None:
            async for record in first.stream():
                handed.append((TopicPartition(record.topic, record.partition), record.offset,
                               time.monotonic()))  # fmt: skip
                await asyncio.sleep(0.002)  # always a backlog: 4000 records take 8 s

        reader = asyncio.create_task(read())
        await eventually(
            lambda: asyncio.sleep(0, {tp for tp, _, _ in handed}), lambda s: len(s) == 2, 30
        )
        async with Consumer(bootstrap, group_id=group, **settings) as second:  # type: ignore[arg-type]
            second.subscribe([topic])
            (moved,) = await _owns(second, 1)
            await _owns(first, 1)
            (revoked, started_at) = revoke_started[0]
            assert revoked == {moved}
            late = [(o, t - started_at) for tp, o, t in handed if tp == moved and t > started_at]
            assert late == [], f"handed out after the revoke started: {late[:5]}"
            last = max(o for tp, o, _ in handed if tp == moved)
            record = await asyncio.wait_for(anext(aiter(second.stream())), 30)
            assert (record.partition, record.offset) == (moved.partition, last + 1)
        await _stop(reader)


async def test_a_commit_inside_on_revoked_lands(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Defect 2: the Java/librdkafka habit, ``await consumer.commit()`` in ``on_revoked``
    (no auto-commit, no ``committing()``), commits the revoked partition's position: the
    offset after the last record the first member handed out."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await _produce(bootstrap, topic, 200, partitions=2)
    group = _group()
    settings = {**SETTINGS, "enable_auto_commit": False}
    async with Consumer(bootstrap, group_id=group, **settings) as first:  # type: ignore[arg-type]
        seen_in_callback: list[dict[TopicPartition, int]] = []

        async def on_revoked(partitions: frozenset[TopicPartition]) -> None:
            member = first.group
            assert member is not None
            seen_in_callback.append(member.delivered_offsets(partitions))
            await first.commit()

        first.subscribe([topic], on_revoked=on_revoked)
        delivered: Counter[int] = Counter()
        stream = aiter(first.stream())
        while sum(delivered.values()) < 150:  # some of both partitions, not all
            record = await anext(stream)
            delivered[record.partition] += 1
        async with Consumer(bootstrap, group_id=group, **settings) as second:  # type: ignore[arg-type]
            second.subscribe([topic])
            (moved,) = await _owns(second, 1)
            assert seen_in_callback == [{moved: delivered[moved.partition]}]
            async with Admin(bootstrap) as admin:
                committed = await admin.list_consumer_group_offsets(group)
            assert moved in committed, committed
            assert committed[moved].offset == delivered[moved.partition]


async def _process(
    name: str,
    records: object,
    processed: list[tuple[str, TopicPartition, int]],
    delay_s: float,
) -> None:
    async for record in records:  # type: ignore[attr-defined]
        assert isinstance(record, Record)
        processed.append((name, TopicPartition(record.topic, record.partition), record.offset))
        await asyncio.sleep(delay_s)


async def test_a_record_in_hand_is_finished_and_committed_before_its_partition_moves(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Defect 1, ``committing()``: each partition is processed by its own task, one record
    every 100 ms, so when the revoke starts the application always holds a record of the
    revoked partition (handed out, not yet processed, so not staged). The revoke waits for
    it, commits it, and the new owner starts after it: no duplicate, nothing missing."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await _produce(bootstrap, topic, 400, partitions=2)
    group = _group()
    processed: list[tuple[str, TopicPartition, int]] = []

    async def member(name: str, consumer: Consumer) -> None:
        async with asyncio.TaskGroup() as tasks:
            async for _tp, records in consumer.partitioned_stream():
                tasks.create_task(
                    _process(
                        name,
                        consumer.committing(records, every=10**6, within_s=3600),
                        processed,
                        0.1,
                    )
                )

    async with Consumer(bootstrap, group_id=group, **SETTINGS) as first:  # type: ignore[arg-type]
        first.subscribe([topic])
        one = asyncio.create_task(member("first", first))
        await eventually(lambda: asyncio.sleep(0, len(processed)), lambda n: n >= 10, 30)
        async with Consumer(bootstrap, group_id=group, **SETTINGS) as second:  # type: ignore[arg-type]
            second.subscribe([topic])
            two = asyncio.create_task(member("second", second))
            (moved,) = await _owns(second, 1)
            await eventually(
                lambda: asyncio.sleep(0, [x for x in processed if x[0] == "second"]),
                lambda got: len(got) >= 3,
                30,
            )
            await _stop(two)
        await _stop(one)
    of_moved = Counter(off for _, tp, off in processed if tp == moved)
    duplicates = sorted(off for off, n in of_moved.items() if n > 1)
    assert duplicates == [], duplicates
    assert sorted(of_moved) == list(range(max(of_moved) + 1))  # nothing skipped


async def test_graceful_cooperative_rebalances_under_produce_deliver_each_record_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Member 1 processes with ``committing()`` (20 ms a record) under continuous produce;
    member 2 joins and then leaves gracefully, three times: across both members every
    record is processed exactly once."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    group = _group()
    total = 1_500
    processed: list[tuple[str, TopicPartition, int]] = []

    async def produce() -> None:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            for i in range(total):
                await producer.enqueue(topic, value=b"%d" % i, partition=i % 4)
                if i % 50 == 49:
                    await asyncio.sleep(0.05)  # ~1000 records/s
            await producer.flush()

    async def run(name: str, consumer: Consumer) -> None:
        await _process(name, consumer.committing(consumer.stream(), every=50, within_s=0.5),
                       processed, 0.02)  # fmt: skip

    async with Consumer(bootstrap, group_id=group, **SETTINGS) as first:  # type: ignore[arg-type]
        first.subscribe([topic])
        one = asyncio.create_task(run("first", first))
        await _owns(first, 4)
        producing = asyncio.create_task(produce())
        for round_ in range(3):
            second = Consumer(bootstrap, group_id=group, **SETTINGS)  # type: ignore[arg-type]
            await second.start()
            second.subscribe([topic])
            two = asyncio.create_task(run(f"second{round_}", second))
            await _owns(second, 2)
            await asyncio.sleep(0.5)
            await second.drain(timeout=5)  # graceful: hands out, commits, leaves
            await _stop(two)
            await _owns(first, 4)
        await producing

        async def distinct() -> int:
            return len({(tp, off) for _, tp, off in processed})

        await eventually(distinct, lambda n: n >= total, 60)
        await _stop(one)
    seen = Counter((tp, off) for _, tp, off in processed)
    duplicates = sorted(key for key, n in seen.items() if n > 1)
    assert len(seen) == total  # nothing missing
    assert duplicates == [], f"{len(duplicates)} duplicates: {duplicates[:10]}"


def test_a_partition_being_revoked_stays_paused_whatever_resume_says() -> None:
    """engine.hold (a revocation started): the partition is paused, the user's resume()
    does not undo it, other partitions pause and resume as before; revoking drops it."""
    consumer = Consumer("localhost:9")
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    consumer.assign([tp0, tp1])
    engine = consumer._engine
    engine.hold([tp0, TopicPartition("t", 7)])  # an unassigned one is skipped
    assert consumer.paused() == {tp0}
    consumer.pause(tp0, tp1)
    consumer.resume(tp0, tp1)
    assert consumer.paused() == {tp0}
    assert not engine.partitions[tp0].fetchable(10)
    engine.revoke([tp0])
    assert engine.held == set()
    consumer.assign([tp0, tp1])  # assigned again: a fresh state, not held
    assert consumer.paused() == set()
