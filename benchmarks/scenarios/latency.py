"""End-to-end latency: at a fixed offered rate, and closed-loop (Java's EndToEndLatency)."""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks import settings
from benchmarks.runner import Case, Context, Metric

FAMILY = "latency"
TITLE = "End-to-end latency"
ABOUT = (
    "Producer and consumer in one process, a fresh 1-partition topic per run, {size} B "
    "values, `acks=all`, producer `linger.ms=0`.\n\n"
    "* **fixed rate**: {rate:,} records/s for {seconds:g} s after {warmup} warm-up records; "
    "latency runs from each record's *scheduled* send time to its arrival at the consumer "
    "(a client that falls behind is charged for it). Consumer `fetch.max.wait.ms=500` (a "
    "fetch returns as soon as a byte is there). The Java tools cannot offer a fixed rate "
    "end to end, so Java has no row here.\n"
    "* **closed loop**: what Java's `EndToEndLatency` does, {closed:,} records: send one "
    "record, wait for its acknowledgement, then read it back; the next record only after. "
    "Consumer `fetch.max.wait.ms=0` (as the tool hard-codes). Every record is counted, the "
    "first too (the tool has no warm-up). The tool prints its percentiles in whole "
    "milliseconds, truncated, so Java's p50/p99/p99.9 are up to 1 ms low; the Python "
    "clients' are exact.\n\n"
    "Percentiles are picked the way `EndToEndLatency` does: `sorted[int(n * q)]`."
)

METRICS = [
    Metric("p50_ms", "p50 ms", False, "{:,.2f}"),
    Metric("p99_ms", "p99 ms", False, "{:,.2f}"),
    Metric("p999_ms", "p99.9 ms", False, "{:,.2f}"),
]

SIZE = 100


def _extract(result: dict[str, Any]) -> dict[str, float]:
    return {m.key: float(result[m.key]) for m in METRICS if m.key in result}


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    topic = partial(ctx.create_topic, "latency", settings.LATENCY_PARTITIONS)
    return [
        Case(
            family=FAMILY,
            name=f"{p.latency_rate:,}/s",
            scenario="latency_rate",
            spec={
                "size": SIZE,
                "rate": p.latency_rate,
                "seconds": p.latency_seconds,
                "warmup": p.latency_warmup_records,
            },
            metrics=METRICS,
            extract=_extract,
            topic=topic,
            cleanup=ctx.delete_topic,
            clients=["ours", "ours_pure", "aiokafka", "confluent"],
        ),
        Case(
            family=FAMILY,
            name="closed loop",
            scenario="latency_closed",
            spec={"size": SIZE, "records": p.latency_closed_records},
            metrics=METRICS,
            extract=_extract,
            topic=topic,
            cleanup=ctx.delete_topic,
        ),
    ]


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        size=SIZE,
        rate=profile.latency_rate,
        seconds=profile.latency_seconds,
        warmup=profile.latency_warmup_records,
        closed=profile.latency_closed_records,
    )
