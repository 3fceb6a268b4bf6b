"""Issue 30: ``Consumer.process()`` against the sequential ``async for`` (ours, aiokafka),
an I/O-bound handler per record, and the records done again after a SIGKILL. The handlers,
the clock and the SIGKILL driver are ``benchmarks/process.py``."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks import settings
from benchmarks.process import ideal_rate
from benchmarks.runner import Case, Context, Metric

FAMILY = "process"
TITLE = "Concurrent processing: process() beside a sequential async for (issue 30)"
HANDLERS = {"fixed": "10 ms", "random": "1-20 ms"}
ABOUT = (
    "One topic of {partitions} partitions is written once (confluent-kafka) with "
    "{records:,} records of 100 B over {keys:,} keys (record `i` has key `k{{i % {keys}}}`, "
    "every key on one partition). Every run reads it from the earliest offset with a fresh "
    "consumer group (`subscribe`, the common fetch settings, no auto-commit) and gives each "
    "record to a handler: `await asyncio.sleep(0.010)` (*10 ms*), or a sleep of 1-20 ms "
    "(*1-20 ms*: uniform, a seeded function of the record's partition and offset, so every "
    "client of a round sleeps the same for the same record). *sequential*: ours `async for "
    "record in consumer.stream(): await handler(record)`, aiokafka `async for msg in "
    "consumer: await handler(msg)`; *process() xC*: ours `await consumer.process(handler, "
    'concurrency=C, ordering="key")` with its commit defaults (`every=1000`, '
    "`within_s=5.0`). *asyncio floor xC*: what asyncio itself reaches with C handlers at "
    "once, measured in the same kind of worker process as ours, right after it in each "
    "round: no Kafka and no `process()`, the topic's `(partition, offset)` pairs put by one "
    "task into an `asyncio.Queue(maxsize=4*C)` and C tasks each `await queue.get()` then "
    "the same handler. The clock runs from the first handler's start to the N-th handler's "
    "end (N: {counts}); the group join is not timed. **Ideal** = concurrency / mean "
    "handler time of those N records, capped at {cap:,} records/s (issue 30's goal: >= 90 % "
    "of the ideal up to {cap:,} records/s on one core). *SIGKILL*: a member runs "
    "`process()` at concurrency {kill_c} on a fresh topic of {kill:,} records (10 ms "
    "handler), writes each handler's start and end to a file (one unbuffered write each) "
    "and is SIGKILLed once half the records were handled; a second member of the group "
    "(both with `session_timeout_ms={session}`) then reads on from the group's commit "
    "until every record was handled by one of the two. *pyrallel-consumer xC* (1.0.0, on "
    "confluent-kafka; it requires Python >= 3.12, so its worker runs on a Python 3.12 of "
    "its own, `benchmarks/side_venv.py`): `PyrallelConsumer(config, worker, topic)` with "
    "its asyncio engine, `key_hash` ordering and `execution.max_in_flight=C` (its bound "
    "on records in flight), a fresh group, its other settings its defaults; the worker "
    "awaits the same handler, with the same clock."
)

THROUGHPUT_METRICS = [
    Metric("records_per_s", "records/s", True),
    Metric("of_ideal_pct", "% of ideal", True, "{:,.1f}"),
]
KILL_METRICS = [
    Metric("redone", "records run again", False),
    Metric("done_twice", "finished records run again", False),
    Metric("running_at_kill", "handlers running at the kill", False),
    Metric("lost", "records lost", False),
]
KILL_CONCURRENCY = 64


def _throughput(result: dict[str, Any]) -> dict[str, float]:
    rate = result["records"] / result["seconds"]
    ideal = ideal_rate(result["concurrency"], result["handler_mean_ms"])
    return {
        "records_per_s": rate,
        "of_ideal_pct": 100 * rate / ideal,
        "ideal": ideal,
        "handler_mean_ms": float(result["handler_mean_ms"]),
        "peak_running": float(result["peak_running"]),
    }


def _kill(result: dict[str, Any]) -> dict[str, float]:
    keys = (
        "redone",
        "done_twice",
        "running_at_kill",
        "lost",
        "finished_uncommitted",
        "committed_not_done",
    )
    return {k: float(result[k]) for k in keys}


def case_name(handler: str, concurrency: int) -> str:
    mode = "sequential" if concurrency == 1 else f"process() x{concurrency}"
    return f"{HANDLERS[handler]}, {mode}"


def floor_name(handler: str, concurrency: int) -> str:
    return f"{HANDLERS[handler]}, asyncio floor x{concurrency}"


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    records = max(p.process_records.values())
    topic = await ctx.create_topic("process", p.process_partitions)
    await ctx.fill(topic, records, 100, p.process_partitions, keys=p.process_keys)
    ctx.extra.setdefault("topics_to_delete", []).append(topic)
    out = []
    for handler in p.process_handlers:
        for concurrency in [1, *p.process_concurrency]:
            clients = ["ours", "aiokafka"] if concurrency == 1 else ["ours", "pyrallel"]
            out.append(
                Case(
                    family=FAMILY,
                    name=case_name(handler, concurrency),
                    scenario="process",
                    spec={
                        "handler": handler,
                        "concurrency": concurrency,
                        "records": p.process_records[concurrency],
                        "size": 100,
                    },
                    metrics=THROUGHPUT_METRICS,
                    extract=_throughput,
                    shared_topic=topic,
                    clients=clients,
                )
            )
            if concurrency > 1:
                out.append(
                    Case(
                        family=FAMILY,
                        name=floor_name(handler, concurrency),
                        scenario="process",
                        spec={
                            "handler": handler,
                            "concurrency": concurrency,
                            "records": p.process_records[concurrency],
                            "floor": True,
                            "available": records,
                            "keys": p.process_keys,
                            "partitions": p.process_partitions,
                        },
                        metrics=THROUGHPUT_METRICS,
                        extract=_throughput,
                        clients=["ours"],
                    )
                )

    async def kill_topic() -> str:
        name = await ctx.create_topic("process-kill", p.process_partitions)
        await ctx.fill(name, p.process_kill_records, 100, p.process_partitions, keys=p.process_keys)
        return name

    out.append(
        Case(
            family=FAMILY,
            name=f"SIGKILL at half, process() x{KILL_CONCURRENCY}",
            scenario="process_kill",
            spec={
                "records": p.process_kill_records,
                "keys": p.process_keys,
                "partitions": p.process_partitions,
                "concurrency": KILL_CONCURRENCY,
            },
            metrics=KILL_METRICS,
            extract=_kill,
            topic=kill_topic,
            cleanup=ctx.delete_topic,
            clients=["ours"],
        )
    )
    return out


def about(profile: settings.Profile) -> str:
    counts = ", ".join(
        f"{profile.process_records[c]:,} ({'sequential' if c == 1 else f'x{c}'})"
        for c in [1, *profile.process_concurrency]
    )
    return ABOUT.format(
        partitions=profile.process_partitions,
        records=max(profile.process_records.values()),
        keys=profile.process_keys,
        counts=counts,
        cap=settings.PROCESS_CORE_CAP,
        kill=profile.process_kill_records,
        kill_c=KILL_CONCURRENCY,
        session=settings.PROCESS_SESSION_TIMEOUT_MS,
    )


# -- the tables (one metric each: the docs column is narrow) -----------------------------------


def _fmt(summary: dict[str, Any] | None, fmt: str, spread: bool = True) -> str:
    if not summary:
        return "n/a"
    text = fmt.format(summary["median"])
    if spread and summary["n"] > 1:
        text += f" ({fmt.format(summary['min'])}-{fmt.format(summary['max'])})"
    return text


def _table(rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(rows[0]) + " |",
        "|---|" + "---:|" * (len(rows[0]) - 1),
        *("| " + " | ".join(r) + " |" for r in rows[1:]),
    ]


def _pyrallel_table(runs: list[dict[str, Any]]) -> list[str]:
    """What pyrallel-consumer's runs did, summed over the rounds: records whose handler
    started twice, a key's record started while another of that key ran or out of offset
    order, its commits per second within the clock (median), its process's CPU seconds
    per 1,000 records within the clock (median) and the most handlers it ran at once."""
    rows = [
        [
            "case",
            "handled twice",
            "key order broken",
            "commits/s",
            "CPU s / 1k records",
            "peak running",
        ]
    ]
    for case in runs:
        found = case["runs"].get("pyrallel", [])
        if not found or "duplicates" not in found[0]:
            continue
        cpu = [1000 * r["cpu_s_in_clock"] / r["records"] for r in found]
        rows.append(
            [
                case["case"],
                f"{sum(r['duplicates'] for r in found):,}",
                f"{sum(r['key_overlaps'] + r['key_out_of_order'] for r in found):,}",
                f"{statistics.median(r['commits_per_s'] for r in found):,.1f}",
                f"{statistics.median(cpu):,.2f}",
                f"{max(r['peak_running'] for r in found):,}",
            ]
        )
    if len(rows) == 1:
        return []
    per_case = max(len(case["runs"].get("pyrallel", [])) for case in runs)
    return [
        f"pyrallel-consumer's runs ({per_case} per case; counts summed over them):",
        "",
        *_table(rows),
        "",
    ]


def extra_table(cases: list[dict[str, Any]]) -> list[str]:
    """The throughput cases as three tables of one metric each (records/s beside the
    ideal and the asyncio floor; the share of the ideal, and ours as a share of the floor;
    ours over pyrallel-consumer and over the sequential loops), what pyrallel-consumer's
    runs did (when it ran), then the SIGKILL runs."""
    throughput = [c for c in cases if c["scenario"] == "process"]
    runs = [c for c in throughput if not c["spec"].get("floor")]
    floors = {
        (c["spec"]["handler"], c["spec"]["concurrency"]): c["summary"].get("ours", {})
        for c in throughput
        if c["spec"].get("floor")
    }
    kills = [c for c in cases if c["scenario"] == "process_kill"]
    lines: list[str] = []
    if runs:
        rate = [["case", "ideal", "asyncio floor", "ours", "pyrallel", "aiokafka"]]
        share = [["case", "asyncio floor", "ours", "pyrallel", "aiokafka", "ours, % of the floor"]]
        speed = [
            [
                "case",
                "ours / pyrallel",
                "ours / aiokafka sequential",
                "ours / ours sequential",
                "peak running, ours",
            ]
        ]
        sequential: dict[str, dict[str, float]] = {}
        for case in runs:
            if case["spec"]["concurrency"] == 1:
                for client in ("ours", "aiokafka"):
                    s = case["summary"].get(client, {}).get("records_per_s")
                    if s:
                        sequential.setdefault(case["spec"]["handler"], {})[client] = s["median"]
        for case in runs:
            s = case["summary"]
            ours, peer = s.get("ours", {}), s.get("aiokafka", {})
            pyr = s.get("pyrallel", {})
            floor = floors.get((case["spec"]["handler"], case["spec"]["concurrency"]), {})
            ideal = ours.get("ideal") or peer.get("ideal") or pyr.get("ideal")
            mine = ours.get("records_per_s", {}).get("median")
            bound = floor.get("records_per_s", {}).get("median")
            theirs = pyr.get("records_per_s", {}).get("median")
            rate.append(
                [
                    case["case"],
                    _fmt(ideal, "{:,.0f}", spread=False),
                    _fmt(floor.get("records_per_s"), "{:,.0f}"),
                    _fmt(ours.get("records_per_s"), "{:,.0f}"),
                    _fmt(pyr.get("records_per_s"), "{:,.0f}"),
                    _fmt(peer.get("records_per_s"), "{:,.0f}"),
                ]
            )
            share.append(
                [
                    case["case"],
                    _fmt(floor.get("of_ideal_pct"), "{:,.1f}"),
                    _fmt(ours.get("of_ideal_pct"), "{:,.1f}"),
                    _fmt(pyr.get("of_ideal_pct"), "{:,.1f}"),
                    _fmt(peer.get("of_ideal_pct"), "{:,.1f}"),
                    f"{100 * mine / bound:,.1f}" if mine and bound else "n/a",
                ]
            )
            base = sequential.get(case["spec"]["handler"], {})
            speed.append(
                [
                    case["case"],
                    f"{mine / theirs:,.2f}x" if mine and theirs else "n/a",
                    f"{mine / base['aiokafka']:,.2f}x" if mine and base.get("aiokafka") else "n/a",
                    f"{mine / base['ours']:,.2f}x" if mine and base.get("ours") else "n/a",
                    _fmt(ours.get("peak_running"), "{:,.0f}", spread=False),
                ]
            )
        lines += [
            "Records/s (median, min-max over the rounds; *ours*: aiostream_kafka, *pyrallel*: "
            "pyrallel-consumer) ↑:",
            "",
            *_table(rate),
            "",
        ]
        lines += [
            "Share of the ideal rate, % (median, min-max), and ours as a share of the asyncio "
            "floor (medians) ↑:",
            "",
            *_table(share),
            "",
        ]
        lines += [
            "Ours over pyrallel-consumer at the same concurrency and over the sequential "
            "loops with the same handler (medians) ↑, and the most handlers ours ran at once:",
            "",
            *_table(speed),
            "",
        ]
        lines += _pyrallel_table(runs)
    for case in kills:
        rows = [["run", "running at the kill", "done, not committed", "run again", "lost"]]
        for i, run in enumerate(case["runs"].get("ours", []), 1):
            rows.append(
                [
                    str(i),
                    f"{run['running_at_kill']:,}",
                    f"{run['finished_uncommitted']:,}",
                    f"{run['redone']:,} ({run['done_twice']:,} done before)",
                    f"{run['lost']:,}",
                ]
            )
        errors = case["errors"].get("ours")
        if errors:
            rows.append(["error", errors[0][:120], "", "", ""])
        if len(rows) > 1:
            lines += [f"{case['case']}, {case['spec']['records']:,} records:", "", *_table(rows)]
            lines.append("")
    while lines and not lines[-1]:
        lines.pop()
    return lines
