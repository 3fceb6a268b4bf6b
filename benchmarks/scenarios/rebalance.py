"""Issue 28: a group's members joining and leaving one by one under steady produce, per
client and group protocol (classic, KIP-848 ``consumer``). The driver and the analysis
are ``benchmarks/rebalance.py``."""

from __future__ import annotations

import math
from typing import Any

from benchmarks import settings
from benchmarks.runner import Case, Context, Metric

FAMILY = "rebalance"
TITLE = "Rebalance: members joining and leaving one by one (issue 28)"
ABOUT = (
    "One {partitions}-partition topic (fresh per run) under steady produce, {rate:,} "
    "records/s of {size} B values each carrying its sequence number (confluent-kafka's "
    "producer in the driver, the same for every client). The group's members join one by "
    "one ({members} of them, {step:g} s apart, each at a random offset of up to {jitter:g} s "
    "within its step, the same offsets for every client of a round), then leave one by "
    "one, gracefully (close), "
    "in the order they joined; the last one reads until every acknowledged record was seen "
    "(at most {drain:g} s after the produce stops), then closes. Each member is its own "
    "process. Every member commits with its client's auto-commit (on, every 5 s, and on "
    "revoke); offsets reset to earliest. Classic members keep their client's defaults "
    "(ours and confluent-kafka: cooperative-sticky, which confluent-kafka is given, 45 s "
    "session, 3 s heartbeat; aiokafka: round-robin, an eager protocol, 10 s session, 3 s "
    'heartbeat). KIP-848 runs (`group_protocol="consumer"`, confluent-kafka '
    "`group.protocol=consumer`) set the group's `consumer.heartbeat.interval.ms` to "
    "{heartbeat:,} ms first (the broker's default); the broker assigns (its default "
    "assignor, `uniform`). *Longest kept pause*: for each membership change, each member "
    "alive until the next one, over the partitions it received records from both in the "
    "second before the change and in the second before the next change, the longest gap "
    "between consecutive records it received on those partitions; the longest of all "
    "changes and members. *First record*: from a member creating its consumer to its first "
    "record (median, max over the members). *Re-delivered*: deliveries beyond the first of "
    "each record (to another member or to the same one again). *Missing*: records the "
    "broker acknowledged that no member received. Goal of issue 28: under KIP-848 no "
    "member keeping partitions pauses longer than one heartbeat interval "
    "({heartbeat_s:g} s)."
)

METRICS = [
    Metric("max_kept_pause_s", "longest kept pause, s", False, "{:,.2f}"),
    Metric("first_record_median_s", "first record, median, s", False, "{:,.2f}"),
    Metric("first_record_max_s", "first record, max, s", False, "{:,.2f}"),
    Metric("redelivered", "records re-delivered", False),
    Metric("missing", "records missing", False),
]

SIZE = 100
#: Each join and leave lands at a seeded random offset of up to this within its step (a
#: classic joiner waits for the other members' next heartbeat: 3 s for every client).
JITTER_S = 3.0
PROTOCOLS = {
    "classic": "classic",
    "consumer": "consumer (KIP-848)",
}
#: The per-row table's labels of each client under each protocol.
ROW_LABELS = {
    ("ours", "classic"): "aiostream_kafka, classic (cooperative-sticky)",
    ("confluent", "classic"): "confluent-kafka, classic (cooperative-sticky)",
    ("aiokafka", "classic"): "aiokafka, classic (round-robin, eager)",
    ("ours", "consumer"): 'aiostream_kafka, group_protocol="consumer"',
    ("confluent", "consumer"): "confluent-kafka, group.protocol=consumer",
    ("aiokafka", "consumer"): "aiokafka, KIP-848",
}


def _extract(result: dict[str, Any]) -> dict[str, float]:
    return {m.key: float(result[m.key]) for m in METRICS} | {
        "heartbeat_interval_ms": float(result.get("heartbeat_interval_ms") or 0),
    }


def spec(profile: settings.Profile, protocol: str) -> dict[str, Any]:
    """What every member and the driver of one run are given."""
    return {
        "protocol": protocol,
        "size": SIZE,
        "rate": profile.rebalance_rate,
        "partitions": settings.REBALANCE_PARTITIONS,
        "members": profile.rebalance_members,
        "step_s": profile.rebalance_step_s,
        "lead_s": 1.0,  # records are there before the first member starts
        "drain_s": 20.0,
        "window_s": 1.0,
        "jitter_s": JITTER_S,
        "close_timeout_s": 60.0,
        "max_member_s": 2 * profile.rebalance_members * profile.rebalance_step_s + 120,
        "heartbeat_interval_ms": settings.REBALANCE_HEARTBEAT_MS,
    }


async def cases(ctx: Context) -> list[Case]:
    async def topic() -> str:
        return await ctx.create_topic("rebalance", settings.REBALANCE_PARTITIONS)

    return [
        Case(
            family=FAMILY,
            name=label,
            scenario="rebalance",
            spec=spec(ctx.profile, protocol),
            metrics=METRICS,
            extract=_extract,
            topic=topic,
            cleanup=ctx.delete_topic,
            clients=["ours", "confluent", "aiokafka"],
        )
        for protocol, label in PROTOCOLS.items()
    ]


def about(profile: settings.Profile) -> str:
    return ABOUT.format(
        partitions=settings.REBALANCE_PARTITIONS,
        rate=profile.rebalance_rate,
        size=SIZE,
        members=profile.rebalance_members,
        step=profile.rebalance_step_s,
        jitter=JITTER_S,
        drain=20.0,
        heartbeat=settings.REBALANCE_HEARTBEAT_MS,
        heartbeat_s=settings.REBALANCE_HEARTBEAT_MS / 1000,
    )


def _value(summary: dict[str, Any] | None, fmt: str) -> str:
    if not summary or (isinstance(summary["median"], float) and math.isnan(summary["median"])):
        return "n/a"
    text = fmt.format(summary["median"])
    if summary["n"] > 1:
        text += f" ({fmt.format(summary['min'])}-{fmt.format(summary['max'])})"
    return text


def extra_table(cases: list[dict[str, Any]]) -> list[str]:
    """One row per client and protocol, the figures as columns (medians over the
    rounds), the heartbeat interval of KIP-848 runs beside them, then the ratios ours /
    confluent-kafka under each protocol; rows skipped or failed say why."""
    head = ["client, protocol", *(m.label for m in METRICS), "group heartbeat"]
    rows = [head]
    notes: list[str] = []
    ratio_rows = [["protocol", *(m.label for m in METRICS)]]
    for case in cases:
        protocol = case["spec"]["protocol"]
        for client in ("ours", "confluent", "aiokafka"):
            label = ROW_LABELS[(client, protocol)]
            summary = case["summary"].get(client)
            if client in case["unsupported"]:
                notes.append(f"* {label}: skipped: {case['unsupported'][client]}")
                continue
            if client in case["errors"] and not summary:
                notes.append(f"* {label}: **error**: {case['errors'][client][0][:300]}")
                continue
            if not summary:
                continue
            heartbeat = summary.get("heartbeat_interval_ms", {}).get("median")
            hb = f"{heartbeat / 1000:g} s" if heartbeat else "client's own (classic)"
            rows.append([label, *(_value(summary.get(m.key), m.fmt) for m in METRICS), hb])
        ours, peer = case["summary"].get("ours"), case["summary"].get("confluent")
        if ours and peer:
            cells = []
            for m in METRICS:
                a, b = ours.get(m.key), peer.get(m.key)
                if not a or not b or not b["median"] or math.isnan(b["median"]):
                    cells.append("n/a")
                else:
                    cells.append(f"{a['median'] / b['median']:.2f}x")
            ratio_rows.append([PROTOCOLS[protocol], *cells])
    out = _md(rows)
    if len(ratio_rows) > 1:
        out += ["", "ours / confluent-kafka, same protocol (↓ better; n/a: a zero):", ""]
        out += _md(ratio_rows)
    if notes:
        out += ["", *notes]
    return out


def _md(rows: list[list[str]]) -> list[str]:
    align = "|---|" + "---:|" * (len(rows[0]) - 1)
    body = ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return ["| " + " | ".join(rows[0]) + " |", align, *body]
