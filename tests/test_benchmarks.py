"""The benchmark suite's harness works: its smallest configuration (the ``smoke`` profile:
one round, tiny counts, every scenario family but the codec micro-benchmarks, all four
clients, and ours again as the pure build) runs against the session broker and writes the
JSON, the Markdown with a ratio for each peer, and the plots. It checks the harness, not
speed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aiostream_kafka import _native
from aiostream_kafka.testing.cluster import KafkaCluster

ROOT = Path(__file__).resolve().parent.parent


def _run_benchmarks(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks ARGS`` from the repository root, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


FAMILIES = ["produce", "consume", "latency", "pause", "fastapi"]


@pytest.mark.real_broker(
    reason="runs the Java perf clients (a JVM of their own) beside the Python peers"
)
def test_benchmark_suite_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = _run_benchmarks(
        "--profile",
        "smoke",
        "--scenarios",
        ",".join(FAMILIES),
        "--bootstrap-servers",
        kafka_cluster.bootstrap_servers,
        "--output",
        str(out),
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]

    data = json.loads((out / "results.json").read_text())
    assert data["machine"]["cores"]
    assert data["machine"]["python"]
    assert "java" in data["machine"]
    by_family: dict[str, list[dict]] = {}
    for case in data["cases"]:
        assert not case["errors"], (case["family"], case["case"], case["errors"])
        by_family.setdefault(case["family"], []).append(case)
        assert "ours" in case["summary"], (case["family"], case["case"])
        assert case["configs"]["ours"], "every client's settings are recorded"
    assert sorted(by_family) == sorted(FAMILIES)
    measured = {c for case in data["cases"] for c in case["summary"]}
    assert measured == {"ours", "ours_pure", "aiokafka", "confluent", "java"}
    # the pure client really ran without its compiled modules, ours as built
    for case in data["cases"]:
        assert case["configs"]["ours_pure"]["build"] == "pure Python", case["case"]
        assert case["configs"]["ours"]["build"] != "pure Python" or not _native.compiled_modules()
    # ours' enqueue_nowait: a row of its own after each per-record produce case, its
    # figures in ours' columns beside the same peers' runs (benchmarks.report.variant_rows)
    produce = {case["case"]: case for case in by_family["produce"]}
    nowait = produce["100 B lz4 enqueue_nowait"]
    assert nowait["variant_of"] == "100 B lz4"
    assert set(nowait["summary"]) == {"ours", "ours_pure", "aiokafka", "confluent", "java"}
    assert nowait["summary"]["confluent"] == produce["100 B lz4"]["summary"]["confluent"]
    for client in ("ours", "ours_pure"):
        assert nowait["configs"][client]["api"].startswith("producer.enqueue_nowait("), client
        assert nowait["runs"][client][0]["records"] == 3000, client
        assert produce["100 B lz4"]["configs"][client]["api"].startswith("await producer.enqueue(")
    assert nowait["configs"]["ours_pure"]["build"] == "pure Python"
    pause = by_family["pause"][0]["summary"]
    assert pause["ours"]["fetches_per_1k"]["median"] > 0  # counted by the proxy
    assert pause["aiokafka"]["fetched_per_delivered"]["median"] > 0

    markdown = (out / "results.md").read_text()
    for peer in ("aiostream_kafka (pure)", "aiokafka", "confluent-kafka", "Java"):
        column = f"ours / {peer}"
        assert column in markdown
        header = next(line for line in markdown.splitlines() if column in line)
        index = [c.strip() for c in header.strip("|").split("|")].index(column)
        ratios = [
            line.strip("|").split("|")[index].strip()
            for line in markdown.splitlines()
            if line.startswith("| ") and line.count("|") == header.count("|")
        ]
        assert any(r.endswith("x") or "x (" in r for r in ratios), (peer, ratios)
    for name in FAMILIES:
        assert (out / f"{name}.png").stat().st_size > 0
    assert "| 100 B lz4 enqueue_nowait |" in markdown
    assert "Produce throughput (enqueue_nowait rows)" in markdown


def test_produce_keyed_scenario_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The opt-in keyed produce family (issue 32) at the smoke profile: keyed records to a
    6-partition topic through ours' enqueue and enqueue_nowait, confluent-kafka's and
    aiokafka's producers; every run sends every record, and the enqueue_nowait row
    stands beside the same peers' runs."""
    out = tmp_path / "results"
    proc = _run_benchmarks(
        "--profile",
        "smoke",
        "--scenarios",
        "produce_keyed",
        "--clients",
        "ours,aiokafka,confluent",
        "--bootstrap-servers",
        kafka_cluster.bootstrap_servers,
        "--output",
        str(out),
        "--no-plots",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    cases = {case["case"]: case for case in data["cases"]}
    assert sorted(cases) == ["keyed, 6p", "keyed, 6p enqueue_nowait"]
    for case in cases.values():
        assert not case["errors"], (case["case"], case["errors"])
        assert set(case["summary"]) == {"ours", "aiokafka", "confluent"}, case["case"]
        for client, runs in case["runs"].items():
            assert runs[0]["records"] == 3000, (case["case"], client)
        producer = case["configs"]["confluent"]["producer"]
        assert producer["acks"] == "all" and producer["linger.ms"] == 5
        assert "batch.size" not in producer  # its default
    assert "key=key" in cases["keyed, 6p"]["configs"]["ours"]["api"]
    assert cases["keyed, 6p enqueue_nowait"]["configs"]["ours"]["api"].startswith(
        "producer.enqueue_nowait(topic, value, key=key)"
    )
    assert "ours_nowait" not in cases["keyed, 6p"]["summary"]
    markdown = (out / "results.md").read_text()
    assert "| keyed, 6p enqueue_nowait |" in markdown
    assert "ours / confluent-kafka" in markdown


def test_share_scenario_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The opt-in share scenario (issue 29) at the smoke profile: a throughput case and the
    slow member beside a fast one, for ours, confluent-kafka and Java, each member in its
    own process; every run finishes, with a ratio per peer and the slow case's table."""
    out = tmp_path / "results"
    proc = _run_benchmarks(
        "--profile",
        "smoke",
        "--scenarios",
        "share",
        "--clients",
        "ours,confluent,java",
        "--bootstrap-servers",
        kafka_cluster.bootstrap_servers,
        "--output",
        str(out),
        "--no-plots",
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    cases = {case["case"]: case for case in data["cases"]}
    assert sorted(cases) == ["100 B, 1p, 1 member", "slow beside fast, 100 records"]
    for case in cases.values():
        assert not case["errors"], (case["case"], case["errors"])
        assert set(case["summary"]) == {"ours", "confluent", "java"}, case["case"]
        for client in ("ours", "confluent", "java"):
            assert case["configs"][client], "every client's settings are recorded"
    for client, runs in cases["100 B, 1p, 1 member"]["runs"].items():
        assert runs[0]["records"] == 3000, client
        assert runs[0]["group_configs"]["share.auto.offset.reset"] == "earliest", client
    for client, runs in cases["slow beside fast, 100 records"]["runs"].items():
        run = runs[0]
        assert run["missing"] == 0, client
        assert sum(run["processed"].values()) - run["redelivered"] == 100, client
        # one producer batch of 100: whichever member fetches first may take it all
        assert (run["slow_peak_held"] >= 1) == (run["slow_processed"] >= 1), client
    markdown = (out / "results.md").read_text()
    assert "ours / confluent-kafka" in markdown and "ours / Java" in markdown
    assert "Slow member beside a fast one" in markdown


def test_process_scenario_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The opt-in process scenario (issue 30) at the smoke profile: the sequential loops of
    ours and aiokafka and ours' process() at concurrency 64 on a keyed 12-partition topic,
    the asyncio floor beside it (a queue and 64 worker tasks, no broker), then the SIGKILL
    case (a member killed at half, a second one resumes): every run finishes, process()
    runs handlers side by side, the floor keeps all 64 busy, and no record is lost."""
    out = tmp_path / "results"
    proc = _run_benchmarks(
        "--profile",
        "smoke",
        "--scenarios",
        "process",
        "--clients",
        "ours,aiokafka",
        "--bootstrap-servers",
        kafka_cluster.bootstrap_servers,
        "--output",
        str(out),
        "--no-plots",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    cases = {case["case"]: case for case in data["cases"]}
    assert sorted(cases) == [
        "10 ms, asyncio floor x64",
        "10 ms, process() x64",
        "10 ms, sequential",
        "SIGKILL at half, process() x64",
    ]
    for case in cases.values():
        assert not case["errors"], (case["case"], case["errors"])
    assert set(cases["10 ms, sequential"]["summary"]) == {"ours", "aiokafka"}
    for client, runs in cases["10 ms, sequential"]["runs"].items():
        assert runs[0]["records"] == 60 and runs[0]["peak_running"] == 1, client
        assert abs(runs[0]["handler_mean_ms"] - 10.0) < 1e-6, client
    concurrent = cases["10 ms, process() x64"]["runs"]["ours"][0]
    assert concurrent["records"] == 1500
    assert concurrent["peak_running"] > 1  # handlers ran side by side
    assert concurrent["peak_running"] <= 64
    # 1,500 records of 10 ms one at a time take 15 s: side by side far less
    assert concurrent["seconds"] < 7.5, concurrent
    floor_case = cases["10 ms, asyncio floor x64"]
    assert set(floor_case["summary"]) == {"ours"}
    assert floor_case["configs"]["ours"]["api"].startswith("no consumer (the asyncio floor)")
    floor = floor_case["runs"]["ours"][0]
    assert floor["records"] == 1500 and floor["peak_running"] == 64, floor
    assert abs(floor["handler_mean_ms"] - 10.0) < 1e-6, floor
    assert floor["seconds"] < 7.5, floor
    kill = cases["SIGKILL at half, process() x64"]["runs"]["ours"][0]
    assert kill["records"] == 2000
    assert kill["lost"] == 0 and kill["committed_not_done"] == 0, kill
    assert 1000 <= kill["done_before_kill"] < 2000, kill
    assert kill["running_at_kill"] <= 64, kill
    markdown = (out / "results.md").read_text()
    assert "ours / aiokafka" in markdown
    assert "Share of the ideal rate" in markdown and "running at the kill" in markdown
    assert "| asyncio floor |" in markdown and "ours, % of the floor" in markdown


def test_round_order_rotates_tagged_cases() -> None:
    """Consecutive cases sharing a ``rotate`` tag take turns leading, round by round; the
    untagged ones keep their place."""
    from benchmarks.runner import Case, round_order

    def case(name: str, tag: str | None) -> Case:
        return Case("f", name, "s", {}, [], dict, rotate=tag)

    cases = [case("a", "x"), case("b", "x"), case("c", "x"), case("d", None), case("e", "y")]
    cases.append(case("f", "y"))
    names = [[c.name for c in round_order(cases, r)] for r in range(3)]
    assert names == [
        ["a", "b", "c", "d", "e", "f"],
        ["b", "c", "a", "d", "f", "e"],
        ["c", "a", "b", "d", "e", "f"],
    ]


def test_otel_scenario_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The opt-in otel scenario (issue 31) at the smoke profile: ours' enqueue() and
    batches() and aiokafka's send() in each mode, each in its own worker: with no SDK ours
    hooks nothing, with the SDK every produced record's span reaches the exporter, and the
    report has the ratio and cost tables. aiokafka's instrumented modes need
    opentelemetry-instrumentation-aiokafka (benchmarks/otel.py); without it they are
    reported as unsupported, naming the install."""
    from benchmarks.otel import CONTRIB_DIR

    out = tmp_path / "results"
    proc = _run_benchmarks(
        "--profile",
        "smoke",
        "--scenarios",
        "otel",
        "--clients",
        "ours,aiokafka",
        "--bootstrap-servers",
        kafka_cluster.bootstrap_servers,
        "--output",
        str(out),
        "--no-plots",
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    cases = {case["case"]: case for case in data["cases"]}
    modes = ["opentelemetry=False", "API, no SDK", "SDK"]
    assert sorted(cases) == sorted(f"{op}, {m}" for op in ("enqueue()", "batches()") for m in modes)
    for case in cases.values():
        assert not case["errors"], (case["case"], case["errors"])
        ours = case["runs"]["ours"][0]
        assert ours["hooked"] is (case["spec"]["otel"] == "sdk"), case["case"]
        assert ("spans" in ours) is (case["spec"]["otel"] == "sdk"), case["case"]
    produced = cases["enqueue(), SDK"]["runs"]["ours"][0]
    # a span per record sent, warm-up included (more than the span queue's 2,048 could
    # hold at once: not one per batch), unless the batch processor's queue overflowed
    assert 2048 < produced["spans"] <= 3000 + 100, produced
    assert produced["metric_points"] > 0, produced
    assert (
        cases["enqueue(), opentelemetry=False"]["configs"]["ours"]["producer"]["opentelemetry"]
        is False
    )
    read = cases["batches(), SDK"]["runs"]["ours"][0]
    assert 1 <= read["spans"] < read["records"], read  # receive spans: one per chunk
    assert cases["enqueue(), opentelemetry=False"]["runs"]["aiokafka"]
    contrib = cases["enqueue(), SDK"]
    if "aiokafka" in contrib["unsupported"]:
        assert not (CONTRIB_DIR / "opentelemetry" / "instrumentation" / "aiokafka").exists()
        assert "pip install --no-deps" in contrib["unsupported"]["aiokafka"]
    else:
        assert contrib["runs"]["aiokafka"][0]["spans"] >= 3000, contrib["runs"]["aiokafka"]
    markdown = (out / "results.md").read_text()
    assert "| operation | no SDK / off | SDK / off |" in markdown
    assert "µs per record, SDK" in markdown and "| enqueue() |" in markdown


def _bench_doc(
    commit: str, date: str, rounds: int, clients: list[str], rates: dict[str, dict[str, float]]
) -> dict:
    """A small results document as ``report.build_json`` writes one: per family, one case
    with a records/s median per client (``rates``: family -> client -> rate)."""
    metric = {"key": "records_per_s", "label": "records/s", "higher_is_better": True}
    metric["fmt"] = "{:,.0f}"

    def case(fam: str, per_client: dict[str, float]) -> dict:
        summary = {
            c: {"records_per_s": {"median": v, "min": v * 0.99, "max": v * 1.01, "n": rounds}}
            for c, v in per_client.items()
        }
        return {
            "family": fam,
            "case": f"{fam} case",
            "scenario": fam,
            "spec": {},
            "metrics": [metric],
            "samples": {c: {"records_per_s": [v] * rounds} for c, v in per_client.items()},
            "summary": summary,
            "unsupported": {},
            "errors": {},
            "configs": {c: {"commit": commit} for c in per_client},
            "runs": {c: [] for c in per_client},
        }

    families = list(rates)
    return {
        "machine": {"git_commit": commit, "date": date, "cores": 2},
        "profile": {"name": "full", "rounds": rounds, "warmup_rounds": 1},
        "clients": clients,
        "families": families,
        "settings": {"commit": commit},
        "about": {f: f"about {f} at {commit}" for f in families},
        "titles": {"produce": "Produce throughput", "consume": "Consume throughput"},
        "cases": [case(f, per) for f, per in rates.items()],
        "peak_rss_mb": {
            "median": {f: {c: 50.0 for c in per} for f, per in rates.items()},
            "samples": {f: {c: [50.0] for c in per} for f, per in rates.items()},
        },
        "standalone": {},
        "wall_seconds": 100.0,
        "plots": {},
    }


def test_publish_merges_a_run_of_some_scenarios_into_the_published_page(
    tmp_path: Path,
) -> None:
    """A run of one family published over a page of two (issue 32): the run's family is
    replaced (cases, medians, peak RSS, about, its run's clients and settings), the other
    kept as it was, and the page names the run of each section, recomputes the summary at
    the top from the merged cases, and lists both runs. A run of every family replaces the
    page; a run's own document renders as before (one "This run")."""
    from benchmarks import report

    old = _bench_doc(
        "aaaaaaa",
        "2026-11-25",
        5,
        ["ours", "aiokafka"],
        {
            "produce": {"ours": 100.0, "aiokafka": 50.0},
            "consume": {"ours": 300.0, "aiokafka": 100.0},
        },
    )
    fresh = _bench_doc(
        "bbbbbbb",
        "2026-11-27",
        3,
        ["ours", "confluent"],
        {"produce": {"ours": 80.0, "confluent": 40.0}},
    )
    merged = report.merge(old, fresh)
    assert merged["families"] == ["produce", "consume"]
    assert [c["family"] for c in merged["cases"]] == ["produce", "consume"]
    assert merged["cases"][0] == fresh["cases"][0]
    assert merged["cases"][1] == old["cases"][1]
    assert merged["about"] == {
        "produce": "about produce at bbbbbbb",
        "consume": "about consume at aaaaaaa",
    }
    assert merged["peak_rss_mb"]["median"] == {
        "produce": {"ours": 50.0, "confluent": 50.0},
        "consume": {"ours": 50.0, "aiokafka": 50.0},
    }
    assert merged["clients"] == ["ours", "aiokafka", "confluent"]
    assert [(r["families"], r["machine"]["git_commit"]) for r in merged["runs"]] == [
        (["produce"], "bbbbbbb"),
        (["consume"], "aaaaaaa"),
    ]
    assert report.family_view(merged, "produce")["clients"] == ["ours", "confluent"]
    assert report.family_view(merged, "consume")["settings"] == {"commit": "aaaaaaa"}

    page = report.markdown(merged, "img/bench/", html=True)
    top = page[: page.index("## Produce throughput")]
    produce = page[page.index("## Produce throughput") : page.index("## Consume throughput")]
    consume = page[page.index("## Consume throughput") : page.index("## Peak memory")]
    assert "run of 2026-11-25" in top and "run of 2026-11-27" in top
    # the summary is the merged data's: produce against confluent-kafka (2.00x), consume
    # against aiokafka (3.00x); the produce run had no aiokafka
    assert "* **Produce throughput**, records/s ↑: confluent-kafka 2.00x (better)." in top
    assert "* **Consume throughput**, records/s ↑: aiokafka 3.00x (better)." in top
    assert "run of 2026-11-27 at commit `bbbbbbb`" in produce and "3 measured round" in produce
    assert "aiostream_kafka | confluent-kafka |" in produce and "aiokafka" not in produce
    assert "run of 2026-11-25 at commit `aaaaaaa`" in consume and "5 measured round" in consume
    assert "## The runs" in page and "## This run" not in page
    assert (
        "### Run of 2026-11-27 (`bbbbbbb`)" in page and "### Run of 2026-11-25 (`aaaaaaa`)" in page
    )

    # merging again keeps each family's run; a run of every family is the page itself
    again = _bench_doc(
        "ccccccc", "2026-11-28", 2, ["ours", "java"], {"consume": {"ours": 90.0, "java": 30.0}}
    )
    twice = report.merge(merged, again)
    assert [(r["families"], r["machine"]["git_commit"]) for r in twice["runs"]] == [
        (["consume"], "ccccccc"),
        (["produce"], "bbbbbbb"),
    ]
    assert twice["cases"][0] == fresh["cases"][0]
    whole = _bench_doc(
        "ddddddd", "2026-11-29", 5, ["ours"], {"produce": {"ours": 1.0}, "consume": {"ours": 2.0}}
    )
    assert report.merge(twice, whole) is whole
    single = report.markdown(old, "")
    assert "## This run" in single and "*Figures of the run" not in single

    # publish: the published JSON becomes the merge, the page is written from it
    docs = tmp_path / "docs"
    (docs / "img" / "bench").mkdir(parents=True)
    (docs / "img" / "bench" / "results.json").write_text(json.dumps(old))
    report.publish(fresh, docs, plots=False)
    published = json.loads((docs / "img" / "bench" / "results.json").read_text())
    assert published == merged
    assert (docs / "benchmarks.md").read_text(encoding="utf-8") == report.docs_page(merged)
