"""The KIP-714 client metrics of each client, from what the clients already count.

Names are the KIP's (``org.apache.kafka.<client>.<group>.<metric>``: Java's metric name
with its group, dashes made dots). The standard ones of the KIP's tables we can compute
honestly, plus a few of Java's that count the same things here (``record.send.total``...).
What is not emitted, and why, is in docs/concepts/observability.md.

A collector is asked once per push; the ``-avg``/``-max`` gauges cover the observations
since the previous push (a window with no observation is left out: sparse metrics, as
the KIP allows), the ``-rate`` gauges the time since then, and sums are cumulative (the
pusher turns them into deltas when the broker asks for delta temporality).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiostream_kafka.telemetry.otlp import MetricKind
from aiostream_kafka.telemetry.stats import ProducerStats, Window

__all__ = [
    "CommitCounters",
    "ConnectionMetrics",
    "ConsumerMetrics",
    "FetchCounters",
    "MetricsCollector",
    "ProducerMetrics",
    "Sample",
]

PRODUCER_PREFIX = "org.apache.kafka.producer."
CONSUMER_PREFIX = "org.apache.kafka.consumer."


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric (and attribute set) at a push."""

    name: str
    kind: MetricKind
    value: int | float
    unit: str = ""
    description: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)


class MetricsCollector(Protocol):
    """What the pusher asks at each push."""

    def collect(self) -> list[Sample]:
        """The metrics' values now."""
        ...


class CommitCounters(Protocol):
    """A group's commit counters the metrics read (``GroupOffsets``)."""

    commit_latency: Window
    commits: int


class FetchCounters(Protocol):
    """The consumer's fetch counters the metrics read (``FetchMetrics``)."""

    fetch_requests: int
    fetched_records: int
    fetched_bytes: int


def _window(
    out: list[Sample],
    name: str,
    window: Window,
    unit: str,
    what: str,
    attributes: Mapping[str, str] | None = None,
) -> None:
    count, average, top = window.take()
    if not count:
        return
    attrs = dict(attributes or {})
    gauge = MetricKind.GAUGE
    out.append(Sample(f"{name}.avg", gauge, average, unit, f"The average {what}.", attrs))
    out.append(Sample(f"{name}.max", gauge, top, unit, f"The maximum {what}.", attrs))


def _per_node(out: list[Sample], name: str, windows: Mapping[int, Window], what: str) -> Window:
    """``name.avg``/``.max`` per broker node (attribute ``node_id``); returns the windows
    merged (taken before they are emptied)."""
    merged = Window()
    for node, window in sorted(windows.items()):
        if window.count:
            if not merged.count or window.max > merged.max:
                merged.max = window.max
            merged.count += window.count
            merged.total += window.total
        _window(out, name, window, "ms", f"{what} in ms for a node", {"node_id": str(node)})
    return merged


def _sum(out: list[Sample], name: str, value: int, unit: str, what: str) -> None:
    out.append(Sample(name, MetricKind.SUM, value, unit, what))


class _Connections:
    """``connection.creation.total`` and ``.rate`` from a connection pool's counter."""

    def __init__(self, prefix: str, created: Callable[[], int]) -> None:
        self.prefix = prefix
        self._created = created
        self._last = 0
        self._last_at = time.monotonic()

    def collect(self, out: list[Sample]) -> None:
        now = time.monotonic()
        created = self._created()
        elapsed = now - self._last_at
        rate = (created - self._last) / elapsed if elapsed > 0 else 0.0
        self._last, self._last_at = created, now
        out.append(
            Sample(
                f"{self.prefix}connection.creation.rate",
                MetricKind.GAUGE,
                rate,
                "1/s",
                "The rate of connections established per second.",
            )
        )
        _sum(
            out,
            f"{self.prefix}connection.creation.total",
            created,
            "1",
            "The total number of connections established.",
        )


class ConnectionMetrics:
    """Only ``<prefix>connection.creation.*`` (a client with no other metric here)."""

    def __init__(self, prefix: str, connections_created: Callable[[], int]) -> None:
        self._connections = _Connections(prefix, connections_created)

    def collect(self) -> list[Sample]:
        """The metrics' values now."""
        out: list[Sample] = []
        self._connections.collect(out)
        return out


class ProducerMetrics:
    """The producer's pushed metrics, from its sender's :class:`ProducerStats` and its
    connection pool."""

    def __init__(self, stats: ProducerStats, connections_created: Callable[[], int]) -> None:
        self._stats = stats
        self._connections = _Connections(PRODUCER_PREFIX, connections_created)

    def collect(self) -> list[Sample]:
        """The metrics' values now (the windows start again)."""
        p = PRODUCER_PREFIX
        stats = self._stats
        out: list[Sample] = []
        self._connections.collect(out)
        everywhere = _per_node(
            out, f"{p}node.request.latency", stats.request_latency, "Produce request latency"
        )
        _window(out, f"{p}request.latency", everywhere, "ms", "Produce request latency in ms")
        _window(
            out,
            f"{p}produce.throttle.time",
            stats.throttle_time,
            "ms",
            "throttle time in ms of the Produce responses",
        )
        _window(
            out,
            f"{p}record.queue.time",
            stats.queue_time,
            "ms",
            "time in ms a record batch spent in the send buffer before it was sent",
        )
        _sum(out, f"{p}record.send.total", stats.records_sent, "1",
             "The total number of records sent (a retried record counts again).")  # fmt: skip
        _sum(out, f"{p}record.error.total", stats.record_errors, "1",
             "The total number of records whose send failed.")  # fmt: skip
        _sum(out, f"{p}record.retry.total", stats.record_retries, "1",
             "The total number of retried record sends.")  # fmt: skip
        _sum(out, f"{p}request.total", stats.requests, "1",
             "The total number of Produce requests sent.")  # fmt: skip
        _sum(out, f"{p}outgoing.byte.total", stats.bytes_sent, "By",
             "The total number of record-batch bytes sent in Produce requests.")  # fmt: skip
        return out


class ConsumerMetrics:
    """The consumer's pushed metrics, from its fetch counters and fetch latencies, its
    group's commits and assignment, and its connection pool."""

    def __init__(
        self,
        fetch: FetchCounters,
        fetch_latency: dict[int, Window],
        connections_created: Callable[[], int],
        assigned_partitions: Callable[[], int] | None = None,
        commits: Callable[[], CommitCounters] | None = None,
    ) -> None:
        self._fetch = fetch
        self._fetch_latency = fetch_latency
        self._assigned = assigned_partitions
        self._commits = commits
        self._connections = _Connections(CONSUMER_PREFIX, connections_created)

    def collect(self) -> list[Sample]:
        """The metrics' values now (the windows start again)."""
        c = CONSUMER_PREFIX
        out: list[Sample] = []
        self._connections.collect(out)
        everywhere = _per_node(
            out, f"{c}node.request.latency", self._fetch_latency, "Fetch request latency"
        )
        _window(out, f"{c}fetch.manager.fetch.latency", everywhere, "ms", "fetch latency in ms")
        fetch = self._fetch
        _sum(out, f"{c}fetch.manager.fetch.total", fetch.fetch_requests, "1",
             "The total number of Fetch requests.")  # fmt: skip
        _sum(out, f"{c}fetch.manager.records.consumed.total", fetch.fetched_records, "1",
             "The total number of records fetched (admitted to the prefetch buffer).")  # fmt: skip
        _sum(out, f"{c}fetch.manager.bytes.consumed.total", fetch.fetched_bytes, "By",
             "The total number of record-batch bytes fetched (decompressed).")  # fmt: skip
        if self._assigned is not None:
            out.append(
                Sample(
                    f"{c}coordinator.assigned.partitions",
                    MetricKind.GAUGE,
                    self._assigned(),
                    "1",
                    "The number of partitions currently assigned to this consumer.",
                )
            )
        if self._commits is not None:
            commits = self._commits()
            _window(out, f"{c}coordinator.commit.latency", commits.commit_latency, "ms",
                    "time in ms an offset commit took")  # fmt: skip
            _sum(out, f"{c}coordinator.commit.total", commits.commits, "1",
                 "The total number of offset commits.")  # fmt: skip
        return out
