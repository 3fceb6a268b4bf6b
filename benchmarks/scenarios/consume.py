"""Consumer throughput: read a pre-filled topic from the beginning."""

from __future__ import annotations

from functools import partial

from benchmarks import settings
from benchmarks.runner import THROUGHPUT_METRICS, Case, Context, throughput

FAMILY = "consume"
TITLE = "Consume throughput"
ABOUT = (
    "One topic per value size ({partitions} partitions) is written once (confluent-kafka, "
    "`linger.ms=5`, `batch.size=16384`, uncompressed, round-robin over the partitions); "
    "every client then reads all of it from the beginning, with the same fetch settings "
    "(`fetch.min.bytes=1`, `fetch.max.wait.ms=500`, `fetch.max.bytes=50 MiB`, "
    "`max.partition.fetch.bytes=1 MiB`). The Python clients assign the partitions (no "
    "group) and time from before the first fetch to the last record; Java's "
    "`ConsumerPerformance` subscribes with a fresh group and reports `fetch.nMsg.sec`, "
    "which excludes the group join. `batch`: a batch at a time (`batches()`, aiokafka "
    "`getmany()`, confluent `consume(10000)`, Java `poll()`); `record`: one record at a "
    "time (`stream()`, aiokafka `async for`, confluent `poll()`; Java has no such API)."
)


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    out = []
    for size in p.produce_sizes:
        records = p.consume_records[size]
        topic = await ctx.create_topic(f"consume-{size}", settings.CONSUME_PARTITIONS)
        await ctx.fill(topic, records, size, settings.CONSUME_PARTITIONS)
        ctx.extra.setdefault("topics_to_delete", []).append(topic)
        for mode in p.consume_modes:
            out.append(
                Case(
                    family=FAMILY,
                    name=f"{size} B {mode}",
                    scenario="consume",
                    spec={
                        "size": size,
                        "mode": mode,
                        "records": records,
                        "partitions": settings.CONSUME_PARTITIONS,
                    },
                    metrics=THROUGHPUT_METRICS,
                    extract=partial(throughput, size=size),
                    shared_topic=topic,
                )
            )
    return out


def about(profile: settings.Profile) -> str:
    del profile
    return ABOUT.format(partitions=settings.CONSUME_PARTITIONS)
