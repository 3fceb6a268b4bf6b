"""Keyed produce (issue 32): 200,000 keyed 100 B records over 20,000 keys to a fresh topic
of 6 and of 600 partitions, ``acks=all``, ``linger.ms=5``, each client's defaults
otherwise, each client's own partitioner; ours' ``enqueue`` and ``enqueue_nowait`` beside
confluent-kafka's ``produce()`` and aiokafka's ``send()``. Opt-in."""

from __future__ import annotations

from functools import partial

from benchmarks import settings
from benchmarks.runner import THROUGHPUT_METRICS, Case, Context, throughput

FAMILY = "produce_keyed"
TITLE = "Keyed produce throughput"
SIZE = 100
ABOUT = (
    "{records:,} records of {size} B with keys (11 B, {keys:,} distinct, in a seeded "
    "shuffled order repeated), to a fresh topic of each partition count per run, through "
    "each client's own partitioner (ours and aiokafka: murmur2, as Java; librdkafka: its "
    "default, `consistent_random`); `acks=all`, `linger.ms=5` and **each client's defaults "
    "otherwise** (what a user gets: ours idempotent with 16 KiB batches, librdkafka not "
    "idempotent with 1 MB batches, aiokafka not idempotent with 16 KiB batches). Each run "
    "first sends {warmup:,} warm-up records (untimed), then the clock runs from the first "
    "timed send to the last acknowledgement. Ours: `enqueue` (await each future) and, as "
    "its own *enqueue_nowait* row from the same rounds, `enqueue_nowait(topic, value, "
    "key)` (`BufferFullError` -> `await wait_for_buffer()`, then `flush()`); "
    "confluent-kafka: `produce()` + `poll(0)`, `flush()`; aiokafka: `send()`, await each "
    "future. The Java perf tool sends no keys: no Java column."
)


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    return [
        Case(
            family=FAMILY,
            name=f"keyed, {partitions}p",
            scenario="produce_keyed",
            spec={
                "size": SIZE,
                "codec": "none",
                "records": p.keyed_records,
                "keys": p.keyed_keys,
                "warmup": p.keyed_warmup_records,
                "partitions": partitions,
            },
            metrics=THROUGHPUT_METRICS,
            extract=partial(throughput, size=SIZE),
            topic=partial(ctx.create_topic, f"keyed-{partitions}", partitions),
            cleanup=ctx.delete_topic,
            clients=[
                "ours",
                "ours_nowait",
                "ours_pure",
                "ours_pure_nowait",
                "aiokafka",
                "confluent",
            ],
        )
        for partitions in p.keyed_partitions
    ]


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        records=profile.keyed_records,
        size=SIZE,
        keys=profile.keyed_keys,
        warmup=profile.keyed_warmup_records,
    )
