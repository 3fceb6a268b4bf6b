"""The rebalance scenario: its driver and its analysis.

``drive(client, spec)`` runs inside the client's ``benchmarks.worker`` process: it sets the
group's heartbeat interval (KIP-848 runs), produces stamped records at a fixed rate from a
thread (confluent-kafka's producer, the same for every client), starts the group's members
one by one, each ``python -m benchmarks.worker CLIENT`` with the ``rebalance_member``
scenario in its own process, tells them to close one by one (``stop`` on stdin: a graceful
leave), waits until every produced record has been seen (or ``drain_s``), and reads what
each member logged (``common.MemberLog``).

``analyze(...)`` is pure (``tests/test_rebalance_bench.py``): from the members' logs and the
membership changes it computes

* the longest pause of a member that kept partitions through a change: for a change at
  ``T`` (followed by the next one at ``T_next``, or the end of the produce), a member alive
  over ``[T, T_next)`` *kept* the partitions it received records from both in the
  ``window_s`` before ``T`` and in the ``window_s`` before ``T_next``; its pause is the
  longest gap between consecutive records it received on those partitions (all of them
  together), from its last such record before ``T`` to its last before ``T_next``;
* each member's time from creating its consumer to its first record;
* records re-delivered (deliveries beyond the first of each record: to a second member, or
  twice to one) and records acknowledged to the producer that no member received.

Ownership is read from the records (every partition gets ~``rate / partitions`` records a
second), not from each client's rebalance callbacks, so every client is measured alike.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.clients.common import Unsupported, stamp, unstamp

ROOT = Path(__file__).resolve().parent.parent
MARKER = "BENCH-RESULT "  # benchmarks.worker's (not imported: it imports the adapters)


# -- analysis (pure) ------------------------------------------------------------------------


@dataclass
class MemberTrace:
    """One member: when the driver started it and told it to close, and what it logged."""

    name: str
    joined_at: float  # the driver started its process: a membership change
    left_at: float | None = None  # the driver told it to close (None: the last member)
    started_at: float | None = None  # it created its consumer
    closed_at: float | None = None
    records: list[tuple[float, int, int]] = field(default_factory=list)  # (t, partition, seq)


@dataclass(frozen=True)
class Change:
    at: float
    kind: str  # "join" or "leave"
    member: str


def read_member_log(lines: Iterable[str], trace: MemberTrace) -> MemberTrace:
    """Fill ``trace`` from a ``MemberLog`` file's lines (a torn last line is skipped)."""
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        try:
            if parts[0] == "R" and len(parts) == 5:
                trace.records.append((float(parts[1]), int(parts[2]), int(parts[4])))
            elif parts[0] == "S" and len(parts) == 2:
                trace.started_at = float(parts[1])
            elif parts[0] == "C" and len(parts) == 2:
                trace.closed_at = float(parts[1])
        except ValueError:
            continue
    return trace


def _partitions(records: Sequence[tuple[float, int, int]], start: float, end: float) -> set[int]:
    return {p for t, p, _ in records if start <= t < end}


def kept_pause(
    member: MemberTrace, at: float, until: float, window_s: float
) -> tuple[float, list[int]] | None:
    """The longest gap in ``member``'s records on the partitions it kept through a change at
    ``at`` (settled by ``until``), and those partitions; None when it kept none."""
    kept = _partitions(member.records, at - window_s, at) & _partitions(
        member.records, until - window_s, until
    )
    if not kept:
        return None
    times = sorted(t for t, p, _ in member.records if p in kept and t < until)
    before = [t for t in times if t < at]
    during = [t for t in times if t >= at]
    series = before[-1:] + during
    gap = max((b - a for a, b in itertools.pairwise(series)), default=0.0)
    return gap, sorted(kept)


def analyze(
    members: Sequence[MemberTrace],
    changes: Sequence[Change],
    end: float,
    produced: Iterable[int],
    window_s: float = 1.0,
) -> dict[str, Any]:
    """The scenario's figures (see the module's docstring); ``end`` is when the produce
    stopped, ``produced`` the sequence numbers the producer had acknowledged."""
    ordered = sorted(changes, key=lambda c: c.at)
    per_change = []
    longest = 0.0
    longest_at: dict[str, Any] | None = None
    for i, change in enumerate(ordered):
        until = ordered[i + 1].at if i + 1 < len(ordered) else end
        pauses: dict[str, dict[str, Any]] = {}
        for m in members:
            if m.name == change.member or m.joined_at >= change.at:
                continue
            if m.left_at is not None and m.left_at < until:
                continue
            found = kept_pause(m, change.at, until, window_s)
            if found is None:
                continue
            gap, kept = found
            pauses[m.name] = {"pause_s": gap, "kept": kept}
            if gap > longest:
                longest = gap
                longest_at = {"change": i, "member": m.name, "pause_s": gap}
        per_change.append(
            {"at": change.at, "kind": change.kind, "member": change.member, "pauses": pauses}
        )

    first: dict[str, float | None] = {}
    for m in members:
        if m.started_at is None or not m.records:
            first[m.name] = None
            continue
        first[m.name] = min(t for t, _, _ in m.records) - m.started_at
    firsts = [v for v in first.values() if v is not None]

    seen_by: dict[int, list[str]] = {}
    deliveries = 0
    for m in members:
        for _, _, seq in m.records:
            if seq < 0:
                continue
            deliveries += 1
            seen_by.setdefault(seq, []).append(m.name)
    redelivered = deliveries - len(seen_by)
    twice_by_one = sum(len(who) - len(set(who)) for who in seen_by.values())
    produced_set = set(produced)
    missing = produced_set - seen_by.keys()
    return {
        "max_kept_pause_s": longest,
        "longest_pause": longest_at,
        "changes": per_change,
        "first_record_s": first,
        "first_record_median_s": statistics.median(firsts) if firsts else float("nan"),
        "first_record_max_s": max(firsts) if firsts else float("nan"),
        "members_without_records": sorted(k for k, v in first.items() if v is None),
        "produced": len(produced_set),
        "deliveries": deliveries,
        "redelivered": redelivered,
        "redelivered_same_member": twice_by_one,
        "redelivered_other_member": redelivered - twice_by_one,
        "missing": len(missing),
        "missing_sample": sorted(missing)[:20],
    }


# -- the driver -----------------------------------------------------------------------------


class PacedProducer:
    """A thread producing stamped records at ``rate``/s (confluent-kafka, the settings
    every client's producer gets) until stopped; ``acked`` holds the sequence numbers the
    broker acknowledged."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.sent = 0
        self.stopped_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the producer did not flush within {timeout:g} s")

    def _run(self) -> None:
        import confluent_kafka

        from benchmarks.clients.confluent import producer_config

        spec = self.spec
        config = producer_config({"scenario": "rebalance", "bootstrap": spec["bootstrap"]})
        producer = confluent_kafka.Producer(config)
        rate, size, topic = spec["rate"], spec["size"], spec["topic"]

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(unstamp(msg.value()))
            elif len(self.errors) < 10:
                self.errors.append(str(err))

        began = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - began) * rate)
            while self.sent < due:
                try:
                    producer.produce(topic, stamp(self.sent, size), on_delivery=on_delivery)
                except BufferError:
                    producer.poll(0.005)
                    continue
                self.sent += 1
            producer.poll(0)
            time.sleep(0.005)
        self.stopped_at = time.monotonic()
        left = producer.flush(30)
        if left:
            self.errors.append(f"{left} record(s) not flushed within 30 s")


async def set_group_heartbeat(bootstrap: str, group: str, interval_ms: int) -> int:
    """Set the KIP-848 group config ``consumer.heartbeat.interval.ms`` of ``group`` (before
    it exists) and return the value the broker then describes."""
    from aiostream_kafka import Admin
    from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType

    resource = ConfigResource(ConfigResourceType.GROUP, group)
    name = "consumer.heartbeat.interval.ms"
    async with Admin(bootstrap) as admin:
        await admin.incremental_alter_configs({resource: [AlterConfigOp(name, str(interval_ms))]})
        described = await admin.describe_configs([resource], keys=[name])
    value = described[resource][name].value
    return int(value) if value is not None else -1


class Member:
    """One member process (``benchmarks.worker CLIENT`` with ``rebalance_member``)."""

    def __init__(self, client: str, spec: dict[str, Any], index: int, workdir: Path) -> None:
        self.name = f"m{index + 1}"
        self.log_path = workdir / f"{self.name}.log"
        self.out_path = workdir / f"{self.name}.out"
        self.err_path = workdir / f"{self.name}.err"
        member_spec = {**spec, "scenario": "rebalance_member", "log": str(self.log_path)}
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.worker", client, json.dumps(member_spec)],
                cwd=str(ROOT),
                env=dict(os.environ),
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
            )
        self.trace = MemberTrace(self.name, joined_at=time.monotonic())
        self.told_to_stop = False
        self._tail_at = 0
        self._tail_rest = ""

    def stop(self) -> float:
        """Ask it to close (a graceful leave); return when that was asked."""
        at = time.monotonic()
        self.told_to_stop = True
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b"stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
        return at

    def wait(self, timeout: float) -> dict[str, Any]:
        """Its worker's result once it exited (killed after ``timeout``)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return {"error": f"{self.name} did not exit within {timeout:g} s of its stop"}
        return self.result()

    def result(self) -> dict[str, Any]:
        for line in reversed(self.out_path.read_text(errors="replace").splitlines()):
            if line.startswith(MARKER):
                out: dict[str, Any] = json.loads(line[len(MARKER) :])
                return out
        tail = self.err_path.read_text(errors="replace")[-2000:]
        return {"error": f"{self.name} exited {self.proc.returncode} without a result: {tail}"}

    def new_seqs(self) -> list[int]:
        """Sequence numbers logged since the last call (the drain's progress)."""
        try:
            with open(self.log_path) as f:
                f.seek(self._tail_at)
                chunk = f.read()
                self._tail_at = f.tell()
        except OSError:
            return []
        text = self._tail_rest + chunk
        lines = text.split("\n")
        self._tail_rest = lines.pop()
        return [int(line.split()[4]) for line in lines if line.startswith("R ")]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _check_alive(members: list[Member]) -> None:
    """A member that exited before it was told to: the run cannot go on."""
    for m in members:
        if m.told_to_stop or m.proc.poll() is None:
            continue
        out = m.result()
        if "unsupported" in out:
            raise Unsupported(out["unsupported"])
        raise RuntimeError(f"member {m.name} exited early: {out.get('error', out)}")


def _sleep_until(at: float, members: list[Member]) -> None:
    while (now := time.monotonic()) < at:
        _check_alive(members)
        time.sleep(min(0.1, at - now))
    _check_alive(members)


def drive(client: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One run of the scenario for ``client`` (see the module's docstring)."""
    import asyncio

    spec = {**spec, "group": f"bench-rebalance-{uuid.uuid4().hex[:10]}"}
    heartbeat_ms = None
    if spec["protocol"] == "consumer":
        if client == "aiokafka":
            raise Unsupported("aiokafka has no KIP-848 consumer protocol")
        heartbeat_ms = asyncio.run(
            set_group_heartbeat(spec["bootstrap"], spec["group"], spec["heartbeat_interval_ms"])
        )
    n, step = spec["members"], spec["step_s"]
    workdir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    producer = PacedProducer(spec)
    members: list[Member] = []
    changes: list[Change] = []
    outcomes: dict[str, dict[str, Any]] = {}
    # Each change lands at a seeded offset within its step (the same offsets for every
    # client of a round): a step that is a multiple of a heartbeat interval would put every
    # join at the same phase of the members' heartbeats, and a classic joiner waits for
    # the others' next heartbeat (up to one interval).
    rng = random.Random(spec.get("seed", 0))
    offsets = [rng.uniform(0, spec["jitter_s"]) for _ in range(2 * n - 1)]
    producer.start()
    try:
        began = time.monotonic() + spec["lead_s"]
        for i in range(n):  # join one by one
            _sleep_until(began + i * step + offsets[i], members)
            members.append(Member(client, spec, i, workdir))
            changes.append(Change(members[-1].trace.joined_at, "join", members[-1].name))
        for i in range(n - 1):  # then leave one by one, in the order they joined
            _sleep_until(began + (n + i) * step + offsets[n + i], members)
            at = members[i].stop()
            members[i].trace.left_at = at
            changes.append(Change(at, "leave", members[i].name))
        _sleep_until(began + (2 * n - 1) * step, members)
        producer.stop()
        end = producer.stopped_at or time.monotonic()
        # the last member reads on until every acknowledged record was seen by someone
        wanted = set(producer.acked)
        for m in members:
            wanted.difference_update(m.new_seqs())
        deadline = time.monotonic() + spec["drain_s"]
        while wanted and time.monotonic() < deadline:
            _sleep_until(time.monotonic() + 0.25, members)
            for m in members:
                wanted.difference_update(m.new_seqs())
        last = members[-1]
        last.trace.left_at = last.stop()
        for m in members:  # each was told to close: its result once it exited
            outcomes[m.name] = m.wait(spec["close_timeout_s"])
    finally:
        for m in members:
            m.kill()
        if producer.stopped_at is None:
            producer.stop()
    errors = {name: out["error"] for name, out in outcomes.items() if "error" in out}
    if errors:
        raise RuntimeError(f"member(s) failed (their output: {workdir}): {errors}")
    for m in members:
        with open(m.log_path) as f:
            read_member_log(f, m.trace)
    result = analyze([m.trace for m in members], changes, end, producer.acked, spec["window_s"])
    result["heartbeat_interval_ms"] = heartbeat_ms
    result["producer_errors"] = producer.errors
    result["sent"] = producer.sent
    result["group"] = spec["group"]
    result["records"] = result["deliveries"]
    result["member_peak_rss_mb"] = {n: o.get("peak_rss_mb") for n, o in outcomes.items()}
    peaks = [v for v in result["member_peak_rss_mb"].values() if v]
    if peaks:
        result["peak_rss_mb"] = max(peaks)  # the runner reports the members', not the driver's
    result["timeline"] = [
        {"at": round(c.at - changes[0].at, 3), "kind": c.kind, "member": c.member} for c in changes
    ]
    shutil.rmtree(workdir, ignore_errors=True)  # kept when the run failed (its .err files)
    return result
