"""Issue 29: share-consume throughput (members of one share group in separate processes),
and the locks a slow member holds beside a fast one. The driver and the analysis are
``benchmarks/share.py``."""

from __future__ import annotations

import math
from typing import Any

from benchmarks import settings
from benchmarks.runner import THROUGHPUT_METRICS, Case, Context, Metric, throughput

FAMILY = "share"
TITLE = "Share groups: share-consume throughput and a slow member's locks (issue 29)"
CLIENTS = ["ours", "confluent", "java"]
ABOUT = (
    "Share groups (KIP-932). One topic per value size and partition count is written once "
    "(confluent-kafka, uncompressed, round-robin over the partitions); every run reads it "
    "with a fresh share group whose group configs are set first with "
    "`incremental_alter_configs` on the GROUP resource: {configs}. The group's members "
    "are started together, each in its own process: ours `ShareConsumer` with its "
    "defaults (implicit acknowledgement, `max_prefetch_records=500`), `async for record in "
    "sc`; confluent-kafka {confluent}'s preview `ShareConsumer` with its defaults "
    "(implicit), `poll(0.1)` in a loop; Java `KafkaShareConsumer` with its defaults "
    "(implicit, `batch_optimized`), `poll(100 ms)` in a loop, one JVM per member "
    "(`benchmarks/java/ShareMember.java`, a small driver: the perf tool "
    "`ShareConsumerPerformance` runs its consumers as threads of one JVM and times them "
    "itself). Each member keeps the monotonic time at which each record is handed to the "
    "application; the clock runs from the first record any member received to the "
    "{{n}}-th of all (start-up and the group join are not timed). *Slow beside fast*: "
    "two members of one group on a fresh one-partition topic, one taking {delay} ms per "
    "record (a sleep), the other as fast as it can; once the group describes both as "
    "assigned, the driver writes {slow_records:,} stamped records (confluent-kafka), and "
    "the run lasts until every "
    "record was processed: the slow member's peak of records *held* (acquired and not yet "
    "processed, the one in hand included: ours `records_acquired` minus those processed; "
    "confluent-kafka and Java: the rest of the current `poll()` batch, so records their "
    "clients prefetched beyond it are not counted), how the records were split, and the "
    "time from the first record processed to the last new one. A record held longer than "
    "the lock (30 s by default) is delivered again."
)

SLOW_METRICS = [
    Metric("slow_peak_held", "slow member: peak records held", False),
    Metric("slow_processed", "records the slow member processed", False),
    Metric("seconds", "time to process all, s", False, "{:,.1f}"),
    Metric("redelivered", "records processed twice", False),
]


def _slow_extract(result: dict[str, Any]) -> dict[str, float]:
    return {m.key: float(result[m.key]) for m in SLOW_METRICS} | {
        "fast_processed": float(result["fast_processed"])
    }


def _spec(kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "group_configs": dict(settings.SHARE_GROUP_CONFIGS),
        "limit_s": settings.SHARE_SLOW_LIMIT_S if kind == "slow" else settings.SHARE_LIMIT_S,
        "close_timeout_s": 60.0,
        **extra,
    }


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    out = []
    for size in p.share_sizes:
        records = p.share_records[size]
        for partitions in p.share_partitions:
            topic = await ctx.create_topic(f"share-{size}-{partitions}", partitions)
            await ctx.fill(topic, records, size, partitions)
            ctx.extra.setdefault("topics_to_delete", []).append(topic)
            for members in p.share_members:
                out.append(
                    Case(
                        family=FAMILY,
                        name=f"{size} B, {partitions}p, {members} member"
                        + ("s" if members > 1 else ""),
                        scenario="share",
                        spec=_spec(
                            "throughput",
                            size=size,
                            partitions=partitions,
                            members=members,
                            records=records,
                        ),
                        metrics=THROUGHPUT_METRICS,
                        extract=lambda r, s=size: throughput(r, s),
                        shared_topic=topic,
                        clients=list(CLIENTS),
                    )
                )
    n = p.share_slow_records

    async def slow_topic() -> str:
        return await ctx.create_topic("share-slow", 1)

    out.append(
        Case(
            family=FAMILY,
            name=f"slow beside fast, {n:,} records",
            scenario="share",
            spec=_spec("slow", size=100, records=n, delay_ms=p.share_slow_delay_ms),
            metrics=SLOW_METRICS,
            extract=_slow_extract,
            topic=slow_topic,  # fresh per run: its records are written once both joined
            cleanup=ctx.delete_topic,
            clients=list(CLIENTS),
        )
    )
    return out


def about(profile: settings.Profile) -> str:
    import confluent_kafka

    configs = ", ".join(f"`{k}={v}`" for k, v in settings.SHARE_GROUP_CONFIGS.items())
    counts = " / ".join(f"{profile.share_records[s]:,} ({s} B)" for s in profile.share_sizes)
    return ABOUT.format(
        configs=configs,
        confluent=confluent_kafka.version()[0],
        slow_records=profile.share_slow_records,
        delay=profile.share_slow_delay_ms,
    ).replace("{n}", counts)


def _value(summary: dict[str, Any] | None, fmt: str) -> str:
    if not summary or (isinstance(summary["median"], float) and math.isnan(summary["median"])):
        return "n/a"
    text = fmt.format(summary["median"])
    if summary["n"] > 1:
        text += f" ({fmt.format(summary['min'])}-{fmt.format(summary['max'])})"
    return text


LABELS = {"ours": "aiostream_kafka", "confluent": "confluent-kafka", "java": "Java"}


def extra_table(cases: list[dict[str, Any]]) -> list[str]:
    """The slow-beside-fast case as one row per client: the slow member's peak of held
    records, the split slow / fast, records processed twice, the time to process all."""
    rows = [
        [
            "client",
            "slow: peak held",
            "processed slow / fast",
            "processed twice",
            "time to process all, s",
        ]
    ]
    for case in cases:
        if case["spec"].get("kind") != "slow":
            continue
        for client in CLIENTS:
            s = case["summary"].get(client)
            if not s:
                if client in case["errors"]:
                    rows.append([LABELS[client], "error", case["errors"][client][0][:120], "", ""])
                continue
            rows.append(
                [
                    LABELS[client],
                    _value(s.get("slow_peak_held"), "{:,.0f}"),
                    f"{_value(s.get('slow_processed'), '{:,.0f}')} / "
                    f"{_value(s.get('fast_processed'), '{:,.0f}')}",
                    _value(s.get("redelivered"), "{:,.0f}"),
                    _value(s.get("seconds"), "{:,.1f}"),
                ]
            )
    if len(rows) == 1:
        return []
    head = "| " + " | ".join(rows[0]) + " |"
    return [
        "Slow member beside a fast one (medians over the rounds):",
        "",
        head,
        "|---|" + "---:|" * (len(rows[0]) - 1),
        *("| " + " | ".join(r) + " |" for r in rows[1:]),
    ]
