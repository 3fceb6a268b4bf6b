"""An executor worker's kept connections (``reader.WorkerClients``), against the real
broker, without Spark: reads one after another share one cluster; a read stopped early
closes its connections instead of handing them back; limits replace old ones."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from aiostream_kafka.producer import Producer
from aiostream_kafka.spark import reader
from aiostream_kafka.spark.options import parse_source_options
from aiostream_kafka.spark.reader import KafkaInputPartition, WorkerClients, read_range
from aiostream_kafka.testing import KafkaCluster


@pytest.fixture
def filled(kafka_cluster: KafkaCluster) -> tuple[str, str]:
    bs = kafka_cluster.bootstrap_servers
    topic = f"worker-clients-{uuid.uuid4().hex[:8]}"

    async def fill() -> None:
        from aiostream_kafka.admin import Admin, NewTopic

        async with Admin(bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        async with Producer(bs, linger_ms=2) as producer:
            await producer.send_batch(topic, [b"v%d" % i for i in range(500)], partition=0)

    asyncio.run(fill())
    return bs, topic


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkerClients]:
    clients = WorkerClients()
    monkeypatch.setattr(reader, "_WORKER", clients)
    yield clients
    clients.close()


def _values(opts: object, topic: str, start: int, end: int) -> list[bytes]:
    part = KafkaInputPartition(0, topic, 0, start, end)
    return [v for b in read_range(opts, part) for v in b.column("value").to_pylist()]  # type: ignore[arg-type]


def test_reads_share_the_workers_connections(
    filled: tuple[str, str], worker: WorkerClients
) -> None:
    bs, topic = filled
    opts = parse_source_options({"kafka.bootstrap.servers": bs, "subscribe": topic})
    assert _values(opts, topic, 0, 100) == [b"v%d" % i for i in range(100)]
    ((cluster, _, _),) = worker._idle.values()
    assert _values(opts, topic, 100, 500) == [b"v%d" % i for i in range(100, 500)]
    ((again, _, _),) = worker._idle.values()
    assert again is cluster  # the same connections, handed back twice
    # other client options: other connections
    other = parse_source_options(
        {"kafka.bootstrap.servers": bs, "subscribe": topic, "kafka.client.id": "other"}
    )
    assert _values(other, topic, 0, 10) == [b"v%d" % i for i in range(10)]
    assert len(worker._idle) == 2


def test_a_read_stopped_early_closes_its_connections(
    filled: tuple[str, str], worker: WorkerClients
) -> None:
    bs, topic = filled
    opts = parse_source_options(
        {"kafka.bootstrap.servers": bs, "subscribe": topic, "kafkaConsumer.pollTimeoutMs": "30000"}
    )
    assert _values(opts, topic, 0, 10)
    ((cluster, _, _),) = worker._idle.values()
    batches = read_range(opts, KafkaInputPartition(0, topic, 0, 0, 500))
    next(batches)  # the first batch only (as a limit() stops early)
    assert not worker._idle  # taken by the read
    batches.close()  # type: ignore[attr-defined]  # a generator
    assert not worker._idle and cluster._closed  # not handed back: closed
    assert _values(opts, topic, 0, 5) == [b"v%d" % i for i in range(5)]  # a new one


def test_old_or_idle_connections_are_replaced(
    filled: tuple[str, str], worker: WorkerClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs, topic = filled
    opts = parse_source_options({"kafka.bootstrap.servers": bs, "subscribe": topic})
    _values(opts, topic, 0, 10)
    ((cluster, _, _),) = worker._idle.values()
    monkeypatch.setattr(reader, "WORKER_CLUSTER_MAX_IDLE_S", 0.0)
    _values(opts, topic, 0, 10)
    ((replacement, _, _),) = worker._idle.values()
    assert replacement is not cluster and cluster._closed
