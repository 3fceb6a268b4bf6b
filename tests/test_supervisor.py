"""The framework-free supervisor under a plain asyncio app (no FastAPI, no Starlette): the
same startup, supervision, health and ordered shutdown the FastAPI integration is built on."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

from aiostream_kafka import Consumer
from aiostream_kafka.structs import Record
from aiostream_kafka.supervisor import KafkaSupervisor
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.pytest_plugin import NewTopic


def test_the_supervisor_does_not_need_fastapi() -> None:
    code = (
        "import sys; import aiostream_kafka.supervisor; "
        "assert 'fastapi' not in sys.modules and 'starlette' not in sys.modules, "
        "[m for m in sys.modules if m.startswith(('fastapi', 'starlette'))]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_a_plain_asyncio_app_runs_consumers_and_the_producer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    kafka = KafkaSupervisor(kafka_cluster.bootstrap_servers)
    seen: list[bytes] = []
    got_all = asyncio.Event()

    @kafka.record_consumer([topic], group_id=f"sup-{uuid.uuid4().hex[:8]}", commit_every=1)
    async def handle(record: Record) -> None:
        assert record.value is not None
        seen.append(record.value)
        if len(seen) == 20:
            got_all.set()

    crashed = asyncio.Event()

    @kafka.consumer(name="crashes")
    async def crash(consumer: Consumer) -> None:
        crashed.set()
        raise RuntimeError("handler bug")

    assert not kafka.readiness().ok  # not started
    async with kafka.run():
        producer = kafka.get_producer()
        for i in range(20):
            await producer.send(topic, b"%d" % i, key=b"%d" % (i % 4))
        await asyncio.wait_for(got_all.wait(), 60)
        await asyncio.wait_for(crashed.wait(), 10)
        await asyncio.sleep(0.1)
        report = kafka.liveness()
        assert not report.ok
        assert report.reasons == (
            "consumer 'crashes': handler crashed: RuntimeError('handler bug')",
        )
        assert {s.name: s.healthy for s in report.consumers} == {"handle": True, "crashes": False}
    assert sorted(seen, key=int) == [b"%d" % i for i in range(20)]
    assert kafka.state == "stopped"
    readiness = kafka.readiness()
    assert not readiness.ok and readiness.reasons[0] == "Kafka supervisor is stopped"


async def test_a_consumer_with_concurrency_runs_record_handlers_through_process(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    kafka = KafkaSupervisor(kafka_cluster.bootstrap_servers)
    seen: dict[bytes, list[int]] = {}
    running = 0
    peak = 0
    got_all = asyncio.Event()

    @kafka.consumer([topic], group_id=f"sup-{uuid.uuid4().hex[:8]}", concurrency=8)
    async def handle(record: Record) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.02)
            assert record.key is not None and record.value is not None
            seen.setdefault(record.key, []).append(int(record.value))
            if sum(len(v) for v in seen.values()) == 80:
                got_all.set()
        finally:
            running -= 1

    async with kafka.run():
        producer = kafka.get_producer()
        for i in range(80):
            await producer.send(topic, b"%d" % i, key=b"k%d" % (i % 10))
        await asyncio.wait_for(got_all.wait(), 60)
    assert 1 < peak <= 8  # concurrent, within the bound
    # each key's records in the order produced (one key lives in one partition)
    for key, values in seen.items():
        assert values == sorted(values), key
    assert sorted(v for vs in seen.values() for v in vs) == list(range(80))
