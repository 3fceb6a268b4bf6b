"""The FakeCluster fidelity run (issue 34, item 5): the project's broker tests (``-m
broker``), file by file, with ``AIOSTREAM_KAFKA_BROKER=fake`` and a per-file timeout;
prints a Markdown table of pass/fail/skip counts per file.

Usage: ``python tools/fake_fidelity.py [--timeout 300] [--out table.md] [--real] [files...]``
(default: every tests/test_*.py and tests/*/test_*.py that requests a broker, Spark's
aside: those start a JVM of their own). Tests marked ``real_broker`` are skipped by the
conftest in this run, and a test forcing a JVM source fails rather than starting one.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BROKER_USE = re.compile(
    r"\b(kafka_cluster|new_topic|three_brokers|kafka_sasl_cluster|broker_fixtures|"
    r"pytest\.mark\.broker)\b"
)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def broker_files() -> list[Path]:
    """The test files that use a broker (Spark's and the fake's own aside)."""
    out = []
    for path in sorted([*ROOT.glob("tests/test_*.py"), *ROOT.glob("tests/*/test_*.py")]):
        if "spark" in path.parts or path.name.startswith("test_fake_"):
            continue
        if _BROKER_USE.search(path.read_text()):
            out.append(path)
    return out


def run(path: Path, timeout: float, real: bool = False) -> tuple[dict[str, int], float, str]:
    """``(counts, seconds, note)`` of one file's broker tests against the fake (``real``:
    the same tests, those marked ``real_broker`` left out, against the JVM broker the
    fixtures start: the tier-runtime comparison)."""
    env = {**os.environ, "AIOSTREAM_KAFKA_PURE": "1"}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    env.pop("AIOSTREAM_KAFKA_BROKER", None)
    marks = "broker and not real_broker" if real else "broker"
    if not real:
        env["AIOSTREAM_KAFKA_BROKER"] = "fake"
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", marks, "-p", "no:cacheprovider",
           "--no-header", "-rN", str(path.relative_to(ROOT))]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {}, time.monotonic() - started, f"timed out after {timeout:.0f} s"
    tail = (done.stdout.strip().splitlines() or [""])[-1]
    counts: dict[str, int] = {}
    for number, kind in _COUNT.findall(tail):
        counts["errors" if kind.startswith("error") else kind] = int(number)
    return counts, time.monotonic() - started, "" if counts else tail[:80]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--real",
        action="store_true",
        help="run the same tests (real_broker ones left out) against the JVM broker instead",
    )
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = [p.resolve() for p in args.files] or broker_files()
    lines = [
        "| test file | passed | failed | errors | skipped (real broker) | seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    total_seconds = 0.0
    for path in files:
        counts, seconds, note = run(path, args.timeout, args.real)
        total_seconds += seconds
        for key in totals:
            totals[key] += counts.get(key, 0)
        name = str(path.relative_to(ROOT))
        row = [counts.get(k, 0) for k in ("passed", "failed", "errors", "skipped")]
        cells = " | ".join(str(c) for c in row)
        lines.append(f"| `{name}` | {cells} | {seconds:.0f} |" + (f" {note}" if note else ""))
        print(lines[-1], flush=True)
    cells = " | ".join(str(totals[k]) for k in ("passed", "failed", "errors", "skipped"))
    lines.append(f"| **total** | {cells} | {total_seconds:.0f} |")
    table = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
