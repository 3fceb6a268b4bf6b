"""A minimal protobuf writer for the OTLP metrics messages KIP-714 pushes.

``PushTelemetry.Metrics`` holds an OpenTelemetry ``MetricsData`` message (OTLP v1,
protobuf). We need only a small part of it: one ``ResourceMetrics`` with the resource's
string attributes, one ``ScopeMetrics``, and ``Metric``s whose data is a ``Sum`` or a
``Gauge`` of ``NumberDataPoint``s with string attributes. The field numbers are those of
opentelemetry-proto's ``metrics/v1/metrics.proto``, ``common/v1/common.proto`` and
``resource/v1/resource.proto``; the wire format is protobuf's (varint keys, length-delimited
sub-messages, fixed64 times, doubles and sfixed64 integers little-endian). Sans-IO, no
protobuf dependency.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

__all__ = [
    "DataPoint",
    "MetricKind",
    "MetricPoint",
    "Temporality",
    "encode_metrics_data",
]

# Wire types.
_VARINT = 0
_FIXED64 = 1
_LEN = 2

_FIXED64_LE = struct.Struct("<Q")
_SFIXED64_LE = struct.Struct("<q")
_DOUBLE_LE = struct.Struct("<d")

# Field numbers (opentelemetry-proto v1).
_METRICS_DATA_RESOURCE_METRICS = 1
_RESOURCE_METRICS_RESOURCE = 1
_RESOURCE_METRICS_SCOPE_METRICS = 2
_RESOURCE_ATTRIBUTES = 1
_SCOPE_METRICS_SCOPE = 1
_SCOPE_METRICS_METRICS = 2
_SCOPE_NAME = 1
_SCOPE_VERSION = 2
_METRIC_NAME = 1
_METRIC_DESCRIPTION = 2
_METRIC_UNIT = 3
_METRIC_GAUGE = 5
_METRIC_SUM = 7
_GAUGE_DATA_POINTS = 1
_SUM_DATA_POINTS = 1
_SUM_TEMPORALITY = 2
_SUM_IS_MONOTONIC = 3
_POINT_START_TIME = 2
_POINT_TIME = 3
_POINT_AS_DOUBLE = 4
_POINT_AS_INT = 6
_POINT_ATTRIBUTES = 7
_KEY_VALUE_KEY = 1
_KEY_VALUE_VALUE = 2
_ANY_VALUE_STRING = 1


class MetricKind(IntEnum):
    """How a metric aggregates: a ``Sum`` (a counter) or a ``Gauge`` (a current value)."""

    SUM = 1
    GAUGE = 2


class Temporality(IntEnum):
    """OTLP ``AggregationTemporality`` of a ``Sum``."""

    DELTA = 1
    CUMULATIVE = 2


@dataclass(frozen=True, slots=True)
class DataPoint:
    """One ``NumberDataPoint``: the value (an int is sent as ``as_int``, a float as
    ``as_double``), its string attributes and its times (UNIX ns; a start time of 0 is
    left out)."""

    value: int | float
    time_unix_nano: int
    start_time_unix_nano: int = 0
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One ``Metric`` with its points; ``temporality`` and ``monotonic`` apply to sums."""

    name: str
    kind: MetricKind
    points: Sequence[DataPoint]
    description: str = ""
    unit: str = ""
    temporality: Temporality = Temporality.CUMULATIVE
    monotonic: bool = True


def _varint(value: int, out: bytearray) -> None:
    if value < 0:
        value += 1 << 64  # int64 fields: two's complement in ten bytes
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _key(number: int, wire_type: int, out: bytearray) -> None:
    _varint((number << 3) | wire_type, out)


def _bytes_field(number: int, payload: bytes | bytearray, out: bytearray) -> None:
    _key(number, _LEN, out)
    _varint(len(payload), out)
    out += payload


def _string_field(number: int, text: str, out: bytearray) -> None:
    if text:  # proto3: an empty string is the default and is not written
        _bytes_field(number, text.encode("utf-8"), out)


def _key_value(key: str, value: str) -> bytearray:
    any_value = bytearray()
    _bytes_field(_ANY_VALUE_STRING, value.encode("utf-8"), any_value)
    out = bytearray()
    _bytes_field(_KEY_VALUE_KEY, key.encode("utf-8"), out)
    _bytes_field(_KEY_VALUE_VALUE, any_value, out)
    return out


def _attributes(number: int, attributes: Mapping[str, str], out: bytearray) -> None:
    for key, value in attributes.items():
        _bytes_field(number, _key_value(key, value), out)


def _data_point(point: DataPoint) -> bytearray:
    out = bytearray()
    if point.start_time_unix_nano:
        _key(_POINT_START_TIME, _FIXED64, out)
        out += _FIXED64_LE.pack(point.start_time_unix_nano)
    _key(_POINT_TIME, _FIXED64, out)
    out += _FIXED64_LE.pack(point.time_unix_nano)
    value = point.value
    if isinstance(value, bool) or not isinstance(value, int):
        _key(_POINT_AS_DOUBLE, _FIXED64, out)
        out += _DOUBLE_LE.pack(float(value))
    else:
        _key(_POINT_AS_INT, _FIXED64, out)
        out += _SFIXED64_LE.pack(value)
    _attributes(_POINT_ATTRIBUTES, point.attributes, out)
    return out


def _metric(metric: MetricPoint) -> bytearray:
    data = bytearray()
    if metric.kind is MetricKind.SUM:
        for point in metric.points:
            _bytes_field(_SUM_DATA_POINTS, _data_point(point), data)
        _key(_SUM_TEMPORALITY, _VARINT, data)
        _varint(int(metric.temporality), data)
        if metric.monotonic:
            _key(_SUM_IS_MONOTONIC, _VARINT, data)
            _varint(1, data)
    else:
        for point in metric.points:
            _bytes_field(_GAUGE_DATA_POINTS, _data_point(point), data)
    out = bytearray()
    _string_field(_METRIC_NAME, metric.name, out)
    _string_field(_METRIC_DESCRIPTION, metric.description, out)
    _string_field(_METRIC_UNIT, metric.unit, out)
    _bytes_field(_METRIC_SUM if metric.kind is MetricKind.SUM else _METRIC_GAUGE, data, out)
    return out


def encode_metrics_data(
    resource: Mapping[str, str],
    metrics: Iterable[MetricPoint],
    *,
    scope_name: str = "",
    scope_version: str = "",
) -> bytes:
    """Encode one OTLP ``MetricsData``: a ``ResourceMetrics`` with ``resource`` as its
    attributes and one ``ScopeMetrics`` holding ``metrics``.

    Returns:
        The protobuf bytes (uncompressed).
    """
    scope = bytearray()
    _string_field(_SCOPE_NAME, scope_name, scope)
    _string_field(_SCOPE_VERSION, scope_version, scope)
    scope_metrics = bytearray()
    _bytes_field(_SCOPE_METRICS_SCOPE, scope, scope_metrics)
    for metric in metrics:
        _bytes_field(_SCOPE_METRICS_METRICS, _metric(metric), scope_metrics)
    resource_message = bytearray()
    _attributes(_RESOURCE_ATTRIBUTES, resource, resource_message)
    resource_metrics = bytearray()
    _bytes_field(_RESOURCE_METRICS_RESOURCE, resource_message, resource_metrics)
    _bytes_field(_RESOURCE_METRICS_SCOPE_METRICS, scope_metrics, resource_metrics)
    out = bytearray()
    _bytes_field(_METRICS_DATA_RESOURCE_METRICS, resource_metrics, out)
    return bytes(out)
