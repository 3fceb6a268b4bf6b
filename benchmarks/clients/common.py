"""Helpers shared by the client adapters (all of them measure the same way)."""

from __future__ import annotations

import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any


class Unsupported(Exception):
    """The client has no equivalent of this scenario."""


_STAMP = b"L"


def stamp(index: int, size: int) -> bytes:
    """A value of ``size`` bytes that carries its sequence number."""
    head = _STAMP + struct.pack(">Q", index)
    return head + b"A" * max(0, size - len(head))


def unstamp(value: bytes | None) -> int:
    """The sequence number of a :func:`stamp` value, or -1 for any other value."""
    if not value or value[:1] != _STAMP or len(value) < 9:
        return -1
    return int(struct.unpack_from(">Q", value, 1)[0])


def closed_loop_value(index: int, size: int) -> bytes:
    """What ``EndToEndLatency`` sends: ``size`` copies of one random uppercase letter."""
    return bytes([65 + (index * 7919) % 26]) * size


@dataclass
class Schedule:
    times: list[float]  # perf_counter() when each record is due


def rate_schedule(spec: dict[str, Any]) -> Schedule:
    """Send times at ``spec['rate']`` records/s: ``warmup`` records, then ``seconds``."""
    count = spec["warmup"] + int(spec["rate"] * spec["seconds"])
    start = time.perf_counter() + 0.05
    step = 1.0 / spec["rate"]
    return Schedule([start + i * step for i in range(count)])


class LatencyRecorder:
    """End-to-end latency from each record's *scheduled* send time to its receipt (so a
    client that falls behind the offered rate is charged for it: no coordinated
    omission)."""

    def __init__(self, schedule: Schedule, warmup: int) -> None:
        self.schedule = schedule
        self.warmup = warmup
        self.received: dict[int, float] = {}

    def receive(self, index: int, now: float) -> bool:
        """Note record ``index`` received at ``now``; True once every record is in."""
        if 0 <= index < len(self.schedule.times):
            self.received.setdefault(index, now - self.schedule.times[index])
        return len(self.received) >= len(self.schedule.times)

    def result(self) -> dict[str, Any]:
        measured = [v * 1000 for i, v in self.received.items() if i >= self.warmup]
        out = percentiles(measured)
        out["offered_rate"] = len(self.schedule.times) / (
            self.schedule.times[-1] - self.schedule.times[0] + 1e-9
        )
        out["lost"] = len(self.schedule.times) - len(self.received)
        return out


def percentiles(latencies_ms: list[float], prefix: str = "") -> dict[str, Any]:
    """p50/p99/p99.9 picked as ``EndToEndLatency`` does (``sorted[int(n * q)]``)."""
    if not latencies_ms:
        return {f"{prefix}samples": 0}
    s = sorted(latencies_ms)
    n = len(s)

    def pick(q: float) -> float:
        return s[min(n - 1, int(n * q))]

    return {
        f"{prefix}samples": n,
        f"{prefix}p50_ms": pick(0.5),
        f"{prefix}p99_ms": pick(0.99),
        f"{prefix}p999_ms": pick(0.999),
        f"{prefix}avg_ms": sum(s) / n,
        f"{prefix}max_ms": s[-1],
    }


class PausePicker:
    """Seed 001's choice of the one resumed partition, at random among the partitions that
    still hold records (so that no run waits on a drained partition)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import random

        self.rng = random.Random(spec["seed"])
        self.left = dict.fromkeys(range(spec["partitions"]), spec["per_partition"])
        self.stalls = 0  # takes that found nothing within take_timeout

    def pick(self) -> int | None:
        live = [p for p, n in self.left.items() if n > 0]
        return self.rng.choice(live) if live else None

    def took(self, partition: int) -> None:
        self.left[partition] -= 1

    def result(self, records: int, seconds: float, delivered: int) -> dict[str, Any]:
        return {
            "records": records,
            "seconds": seconds,
            "drained": not any(n > 0 for n in self.left.values()),
            "stalls": self.stalls,
            "bytes_delivered": delivered,
        }


# -- the rebalance scenario's members ------------------------------------------------------


def stop_on_stdin() -> threading.Event:
    """An event set when the driver writes ``stop`` to this process's stdin (or closes it:
    a driver gone is a stop too), read by a daemon thread."""
    stop = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch, name="stop-on-stdin", daemon=True).start()
    return stop


class MemberLog:
    """What one group member of the rebalance scenario saw, as text lines in a file the
    driver reads (``benchmarks.rebalance.read_member_log``): ``S <t>`` when the member
    creates its consumer, ``R <t> <partition> <offset> <seq>`` per record handed to the
    application (``t`` the ``time.monotonic()`` of the hand-over: one clock for every
    process of the machine), ``C <t>`` once its consumer is closed."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "w", buffering=1 << 16)  # closed by closed()
        self.records = 0
        self.first_at: float | None = None
        self.started_at: float | None = None

    def start(self) -> None:
        self.started_at = time.monotonic()
        self.file.write(f"S {self.started_at:.6f}\n")
        self.file.flush()

    def batch(self, at: float, records: list[tuple[int, int, int]]) -> None:
        """Records ``(partition, offset, seq)`` handed over together at ``at``."""
        if not records:
            return
        if self.first_at is None:
            self.first_at = at
        self.records += len(records)
        stamp_text = f"{at:.6f}"
        self.file.write("".join(f"R {stamp_text} {p} {o} {s}\n" for p, o, s in records))
        self.file.flush()

    def closed(self) -> dict[str, Any]:
        now = time.monotonic()
        self.file.write(f"C {now:.6f}\n")
        self.file.close()
        return {"records": self.records, "started_at": self.started_at, "closed_at": now}
