"""Producer throughput: 100 B and 1 KiB values, acks=all, none/lz4/zstd; per record, and
through each client's batch API (the "batch API" cases)."""

from __future__ import annotations

from functools import partial

from benchmarks import settings
from benchmarks.runner import THROUGHPUT_METRICS, Case, Context, throughput

FAMILY = "produce"
TITLE = "Produce throughput"
ABOUT = (
    "Keyless records of random uppercase letters (as Java's `ProducerPerformance` sends), "
    "to a fresh {partitions}-partition topic per run, `acks=all`, `linger.ms=5`, "
    "`batch.size=16384`, idempotence on, for every client. Each run first sends "
    "{warmup:,} warm-up records (untimed; Java: `--warmup-records`), then the clock runs "
    "from the first timed send to the last acknowledgement. Each client's compression level "
    "is its own default. The *batch API* cases hand the records over {call:,} per call "
    "where the client has such a call (ours: `enqueue_batch`, one future per call; "
    "confluent-kafka: `produce_batch`, `poll(0)` between calls; aiokafka: hand-built "
    "`create_batch()` batches, one per `send_batch` call, partitions in turn), with one "
    "completion per call instead of one per record; the Java perf tool has no such mode. "
    "The *enqueue_nowait* rows are ours' call that never awaits (per record "
    "`enqueue_nowait(topic, value)`, no future, no callback; on `BufferFullError` "
    "`await wait_for_buffer()` and call again; the clock stops when `flush()` returns), run "
    "in the same rounds as the row above it, alternating with the peers: the peers' "
    "figures in both rows are the same runs."
)

#: The suffix of the report's row for ours' ``enqueue_nowait`` (clients ``ours_nowait``,
#: ``ours_pure_nowait``: ``report.variant_rows``).
NOWAIT_ROW = "enqueue_nowait"


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    out = []
    for size in p.produce_sizes:
        for codec in p.produce_codecs:
            out.append(
                Case(
                    family=FAMILY,
                    name=f"{size} B {codec}",
                    scenario="produce",
                    spec={
                        "size": size,
                        "codec": codec,
                        "records": p.produce_records[size],
                        "warmup": p.produce_warmup_records,
                    },
                    metrics=THROUGHPUT_METRICS,
                    extract=partial(throughput, size=size),
                    topic=partial(
                        ctx.create_topic, f"produce-{size}-{codec}", settings.PRODUCE_PARTITIONS
                    ),
                    cleanup=ctx.delete_topic,
                    # ours' enqueue_nowait as clients of their own, alternating with the
                    # others: the report shows them as a row of their own (NOWAIT_ROW)
                    clients=[*settings.CLIENTS, "ours_nowait", "ours_pure_nowait"],
                )
            )
    for size in p.produce_batch_sizes:
        for codec in p.produce_batch_codecs:
            out.append(
                Case(
                    family=FAMILY,
                    name=f"{size} B {codec} batch API",
                    scenario="produce_batch",
                    spec={
                        "size": size,
                        "codec": codec,
                        "records": p.produce_records[size],
                        "warmup": p.produce_warmup_records,
                        "call": settings.PRODUCE_BATCH_CALL,
                    },
                    metrics=THROUGHPUT_METRICS,
                    extract=partial(throughput, size=size),
                    topic=partial(
                        ctx.create_topic, f"produce-{size}-{codec}", settings.PRODUCE_PARTITIONS
                    ),
                    cleanup=ctx.delete_topic,
                    clients=["ours", "ours_pure", "aiokafka", "confluent"],
                )
            )
    return out


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        partitions=settings.PRODUCE_PARTITIONS,
        warmup=profile.produce_warmup_records,
        call=settings.PRODUCE_BATCH_CALL,
    )
