"""Issue 31, item 4: what OpenTelemetry costs. Ours' per-record ``enqueue`` and its
``batches()`` and ``stream()`` with OpenTelemetry off, with the API and no SDK (the
default), and with an SDK; aiokafka's ``send`` bare, with opentelemetry-instrumentation-
aiokafka applied and no SDK, and with the SDK. Each mode is set up in the run's own
worker process (``benchmarks/otel.py``); the modes of one operation are consecutive cases
run in turn within each round, their order rotating (``Case.rotate``)."""

from __future__ import annotations

import statistics
from functools import partial
from typing import Any

from benchmarks import settings
from benchmarks.otel import CONTRIB_VERSION, LABELS, METRIC_EXPORT_MS, MODES
from benchmarks.runner import Case, Context, Metric

FAMILY = "otel"
TITLE = "OpenTelemetry: what it costs (issue 31)"
SIZE = 100
OPERATIONS = {"produce": "enqueue()", "batch": "batches()", "record": "stream()"}
ABOUT = (
    "Three modes, each set up in the run's own worker process before the client starts: "
    "*off* (ours `opentelemetry=False`; aiokafka bare), *no SDK* (`opentelemetry-api` "
    "importable, no SDK configured: the default a user has; aiokafka with "
    "opentelemetry-instrumentation-aiokafka {contrib}'s `AIOKafkaInstrumentor().instrument()` "
    "applied) and *SDK* (as *no SDK*, and the global providers set first: a `TracerProvider` "
    "with a `BatchSpanProcessor` at its defaults and a `MeterProvider` with a "
    "`PeriodicExportingMetricReader` every {export_ms:,} ms, each to an exporter of ours that "
    "counts and drops what it gets: the SDK's whole path, no I/O). **Produce**: per-record "
    "`await producer.enqueue(...)` (aiokafka `await producer.send(...)`) of {size} B values, "
    "no compression, the suite's producer settings (`acks=all`, `linger.ms=5`, "
    "`batch.size=16384`, idempotence on), a fresh {produce_partitions}-partition topic per run, "
    "{warmup:,} warm-up records, then {produce:,} timed from the first send to the last "
    "acknowledgement. **Consume**: ours `batches()` and `stream()` read a {consume:,}-record "
    "topic of {size} B values ({consume_partitions} partitions, assigned, the suite's fetch "
    "settings) from the start. The modes of one operation run one after the other within "
    "each round, their order rotating round by round. The ratios are per round (the runs of "
    "one round side by side), their median and min-max; the cost per record is "
    "1/rate(mode) - 1/rate(off) of those runs. Issue 31's goal: *no SDK* / *off* >= 0.97 "
    "for `enqueue()` and `batches()`."
)

METRICS = [Metric("records_per_s", "records/s", True)]


def _extract(result: dict[str, Any]) -> dict[str, float]:
    out = {"records_per_s": result["records"] / result["seconds"]}
    if "spans_per_record" in result:
        out["spans_per_record"] = result["spans_per_record"]
    return out


def case_name(operation: str, mode: str) -> str:
    return f"{OPERATIONS[operation]}, {LABELS['ours'][mode]}"


async def cases(ctx: Context) -> list[Case]:
    p = ctx.profile
    out = []
    for mode in MODES:
        out.append(
            Case(
                family=FAMILY,
                name=case_name("produce", mode),
                scenario="produce",
                spec={
                    "size": SIZE,
                    "codec": "none",
                    "records": p.produce_records[SIZE],
                    "warmup": p.produce_warmup_records,
                    "otel": mode,
                    "operation": "produce",
                },
                metrics=METRICS,
                extract=_extract,
                topic=partial(ctx.create_topic, "otel-produce", settings.PRODUCE_PARTITIONS),
                cleanup=ctx.delete_topic,
                clients=["ours", "aiokafka"],
                rotate="produce",
            )
        )
    records = p.consume_records[SIZE]
    topic = await ctx.create_topic("otel-consume", settings.CONSUME_PARTITIONS)
    await ctx.fill(topic, records, SIZE, settings.CONSUME_PARTITIONS)
    ctx.extra.setdefault("topics_to_delete", []).append(topic)
    for kind in p.consume_modes:
        for mode in MODES:
            out.append(
                Case(
                    family=FAMILY,
                    name=case_name(kind, mode),
                    scenario="consume",
                    spec={
                        "size": SIZE,
                        "mode": kind,
                        "records": records,
                        "partitions": settings.CONSUME_PARTITIONS,
                        "otel": mode,
                        "operation": kind,
                    },
                    metrics=METRICS,
                    extract=_extract,
                    shared_topic=topic,
                    clients=["ours"],
                    rotate=f"consume-{kind}",
                )
            )
    return out


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        contrib=CONTRIB_VERSION,
        export_ms=METRIC_EXPORT_MS,
        size=SIZE,
        produce_partitions=settings.PRODUCE_PARTITIONS,
        warmup=profile.produce_warmup_records,
        produce=profile.produce_records[SIZE],
        consume=profile.consume_records[SIZE],
        consume_partitions=settings.CONSUME_PARTITIONS,
    )


# -- the tables (one metric each: the docs column is narrow) -----------------------------------

CLIENT_NAMES = {"ours": "aiostream_kafka", "aiokafka": "aiokafka"}


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "n/a"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    return text


def _rates(case: dict[str, Any], client: str) -> dict[int, float]:
    """round -> records/s of ``client``'s runs of ``case``."""
    return {
        run["round"]: run["records"] / run["seconds"]
        for run in case["runs"].get(client, [])
        if run.get("seconds")
    }


def _table(rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(rows[0]) + " |",
        "|---|" + "---:|" * (len(rows[0]) - 1),
        *("| " + " | ".join(r) + " |" for r in rows[1:]),
    ]


def compare(cases: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, dict[str, Any]]]]:
    """(operation label, client, mode -> case) for each operation and client measured."""
    by_op: dict[str, dict[str, dict[str, Any]]] = {}
    for case in cases:
        by_op.setdefault(case["spec"]["operation"], {})[case["spec"]["otel"]] = case
    out = []
    for op, modes in by_op.items():
        for client in ("ours", "aiokafka"):
            if any(case["runs"].get(client) for case in modes.values()):
                label = OPERATIONS[op] if client == "ours" else "send() (aiokafka)"
                out.append((label, client, modes))
    return out


def ratios(rates: dict[str, dict[int, float]], mode: str) -> list[float]:
    """Per round: records/s of ``mode`` over records/s of ``off`` in that round."""
    base, other = rates.get("off", {}), rates.get(mode, {})
    return [other[r] / base[r] for r in sorted(set(base) & set(other))]


def cost_us(rates: dict[str, dict[int, float]], mode: str) -> list[float]:
    """Per round: microseconds per record that ``mode`` adds to ``off``."""
    base, other = rates.get("off", {}), rates.get(mode, {})
    return [1e6 / other[r] - 1e6 / base[r] for r in sorted(set(base) & set(other))]


def extra_table(cases: list[dict[str, Any]]) -> list[str]:
    """Records/s per operation and mode; the ratios to *off* per round; the microseconds
    per record the SDK adds; the spans the exporter got per record."""
    rows = compare(cases)
    if not rows:
        return []
    rate = [["operation", *(LABELS["ours"][m] for m in MODES)]]
    ratio = [["operation", "no SDK / off", "SDK / off"]]
    cost = [["operation", "µs per record, SDK", "µs per record, no SDK"]]
    spans = [["operation", "spans per 1,000 records, SDK"]]
    for label, client, modes in rows:
        rates = {mode: _rates(case, client) for mode, case in modes.items()}
        rate.append([label, *(_spread(list(rates.get(m, {}).values()), "{:,.0f}") for m in MODES)])
        ratio.append(
            [
                label,
                _spread(ratios(rates, "nosdk"), "{:.3f}"),
                _spread(ratios(rates, "sdk"), "{:.3f}"),
            ]
        )
        cost.append(
            [
                label,
                _spread(cost_us(rates, "sdk"), "{:.2f}"),
                _spread(cost_us(rates, "nosdk"), "{:.2f}"),
            ]
        )
        sdk_runs = modes["sdk"]["runs"].get(client, []) if "sdk" in modes else []
        per = [1000 * r["spans_per_record"] for r in sdk_runs if "spans_per_record" in r]
        spans.append([label, _spread(per, "{:,.1f}")])
    lines = [
        "Records/s (median, min-max over the rounds) ↑; aiokafka's columns: not instrumented, "
        "instrumented with no SDK, instrumented with the SDK:",
        "",
        *_table(rate),
        "",
        "Throughput over *off*, per round (median, min-max) ↑; the goal for `enqueue()` and "
        "`batches()` with no SDK: >= 0.97:",
        "",
        *_table(ratio),
        "",
        "What a mode adds per record over *off*, µs (median, min-max over the rounds) ↓:",
        "",
        *_table(cost),
        "",
        "Spans the exporter received per 1,000 records sent or read (warm-up included), with "
        "the SDK (median, min-max; the `BatchSpanProcessor` drops spans when its queue of "
        "2,048 is full):",
        "",
        *_table(spans),
    ]
    return lines
