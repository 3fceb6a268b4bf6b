"""What the clients record for their pushed metrics (KIP-714): windows of observations
whose average and maximum are reported and reset at each push, and the producer's
counters. Recording is an attribute update or two, off the per-record paths (per batch,
per request)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ProducerStats", "Window", "keyed_window"]


class Window:
    """Observations since the last :meth:`take`: how many, their sum and their maximum
    (Java's ``-avg``/``-max`` sensors over one push interval)."""

    __slots__ = ("count", "max", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def record(self, value: float) -> None:
        """Add one observation."""
        self.count += 1
        self.total += value
        if self.count == 1 or value > self.max:
            self.max = value

    def take(self) -> tuple[int, float, float]:
        """Return ``(count, average, maximum)`` of the observations and start a new
        window; average and maximum are 0.0 when there were none."""
        count, total, top = self.count, self.total, self.max
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        return count, (total / count if count else 0.0), top


def keyed_window(windows: dict[int, Window], key: int) -> Window:
    """The window of ``key`` (a broker node id) in ``windows``, added when missing."""
    window = windows.get(key)
    if window is None:
        window = windows[key] = Window()
    return window


@dataclass(slots=True)
class ProducerStats:
    """The producer sender's counters (cumulative) and windows (per push)."""

    #: Records put in Produce requests (a retried batch counts again, as Java's
    #: ``record-send-total``).
    records_sent: int = 0
    #: Records that failed for good.
    record_errors: int = 0
    #: Records whose batch was queued again to be retried.
    record_retries: int = 0
    #: Produce requests sent.
    requests: int = 0
    #: Record-batch bytes put in Produce requests.
    bytes_sent: int = 0
    #: Milliseconds from a batch's creation to its first send.
    queue_time: Window = field(default_factory=Window)
    #: ``throttle_time_ms`` of every Produce response.
    throttle_time: Window = field(default_factory=Window)
    #: Milliseconds from a Produce request's send to its answer, per broker node id.
    request_latency: dict[int, Window] = field(default_factory=dict)

    def latency(self, node: int) -> Window:
        """The request-latency window of broker ``node``."""
        return keyed_window(self.request_latency, node)
