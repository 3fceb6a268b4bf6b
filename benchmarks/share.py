"""The share scenario (issue 29): its driver, its members and its analysis.

``drive(client, spec)`` runs inside the client's ``benchmarks.worker`` process. It sets the
fresh share group's configs (``share.auto.offset.reset=earliest`` and the heartbeat
interval) with ``incremental_alter_configs`` on the GROUP resource, then starts the group's
members together, each in its own process (Python clients: ``python -m benchmarks.worker
CLIENT`` with the ``share_member`` scenario; Java: ``benchmarks/java/ShareMember.java``,
compiled once with ``javac`` against the cached kafka-clients jar), and stops them once
the work is done. Every member speaks the same small protocol, whatever its client:

* ``PREFIX.progress``: ``count peak_held``, rewritten every 50 ms (the driver's progress);
* mode ``count`` (throughput): the ``time.monotonic_ns()`` (``System.nanoTime()``: both
  CLOCK_MONOTONIC, one clock for every process of the machine) of every record handed to
  the application, written at the end to ``PREFIX.times`` as big-endian int64s;
* mode ``log`` (a slow member beside a fast one): ``t_ns seq held`` per record once
  processed, flushed at once, to ``PREFIX.log`` (``seq``: the stamped sequence number;
  ``held``: records the member had acquired and not yet processed when this one was handed
  over, this one included);
* ``stop`` on stdin (or its end): close the consumer and exit.

The analysis is pure (``tests/test_share_bench.py``): ``throughput_window`` (the clock
from the first record any member received to the ``n``-th of all) and ``split`` (who
processed what, re-deliveries, the slow member's peak of held records).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.clients.common import Unsupported

ROOT = Path(__file__).resolve().parent.parent
MARKER = "BENCH-RESULT "  # benchmarks.worker's (not imported: it imports the adapters)
JAVA_SOURCE = ROOT / "benchmarks" / "java" / "ShareMember.java"
PROGRESS_EVERY_S = 0.05

# -- analysis (pure) ------------------------------------------------------------------------


def throughput_window(times_ns: Sequence[Iterable[int]], n: int) -> tuple[float, float, int]:
    """(first, end, records): over every member's hand-over times, the first record's time
    and the ``n``-th record's (seconds), and how many records that window holds (``n``, or
    fewer when the members received fewer).

    Raises:
        ValueError: no member received a record.
    """
    merged = sorted(t for member in times_ns for t in member)
    if not merged:
        raise ValueError("no member received a record")
    last = min(n, len(merged)) - 1
    return merged[0] / 1e9, merged[last] / 1e9, last + 1


def split(logs: dict[str, list[tuple[int, int, int]]], wanted: int, slow: str) -> dict[str, Any]:
    """Who processed what, from each member's ``(t_ns, seq, held)`` lines: the records each
    processed, re-deliveries (a sequence number processed more than once, by anyone), the
    records of ``range(wanted)`` nobody processed, the ``slow`` member's peak of held
    records, and the time from the first record processed to the last new one."""
    seen: dict[int, int] = {}
    for lines in logs.values():
        for _, seq, _ in lines:
            seen[seq] = seen.get(seq, 0) + 1
    first_done: dict[int, int] = {}
    for lines in logs.values():
        for t, seq, _ in lines:
            if seq not in first_done or t < first_done[seq]:
                first_done[seq] = t
    times = [t for lines in logs.values() for t, _, _ in lines]
    return {
        "processed": {name: len(lines) for name, lines in logs.items()},
        "slow_processed": len(logs.get(slow, [])),
        "slow_peak_held": max((held for _, _, held in logs.get(slow, [])), default=0),
        "redelivered": sum(c - 1 for c in seen.values()),
        "missing": sum(1 for s in range(wanted) if s not in seen),
        "seconds": (max(first_done.values()) - min(times)) / 1e9 if times else float("nan"),
    }


def read_times(path: Path) -> array[int]:
    """A ``PREFIX.times`` file (big-endian int64s)."""
    values = array("q")
    data = path.read_bytes() if path.exists() else b""
    values.frombytes(data[: len(data) - len(data) % 8])
    if sys.byteorder == "little":
        values.byteswap()
    return values


def read_log(path: Path) -> list[tuple[int, int, int]]:
    """A ``PREFIX.log`` file's ``(t_ns, seq, held)`` lines (a torn last line is skipped)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            try:
                out.append((int(parts[0]), int(parts[1]), int(parts[2])))
            except ValueError:
                continue
    return out


# -- the members' shared pieces (inside each member's process) ------------------------------


class Progress:
    """``count`` and ``peak_held`` of one member, written to ``PREFIX.progress`` every 50 ms
    by a daemon thread (atomically: a temporary file renamed over it)."""

    def __init__(self, prefix: str) -> None:
        self.path = Path(prefix + ".progress")
        self.count = 0
        self.peak_held = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="share-progress", daemon=True)
        self._thread.start()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.count} {self.peak_held}\n")
        os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_EVERY_S):
            self._write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self._write()


def write_times(prefix: str, times: array[int]) -> None:
    if sys.byteorder == "little":
        times.byteswap()
    Path(prefix + ".times").write_bytes(times.tobytes())


# -- the driver -----------------------------------------------------------------------------


async def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> dict[str, Any]:
    """Set share-group configs of ``group`` (before it exists) with incremental alter
    configs on the GROUP resource; return what the broker then describes."""
    from aiostream_kafka import Admin
    from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType

    resource = ConfigResource(ConfigResourceType.GROUP, group)
    async with Admin(bootstrap) as admin:
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp(k, v) for k, v in configs.items()]}
        )
        described = await admin.describe_configs([resource], keys=list(configs))
    return {k: described[resource][k].value for k in configs}


async def wait_joined(bootstrap: str, group: str, members: int, limit_s: float) -> float:
    """Wait until ``group`` is Stable with ``members`` members, each assigned partitions;
    return how long that took.

    Raises:
        RuntimeError: not within ``limit_s`` seconds.
    """
    from aiostream_kafka import Admin
    from aiostream_kafka.errors import KafkaError

    began = time.monotonic()
    last = "not described yet"
    async with Admin(bootstrap) as admin:
        while time.monotonic() - began < limit_s:
            try:
                desc = (await admin.describe_share_groups([group]))[group]
            except KafkaError as exc:  # not there yet
                last = repr(exc)
            else:
                last = f"{desc.state}, {len(desc.members)} member(s)"
                assigned = [m for m in desc.members if m.assignment]
                if desc.state == "Stable" and len(assigned) >= members:
                    return time.monotonic() - began
            await asyncio.sleep(0.1)
    raise RuntimeError(
        f"the share group did not have {members} members within {limit_s:g} s: {last}"
    )


def java_classes() -> Path:
    """``ShareMember.class``, compiled with ``javac`` once per source version (cached).

    Raises:
        Unsupported: no ``javac`` on this machine.
    """
    from benchmarks.clients.java import lib_dir

    javac = shutil.which("javac")
    if javac is None:
        raise Unsupported("no javac on this machine: the Java share member cannot be built")
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes()).hexdigest()[:16]
    out = Path.home() / ".cache" / "aiostream_kafka" / "bench-java" / digest
    if not (out / "ShareMember.class").exists():
        tmp = Path(tempfile.mkdtemp(prefix="share-member-"))
        subprocess.run(
            [javac, "-cp", f"{lib_dir()}/*", "-d", str(tmp), str(JAVA_SOURCE)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        if not out.exists():
            tmp.rename(out)
    return out


def member_command(client: str, spec: dict[str, Any], prefix: str, delay_ms: int) -> list[str]:
    mode = "log" if spec["kind"] == "slow" else "count"
    if client == "java":
        from aiostream_kafka.testing.jars import java_executable
        from benchmarks import settings
        from benchmarks.clients.java import lib_dir

        classpath = f"{java_classes()}:{lib_dir()}/*"
        return [
            java_executable(), settings.JAVA_HEAP, "-cp", classpath, "ShareMember",
            spec["bootstrap"], spec["topic"], spec["group"], str(delay_ms), prefix, mode,
        ]  # fmt: skip
    member = {**spec, "scenario": "share_member", "prefix": prefix, "delay_ms": delay_ms}
    member["mode"] = mode
    return [sys.executable, "-m", "benchmarks.worker", client, json.dumps(member)]


class Member:
    """One member process."""

    def __init__(self, name: str, command: list[str], prefix: str) -> None:
        self.name = name
        self.prefix = prefix
        self.out_path = Path(prefix + ".out")
        self.err_path = Path(prefix + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                command, cwd=str(ROOT), stdin=subprocess.PIPE, stdout=out, stderr=err
            )
        self.told_to_stop = False

    def progress(self) -> tuple[int, int]:
        try:
            count, held = Path(self.prefix + ".progress").read_text().split()
            return int(count), int(held)
        except (OSError, ValueError):
            return 0, 0

    def stop(self) -> None:
        self.told_to_stop = True
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b"stop\n")
                self.proc.stdin.close()
            except OSError:
                pass

    def check_alive(self) -> None:
        if self.told_to_stop or self.proc.poll() is None:
            return
        out = self.result()
        if "unsupported" in out:
            raise Unsupported(out["unsupported"])
        raise RuntimeError(f"member {self.name} exited early: {out.get('error', out)}")

    def wait(self, timeout: float) -> dict[str, Any]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return {"error": f"{self.name} did not exit within {timeout:g} s of its stop"}
        return self.result()

    def result(self) -> dict[str, Any]:
        text = self.out_path.read_text(errors="replace")
        for line in reversed(text.splitlines()):
            if line.startswith(MARKER):
                out: dict[str, Any] = json.loads(line[len(MARKER) :])
                if "error" in out:
                    return {"error": f"{self.name}: {out['error']}"}
                return {**out.get("result", {}), "peak_rss_mb": out.get("peak_rss_mb")}
            if line.startswith("RESULT "):  # the Java member
                _, count, held = line.split()
                return {"records": int(count), "peak_held": int(held)}
        tail = self.err_path.read_text(errors="replace")[-2000:]
        return {"error": f"{self.name} exited {self.proc.returncode} without a result: {tail}"}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _run_members(
    members: list[Member], done: Callable[[], bool], limit_s: float
) -> tuple[bool, float]:
    """Wait until ``done()`` (or ``limit_s``), checking that every member is alive; then
    stop them all. Returns (done, when the driver saw it)."""
    deadline = time.monotonic() + limit_s
    finished = False
    while time.monotonic() < deadline:
        for m in members:
            m.check_alive()
        if done():
            finished = True
            break
        time.sleep(PROGRESS_EVERY_S)
    seen_at = time.monotonic()
    for m in members:
        m.stop()
    return finished, seen_at


def drive(client: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One run of the share scenario for ``client``: ``spec['kind']`` ``throughput`` (the
    members as fast as they can until ``records`` were handed out) or ``slow`` (member
    ``slow`` taking ``delay_ms`` per record beside ``fast``, until every record of the
    topic was processed)."""
    spec = {**spec, "group": f"bench-share-{uuid.uuid4().hex[:10]}"}
    configs = asyncio.run(
        set_group_configs(spec["bootstrap"], spec["group"], spec["group_configs"])
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-share-"))
    slow = spec["kind"] == "slow"
    names = ["slow", "fast"] if slow else [f"m{i + 1}" for i in range(spec["members"])]
    delays = {"slow": spec.get("delay_ms", 0)}
    commands = {
        name: member_command(client, spec, str(workdir / name), delays.get(name, 0))
        for name in names
    }
    members: list[Member] = []
    outcomes: dict[str, dict[str, Any]] = {}
    n = spec["records"]
    result_join = 0.0
    try:
        for name in names:  # together: every command is built before the first starts
            members.append(Member(name, commands[name], str(workdir / name)))
        if slow:
            # Both members in the group first, then the records: neither takes them all
            # just because it joined first.
            from benchmarks.clients.confluent import _fill

            result_join = asyncio.run(wait_joined(spec["bootstrap"], spec["group"], 2, 60.0))
            for m in members:
                m.check_alive()
            _fill({**spec, "scenario": "fill", "partitions": 1, "stamped": True})

            def done() -> bool:
                seqs = {s for m in members for _, s, _ in read_log(Path(m.prefix + ".log"))}
                return len(seqs & set(range(n))) >= n

        else:

            def done() -> bool:
                return sum(m.progress()[0] for m in members) >= n

        finished, _ = _run_members(members, done, spec["limit_s"])
        for m in members:
            outcomes[m.name] = m.wait(spec["close_timeout_s"])
    finally:
        for m in members:
            m.kill()
    errors = {name: out["error"] for name, out in outcomes.items() if "error" in out}
    if errors:
        raise RuntimeError(f"member(s) failed (their output: {workdir}): {errors}")
    result: dict[str, Any] = {"group": spec["group"], "group_configs": configs}
    if slow:
        result["joined_after_s"] = result_join
        logs = {m.name: read_log(Path(m.prefix + ".log")) for m in members}
        result |= split(logs, n, "slow")
        result["records"] = n
        result["fast_processed"] = result["processed"].get("fast", 0)
        result["client_peak_held"] = {m: o.get("peak_held") for m, o in outcomes.items()}
    else:
        times = {m.name: read_times(Path(m.prefix + ".times")) for m in members}
        first, end, records = throughput_window(list(times.values()), n)
        result |= {
            "records": records,
            "seconds": end - first,
            "per_member": {name: len(t) for name, t in times.items()},
            "handed_out": sum(len(t) for t in times.values()),
        }
    result["finished"] = finished
    if not finished:
        raise RuntimeError(
            f"not done within {spec['limit_s']:g} s: "
            + json.dumps({k: v for k, v in result.items() if k != "group_configs"})[:800]
        )
    result["member_peak_rss_mb"] = {m: o.get("peak_rss_mb") for m, o in outcomes.items()}
    peaks = [v for v in result["member_peak_rss_mb"].values() if v]
    if peaks:
        result["peak_rss_mb"] = max(peaks)  # the members', not the driver's
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run failed
    return result
