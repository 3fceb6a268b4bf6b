"""Results: the JSON document, the Markdown report (ratios ours / each peer) and the PNG
plots; ``publish`` merges a run into the published document (``merge``: the run's scenario
families replace theirs, the others stay with the run they came from), draws its plots and
writes the docs page from it."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks import settings
from benchmarks.clients import VARIANTS
from benchmarks.runner import ROOT, Context
from benchmarks.scenarios import FAMILIES, family

CLIENT_LABELS = {
    "ours": "aiostream_kafka",
    "ours_pure": "aiostream_kafka (pure)",
    "aiokafka": "aiokafka",
    "confluent": "confluent-kafka",
    "java": "Java",
    "pyrallel": "pyrallel-consumer",
}
COLORS = {
    "ours": "#d62728",
    "ours_pure": "#9467bd",
    "aiokafka": "#1f77b4",
    "confluent": "#2ca02c",
    "java": "#ff7f0e",
    "pyrallel": "#8c564b",
}


# -- machine --------------------------------------------------------------------------------


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _mem_total_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def machine_info() -> dict[str, Any]:
    import aiokafka
    import confluent_kafka

    import aiostream_kafka

    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gb": _mem_total_gb(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "aiostream_kafka": aiostream_kafka.__version__,
        "git_commit": _git_commit(),
        "aiokafka": aiokafka.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "load_average_start": load_average(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    try:
        from benchmarks.clients.java import versions

        info.update(versions())
    except Exception as exc:
        info["java"] = f"unavailable: {exc}"
    return info


# -- JSON -----------------------------------------------------------------------------------


def build_json(
    ctx: Context,
    families: list[str],
    machine: dict[str, Any],
    standalone: dict[str, Any],
    wall: float,
) -> dict[str, Any]:
    rss = {
        fam: {c: statistics.median(v) for c, v in clients.items() if v}
        for fam, clients in ctx.rss.items()
    }
    return {
        "machine": machine,
        "profile": ctx.profile.to_json(),
        "clients": ctx.clients,
        "families": families,
        "settings": {
            "producer": settings.PRODUCER,
            "consumer": settings.CONSUMER,
            "latency_rate": {
                "producer": settings.RATE_PRODUCER,
                "consumer": settings.RATE_CONSUMER,
            },
            "latency_closed": {
                "producer": settings.LATENCY_PRODUCER,
                "consumer": settings.LATENCY_CONSUMER,
            },
            "topic_config": settings.TOPIC_CONFIG,
            "java_heap": settings.JAVA_HEAP,
        },
        "about": {name: family(name).about(ctx.profile) for name in families},
        "titles": {name: family(name).TITLE for name in families},
        "cases": variant_rows([c.to_json() for c in ctx.cases]),
        "peak_rss_mb": {"median": rss, "samples": ctx.rss},
        "standalone": standalone,
        "wall_seconds": wall,
    }


def variant_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case in which a client variant ran (``clients.VARIANTS``: ours' other API),
    followed by a case of its own, named with the variant's API: the variant's figures in
    its base client's place (``ours_nowait`` as ``ours``, ``ours_pure_nowait`` as
    ``ours_pure``; a base whose variant did not run is left out), the peers' figures
    those of the same runs. So the tables get a row, not a column, and every ratio is
    against the peers as measured beside it. The case itself keeps its other clients."""
    bases = {base: variant for variant, (base, _) in VARIANTS.items()}
    keyed = ("samples", "summary", "runs", "configs", "errors", "unsupported")
    out = []
    for case in cases:
        present = [v for v in VARIANTS if any(v in case.get(key, {}) for key in keyed)]
        if not present:
            out.append(case)
            continue
        own = {**case}
        for key in keyed:
            own[key] = {c: x for c, x in case.get(key, {}).items() if c not in VARIANTS}
        out.append(own)
        by_api: dict[str, list[str]] = {}
        for variant in present:
            by_api.setdefault(VARIANTS[variant][1]["api"], []).append(variant)
        for api, variants in by_api.items():
            row = {**case, "case": f"{case['case']} {api}", "variant_of": case["case"]}
            for key in keyed:
                values = case.get(key, {})
                mapped = {c: x for c, x in values.items() if c not in VARIANTS and c not in bases}
                for base, variant in bases.items():
                    if variant in variants and variant in values:
                        mapped[base] = values[variant]
                row[key] = mapped
            out.append(row)
    return out


# -- runs: a published document may hold the families of several runs ----------------------

#: What describes a run beside its cases: a merged document keeps them per run (``runs``).
RUN_KEYS = ("machine", "profile", "clients", "settings", "wall_seconds")


def runs(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs whose figures ``data`` holds, each ``{"families": [...], **RUN_KEYS}``: the
    ``runs`` of a merged document (``merge``), or the one run of a run's own document."""
    if "runs" in data:
        found: list[dict[str, Any]] = data["runs"]
        return found
    return [{"families": list(data["families"]), **{k: data[k] for k in RUN_KEYS}}]


def run_of(data: dict[str, Any], fam: str) -> dict[str, Any]:
    """The run ``fam``'s figures come from (``KeyError`` when no run of ``data`` has it)."""
    for run in runs(data):
        if fam in run["families"]:
            return run
    raise KeyError(fam)


def family_view(data: dict[str, Any], fam: str) -> dict[str, Any]:
    """``data`` as the run of ``fam`` saw it: that run's machine, profile, clients (so the
    family's tables have its run's columns and ratios) and settings; for a run's own
    document, ``data`` itself."""
    if "runs" not in data:
        return data
    run = run_of(data, fam)
    return {**data, **{k: run[k] for k in RUN_KEYS}}


def _client_order(names: set[str]) -> list[str]:
    known = [*settings.CLIENTS, *settings.OPT_IN_CLIENTS]
    return [c for c in known if c in names] + sorted(names - set(known))


def merge(published: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The published document (``docs/img/bench/results.json``) with the families of the
    ``fresh`` run's document replaced by the fresh run's (cases, samples, medians, peak RSS,
    stand-alone output, about text, and the run's machine, profile, clients and settings
    under ``runs``); every other family is kept as it was, with the run it came from. The
    families follow ``scenarios.FAMILIES``' order; the top-level run keys are the fresh
    run's and ``clients`` is every run's clients. Returns ``fresh`` itself when it has every
    published family (the page is then that one run). Plots: each family keeps its own
    (the fresh families' from ``fresh``); ``rss`` only if ``fresh`` drew one, since the
    merged medians need it drawn again (``publish`` does)."""
    fresh_fams = list(fresh["families"])
    kept = [f for f in published["families"] if f not in fresh_fams]
    if not kept:
        return fresh
    order = {f: i for i, f in enumerate(FAMILIES)}
    families = sorted([*kept, *fresh_fams], key=lambda f: order.get(f, len(order)))
    source = {f: (published if f in kept else fresh) for f in families}
    merged_runs = []
    for run, keep in [(r, fresh_fams) for r in runs(fresh)] + [(r, kept) for r in runs(published)]:
        fams = [f for f in run["families"] if f in keep]
        if fams:
            merged_runs.append({**run, "families": fams})

    def per_family(doc: dict[str, Any], key: str, fam: str) -> dict[str, Any]:
        return {fam: doc[key][fam]} if fam in doc.get(key, {}) else {}

    rss: dict[str, dict[str, Any]] = {"median": {}, "samples": {}}
    about: dict[str, Any] = {}
    titles: dict[str, Any] = {}
    standalone: dict[str, Any] = {}
    plots: dict[str, Any] = {}
    for fam in families:
        doc = source[fam]
        about.update(per_family(doc, "about", fam))
        titles.update(per_family(doc, "titles", fam))
        standalone.update(per_family(doc, "standalone", fam))
        plots.update(per_family(doc, "plots", fam))
        for part in ("median", "samples"):
            rss[part].update(per_family(doc["peak_rss_mb"], part, fam))
    if "rss" in fresh.get("plots", {}):
        plots["rss"] = fresh["plots"]["rss"]
    return {
        **fresh,
        "clients": _client_order({c for run in merged_runs for c in run["clients"]}),
        "families": families,
        "about": about,
        "titles": titles,
        "cases": [c for f in families for c in source[f]["cases"] if c["family"] == f],
        "peak_rss_mb": rss,
        "standalone": standalone,
        "plots": plots,
        "runs": merged_runs,
    }


def _short_title(data: dict[str, Any], fam: str) -> str:
    title: str = data["titles"][fam].split(":")[0].split(" (")[0]
    return title


def _run_label(run: dict[str, Any]) -> str:
    m, prof = run["machine"], run["profile"]
    return (
        f"run of {m.get('date')} at commit `{m.get('git_commit')}`, profile "
        f"**{prof['name']}**, {prof['rounds']} measured round(s) after "
        f"{prof['warmup_rounds']} warm-up"
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


# -- numbers --------------------------------------------------------------------------------


def _fmt(fmt: str, value: float) -> str:
    return fmt.format(value)


def cell(summary: dict[str, Any] | None, fmt: str, html: bool = False) -> str:
    """The median, and the spread (min-max) when there is one: in brackets, or (``html``,
    for the docs site) on a line of its own, which keeps the table's columns narrow, and
    which may wrap after its dash."""
    if not summary:
        return "n/a"
    text = _fmt(fmt, summary["median"])
    if summary["n"] > 1:
        low, high = _fmt(fmt, summary["min"]), _fmt(fmt, summary["max"])
        # html: the spread may wrap after its dash (seven-digit spreads in six columns)
        text += f"<br><small>{low}-<wbr>{high}</small>" if html else f" ({low}-{high})"
    return text


def ratio(ours: dict[str, Any] | None, peer: dict[str, Any] | None) -> tuple[float, str] | None:
    """(ours median / peer median, a noise note)."""
    if not ours or not peer or not peer["median"]:
        return None
    value = ours["median"] / peer["median"]
    if ours["n"] < 2 or peer["n"] < 2:
        note = "1 round"
    elif ours["min"] <= peer["max"] and peer["min"] <= ours["max"]:
        note = "within noise"
    else:
        note = ""
    return value, note


def ratio_cell(r: tuple[float, str] | None) -> str:
    if r is None:
        return "n/a"
    value, note = r
    text = f"{value:.2f}x" if 0.1 <= value < 100 else f"{value:.3g}x"
    return text + (" (within noise)" if note == "within noise" else "")


def _peers(data: dict[str, Any]) -> list[str]:
    return [c for c in settings.PEERS if c in data["clients"]]


def _metric_label(metric: dict[str, Any]) -> str:
    return f"{metric['label']} {'↑' if metric['higher_is_better'] else '↓'}"


# -- Markdown -------------------------------------------------------------------------------


def _table(rows: list[list[str]], align: list[str]) -> list[str]:
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return out


def _case_rows(
    data: dict[str, Any],
    cases: list[dict[str, Any]],
    with_values: bool,
    with_ratios: bool = True,
    html: bool = False,
) -> list[str]:
    clients = data["clients"]
    peers = _peers(data)
    # html: the metric under the case, in one column (the figures need the width).
    head = ["case"] if html else ["case", "metric"]
    if with_values:
        head += [CLIENT_LABELS[c] for c in clients]
    if with_ratios:
        head += [f"ours / {CLIENT_LABELS[p]}" for p in peers]
    rows = [head]
    for case in cases:
        for metric in case["metrics"]:
            if metric["key"] == "mb_per_s" and not with_values:
                continue
            summ = {c: case["summary"].get(c, {}).get(metric["key"]) for c in clients}
            if html:
                name = case["case"]
                base = case.get("variant_of")
                if base and name.startswith(base + " "):  # the API on a line of its own
                    name = f"{base}<br>{name[len(base) + 1 :]}"
                row = [f"{name}<br><small>{_metric_label(metric)}</small>"]
            else:
                row = [case["case"], _metric_label(metric)]
            if with_values:
                row += [cell(summ[c], metric["fmt"], html) for c in clients]
            if with_ratios:
                row += [ratio_cell(ratio(summ["ours"], summ[p])) for p in peers]
            rows.append(row)
    labels = 1 if html else 2
    align = ["---"] * labels + ["---:"] * (len(head) - labels)
    return _table(rows, align)


#: The metrics "What this means" sums up per scenario family (default: each case's first).
HEADLINE_METRICS = {
    "latency": ["p50_ms", "p99_ms"],
    "pause": ["fetches_per_1k", "fetched_per_delivered"],
    "fastapi": ["records_per_s", "send_p99_ms"],
}


def _counts(found: list[tuple[float, str, str]], higher_is_better: bool) -> tuple[int, int, int]:
    """(better, worse, within noise) of ours over these ratios."""
    better = sum(1 for v, note, _ in found if not note and (v > 1) == higher_is_better)
    worse = sum(1 for v, note, _ in found if not note and (v > 1) != higher_is_better)
    return better, worse, len(found) - better - worse


def _verdict(counts: tuple[int, int, int], noise: str) -> str:
    words = ("better", "worse", noise)
    return ", ".join(f"{n} {w}" for n, w in zip(counts, words, strict=True) if n)


def _verdicts(
    found: list[tuple[float, str, str]], higher_is_better: bool, cases: int, noise: str
) -> str:
    counts = _counts(found, higher_is_better)
    if len(found) == 1 and cases == 1:
        return "better" if counts[0] else "worse" if counts[1] else noise
    text = _verdict(counts, noise)
    return text if len(found) == cases else f"{text}, of {len(found)}"


def _span(found: list[tuple[float, str, str]]) -> str:
    lo, hi = found[0][0], found[-1][0]
    if len(found) == 1 or ratio_cell((lo, "")) == ratio_cell((hi, "")):
        return ratio_cell((lo, ""))
    return f"{ratio_cell((lo, ''))[:-1]}-{ratio_cell((hi, ''))}"


def _noise(rounds: list[int]) -> str:
    """What a ratio whose spreads overlap is called: one round has no spread, so nothing is
    told apart from noise (``ratio()`` notes "1 round")."""
    if all(n >= 2 for n in rounds):
        return "within noise"
    return "unresolved" if all(n < 2 for n in rounds) else "within noise or unresolved"


def takeaways(data: dict[str, Any]) -> list[str]:
    """One line per scenario family and headline metric: for each peer, the range of the
    ratios ours / peer over the family's cases, and in how many cases ours is better or
    worse beyond the spread of the rounds; then the count of those per peer."""
    lines = []
    totals: dict[str, list[int]] = {}
    groups: list[tuple[str, str, list[dict[str, Any]]]] = []  # family, variant, cases
    for fam in data["families"]:
        by_variant: dict[str, list[dict[str, Any]]] = {}
        for case in data["cases"]:
            if case["family"] == fam:
                variant = (
                    case["case"][len(case["variant_of"]) + 1 :] if "variant_of" in case else ""
                )
                by_variant.setdefault(variant, []).append(case)
        groups += [(fam, variant, cases) for variant, cases in by_variant.items()]
    for fam, variant, cases in groups:
        view = family_view(data, fam)  # its run's peers and rounds
        noise = _noise([view["profile"]["rounds"]])
        metrics = {m["key"]: m for case in cases for m in case["metrics"]}
        keys = HEADLINE_METRICS.get(fam) or [cases[0]["metrics"][0]["key"]]
        for key in keys:
            metric = metrics.get(key)
            if metric is None:
                continue
            hib = metric["higher_is_better"]
            parts = []
            for peer in _peers(view):
                found = []
                for case in cases:
                    ours = case["summary"].get("ours", {}).get(key)
                    r = ratio(ours, case["summary"].get(peer, {}).get(key))
                    if r is not None:
                        found.append((r[0], r[1], case["case"]))
                if found:
                    found.sort()
                    total = totals.setdefault(peer, [0, 0, 0])
                    for i, n in enumerate(_counts(found, hib)):
                        total[i] += n
                    verdict = _verdicts(found, hib, len(cases), noise)
                    parts.append(f"{CLIENT_LABELS[peer]} {_span(found)} ({verdict})")
            if parts:
                count = f", {len(cases)} cases" if len(cases) > 1 else ""
                title = data["titles"][fam].split(":")[0].split(" (")[0]
                title += f" ({variant} rows)" if variant else ""
                lines.append(
                    f"* **{title}**, {_metric_label(metric)}{count}: " + "; ".join(parts) + "."
                )
    if totals:
        noise = _noise([run["profile"]["rounds"] for run in runs(data)])
        per_peer = [
            f"{CLIENT_LABELS[p]}: {_verdict((t[0], t[1], t[2]), noise)}"
            for p, t in sorted(totals.items(), key=lambda item: _peers(data).index(item[0]))
        ]
        lines += ["", "All these figures together, ours against " + "; ".join(per_peer) + "."]
    return lines


def summary_table(data: dict[str, Any]) -> str:
    lines = []
    for fam in data["families"]:
        cases = [c for c in data["cases"] if c["family"] == fam]
        if not cases:
            continue
        view = family_view(data, fam)
        lines += [f"{data['titles'][fam]}:", *_case_rows(view, cases, True), ""]
        extra = _extra_table(fam, cases)
        if extra:
            lines += [*extra, ""]
    lines += _rss_rows(data)
    return "\n".join(lines)


def _rss_rows(data: dict[str, Any], values: bool = True, ratios: bool = True) -> list[str]:
    med = data["peak_rss_mb"]["median"]
    if not med:
        return []
    clients = data["clients"]
    peers = _peers(data)
    head = ["scenario"]
    head += [CLIENT_LABELS[c] for c in clients] if values else []
    head += [f"ours / {CLIENT_LABELS[p]}" for p in peers] if ratios else []
    rows = [head]
    for fam, per_client in med.items():
        row = [data["titles"].get(fam, fam).split(":")[0]]
        if values:
            row += [f"{per_client[c]:,.0f}" if c in per_client else "n/a" for c in clients]
        for p in peers if ratios else []:
            if "ours" in per_client and p in per_client:
                row.append(f"{per_client['ours'] / per_client[p]:.2f}x")
            else:
                row.append("n/a")
        rows.append(row)
    return [
        "Peak RSS, MB (median over runs) ↓:",
        *_table(rows, ["---"] + ["---:"] * (len(head) - 1)),
    ]


def _run_lines(run: dict[str, Any]) -> list[str]:
    """The bullet list of one run: profile, machine, broker, versions, date."""
    m, prof = run["machine"], run["profile"]
    return [
        f"* profile **{prof['name']}**: {prof['rounds']} measured round(s) after "
        f"{prof['warmup_rounds']} warm-up round(s); wall time {run['wall_seconds']:.0f} s",
        f"* machine: {m.get('cores')} cores ({m.get('cpu')}), {m.get('memory_gb')} GB, "
        f"{m.get('platform')}; load average {m.get('load_average_start')} at the start, "
        f"{m.get('load_average_end')} at the end",
        f"* broker: {m.get('broker')}, on the same machine",
        f"* Python {m.get('python')}; {m.get('java')}",
        f"* aiostream_kafka {m.get('aiostream_kafka')} ({m.get('git_commit')}), aiokafka "
        f"{m.get('aiokafka')}, confluent-kafka {m.get('confluent_kafka')} (librdkafka "
        f"{m.get('librdkafka')}), Java kafka-clients {m.get('kafka_tools', '?')}",
        f"* date: {m.get('date')}",
    ]


def _measured_at(data: dict[str, Any]) -> str:
    """The page's "Measured at" sentence: the one run, or (a merged document) which
    scenarios each run measured."""
    all_runs = runs(data)
    if len(all_runs) == 1:
        m, prof = data["machine"], data["profile"]
        return (
            f"Measured at commit `{m.get('git_commit')}` on {m.get('date')}, profile "
            f"**{prof['name']}** ({prof['rounds']} round(s)), on a {m.get('cores')}-core "
            "machine shared by the broker and the clients: see [This run](#this-run)."
        )
    cores = {run["machine"].get("cores") for run in all_runs}
    where = (
        f"on a {cores.pop()}-core machine" if len(cores) == 1 else "on the machines listed below"
    )
    parts = [
        f"{_and([_short_title(data, f) for f in run['families']])}: {_run_label(run)}"
        for run in all_runs
    ]
    return (
        f"Measured in {len(all_runs)} runs, each scenario's figures from one of them (so "
        "every ratio is between clients that ran side by side, in the same rounds), "
        f"{where} shared by the broker and the clients: " + "; ".join(parts) + ". "
        "See [The runs](#the-runs)."
    )


def markdown(data: dict[str, Any], image_prefix: str, html: bool = False) -> str:
    """The report: what the figures mean first, then each scenario (its plot, its
    figures, its ratios), memory, every ratio in one table, the run(s) and the settings.
    ``html``: for the docs site (spreads on a line of their own). A merged document
    (``merge``) names the run of each scenario's figures in its section and lists every
    run at the end."""
    all_runs = runs(data)
    merged = len(all_runs) > 1
    lines = [
        "# Benchmarks",
        "",
        "aiostream_kafka beside aiokafka, confluent-kafka (librdkafka) and the Java client "
        "(the perf tools of Kafka's `kafka-tools` jar), on the same broker, the same topic "
        "settings, the same record sizes and counts and the same client settings; every run "
        "in a fresh process, the clients alternating, round after round. Figures are "
        "medians, with the spread (min-max over the rounds) beside them. Ratios are "
        "**ours / peer**: above 1 is better for ↑ metrics (throughput), below 1 is better "
        "for ↓ metrics (latency, fetches, bytes, memory). A ratio marked *within noise* "
        "has overlapping spreads: the machine's noise does not resolve the difference.",
        "",
        _measured_at(data) + " Reproduce with "
        "`make bench` (or `python -m benchmarks`; `--quick` for a short run); see "
        "`benchmarks/README.md`.",
    ]
    one_round = [run for run in all_runs if run["profile"]["rounds"] < 2]
    if one_round:
        which = (
            f" ({_and([_short_title(data, f) for run in one_round for f in run['families']])})"
            if merged
            else ""
        )
        lines += [
            "",
            f"> **One measured round**{which}: the spread is unknown, so no ratio here can be "
            "told apart from noise; on this shared 2-core machine treat anything within about "
            "±20 % as unresolved. The full run (`make bench`) measures 5 rounds.",
        ]
    summary = takeaways(data)
    if summary:
        lines += [
            "",
            "## What this means",
            "",
            "Per scenario, the ratios ours / peer over its cases (lowest-highest), and in how "
            "many cases ours is better or worse by more than the spread of the rounds (the "
            "tables below have every figure"
            + ("; each scenario's from its own run, named in its section" if merged else "")
            + "):",
            "",
            *summary,
        ]
    for fam in data["families"]:
        view = family_view(data, fam)
        lines += ["", f"## {data['titles'][fam]}", ""]
        if merged:
            lines += [
                f"*Figures of the {_run_label(run_of(data, fam))} (the other scenarios: "
                "[The runs](#the-runs)).*",
                "",
            ]
        if data.get("plots", {}).get(fam):
            lines += [f"![{data['titles'][fam]}]({image_prefix}{fam}.png)", ""]
        lines += [data["about"][fam], ""]
        cases = [c for c in data["cases"] if c["family"] == fam]
        if cases:
            lines += _case_rows(view, cases, True, with_ratios=False, html=html)
            lines += ["", *_case_rows(view, cases, False)]
            notes = _notes(cases)
            if notes:
                lines += ["", *notes]
            extra = _extra_table(fam, cases)
            if extra:
                lines += ["", *extra]
        standalone = data["standalone"].get(fam)
        if standalone:
            for name, part in standalone.items():
                table = _codec_table(part.get("json")) if html else []
                if table:  # its 105-column text does not fit the docs column
                    caption = part["output"].splitlines()[0]
                    lines += ["", f"`{name}.py` ({caption}):", "", *table]
                    continue
                lines += ["", f"`{name}.py` output:", "", "```text", part["output"].rstrip(), "```"]
    rss = _rss_rows(data)
    if rss:
        lines += [
            "",
            "## Peak memory",
            "",
            "Peak resident set size of the process that ran each client (`ru_maxrss`): the "
            "Python interpreter with the client loaded, or the JVM of the Java tool "
            f"(`{settings.JAVA_HEAP}`, as Kafka's scripts give the tools), median over the "
            "scenario's runs"
            + (
                ", each scenario's from its own run (n/a: the client was not in that run)."
                if merged
                else "."
            ),
            "",
        ]
        if data.get("plots", {}).get("rss"):
            lines += [f"![Peak RSS]({image_prefix}rss.png)", ""]
        lines += _rss_rows(data, ratios=False)[1:]
        lines += ["", *_rss_rows(data, values=False)[1:]]
    lines += ["", "## All ratios", ""]
    if merged:
        lines += [
            "Each row's ratios compare clients of the same run (n/a: the peer was not in the "
            "run of that row's scenario, or has no such case).",
            "",
        ]
    lines += _case_rows(data, data["cases"], with_values=False)
    if merged:
        lines += [
            "",
            "## The runs",
            "",
            "Each scenario's figures come from one run; a run published with `--publish` "
            "replaces the figures of the scenarios it ran and keeps the others "
            "(`benchmarks/README.md`).",
        ]
        for run in all_runs:
            m = run["machine"]
            lines += [
                "",
                f"### Run of {m.get('date')} (`{m.get('git_commit')}`)",
                "",
                f"* scenarios: {_and([_short_title(data, f) for f in run['families']])}",
                *_run_lines(run),
            ]
    else:
        lines += ["", "## This run", "", *_run_lines(data)]
    lines += ["", "## Client settings", "", _settings_text(data, _peers(data))]
    return "\n".join(lines) + "\n"


def _extra_table(fam: str, cases: list[dict[str, Any]]) -> list[str]:
    """A family's own table (``extra_table`` of its module, if it has one)."""
    module = family(fam)
    if not hasattr(module, "extra_table"):
        return []
    lines: list[str] = module.extra_table(cases)
    return lines


def _codec_table(result: dict[str, Any] | None) -> list[str]:
    """``codec_bench.py --json`` as a Markdown table (no table without its results)."""
    if not result or not result.get("results"):
        return []
    head = ["case", "ours", "aiokafka (C)", "aiokafka (Python)", "ours / C", "ours / Python"]
    rows = [head]
    for r in result["results"]:
        rows.append(
            [
                f"{r['workload']}, {r['compression']}<br><small>{r['op']}</small>",
                f"{r['ours']:,.0f}",
                f"{r['aiokafka_c']:,.0f}",
                f"{r['aiokafka_py']:,.0f}",
                f"{r['ours/aiokafka_c']:.2f}x",
                f"{r['ours/aiokafka_py']:.2f}x",
            ]
        )
    return _table(rows, ["---"] + ["---:"] * 5)


def _notes(cases: list[dict[str, Any]]) -> list[str]:
    notes = []
    for case in cases:
        for client, reason in case["unsupported"].items():
            notes.append(f"* {case['case']}, {CLIENT_LABELS[client]}: n/a ({reason})")
        for client, errors in case["errors"].items():
            notes.append(f"* {case['case']}, {CLIENT_LABELS[client]}: **error**: {errors[0][:200]}")
        for client, runs in case["runs"].items():
            if any(r.get("drained") for r in runs):
                notes.append(
                    f"* {case['case']}, {CLIENT_LABELS[client]}: read every record before the "
                    "time was up (its rate counts the time until then)"
                )
            stalls = sum(r.get("stalls", 0) for r in runs)
            if stalls:
                notes.append(
                    f"* {case['case']}, {CLIENT_LABELS[client]}: {stalls} take(s) found no "
                    "record within 1 s (stalls, over all rounds)"
                )
            if any(r.get("lost") for r in runs):
                notes.append(f"* {case['case']}, {CLIENT_LABELS[client]}: records lost")
    return notes


def _settings_text(data: dict[str, Any], peers: list[str]) -> str:
    del peers
    lines = [
        "Exactly what each client was given, per scenario (anything not listed is the "
        "client's default):",
        "",
    ]
    for fam in data["families"]:
        cases = [c for c in data["cases"] if c["family"] == fam]
        if not cases:
            continue
        lines += [f"### {data['titles'][fam]}", ""]
        seen: dict[str, str] = {}
        for case in cases:
            for client, config in case["configs"].items():
                if not config:
                    continue
                text = json.dumps(config, indent=1, default=str)
                if seen.get(client) == text:
                    continue
                seen[client] = text
                lines += [
                    f"{CLIENT_LABELS[client]} ({case['case']}):",
                    "",
                    "```json",
                    text,
                    "```",
                    "",
                ]
    return "\n".join(lines)


# -- plots ----------------------------------------------------------------------------------


def plot(data: dict[str, Any], out: Path, families: list[str] | None = None) -> dict[str, str]:
    """Draw each family's plot (only those of ``families`` when given) and the peak-RSS
    plot into ``out``; returns {family or "rss": file name}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made: dict[str, str] = {}
    clients = data["clients"]
    for fam in data["families"] if families is None else families:
        cases = [c for c in data["cases"] if c["family"] == fam]
        if not cases:
            continue
        fam_clients = family_view(data, fam)["clients"]
        keys = {m["key"] for m in cases[0]["metrics"]}
        skip = {"mb_per_s"} | ({"records_per_s"} if "records" in keys else set())
        metrics = [m for m in cases[0]["metrics"] if m["key"] not in skip]
        # At most 10 in wide (the docs column shows it about 7 in wide: wider, and the
        # labels would be too small to read), and tall enough for the rotated case names.
        fig, axes = plt.subplots(
            1,
            len(metrics),
            figsize=(min(10, max(6, 3.2 * len(metrics) + 0.6 * len(cases))), 4.4),
            squeeze=False,
        )
        shown = [c for c in fam_clients if any(c in case["summary"] for case in cases)]
        width = 0.8 / len(shown)
        for ax, metric in zip(axes[0], metrics, strict=False):
            values = [
                s["median"]
                for case in cases
                for s in (case["summary"].get(c, {}).get(metric["key"]) for c in shown)
                if s and s["median"] > 0
            ]
            if values and max(values) / min(values) > 50:
                ax.set_yscale("log")
            for j, client in enumerate(shown):
                xs, ys, lo, hi = [], [], [], []
                for i, case in enumerate(cases):
                    s = case["summary"].get(client, {}).get(metric["key"])
                    if s:
                        xs.append(i + (j - (len(shown) - 1) / 2) * width)
                        ys.append(s["median"])
                        lo.append(s["median"] - s["min"])
                        hi.append(s["max"] - s["median"])
                if xs:
                    ax.bar(
                        xs,
                        ys,
                        width,
                        yerr=[lo, hi],
                        capsize=2,
                        color=COLORS[client],
                        label=CLIENT_LABELS[client],
                    )
            ax.set_xticks(range(len(cases)))
            ax.set_xticklabels(
                [c["case"] for c in cases],
                rotation=30 if len(cases) > 3 else 0,
                ha="right" if len(cases) > 3 else "center",
                fontsize=8,
            )
            ax.set_title(_metric_label(metric), fontsize=9)
            ax.grid(axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(data["titles"][fam], fontsize=10)
        fig.tight_layout()
        path = out / f"{fam}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made[fam] = path.name
    med = data["peak_rss_mb"]["median"]
    if med:
        fams = list(med)
        fig, ax = plt.subplots(figsize=(7, 3.6))
        width = 0.8 / len(clients)
        for j, client in enumerate(clients):
            xs = [
                i + (j - (len(clients) - 1) / 2) * width
                for i, f in enumerate(fams)
                if client in med[f]
            ]
            ys = [med[f][client] for f in fams if client in med[f]]
            if xs:
                ax.bar(xs, ys, width, color=COLORS[client], label=CLIENT_LABELS[client])
        ax.set_xticks(range(len(fams)))
        ax.set_xticklabels(fams, fontsize=8)
        ax.set_ylabel("MB")
        ax.set_title("Peak RSS per client process ↓", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "rss.png", dpi=110)
        plt.close(fig)
        made["rss"] = "rss.png"
    return made


# -- files ----------------------------------------------------------------------------------


def write(data: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data["plots"] = plot(data, out) if plots else {}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    md_path = out / "results.md"
    md_path.write_text(markdown(data, ""))
    return [json_path, md_path, *(out / name for name in data["plots"].values())]


def publish(data: dict[str, Any], docs: Path, plots: bool = True) -> list[Path]:
    """Publish a run's document into the docs: merged (``merge``) into the published
    ``docs/img/bench/results.json`` (the run's families replace theirs, every other family
    stays with the run it came from; the document is the run's own when it has them all),
    the run's families' plots and the peak-RSS plot drawn again from it into
    ``docs/img/bench/`` (``plots``), then ``docs/benchmarks.md`` written from it
    (``republish``). Returns the paths written."""
    img = docs / "img" / "bench"
    img.mkdir(parents=True, exist_ok=True)
    published = img / "results.json"
    fresh = {**data, "plots": {}}  # this run's plots are drawn again below, from the merge
    merged = merge(json.loads(published.read_text()), fresh) if published.exists() else fresh
    written = []
    if plots:
        drawn = plot(merged, img, families=list(data["families"]))
        every = {**merged["plots"], **drawn}
        merged["plots"] = {k: every[k] for k in [*merged["families"], "rss"] if k in every}
        written = [img / name for name in drawn.values()]
    published.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    return [republish(docs, plots=False), published, *written]


#: Hand-written sections appended to the docs page, one Markdown file each (sorted by
#: name): figures of an opt-in scenario measured on their own, published to a JSON of its
#: own (``publish_opt_in``) and shown where the section asks for them.
SECTIONS = Path(__file__).resolve().parent / "sections"


#: Where ``--publish`` of an opt-in run keeps each family's results (``FAMILY.json``), beside
#: the main run's ``results.json``; a section with the line ``<!-- results: FAMILY -->`` gets
#: that run's tables there.
PUBLISHED = ROOT / "docs" / "img" / "bench"
_MARKER = re.compile(r"^<!-- results: ([a-z_]+) -->$", re.MULTILINE)


def docs_page(data: dict[str, Any]) -> str:
    """``docs/benchmarks.md``: the report for the docs site, then the hand-written
    sections of ``benchmarks/sections/*.md`` (each ``<!-- results: FAMILY -->`` line
    replaced by the tables of ``docs/img/bench/FAMILY.json``, an opt-in run published)."""
    page = markdown(data, "img/bench/", html=True)
    for section in sorted(SECTIONS.glob("*.md")) if SECTIONS.is_dir() else []:
        text = section.read_text(encoding="utf-8")
        page += "\n" + _MARKER.sub(lambda m: opt_in_block(m.group(1)), text)
    return page


def opt_in_block(fam: str) -> str:
    """The tables of the published opt-in run of ``fam`` (``docs/img/bench/FAMILY.json``)
    with the run's details, or a note that it was not published yet."""
    path = PUBLISHED / f"{fam}.json"
    if not path.exists():
        return f"*Not measured yet: `python -m benchmarks --scenarios {fam} --publish`.*"
    part = json.loads(path.read_text())
    m, prof = part["machine"], part["profile"]
    builds = sorted(
        {
            str(c["configs"].get("ours", {}).get("build", "?"))
            for c in part["cases"]
            if c["configs"].get("ours")
        }
    )
    lines = [
        f"Measured at commit `{m.get('git_commit')}` on {m.get('date')}: profile "
        f"**{prof['name']}**, {prof['rounds']} measured round(s) after "
        f"{prof['warmup_rounds']} warm-up, wall time {part['wall_seconds']:.0f} s; "
        f"aiostream_kafka build: {', '.join(builds) or '?'}; {m.get('cores')} cores "
        f"({m.get('cpu')}) shared with the broker ({m.get('broker')}), load average "
        f"{m.get('load_average_start')} at the start, {m.get('load_average_end')} at the end; "
        f"Python {m.get('python')}, aiokafka {m.get('aiokafka')}.",
        "",
        part["about"][fam],
        "",
    ]
    cases = [c for c in part["cases"] if c["family"] == fam]
    lines += _extra_table(fam, cases) or _case_rows(part, cases, True, html=True)
    notes = _notes(cases)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def publish_opt_in(data: dict[str, Any], docs: Path) -> list[Path]:
    """``--publish`` of a run of opt-in families only: each family's results to
    ``docs/img/bench/FAMILY.json`` (the main run's ``results.json``, its plots and the page's
    main part stay), then ``docs/benchmarks.md`` again (its sections show them)."""
    img = docs / "img" / "bench"
    img.mkdir(parents=True, exist_ok=True)
    written = []
    for fam in data["families"]:
        part = {
            **data,
            "families": [fam],
            "cases": [c for c in data["cases"] if c["family"] == fam],
            "about": {fam: data["about"][fam]},
            "titles": {fam: data["titles"][fam]},
            "plots": {},
        }
        path = img / f"{fam}.json"
        path.write_text(json.dumps(part, indent=1, default=str) + "\n")
        written.append(path)
    return [republish(docs, plots=False), *written]


def republish(docs: Path, plots: bool = True) -> Path:
    """Write ``docs/benchmarks.md`` again from the published results (no benchmark runs),
    and with ``plots`` (matplotlib) draw the plots again from them too: ``python -m
    benchmarks --republish`` after a change of this report's layout."""
    img = docs / "img" / "bench"
    data = json.loads((img / "results.json").read_text())
    if plots:
        drawn = plot(data, img)
        assert set(drawn.values()) == set(data.get("plots", {}).values()), drawn
    page = docs / "benchmarks.md"
    page.write_text(docs_page(data))
    return page
