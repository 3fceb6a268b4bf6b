"""KIP-714 client metrics pushed to a real broker.

A broker of its own (module scope) runs our recorder plugin (``tests/java/
TelemetryRecorder.java``, compiled with ``javac`` against the harness's broker jars and
put on its classpath, enabled with ``metric.reporters``): it makes the broker offer
GetTelemetrySubscriptions/PushTelemetry and appends each accepted payload to a file, which
the tests decode with their own protobuf reader (``tests/otlp_reader.py``). Two
client-metrics subscriptions (``CLIENT_METRICS`` configs set with our Admin): ``kip714-sub``
(the producer's and the consumer's metrics every second, for client ids
``kip714-sub-*``) and ``kip714-quiet`` (no metrics, a 1 s interval, for ``kip714-quiet-*``).
The session broker (no plugin) shows the broker without the API.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from otlp_reader import Decoded, decode_metrics_data

from aiostream_kafka.admin import Admin
from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.producer import Producer
from aiostream_kafka.telemetry.push import TelemetryPusher
from aiostream_kafka.testing import KafkaCluster, probe
from aiostream_kafka.testing.jars import cache_root, ensure_kafka_jars

broker_fixtures = ("telemetry_broker",)

pytestmark = pytest.mark.real_broker(
    reason="a broker plugin (our Java telemetry recorder, compiled with javac) runs in the "
    "broker; the fake has no plugins and serves no client telemetry (KIP-714)"
)

RECORDER_SOURCE = Path(__file__).parent / "java" / "TelemetryRecorder.java"
P = "org.apache.kafka.producer."
C = "org.apache.kafka.consumer."

log = logging.getLogger(__name__)


def recorder_classes() -> Path:
    """``TelemetryRecorder.class``, compiled once per source version (cached)."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError(
            "no javac on this machine: the broker's telemetry recorder cannot be built"
        )
    digest = hashlib.sha256(RECORDER_SOURCE.read_bytes()).hexdigest()[:16]
    out = cache_root() / "test-java" / f"telemetry-recorder-{digest}"
    if not (out / "TelemetryRecorder.class").exists():
        tmp = Path(tempfile.mkdtemp(prefix="telemetry-recorder-"))
        subprocess.run(
            [javac, "-cp", f"{ensure_kafka_jars()}/*", "-d", str(tmp), str(RECORDER_SOURCE)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            tmp.rename(out)
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def telemetry_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[KafkaCluster, Path]]:
    record = tmp_path_factory.mktemp("telemetry") / "pushed.txt"
    async with KafkaCluster(
        brokers=1,
        source="local",
        classpath=[recorder_classes()],
        server_properties={
            "metric.reporters": "TelemetryRecorder",
            "telemetry.recorder.file": str(record),
        },
    ) as cluster:
        async with Admin(cluster.bootstrap_servers) as admin:
            metrics = ConfigResourceType.CLIENT_METRICS
            await admin.incremental_alter_configs(
                {
                    ConfigResource(metrics, "kip714-sub"): [
                        AlterConfigOp("metrics", f"{P},{C}"),
                        AlterConfigOp("interval.ms", "1000"),
                        AlterConfigOp("match", "client_id=kip714-sub-.*"),
                    ],
                    ConfigResource(metrics, "kip714-quiet"): [
                        AlterConfigOp("metrics", ""),
                        AlterConfigOp("interval.ms", "1000"),
                        AlterConfigOp("match", "client_id=kip714-quiet-.*"),
                    ],
                }
            )
        yield cluster, record


def pushed(record: Path, instance_id: uuid.UUID) -> list[tuple[bool, Decoded, int]]:
    """What the recorder received from ``instance_id``: (terminating, metrics, bytes)."""
    if not record.exists():
        return []
    out = []
    for line in record.read_text().splitlines():
        client, terminating, _content_type, payload = line.split(" ")
        # Kafka writes a Uuid as URL-safe base64 of its 16 bytes, unpadded.
        if base64.urlsafe_b64decode(client + "==") == instance_id.bytes:
            data = base64.b64decode(payload)
            out.append((terminating == "true", decode_metrics_data(data), len(data)))
    return out


def total(pushes: list[tuple[bool, Decoded, int]], name: str) -> float:
    """A sum metric's value over ``pushes``: deltas added, or the last cumulative value."""
    values = []
    for _, decoded, _ in pushes:
        metric = decoded.metrics.get(name)
        if metric is not None:
            values.append((metric.temporality, sum(p.value for p in metric.points)))
    if not values:
        return 0
    if values[-1][0] == 1:  # AGGREGATION_TEMPORALITY_DELTA
        return sum(v for _, v in values)
    return values[-1][1]


async def wait_for(check, timeout_s: float = 15.0):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout_s} s")
        await asyncio.sleep(0.1)


def pusher(client: Producer | Consumer) -> TelemetryPusher:
    telemetry = client._metrics_push
    assert telemetry is not None
    return telemetry


async def test_a_broker_without_the_api_gets_no_request(kafka_cluster: KafkaCluster) -> None:
    async with Producer(kafka_cluster.bootstrap_servers) as producer:
        stats = pusher(producer).stats
        await wait_for(lambda: stats.stopped)
        assert "does not offer GetTelemetrySubscriptions" in (stats.stopped or "")
        assert stats.subscription_requests == 0 and stats.pushes == 0
    async with Producer(kafka_cluster.bootstrap_servers, enable_metrics_push=False) as off:
        assert off._metrics_push is None


async def test_without_subscription_one_request_per_interval_and_silence(
    telemetry_broker: tuple[KafkaCluster, Path], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, record = telemetry_broker
    caplog.set_level(logging.DEBUG, logger="aiostream_kafka")
    bootstrap = cluster.bootstrap_servers
    async with (
        Producer(bootstrap, client_id="kip714-none") as unmatched,
        Producer(bootstrap, client_id="kip714-quiet-1") as quiet,
    ):
        await asyncio.sleep(3.5)
        none_stats, quiet_stats = pusher(unmatched).stats, pusher(quiet).stats
        # No subscription matches: the broker's default interval (5 min), one request.
        assert pusher(unmatched).subscription is not None
        assert pusher(unmatched).subscription.requested_metrics == ()
        assert pusher(unmatched).subscription.push_interval_ms == 300_000
        assert none_stats.subscription_requests == 1
        # A subscription without metrics, every second: one request per interval.
        assert pusher(quiet).subscription is not None
        assert pusher(quiet).subscription.push_interval_ms == 1000
        assert 3 <= quiet_stats.subscription_requests <= 5, quiet_stats
        assert none_stats.pushes == quiet_stats.pushes == 0
        ids = [pusher(unmatched).client_instance_id, pusher(quiet).client_instance_id]
        assert all(i.int != 0 for i in ids)  # the broker assigned them
    assert quiet_stats.terminating_pushes == none_stats.terminating_pushes == 0
    assert all(not pushed(record, i) for i in ids)
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG and "telemetry" in r.name]
    assert not loud, [r.getMessage() for r in loud]


async def test_the_producer_pushes_its_metrics(
    telemetry_broker: tuple[KafkaCluster, Path],
) -> None:
    cluster, record = telemetry_broker
    topic = f"kip714-{uuid.uuid4().hex[:8]}"
    await probe.create_topic(cluster.bootstrap_servers, topic, 1, 1)
    sent = 300
    async with Producer(cluster.bootstrap_servers, client_id="kip714-sub-producer") as producer:
        telemetry = pusher(producer)
        await asyncio.gather(*(producer.send(topic, b"v%d" % i) for i in range(sent)))
        await wait_for(
            lambda: (
                total(pushed(record, telemetry.client_instance_id), P + "record.send.total") == sent
            )
        )
        stats = telemetry.stats
        log.info(
            "producer push: %d bytes of OTLP, %d bytes pushed (compression %d), %d pushes",
            stats.last_payload_bytes,
            stats.last_push_bytes,
            stats.last_compression,
            stats.pushes,
        )
    received = await wait_for(
        lambda: (r := pushed(record, telemetry.client_instance_id)) and r[-1][0] and r
    )
    assert [terminating for terminating, _, _ in received].count(True) == 1
    assert all(not t for t, _, _ in received[:-1])
    names = {name for _, decoded, _ in received for name in decoded.metrics}
    assert all(name.startswith(P) for name in names), names  # only what was requested
    for standard in (
        "connection.creation.total",
        "connection.creation.rate",
        "node.request.latency.avg",
        "node.request.latency.max",
        "produce.throttle.time.avg",
        "produce.throttle.time.max",
        "record.queue.time.avg",
        "record.queue.time.max",
    ):
        assert P + standard in names, standard
    assert total(received, P + "record.send.total") == sent
    assert total(received, P + "record.error.total") == 0
    assert total(received, P + "connection.creation.total") >= 1
    latencies = [
        point
        for _, decoded, _ in received
        for point in getattr(decoded.metrics.get(P + "node.request.latency.max"), "points", [])
    ]
    assert latencies and all(0 < p.value < 10_000 for p in latencies)
    assert {p.attributes["node_id"] for p in latencies} == {"1"}
    _, first, _ = received[0]
    assert first.resource["client_id"] == "kip714-sub-producer"
    assert first.resource["client_software_name"] == "aiostream-kafka"
    assert first.scope_name == "aiostream-kafka"


async def test_the_consumer_pushes_its_metrics(
    telemetry_broker: tuple[KafkaCluster, Path],
) -> None:
    cluster, record = telemetry_broker
    topic = f"kip714-{uuid.uuid4().hex[:8]}"
    await probe.create_topic(cluster.bootstrap_servers, topic, 1, 1)
    count = 200
    async with Producer(cluster.bootstrap_servers, enable_metrics_push=False) as producer:
        await asyncio.gather(*(producer.send(topic, b"v%d" % i) for i in range(count)))
    group = f"kip714-{uuid.uuid4().hex[:8]}"
    async with Consumer(
        topic,
        bootstrap_servers=cluster.bootstrap_servers,
        client_id="kip714-sub-consumer",
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        telemetry = pusher(consumer)
        seen = 0
        async for _ in consumer.stream():
            seen += 1
            if seen == count:
                break
        await consumer.commit()

        def done() -> bool:
            got = pushed(record, telemetry.client_instance_id)
            return (
                total(got, C + "fetch.manager.records.consumed.total") == count
                and total(got, C + "coordinator.commit.total") >= 1
            )

        await wait_for(done)
    received = pushed(record, telemetry.client_instance_id)
    names = {name for _, decoded, _ in received for name in decoded.metrics}
    assert all(name.startswith(C) for name in names), names
    assert {C + "coordinator.commit.latency.avg", C + "fetch.manager.fetch.latency.max"} <= names
    assigned = [
        p.value
        for _, decoded, _ in received
        for p in getattr(decoded.metrics.get(C + "coordinator.assigned.partitions"), "points", [])
    ]
    assert 1 in assigned
    assert received[0][1].resource["group_id"] == group
