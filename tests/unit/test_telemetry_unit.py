"""KIP-714 push, no broker: the OTLP encoder read back by an independent reader, the
subscription's metric selection, delta temporality, compression and the collectors."""

from __future__ import annotations

import math

from otlp_reader import decode_metrics_data, fields

from aiostream_kafka.protocol import compression
from aiostream_kafka.protocol.compression import CompressionType
from aiostream_kafka.telemetry.client_metrics import ProducerMetrics, Sample
from aiostream_kafka.telemetry.otlp import (
    DataPoint,
    MetricKind,
    MetricPoint,
    Temporality,
    encode_metrics_data,
)
from aiostream_kafka.telemetry.push import Subscription, _compress
from aiostream_kafka.telemetry.stats import ProducerStats, Window

NOW = 1_750_000_000_123_456_789


def test_metrics_data_round_trip() -> None:
    data = encode_metrics_data(
        {"client_id": "c1", "client_software_name": "aiostream-kafka"},
        [
            MetricPoint(
                "org.apache.kafka.producer.record.send.total",
                MetricKind.SUM,
                [DataPoint(1234, NOW, NOW - 10**9)],
                description="sent",
                unit="1",
                temporality=Temporality.CUMULATIVE,
            ),
            MetricPoint(
                "org.apache.kafka.producer.node.request.latency.avg",
                MetricKind.GAUGE,
                [
                    DataPoint(2.5, NOW, attributes={"node_id": "1"}),
                    DataPoint(7.25, NOW, attributes={"node_id": "2"}),
                ],
                unit="ms",
            ),
            MetricPoint(
                "neg",
                MetricKind.SUM,
                [DataPoint(-3, NOW)],
                temporality=Temporality.DELTA,
                monotonic=False,
            ),
        ],
        scope_name="aiostream-kafka",
        scope_version="9.9",
    )
    decoded = decode_metrics_data(data)
    assert decoded.resource == {"client_id": "c1", "client_software_name": "aiostream-kafka"}
    assert (decoded.scope_name, decoded.scope_version) == ("aiostream-kafka", "9.9")
    total = decoded.metrics["org.apache.kafka.producer.record.send.total"]
    assert (total.kind, total.unit, total.description) == ("sum", "1", "sent")
    assert total.temporality == 2 and total.monotonic
    (point,) = total.points
    assert (point.value, point.time_unix_nano, point.start_time_unix_nano) == (
        1234,
        NOW,
        NOW - 10**9,
    )
    assert isinstance(point.value, int)
    latency = decoded.metrics["org.apache.kafka.producer.node.request.latency.avg"]
    assert latency.kind == "gauge"
    assert [(p.value, p.attributes) for p in latency.points] == [
        (2.5, {"node_id": "1"}),
        (7.25, {"node_id": "2"}),
    ]
    assert latency.points[0].start_time_unix_nano == 0  # not written for gauges
    neg = decoded.metrics["neg"]
    assert neg.points[0].value == -3 and neg.temporality == 1 and not neg.monotonic


def test_field_numbers_are_opentelemetry_protos() -> None:
    """The bytes at the top: MetricsData.resource_metrics = 1 (length-delimited), in it
    ResourceMetrics.resource = 1 and scope_metrics = 2."""
    data = encode_metrics_data({"a": "b"}, [])
    ((number, wire, inner),) = fields(data)
    assert (number, wire) == (1, 2)
    assert [(n, w) for n, w, _ in fields(inner)] == [(1, 2), (2, 2)]
    assert data[0] == 0x0A  # field 1, wire type 2


def test_a_value_of_every_size_round_trips() -> None:
    for value in (0, 1, 127, 128, 2**31, 2**62, -(2**63), 0.0, -1.5, math.pi, 1e300):
        data = encode_metrics_data(
            {}, [MetricPoint("m", MetricKind.GAUGE, [DataPoint(value, NOW)])]
        )
        assert decode_metrics_data(data).metrics["m"].points[0].value == value


def test_unicode_strings() -> None:
    data = encode_metrics_data({"client_id": "Zürich-✓" * 30}, [])
    assert decode_metrics_data(data).resource["client_id"] == "Zürich-✓" * 30


def test_requested_metrics_prefix_match() -> None:
    def sub(requested: tuple[str, ...]) -> Subscription:
        return Subscription(1, (), 1000, 1 << 20, False, requested)

    assert not sub(()).wants_any  # an empty list: no metric
    assert not sub(()).wants("org.apache.kafka.producer.record.send.total")
    everything = sub(("",))  # one empty string: every metric
    assert everything.wants_any and everything.wants("anything")
    producer = sub(("org.apache.kafka.producer.",))
    assert producer.wants("org.apache.kafka.producer.record.queue.time.avg")
    assert not producer.wants("org.apache.kafka.consumer.fetch.manager.fetch.total")
    exact = sub(("org.apache.kafka.producer.record.send.total", "org.apache.kafka.consumer.c"))
    assert exact.wants("org.apache.kafka.producer.record.send.total")
    assert exact.wants("org.apache.kafka.consumer.coordinator.commit.total")
    assert not exact.wants("org.apache.kafka.producer.record.error.total")


def test_compression_takes_the_first_accepted_codec_available() -> None:
    payload = encode_metrics_data({"client_id": "x"}, []) * 20
    assert _compress(payload, ()) == (CompressionType.NONE, payload)
    assert _compress(payload, (0, 4)) == (CompressionType.NONE, payload)  # NONE first
    codec, data = _compress(payload, (99, int(CompressionType.GZIP), int(CompressionType.ZSTD)))
    assert codec is CompressionType.GZIP
    assert compression.decompress(codec, data) == payload


def test_window_average_and_maximum_per_interval() -> None:
    window = Window()
    assert window.take() == (0, 0.0, 0.0)
    for value in (3.0, 9.0, 6.0):
        window.record(value)
    assert window.take() == (3, 6.0, 9.0)
    assert window.take() == (0, 0.0, 0.0)  # a new window


def test_producer_metrics_names_values_and_sparse_windows() -> None:
    stats = ProducerStats()
    created = [3]
    metrics = ProducerMetrics(stats, lambda: created[0])
    stats.records_sent = 500
    stats.record_errors = 2
    stats.queue_time.record(4.0)
    stats.queue_time.record(8.0)
    stats.throttle_time.record(0)
    stats.latency(1).record(10.0)
    stats.latency(2).record(30.0)
    by_name: dict[str, list[Sample]] = {}
    for sample in metrics.collect():
        by_name.setdefault(sample.name, []).append(sample)
    p = "org.apache.kafka.producer."

    def value(name: str) -> float:
        (sample,) = by_name[p + name]
        return sample.value

    assert value("record.send.total") == 500
    assert value("record.error.total") == 2
    assert value("connection.creation.total") == 3
    assert (value("record.queue.time.avg"), value("record.queue.time.max")) == (6.0, 8.0)
    assert (value("request.latency.avg"), value("request.latency.max")) == (20.0, 30.0)
    nodes = {s.attributes["node_id"]: s.value for s in by_name[p + "node.request.latency.max"]}
    assert nodes == {"1": 10.0, "2": 30.0}
    assert by_name[p + "record.send.total"][0].kind is MetricKind.SUM
    assert by_name[p + "record.queue.time.avg"][0].kind is MetricKind.GAUGE
    # Nothing observed since: the windows' gauges are left out, the sums stay.
    again = {s.name for s in metrics.collect()}
    assert p + "record.queue.time.avg" not in again
    assert p + "node.request.latency.avg" not in again
    assert p + "record.send.total" in again
