"""OpenTelemetry, natively (issue 31), against a real broker with the SDK's in-memory
span exporter and metric reader: the send span covers the broker's acknowledgement and
carries its partition and offset, failures carry ``error.type``, the context travels in
``traceparent`` from our producer (and confluent-kafka's) to our consumer's receive,
process and commit spans, the metric counts equal the records, and nothing is emitted or
hooked without an SDK, with ``opentelemetry=False``, or without ``opentelemetry-api``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from helpers import eventually

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is a dev dependency")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aiostream_kafka import Consumer, Producer, Record, TopicPartition
from aiostream_kafka.otel.semconv import names_for
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


class Otel:
    """An SDK tracer and meter provider writing to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    @property
    def options(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out.extend(metric.data.data_points)
        return out

    def total(self, name: str) -> float:
        return sum(p.value for p in self.points(name))

    def count(self, name: str) -> int:
        return sum(p.count for p in self.points(name))


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


def _where(span: ReadableSpan) -> tuple[object, object]:
    attrs = span.attributes or {}
    return attrs["messaging.destination.partition.id"], attrs["messaging.kafka.offset"]


def _group() -> str:
    return f"otel-{uuid.uuid4().hex[:10]}"


async def test_send_spans_end_at_the_ack_with_partition_offset_and_metrics(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3, config={"message.timestamp.type": "LogAppendTime"})
    async with Producer(bootstrap_servers=bootstrap, linger_ms=20, **otel.options) as producer:
        sent = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(5)]
        futures = [await producer.enqueue(topic, b"w%d" % i, key=b"b%d" % i) for i in range(15)]
        sent += list(await asyncio.gather(*futures))
    spans = otel.spans("send ")
    assert len(spans) == 20
    by_offset = {_where(s): s for s in spans}
    for md in sent:
        span = by_offset[(str(md.partition), md.offset)]
        assert span.name == f"send {topic}"
        assert span.kind is SpanKind.PRODUCER
        attrs = span.attributes or {}
        assert attrs["messaging.system"] == "kafka"
        assert attrs["messaging.operation.name"] == "send"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == topic
        assert attrs["server.address"] and isinstance(attrs["server.port"], int)
        assert "messaging.kafka.message.offset" not in attrs  # the deprecated name
        # The broker appended the record (LogAppendTime) before the span ended: the span
        # covers the acknowledgement, not just the enqueue.
        assert span.start_time is not None and span.end_time is not None
        assert span.start_time // 1_000_000 <= md.timestamp_ms + 1
        assert span.end_time // 1_000_000 >= md.timestamp_ms - 1
        assert span.status.status_code is StatusCode.UNSET
    keys = {s.attributes["messaging.kafka.message.key"] for s in spans}  # type: ignore[index]
    assert {"k0", "b0"} <= keys
    assert otel.total("messaging.client.sent.messages") == 20
    assert otel.count("messaging.client.operation.duration") == 20
    point = otel.points("messaging.client.sent.messages")[0]
    assert point.attributes["messaging.destination.name"] == topic
    assert "messaging.kafka.message.key" not in point.attributes  # not a metric dimension


async def test_a_failed_send_ends_its_span_with_the_error(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(config={"max.message.bytes": "1000"})
    async with Producer(bootstrap_servers=bootstrap, **otel.options) as producer:
        with pytest.raises(Exception) as delivery:
            await producer.send(topic, b"x" * 5000)  # the broker refuses it
        with pytest.raises(TypeError):
            await producer.send(topic, 12345)  # type: ignore[arg-type]  # not bytes
    spans = otel.spans("send ")
    assert len(spans) == 2
    refused, bad = spans
    assert refused.status.status_code is StatusCode.ERROR
    assert (refused.attributes or {})["error.type"] == type(delivery.value).__qualname__
    assert bad.status.status_code is StatusCode.ERROR
    assert (bad.attributes or {})["error.type"] == "TypeError"
    errors = {p.attributes.get("error.type") for p in otel.points("messaging.client.sent.messages")}
    assert errors == {type(delivery.value).__qualname__, "TypeError"}


async def test_the_context_travels_from_send_to_receive_process_and_commit(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    count = 40
    async with Producer(bootstrap_servers=bootstrap, **otel.options) as producer:
        for i in range(count):
            await producer.enqueue(topic, b"%d" % i, key=b"k%d" % (i % 7))
        await producer.flush()
    sends = {s.context.span_id: s for s in otel.spans("send ")}
    assert len(sends) == count
    tracer = otel.tracer_provider.get_tracer("the application")
    handled: list[Record] = []
    consumer = Consumer(bootstrap, group_id=_group(), auto_offset_reset="earliest", **otel.options)

    async def handler(record: Record) -> None:
        with tracer.start_as_current_span("handler's own work"):
            await asyncio.sleep(0.001)
        handled.append(record)
        if len(handled) == count:
            asyncio.get_running_loop().call_soon(
                lambda: closing.append(asyncio.ensure_future(consumer.close()))
            )

    closing: list[asyncio.Future[None]] = []
    async with asyncio.timeout(60):
        await consumer.start()
        consumer.subscribe([topic])
        await consumer.process(handler, concurrency=8, within_s=0.2)
        await closing[0]
    process = otel.spans("process ")
    assert len(process) == count
    for span in process:
        assert span.kind is SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id in sends  # the send's child
        send = sends[span.parent.span_id]
        assert span.context.trace_id == send.context.trace_id
        attrs = span.attributes or {}
        assert attrs["messaging.consumer.group.name"] == consumer.group.coordinator.config.group_id  # type: ignore[union-attr]
        assert (
            attrs["messaging.destination.partition.id"]
            == (send.attributes or {})["messaging.destination.partition.id"]
        )
        assert attrs["messaging.kafka.offset"] == (send.attributes or {})["messaging.kafka.offset"]
    own = otel.spans("handler's own work")
    assert {s.parent.span_id for s in own if s.parent} == {s.context.span_id for s in process}
    receive = otel.spans("receive ")
    assert receive and all(s.kind is SpanKind.CLIENT for s in receive)
    assert sum((s.attributes or {})["messaging.batch.message_count"] for s in receive) == count  # type: ignore[misc]
    linked = {link.context.span_id for s in receive for link in s.links}
    assert linked == set(sends)
    commits = otel.spans("commit")
    assert commits and all(
        (s.attributes or {})["messaging.operation.type"] == "settle" for s in commits
    )
    assert otel.total("messaging.client.consumed.messages") == count
    assert otel.count("messaging.process.duration") == count


async def test_committing_loops_get_process_spans_and_the_lag_gauge_falls_to_zero(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    async with Producer(bootstrap_servers=bootstrap) as producer:  # not traced (no SDK given)
        for i in range(30):
            await producer.enqueue(topic, b"%d" % i)
        await producer.flush()
    assert otel.spans() == []
    async with Consumer(
        bootstrap, group_id=_group(), auto_offset_reset="earliest", **otel.options
    ) as consumer:
        consumer.subscribe([topic])
        seen = 0
        async for _record in consumer.committing(consumer.stream()):
            seen += 1
            if seen == 10:
                lags = [p.value for p in otel.points("aiostream_kafka.consumer.lag")]
                assert lags and max(lags) >= 1  # records after the position
            if seen == 30:
                break

        async def lag() -> list[int]:
            return [p.value for p in otel.points("aiostream_kafka.consumer.lag")]

        await eventually(lag, lambda values: values == [0], 10)
    process = otel.spans("process ")
    assert len(process) == 30
    assert all(s.parent is None for s in process)  # the records carried no context
    assert all(s.end_time and s.start_time and s.end_time >= s.start_time for s in process)


async def test_confluent_kafka_s_traceparent_parents_our_process_span(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        topic, b"from librdkafka", headers=[("traceparent", f"00-{trace_id}-{span_id}-01".encode())]
    )
    assert producer.flush(10) == 0
    consumer = Consumer(bootstrap, group_id=_group(), auto_offset_reset="earliest", **otel.options)
    got: list[Record] = []

    async def handler(record: Record) -> None:
        got.append(record)
        asyncio.get_running_loop().call_soon(
            lambda: closing.append(asyncio.ensure_future(consumer.close()))
        )

    closing: list[asyncio.Future[None]] = []
    async with asyncio.timeout(60):
        await consumer.start()
        consumer.subscribe([topic])
        await consumer.process(handler, concurrency=1)
        await closing[0]
    (span,) = otel.spans("process ")
    assert span.context.trace_id == int(trace_id, 16)
    assert span.parent is not None and span.parent.span_id == int(span_id, 16)
    assert span.parent.is_remote


async def test_nothing_is_hooked_without_an_sdk_or_with_opentelemetry_false(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"  # no global SDK
    async with (
        Producer(bootstrap_servers=bootstrap) as plain,
        Producer(bootstrap_servers=bootstrap, opentelemetry=False, **otel.options) as off,
    ):
        for producer in (plain, off):
            # the class's method, or the compiled appender's: nothing traced per record
            own = vars(producer).get("enqueue")
            assert own is None or own == producer._appender.enqueue
            await producer.send(topic, b"x")
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert consumer._telemetry is None and consumer._engine.buffer.observer is None
        async for _ in consumer.stream():
            break
    assert otel.spans() == [] and otel.points("messaging.client.sent.messages") == []


async def test_semconv_opt_in_dup_emits_both_spellings(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,messaging/dup")
    topic = await new_topic()
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, **otel.options) as p:
        await p.send(topic, b"x", key=b"k")
    (span,) = otel.spans("send ")
    attrs = span.attributes or {}
    assert attrs["messaging.system"] == attrs["messaging.system.name"] == "kafka"
    assert attrs["messaging.kafka.offset"] == attrs["kafka.offset"] == 0
    assert attrs["messaging.kafka.message.key"] == attrs["kafka.message.key"] == "k"


def test_the_stability_switch() -> None:
    assert names_for("").system == ("messaging.system",)
    assert names_for("messaging").offset == ("kafka.offset",)
    assert names_for("messaging, messaging/dup").key == (
        "messaging.kafka.message.key",
        "kafka.message.key",
    )


def test_the_package_imports_and_runs_without_opentelemetry_api() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import aiostream_kafka\n"
        "from aiostream_kafka import Producer, Consumer\n"
        "from aiostream_kafka.otel import telemetry_for\n"
        "Producer(bootstrap_servers='localhost:9'); Consumer('localhost:9')\n"
        "assert telemetry_for(True, None, None, client_id='x') is None\n"
        "print('ok')\n"
    )
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert time.monotonic() - started < 60


async def test_enqueue_nowait_records_get_send_spans_and_keep_their_callbacks(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    topic = await new_topic()
    got: list[Any] = []
    async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers, **otel.options) as p:
        await p.partitions_for(topic)
        for i in range(5):
            p.enqueue_nowait(topic, b"%d" % i, on_delivery=lambda md, err: got.append(md))
        p.enqueue_nowait(topic, b"no callback")
        await p.flush()
    spans = otel.spans("send ")
    assert len(spans) == 6
    assert sorted((s.attributes or {})["messaging.kafka.offset"] for s in spans) == list(range(6))
    assert [md.offset for md in got] == list(range(5))
    assert otel.total("messaging.client.sent.messages") == 6


async def test_a_share_consumer_s_loop_gets_receive_and_process_spans(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    from test_share_consumer import _group

    from aiostream_kafka import ShareConsumer

    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bootstrap)
    async with Producer(bootstrap_servers=bootstrap, **otel.options) as producer:
        for i in range(5):
            await producer.enqueue(topic, b"%d" % i)
        await producer.flush()
    sends = {s.context.span_id for s in otel.spans("send ")}
    async with ShareConsumer(bootstrap_servers=bootstrap, group_id=group, **otel.options) as sc:
        sc.subscribe([topic])
        seen = 0
        async with asyncio.timeout(60):
            async for _record in sc:
                seen += 1
                if seen == 5:
                    break
    process = otel.spans("process ")
    assert len(process) == 5
    assert {s.parent.span_id for s in process if s.parent} == sends
    assert all((s.attributes or {})["messaging.consumer.group.name"] == group for s in process)
    assert otel.total("messaging.client.consumed.messages") >= 5


async def test_a_share_consumer_s_acknowledgements_get_settle_spans(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, otel: Otel
) -> None:
    from test_share_consumer import _group

    from aiostream_kafka import AcknowledgeType, ShareConsumer

    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bootstrap)
    async with Producer(bootstrap_servers=bootstrap, opentelemetry=False) as producer:
        for i in range(5):
            await producer.enqueue(topic, b"%d" % i)
        await producer.flush()
    async with ShareConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        acknowledgement_mode="explicit",
        **otel.options,
    ) as sc:
        sc.subscribe([topic])
        seen = 0
        async with asyncio.timeout(60):
            async for record in sc:
                seen += 1
                if record.value == b"3":
                    sc.acknowledge(record, AcknowledgeType.REJECT)
                else:
                    sc.acknowledge(record)
                if seen == 5:
                    break
            await sc.commit()
    settles = otel.spans("acknowledge")
    assert settles, "no acknowledge span"
    attrs = [s.attributes or {} for s in settles]
    assert all(s.kind == SpanKind.CLIENT and s.name == f"acknowledge {topic}" for s in settles)
    assert all(a["messaging.operation.type"] == "settle" for a in attrs)
    assert all(a["messaging.operation.name"] == "acknowledge" for a in attrs)
    assert sum(a.get("aiostream_kafka.acknowledge.accept", 0) for a in attrs) == 4
    assert sum(a.get("aiostream_kafka.acknowledge.reject", 0) for a in attrs) == 1
    assert sum(a["messaging.batch.message_count"] for a in attrs) == 5
    assert not any(s.status.status_code == StatusCode.ERROR for s in settles)
    durations = [
        p
        for p in otel.points("messaging.client.operation.duration")
        if p.attributes.get("messaging.operation.name") == "acknowledge"
    ]
    assert sum(p.count for p in durations) >= 1  # commit() sends a ShareAcknowledge
