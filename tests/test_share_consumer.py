"""ShareConsumer (share groups, KIP-932) against the real 4.3.1 broker: one member accepts
everything once; two members of one partition split the work; RELEASE brings a record
back with delivery_count 2; REJECT never; an exception in the loop body releases the
record; close releases what was acquired and not handed out, at once.

Each group gets ``share.auto.offset.reset=earliest`` and a short heartbeat interval as
group configs before its first member joins (the test broker lowers the minimums).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from helpers import eventually

from aiostream_kafka import AcknowledgeType, Producer, ShareConsumer, ShareRecord
from aiostream_kafka.admin import Admin
from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

HEARTBEAT_MS = 200


async def _group(bootstrap: str, **extra: str) -> str:
    group = f"share-{uuid.uuid4().hex[:10]}"
    settings = {
        "share.auto.offset.reset": "earliest",
        "share.heartbeat.interval.ms": str(HEARTBEAT_MS),
        **extra,
    }
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp(k, v) for k, v in settings.items()
                ]
            }
        )
    return group


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(count):
            await producer.enqueue(topic, value=b"%d" % i, key=b"%d" % i)
        await producer.flush()


async def _acquired(sc: ShareConsumer) -> int:
    return sc.records_acquired


async def _nothing_within(sc: ShareConsumer, seconds: float) -> list[ShareRecord]:
    """What ``sc`` hands out within ``seconds`` (each accepted)."""
    got: list[ShareRecord] = []
    try:
        async with asyncio.timeout(seconds):
            async for record in sc:
                got.append(record)
                sc.acknowledge(record)
    except TimeoutError:
        pass
    return got


async def test_one_member_accepts_every_record_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = await _group(bs)
    await _produce(bs, topic, 60)
    seen: list[ShareRecord] = []
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
        sc.subscribe([topic])
        async with asyncio.timeout(30):
            async for record in sc:
                seen.append(record)
                if len(seen) == 60:
                    sc.acknowledge(record)  # the loop ends on it: accept it first
                    break
        await sc.commit()
        assert sc.records_acquired == 60
    assert sorted(int(r.value) for r in seen) == list(range(60))
    assert {r.delivery_count for r in seen} == {1}
    assert {r.partition for r in seen} == {0, 1}
    # Accepted: a new member of the group gets none of them.
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as again:
        again.subscribe([topic])
        assert await _nothing_within(again, 3.0) == []


async def test_two_members_of_one_partition_split_the_work(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    group = await _group(bs)
    total = 400
    await _produce(bs, topic, total)
    accepted: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def member(name: str) -> None:
        async with ShareConsumer(
            bootstrap_servers=bs, group_id=group, max_prefetch_records=10
        ) as sc:
            sc.subscribe([topic])
            async for record in sc:
                await asyncio.sleep(0.005)  # some work: the other member takes its share
                sc.acknowledge(record)
                accepted.append((name, int(record.value)))
                if len({v for _, v in accepted}) >= total:
                    done.set()
                if done.is_set():
                    break

    async with asyncio.timeout(60):
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(member("a")), tg.create_task(member("b"))]
            await done.wait()
            for task in tasks:  # one may be waiting for records that will not come
                task.cancel()
    counts = Counter(v for _, v in accepted)
    assert sorted(counts) == list(range(total))
    assert max(counts.values()) == 1, "a record was accepted twice"
    by_member = Counter(name for name, _ in accepted)
    assert by_member["a"] > 0 and by_member["b"] > 0, by_member


async def test_release_brings_a_record_back_and_reject_never(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, 2)
    log: list[tuple[int, int, str]] = []
    async with ShareConsumer(
        bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit"
    ) as sc:
        sc.subscribe([topic])
        async with asyncio.timeout(30):
            async for record in sc:
                if record.offset == 0 and record.delivery_count == 1:
                    sc.acknowledge(record, AcknowledgeType.RELEASE)
                    log.append((record.offset, record.delivery_count, "release"))
                elif record.offset == 0:
                    sc.acknowledge(record, AcknowledgeType.ACCEPT)
                    log.append((record.offset, record.delivery_count, "accept"))
                else:
                    sc.acknowledge(record, AcknowledgeType.REJECT)
                    log.append((record.offset, record.delivery_count, "reject"))
                if len(log) == 3:
                    break
        await sc.commit()
        # Nothing comes again: offset 0 accepted, offset 1 rejected.
        assert await _nothing_within(sc, 3.0) == []
    assert sorted(log) == [(0, 1, "release"), (0, 2, "accept"), (1, 1, "reject")]
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as again:
        again.subscribe([topic])
        assert await _nothing_within(again, 3.0) == []


async def test_an_exception_in_the_loop_body_releases_the_record(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, 1)

    class Boom(Exception):
        pass

    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
        sc.subscribe([topic])
        with pytest.raises(Boom):
            async with asyncio.timeout(30):
                async for record in sc:
                    assert record.delivery_count == 1
                    raise Boom
        async with asyncio.timeout(15):  # well before the 30 s lock would expire
            async for record in sc:
                assert (record.offset, record.delivery_count) == (0, 2)
                sc.acknowledge(record)
                break
        await sc.commit()


async def test_close_releases_records_acquired_and_not_handed_out(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, 20)
    first = ShareConsumer(bootstrap_servers=bs, group_id=group)
    async with first:
        first.subscribe([topic])
        async with asyncio.timeout(30):
            async for record in first:
                first.acknowledge(record)  # one accepted; the other 19 stay buffered
                break
        await eventually(lambda: _acquired(first), lambda n: n == 20, timeout_s=10)
    # The 30 s lock has not expired: the other member gets the 19 because close released them.
    loop = asyncio.get_running_loop()
    started = loop.time()
    got: list[ShareRecord] = []
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as second:
        second.subscribe([topic])
        async with asyncio.timeout(20):
            async for record in second:
                got.append(record)
                if len(got) == 19:
                    second.acknowledge(record)
                    break
        await second.commit()
    assert loop.time() - started < 20
    assert sorted(r.offset for r in got) == list(range(1, 20))
    assert {r.delivery_count for r in got} <= {1, 2}, [r.delivery_count for r in got]
