"""A tiny protobuf reader for the tests of the KIP-714 push: decodes the OTLP
``MetricsData`` our encoder writes (and the broker hands to its telemetry plugin) into
plain Python values, independently of ``aiostream_kafka.telemetry.otlp``."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> list[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a message: ints for varints, bytes for
    length-delimited fields, raw 8 bytes for fixed64."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} at {pos}")
        out.append((number, wire, value))
    if pos != len(data):
        raise ValueError("truncated message")
    return out


def _attributes(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        kv = {n: v for n, _, v in fields(entry)}
        any_value = {n: v for n, _, v in fields(kv[2])}
        out[kv[1].decode()] = any_value[1].decode()
    return out


@dataclass
class Point:
    value: float | int
    time_unix_nano: int
    start_time_unix_nano: int
    attributes: dict[str, str]


@dataclass
class Metric:
    name: str
    description: str
    unit: str
    kind: str  # "sum" or "gauge"
    points: list[Point]
    temporality: int = 0
    monotonic: bool = False


@dataclass
class Decoded:
    resource: dict[str, str]
    scope_name: str
    scope_version: str
    metrics: dict[str, Metric] = field(default_factory=dict)


def _point(data: bytes) -> Point:
    value: float | int = 0
    start = time = 0
    attrs: list[bytes] = []
    for number, _, raw in fields(data):
        if number == 2:
            start = struct.unpack("<Q", raw)[0]
        elif number == 3:
            time = struct.unpack("<Q", raw)[0]
        elif number == 4:
            value = struct.unpack("<d", raw)[0]
        elif number == 6:
            value = struct.unpack("<q", raw)[0]
        elif number == 7:
            attrs.append(raw)
    return Point(value, time, start, _attributes(attrs))


def decode_metrics_data(data: bytes) -> Decoded:
    """Decode a ``MetricsData`` holding one ``ResourceMetrics`` with one ``ScopeMetrics``."""
    (resource_metrics,) = [v for n, _, v in fields(data) if n == 1]
    rm = fields(resource_metrics)
    (resource,) = [v for n, _, v in rm if n == 1]
    (scope_metrics,) = [v for n, _, v in rm if n == 2]
    resource_attrs = _attributes([v for n, _, v in fields(resource) if n == 1])
    sm = fields(scope_metrics)
    scope = {n: v for n, _, v in fields(next(v for n, _, v in sm if n == 1))}
    decoded = Decoded(resource_attrs, scope.get(1, b"").decode(), scope.get(2, b"").decode())
    for number, _, raw in sm:
        if number != 2:
            continue
        m = {n: v for n, _, v in fields(raw)}
        if 7 in m:
            body = fields(m[7])
            kind = "sum"
        else:
            body = fields(m[5])
            kind = "gauge"
        metric = Metric(
            name=m[1].decode(),
            description=m.get(2, b"").decode(),
            unit=m.get(3, b"").decode(),
            kind=kind,
            points=[_point(v) for n, _, v in body if n == 1],
            temporality=next((v for n, _, v in body if n == 2), 0) if kind == "sum" else 0,
            monotonic=bool(next((v for n, _, v in body if n == 3), 0)) if kind == "sum" else False,
        )
        decoded.metrics[metric.name] = metric
    return decoded
