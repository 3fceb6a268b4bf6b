"""Draw the Observability page's pictures from a real run of ``examples/otel_tracing.py``.

Runs the example (an embedded broker unless ``--bootstrap-servers`` is given) with
``--export``, then draws, with matplotlib, from the spans and metric samples it exported:

* ``docs/img/otel-trace.png``: a trace waterfall of a few orders: one row per span, a bar
  from its start to its end on a millisecond axis, indented under its parent, coloured by
  service, labelled with its name and kind; the receive spans (each in a trace of its own)
  below, with their links to the send spans drawn as dashed lines;
* ``docs/img/otel-metrics.png``: the messages sent and consumed over the run, the consumer
  lag gauge per partition, and the buckets of the two duration histograms.

These are our drawings of the exported data, not screenshots of a tracing product.

    python tools/render_otel.py                          # embedded broker (needs Java)
    python tools/render_otel.py --bootstrap-servers 127.0.0.1:9092
    python tools/render_otel.py --json run.json          # draw again from a saved export
    python tools/render_otel.py --keep-json run.json     # keep the export of this run

Needs the ``bench`` extra (matplotlib) and ``opentelemetry-sdk``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "otel_tracing.py"
OUT = ROOT / "docs" / "img"
COLOURS = {"orders": "#3b73b9", "billing": "#e07b28"}
OTHER = "#7f7f7f"
FOOTNOTE = (
    "Drawn by tools/render_otel.py from the {what} examples/otel_tracing.py exported\n"
    "(OpenTelemetry SDK, in-memory {where}): not a product's screenshot."
)

Span = dict[str, Any]


def run_example(bootstrap: str | None, export: Path, timeout_s: float) -> None:
    command = [sys.executable, str(EXAMPLE), "--export", str(export)]
    if bootstrap:
        command += ["--bootstrap-servers", bootstrap]
    subprocess.run(command, check=True, timeout=timeout_s)


# -- the trace waterfall ------------------------------------------------------------------


def tree_rows(spans: list[Span], trace_id: str) -> list[tuple[Span, int]]:
    """The spans of one trace, depth-first in start order, with their depth."""
    members = [s for s in spans if s["trace_id"] == trace_id]
    ids = {s["span_id"] for s in members}
    children: dict[str | None, list[Span]] = defaultdict(list)
    for s in members:
        children[s["parent_id"] if s["parent_id"] in ids else None].append(s)
    rows: list[tuple[Span, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for s in sorted(children[parent], key=lambda s: s["start_ns"]):
            rows.append((s, depth))
            walk(s["span_id"], depth + 1)

    walk(None, 0)
    return rows


def waterfall(data: dict[str, Any], out: Path, skip: int, count: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    spans: list[Span] = data["spans"]
    requests = sorted(
        (s for s in spans if s["name"] == "POST /orders"), key=lambda s: s["start_ns"]
    )
    chosen = requests[skip : skip + count]
    if not chosen:
        raise SystemExit(f"no POST /orders spans after skipping {skip}")
    sections: list[tuple[str, list[tuple[Span, int]]]] = []
    number: dict[str, int] = {}  # span id -> the number of its trace in the picture
    for n, request in enumerate(chosen, 1):
        rows = tree_rows(spans, request["trace_id"])
        sections.append((f"trace {n}  ({request['trace_id'][:16]}…)", rows))
        number.update((s["span_id"], n) for s, _ in rows)
    # The receive spans are roots of traces of their own, linked to the send spans.
    receives = [s for s in spans if any(link["span_id"] in number for link in s["links"])]
    first_ns = min(s["start_ns"] for _, rows in sections for s, _ in rows)
    last_ns = max(s["end_ns"] for _, rows in sections for s, _ in rows)
    commits = [
        s for s in spans if s["name"].startswith("commit") and first_ns <= s["start_ns"] <= last_ns
    ][:2]
    if receives or commits:
        sections.append(
            ("billing's own traces: receive (linked to the sends), commit",
             [(s, 0) for s in receives + commits])
        )  # fmt: skip

    n_rows = sum(len(rows) + 1 for _, rows in sections)
    fig, ax = plt.subplots(figsize=(8.5, 0.3 * n_rows + 1.8))

    def ms(ns: int) -> float:
        return float(ns - first_ns) / 1e6

    span_ms = ms(max(last_ns, *(s["end_ns"] for s in receives + commits)))
    label_x = -0.42 * span_ms  # the labels' column, left of time zero
    y = 0
    for title, rows in sections:
        ax.text(label_x, y, title, fontsize=9.5, fontweight="bold", va="center", color="#333")
        ax.axhline(y - 0.5, color="#ddd", lw=0.8)
        y += 1
        for s, depth in rows:
            start, end = ms(s["start_ns"]), ms(s["end_ns"])
            colour = COLOURS.get(s["service"], OTHER)
            width = max(end - start, span_ms * 0.004)  # an instant span still shows
            ax.barh(y, width, left=start, height=0.62, color=colour)
            ax.text(label_x + depth * span_ms * 0.025, y, s["name"], fontsize=9.5, va="center")
            ax.text(
                -0.012 * span_ms, y, s["kind"].lower(), fontsize=8, va="center",
                ha="right", color="#666",
            )  # fmt: skip
            ax.text(end + span_ms * 0.008, y, note(s, number), fontsize=8, va="center",
                    color="#555")  # fmt: skip
            y += 1
    ax.set_ylim(y - 0.5, -0.6)
    ax.set_xlim(label_x, span_ms * 1.25)
    ax.set_yticks([])
    ax.set_xticks([t for t in ax.get_xticks() if 0 <= t <= span_ms * 1.1])
    ax.set_xlabel("ms since the first request shown")
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    handles = [Patch(color=c, label=f"service.name = {name}") for name, c in COLOURS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=2, fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 0.965))  # fmt: skip
    fig.suptitle(
        f"Orders {skip + 1}-{skip + len(chosen)} of {len(requests)}: "
        "POST /orders → send → process → charge card, send invoice",
        fontsize=10.5,
    )
    fig.text(0.01, 0.005, FOOTNOTE.format(what="spans", where="span exporters"), fontsize=7.5,
             color="#666")  # fmt: skip
    fig.tight_layout(rect=(0, 0.035, 1, 0.955))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def note(s: Span, number: dict[str, int]) -> str:
    """What the picture says beside a span's bar: its length, or a receive's records and
    links (by the numbers of the traces shown)."""
    records = s["attributes"].get("messaging.batch.message_count")
    if records is None:
        return f"{(s['end_ns'] - s['start_ns']) / 1e6:.1f} ms"
    traces = sorted({number[link["span_id"]] for link in s["links"] if link["span_id"] in number})
    others = sum(1 for link in s["links"] if link["span_id"] not in number)
    text = f"{records} record{'s' if records != 1 else ''}: links to the send of trace "
    text += ", ".join(map(str, traces))
    return text + (f" and {others} other{'s' if others != 1 else ''}" if others else "")


# -- the metrics dashboard ----------------------------------------------------------------


def series(
    samples: Iterable[dict[str, Any]], name: str, service: str, key: tuple[str, ...] = ()
) -> dict[tuple[Any, ...], list[tuple[float, float]]]:
    """(t, value summed over the other attributes) per value of the ``key`` attributes."""
    at: dict[tuple[Any, ...], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for m in samples:
        if m["name"] == name and m["service"] == service:
            at[tuple(m["attributes"].get(k) for k in key)][m["t_s"]] += m["value"]
    return {k: sorted(v.items()) for k, v in at.items()}


def final_histogram(
    samples: list[dict[str, Any]], name: str, service: str, operation: str
) -> dict[str, Any] | None:
    """The last sample of a histogram, summed over its attribute sets."""
    points = [
        m for m in samples
        if m["name"] == name and m["service"] == service
        and m["attributes"].get("messaging.operation.name") == operation
    ]  # fmt: skip
    if not points:
        return None
    last = max(m["t_s"] for m in points)
    points = [m for m in points if m["t_s"] == last]
    buckets = [sum(col) for col in zip(*(m["buckets"] for m in points), strict=True)]
    return {
        "bounds": points[0]["bounds"],
        "buckets": buckets,
        "count": sum(m["count"] for m in points),
        "max": max(m["max"] for m in points),
    }


def quantile(hist: dict[str, Any], q: float) -> float:
    """The ``q`` quantile estimated from the buckets (linear within a bucket), in s."""
    target = q * hist["count"]
    seen = 0
    bounds = hist["bounds"]
    for i, n in enumerate(hist["buckets"]):
        if n and seen + n >= target:
            low = bounds[i - 1] if i > 0 else 0.0
            high = bounds[i] if i < len(bounds) else hist["max"]
            return float(low + (high - low) * (target - seen) / n)
        seen += n
    return float(hist["max"])


def dashboard(data: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    samples: list[dict[str, Any]] = data["metrics"]
    topics = data["topics"]
    fig, axes = plt.subplots(2, 2, figsize=(9, 7.4))
    (sent_ax, lag_ax), (op_ax, proc_ax) = axes

    lines = [
        ("orders", "messaging.client.sent.messages", f"sent to {topics['orders']} (orders)", "-"),
        ("billing", "messaging.client.consumed.messages", "consumed (billing)", "-"),
        ("billing", "messaging.client.sent.messages", f"sent to {topics['invoices']} (billing)",
         "--"),
    ]  # fmt: skip
    for service, name, label, style in lines:
        for points in series(samples, name, service).values():
            t, v = zip(*[(0.0, 0.0), *points], strict=True)  # nothing counted at the start
            sent_ax.step(t, v, where="post", ls=style, color=COLOURS[service], label=label)
    sent_ax.set_title("messaging.client.sent / consumed.messages (counters)", fontsize=10)
    sent_ax.set_ylabel("messages (cumulative)")
    sent_ax.legend(fontsize=8.5, frameon=False)

    lag = series(
        samples, "aiostream_kafka.consumer.lag", "billing", ("messaging.destination.partition.id",)
    )
    for (partition,), points in sorted(lag.items()):
        t, v = zip(*points, strict=True)
        lag_ax.step(t, v, where="post", label=f"{topics['orders']} partition {partition}")
    lag_ax.set_title("aiostream_kafka.consumer.lag (gauge, billing)", fontsize=10)
    lag_ax.set_ylabel("records after the position")
    lag_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    lag_ax.legend(fontsize=8.5, frameon=False)
    for ax in (sent_ax, lag_ax):
        ax.set_xlabel("s since the first order")
        ax.set_xlim(left=0)

    def bars(ax: Any, title: str, histograms: list[tuple[str, str, dict[str, Any]]]) -> None:
        bounds = histograms[0][2]["bounds"]
        used = max(
            i for _, _, h in histograms for i, n in enumerate(h["buckets"]) if n
        )  # the last bucket with a count
        shown = min(used + 2, len(bounds) + 1)
        labels = [f"≤{b * 1000:g}" for b in bounds] + [f">{bounds[-1] * 1000:g}"]
        width = 0.8 / len(histograms)
        for j, (label, colour, h) in enumerate(histograms):
            p50, p99 = quantile(h, 0.5) * 1000, quantile(h, 0.99) * 1000
            ax.bar(
                [i + (j - (len(histograms) - 1) / 2) * width for i in range(shown)],
                h["buckets"][:shown], width=width * 0.95, color=colour,
                label=f"{label}: {h['count']}, p50 ≈ {p50:.0f} ms, p99 ≈ {p99:.0f} ms",
            )  # fmt: skip
        ax.set_xticks(range(shown), labels[:shown], fontsize=8.5)
        ax.set_xlabel("bucket (ms): the conventions' boundaries")
        ax.set_ylabel("count")
        ax.set_title(title, fontsize=10)
        top = max(n for _, _, h in histograms for n in h["buckets"])
        ax.set_ylim(0, top * (1.25 + 0.1 * len(histograms)))  # room for the legend
        ax.legend(fontsize=8, frameon=False, loc="upper right")

    name = "messaging.client.operation.duration"
    ops = [
        (f"send {topics['orders']} (orders)", COLOURS["orders"],
         final_histogram(samples, name, "orders", "send")),
        (f"send {topics['invoices']} (billing)", "#f2b880",
         final_histogram(samples, name, "billing", "send")),
        ("commit (billing)", "#9c5a1c", final_histogram(samples, name, "billing", "commit")),
    ]  # fmt: skip
    bars(op_ax, f"{name} (histogram)", [(a, b, h) for a, b, h in ops if h])
    process = final_histogram(samples, "messaging.process.duration", "billing", "process")
    if process:
        bars(
            proc_ax,
            "messaging.process.duration (histogram, billing)",
            [(f"process {topics['orders']}", COLOURS["billing"], process)],
        )
    footnote = FOOTNOTE.format(what="metrics", where="metric readers, sampled every 50 ms")
    fig.text(0.01, 0.005, footnote + " p50/p99: estimated from the buckets.", fontsize=7.5,
             color="#666")  # fmt: skip
    fig.tight_layout(rect=(0, 0.045, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--json", type=Path, help="draw from this export; run nothing")
    parser.add_argument("--keep-json", type=Path, help="where to keep this run's export")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go")
    parser.add_argument(
        "--skip", type=int, default=4,
        help="orders left out of the waterfall (the first four wait for the producer's start)",
    )  # fmt: skip
    parser.add_argument("--count", type=int, default=3, help="orders in the waterfall")
    args = parser.parse_args()

    if args.json:
        data = json.loads(args.json.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            export = args.keep_json or Path(tmp) / "otel-run.json"
            run_example(args.bootstrap_servers, export, timeout_s=600)
            data = json.loads(export.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    waterfall(data, args.out / "otel-trace.png", args.skip, args.count)
    dashboard(data, args.out / "otel-metrics.png")
    print(f"wrote {args.out / 'otel-trace.png'} and {args.out / 'otel-metrics.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
