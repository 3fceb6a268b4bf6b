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

from aiostream_kafka import _native
from aiostream_kafka.testing.cluster import KafkaCluster

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ["produce", "consume", "latency", "pause", "fastapi"]


def test_benchmark_suite_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--profile",
            "smoke",
            "--scenarios",
            ",".join(FAMILIES),
            "--bootstrap-servers",
            kafka_cluster.bootstrap_servers,
            "--output",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
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


def test_share_scenario_smoke(kafka_cluster: KafkaCluster, tmp_path: Path) -> None:
    """The opt-in share scenario (issue 29) at the smoke profile: a throughput case and the
    slow member beside a fast one, for ours, confluent-kafka and Java, each member in its
    own process; every run finishes, with a ratio per peer and the slow case's table."""
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
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
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
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
    the asyncio floor beside it (a queue and 64 worker tasks, no broker), pyrallel-consumer
    at concurrency 64 in its Python 3.12 side venv (created on first use; where this
    machine has no Python 3.12 it must be reported as not run for that reason, and the
    rest of the test still holds), then the SIGKILL case (a member killed at half, a
    second one resumes): every run finishes, process() runs handlers side by side, the
    floor keeps all 64 busy, pyrallel handles every record once, in key order, at most 64
    at once, and no record is lost."""
    from benchmarks import side_venv

    has_312 = side_venv.find_python("3.12") is not None
    out = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--profile",
            "smoke",
            "--scenarios",
            "process",
            "--clients",
            "ours,aiokafka,pyrallel",
            "--bootstrap-servers",
            kafka_cluster.bootstrap_servers,
            "--output",
            str(out),
            "--no-plots",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,  # a first run installs pyrallel-consumer's side venv
        check=False,
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
    pyrallel_case = cases["10 ms, process() x64"]
    if has_312:
        assert "pyrallel" not in pyrallel_case["unsupported"], pyrallel_case["unsupported"]
        assert pyrallel_case["configs"]["pyrallel"]["build"].startswith("Python 3.12")
        theirs = pyrallel_case["runs"]["pyrallel"][0]
        assert theirs["records"] == 1500 and 1 < theirs["peak_running"] <= 64, theirs
        assert abs(theirs["handler_mean_ms"] - 10.0) < 1e-6, theirs
        assert theirs["duplicates"] == 0 and theirs["key_overlaps"] == 0, theirs
        assert theirs["key_out_of_order"] == 0, theirs
    else:
        reason = pyrallel_case["unsupported"]["pyrallel"]
        assert reason.startswith("not run: no Python 3.12"), reason
        assert "pyrallel" not in pyrallel_case["runs"]
    for name in ("10 ms, sequential", "10 ms, asyncio floor x64"):
        assert "pyrallel" not in cases[name]["runs"], name
    kill = cases["SIGKILL at half, process() x64"]["runs"]["ours"][0]
    assert kill["records"] == 2000
    assert kill["lost"] == 0 and kill["committed_not_done"] == 0, kill
    assert 1000 <= kill["done_before_kill"] < 2000, kill
    assert kill["running_at_kill"] <= 64, kill
    markdown = (out / "results.md").read_text()
    assert "ours / aiokafka" in markdown
    assert "Share of the ideal rate" in markdown and "running at the kill" in markdown
    assert "| asyncio floor |" in markdown and "ours, % of the floor" in markdown
    assert "ours / pyrallel" in markdown
    if has_312:
        assert "pyrallel-consumer's runs" in markdown
