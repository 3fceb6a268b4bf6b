"""The FastAPI pattern: many concurrent tasks, each awaiting one send."""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks import settings
from benchmarks.runner import Case, Context, Metric

FAMILY = "fastapi"
TITLE = "FastAPI pattern: awaited sends, 1,000 concurrent tasks or one at a time"
ABOUT = (
    "What a web service does per request: {tasks:,} tasks are started at once, each sends "
    "one {size} B record and awaits its acknowledgement; when all are done the next "
    "{tasks:,} start ({bursts} bursts, after one warm-up send). The *sequential* case awaits "
    "{sequential:,} sends one after another in one task (aiokafka's `send_and_wait` in a "
    "loop), where a producer that waits out `linger.ms` for each record is slow. "
    "Producer settings as in the "
    "produce scenario (`acks=all`, `linger.ms=5`, `batch.size=16384`, idempotence on). "
    "Ours: `await producer.send(...)`. aiokafka: `await producer.send_and_wait(...)`. "
    "confluent-kafka, the closest equivalent: its classic `Producer` bridged to asyncio "
    "(the pattern of its asyncio example): `produce(on_delivery=...)` whose callback "
    "resolves an asyncio future through `call_soon_threadsafe`, a thread looping "
    "`poll(0.05)`, and each task awaits its future. (Its newer "
    "`confluent_kafka.aio.AIOProducer` hands messages to librdkafka 1,000 at a time or "
    "after 1 s and serves delivery reports only then, so one awaited send can wait up to "
    "1 s; it is not used here.) Java has no asyncio API (no row)."
)

METRICS = [
    Metric("records_per_s", "records/s", True),
    Metric("send_p50_ms", "send p50 ms", False, "{:,.1f}"),
    Metric("send_p99_ms", "send p99 ms", False, "{:,.1f}"),
]

SIZE = 100


def _extract(result: dict[str, Any]) -> dict[str, float]:
    return {
        "records_per_s": result["records"] / result["seconds"],
        "send_p50_ms": result["send_p50_ms"],
        "send_p99_ms": result["send_p99_ms"],
    }


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    return [
        Case(
            family=FAMILY,
            name=f"{p.fastapi_tasks:,} tasks",
            scenario="fastapi",
            spec={"size": SIZE, "tasks": p.fastapi_tasks, "bursts": p.fastapi_bursts},
            metrics=METRICS,
            extract=_extract,
            topic=partial(ctx.create_topic, "fastapi", settings.PRODUCE_PARTITIONS),
            cleanup=ctx.delete_topic,
            clients=["ours", "ours_pure", "aiokafka", "confluent"],
        ),
        Case(
            family=FAMILY,
            name="sequential",
            scenario="fastapi",
            spec={"size": SIZE, "tasks": 1, "bursts": p.sequential_sends},
            metrics=METRICS,
            extract=_extract,
            topic=partial(ctx.create_topic, "sequential", settings.PRODUCE_PARTITIONS),
            cleanup=ctx.delete_topic,
            clients=["ours", "ours_pure", "aiokafka", "confluent"],
        ),
    ]


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        tasks=profile.fastapi_tasks,
        size=SIZE,
        bursts=profile.fastapi_bursts,
        sequential=profile.sequential_sends,
    )
