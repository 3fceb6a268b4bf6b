"""Seed 001 (KAFKA-7548): one record at a time with 9 of 10 partitions paused at random."""

from __future__ import annotations

from typing import Any

from benchmarks import settings
from benchmarks.runner import Case, Context, Metric

FAMILY = "pause"
TITLE = "Pause/resume back-pressure (seed 001, KAFKA-7548)"
ABOUT = (
    "{partitions} partitions of {size} B values ({records:,} records, written once). "
    "Before every take of one record, 9 partitions are paused at random and the 10th "
    "resumed (at random among those not yet read to the end), for {seconds:g} s; a take "
    "that finds nothing within 1 s counts as a stall and the next take starts. "
    "Every client talks to the broker through the same Kafka-aware TCP proxy "
    "(`benchmarks/kafka_proxy.py`), which counts Fetch requests from the api_key of each "
    "request header in the client-to-broker stream and the bytes of the Fetch responses "
    "sent back (whole frames: headers, partition metadata and record batches); it rewrites "
    "the broker addresses in Metadata responses so that every connection goes through it. "
    "*Records* is how many records were delivered in the time; *fetches / 1k records* and "
    "*bytes fetched / byte delivered* show data fetched and thrown away (1.0 would be "
    "none; framing alone adds a few per cent). Ours: `pause()`/`resume()` + `stream()`; "
    "aiokafka: `pause()`/`resume()` + `getone()`; confluent-kafka: `pause()`/`resume()` + "
    "`poll()`. No Java perf tool does this (no Java row)."
)

METRICS = [
    Metric("records", "records", True),
    Metric("records_per_s", "records/s", True),
    Metric("fetches_per_1k", "fetches / 1k records", False, "{:,.1f}"),
    Metric("fetched_per_delivered", "bytes fetched / byte delivered", False, "{:,.2f}"),
]

SIZE = 1024


def _extract(result: dict[str, Any]) -> dict[str, float]:
    proxy = result["proxy"]
    records = max(1, result["records"])
    return {
        "records": result["records"],
        "records_per_s": result["records"] / max(result["seconds"], 1e-9),
        "fetches_per_1k": proxy["fetch_requests"] * 1000 / records,
        "fetch_requests": proxy["fetch_requests"],
        "fetched_per_delivered": proxy["fetch_response_bytes"] / max(1, result["bytes_delivered"]),
    }


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    topic = await ctx.create_topic("pause", settings.PAUSE_PARTITIONS)
    await ctx.fill(topic, p.pause_records, SIZE, settings.PAUSE_PARTITIONS)
    ctx.extra.setdefault("topics_to_delete", []).append(topic)
    return [
        Case(
            family=FAMILY,
            name=f"{settings.PAUSE_PARTITIONS} partitions",
            scenario="pause",
            spec={
                "size": SIZE,
                "partitions": settings.PAUSE_PARTITIONS,
                "seconds": p.pause_seconds,
                "per_partition": p.pause_records // settings.PAUSE_PARTITIONS,
                "take_timeout": 1.0,
            },
            metrics=METRICS,
            extract=_extract,
            shared_topic=topic,
            proxied=True,
            clients=["ours", "ours_pure", "aiokafka", "confluent"],
        )
    ]


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        partitions=settings.PAUSE_PARTITIONS,
        size=SIZE,
        records=profile.pause_records,
        seconds=profile.pause_seconds,
    )
