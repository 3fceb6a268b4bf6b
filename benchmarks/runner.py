"""The driver: runs cases round by round, the clients alternating, each run in a fresh
``benchmarks.worker`` subprocess, and collects the samples."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import settings, side_venv
from benchmarks.clients import PURE, VARIANTS, with_variants
from benchmarks.worker import MARKER

ROOT = Path(__file__).resolve().parent.parent
WORKER_TIMEOUT_S = 900


@dataclass
class Metric:
    key: str
    label: str
    higher_is_better: bool
    fmt: str = "{:,.0f}"


@dataclass
class Case:
    """One row group of the report: a scenario with fixed parameters."""

    family: str
    name: str
    scenario: str  # the worker scenario
    spec: dict[str, Any]
    metrics: list[Metric]
    extract: Callable[[dict[str, Any]], dict[str, float]]
    topic: Callable[[], Awaitable[str]] | None = None  # a fresh topic per run
    cleanup: Callable[[str], Awaitable[None]] | None = None
    shared_topic: str | None = None
    proxied: bool = False
    clients: list[str] = field(default_factory=lambda: list(settings.CLIENTS))
    #: Consecutive cases with the same tag are variants run in turn within each round,
    #: their order rotating round by round (as the clients' within a case): the otel
    #: scenario's modes.
    rotate: str | None = None
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    configs: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "case": self.name,
            "scenario": self.scenario,
            "spec": {k: v for k, v in self.spec.items() if k != "bootstrap"},
            "metrics": [m.__dict__ for m in self.metrics],
            "samples": self.samples,
            "summary": summarize(self),
            "unsupported": self.unsupported,
            "errors": self.errors,
            "configs": self.configs,
            "runs": self.runs,
        }


def summarize(case: Case) -> dict[str, dict[str, dict[str, float]]]:
    """client -> metric -> median/min/max/n."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for client, metrics in case.samples.items():
        for key, values in metrics.items():
            if values:
                out.setdefault(client, {})[key] = {
                    "median": statistics.median(values),
                    "min": min(values),
                    "max": max(values),
                    "n": len(values),
                }
    return out


class Context:
    """What the scenario modules need: the broker, the profile, topics, the proxy."""

    def __init__(self, bootstrap: str, profile: settings.Profile, clients: list[str]) -> None:
        self.bootstrap = bootstrap
        self.profile = profile
        self.clients = clients
        self.cases: list[Case] = []
        self.rss: dict[str, dict[str, list[float]]] = {}  # family -> client -> MB
        self.proxy: Any = None
        self.extra: dict[str, Any] = {}

    async def create_topic(self, prefix: str, partitions: int) -> str:
        from aiostream_kafka import Admin, NewTopic

        name = f"bench-{prefix}-{uuid.uuid4().hex[:10]}"
        async with Admin(self.bootstrap) as admin:
            await admin.create_topics([NewTopic(name, partitions, 1, dict(settings.TOPIC_CONFIG))])
        return name

    async def delete_topic(self, name: str) -> None:
        from aiostream_kafka import Admin

        try:
            async with Admin(self.bootstrap) as admin:
                await admin.delete_topics([name])
        except Exception as exc:
            log(f"  (could not delete {name}: {exc})")

    async def fill(
        self,
        topic: str,
        records: int,
        size: int,
        partitions: int,
        stamped: bool = False,
        keys: int = 0,
    ) -> None:
        """Write ``records`` values of ``size`` bytes round-robin over ``partitions``
        (confluent-kafka's producer); ``stamped``: each value carries its sequence number
        (``clients.common.stamp``); ``keys``: record ``i`` has key ``k{i % keys}``, each
        key on one partition (``(i % keys) % partitions``)."""
        spec = {
            "keys": keys,
            "stamped": stamped,
            "scenario": "fill",
            "bootstrap": self.bootstrap,
            "topic": topic,
            "records": records,
            "size": size,
            "partitions": partitions,
        }
        out = await run_worker("confluent", spec)
        if "result" not in out:
            raise RuntimeError(f"filling {topic} failed: {out.get('error')}")
        log(f"  filled {topic}: {records:,} x {size} B in {out['result']['seconds']:.1f}s")


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


#: The interpreter of each side-venv client once found (or why it cannot run).
_SIDE: dict[str, str | side_venv.NotRun] = {}


async def worker_python(client: str) -> str:
    """The interpreter that runs ``client``'s worker: this one, or for a client of another
    Python (``side_venv.SIDE_CLIENTS``) its side venv's, created on first use (in a thread:
    it may take minutes). Raises ``side_venv.NotRun`` when that client cannot run here."""
    if client not in side_venv.SIDE_CLIENTS:
        return sys.executable
    if client not in _SIDE:
        try:
            _SIDE[client] = await asyncio.to_thread(side_venv.interpreter, client)
        except side_venv.NotRun as exc:
            _SIDE[client] = exc
    found = _SIDE[client]
    if isinstance(found, side_venv.NotRun):
        raise found
    return found


async def run_worker(client: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        python = await worker_python(client)
    except side_venv.NotRun as exc:
        return {"client": client, "unsupported": str(exc)}
    env = dict(os.environ)
    env.pop("AIOSTREAM_KAFKA_PURE", None)
    if client in PURE:
        env["AIOSTREAM_KAFKA_PURE"] = "1"  # the same source, its compiled modules off
    if client in VARIANTS:
        spec = {**spec, **VARIANTS[client][1]}
    proc = await asyncio.create_subprocess_exec(
        python,
        "-m",
        "benchmarks.worker",
        client,
        json.dumps(spec),
        cwd=str(ROOT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), WORKER_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"client": client, "error": f"timed out after {WORKER_TIMEOUT_S}s"}
    for line in reversed(stdout.decode(errors="replace").splitlines()):
        if line.startswith(MARKER):
            result: dict[str, Any] = json.loads(line[len(MARKER) :])
            return result
    return {
        "client": client,
        "error": f"worker exited {proc.returncode} without a result: "
        f"{stderr.decode(errors='replace')[-2000:]}",
    }


async def run_cases(ctx: Context, cases: list[Case]) -> None:
    """Every case, ``warmup_rounds`` + ``rounds`` times, the client order rotating."""
    profile = ctx.profile
    total = profile.warmup_rounds + profile.rounds
    for round_no in range(total):
        warmup = round_no < profile.warmup_rounds
        for case in round_order(cases, round_no):
            clients = [
                c
                for c in with_variants(ctx.clients)
                if c in case.clients and c not in case.unsupported
            ]
            if not clients:
                continue
            shift = round_no % len(clients)
            for client in clients[shift:] + clients[:shift]:
                await _one_run(ctx, case, client, round_no, warmup)


def round_order(cases: list[Case], round_no: int) -> list[Case]:
    """``cases`` in the order of round ``round_no``: each run of consecutive cases sharing
    a ``rotate`` tag rotated by the round number, the others as they are."""
    out: list[Case] = []
    i = 0
    while i < len(cases):
        j = i + 1
        tag = cases[i].rotate
        while tag is not None and j < len(cases) and cases[j].rotate == tag:
            j += 1
        block = cases[i:j]
        shift = round_no % len(block)
        out += block[shift:] + block[:shift]
        i = j
    return out


async def _one_run(ctx: Context, case: Case, client: str, round_no: int, warmup: bool) -> None:
    topic = case.shared_topic or (await case.topic() if case.topic else None)
    bootstrap = ctx.bootstrap
    if case.proxied:
        ctx.proxy.reset()
        bootstrap = ctx.proxy.bootstrap_servers
    spec = {
        **case.spec,
        "scenario": case.scenario,
        "bootstrap": bootstrap,
        "topic": topic,
        "seed": 7548 + round_no,
    }
    started = time.monotonic()
    out = await run_worker(client, spec)
    wall = time.monotonic() - started
    if case.proxied and "result" in out:
        out["result"]["proxy"] = ctx.proxy.counters.as_dict()
    if topic and case.cleanup and not case.shared_topic:
        await case.cleanup(topic)
    tag = "warm-up" if warmup else f"round {round_no + 1 - ctx.profile.warmup_rounds}"
    case.configs.setdefault(client, out.get("config", {}))
    if "unsupported" in out:
        case.unsupported[client] = out["unsupported"]
        log(f"  {case.family} {case.name} {client:<9} n/a: {out['unsupported']}")
        return
    if "error" in out:
        case.errors.setdefault(client, []).append(out["error"])
        log(f"  {case.family} {case.name} {client:<9} {tag}: ERROR {out['error'][:300]}")
        return
    values = case.extract(out["result"])
    shown = ", ".join(
        f"{m.label} " + m.fmt.format(values[m.key]) for m in case.metrics if m.key in values
    )
    log(f"  {case.family} {case.name} {client:<9} {tag}: {shown}  [{wall:.1f}s]")
    if warmup:
        return
    for key, value in values.items():
        case.samples.setdefault(client, {}).setdefault(key, []).append(value)
    # A run of several processes (rebalance) reports its clients' peak, not its driver's.
    peak = out["result"].get("peak_rss_mb", out["peak_rss_mb"])
    case.runs.setdefault(client, []).append(
        {**out["result"], "peak_rss_mb": peak, "round": round_no + 1 - ctx.profile.warmup_rounds}
    )
    ctx.rss.setdefault(case.family, {}).setdefault(client, []).append(peak)


def throughput(result: dict[str, Any], size: int) -> dict[str, float]:
    rate = result["records"] / result["seconds"]
    return {"records_per_s": rate, "mb_per_s": rate * size / 1e6}


THROUGHPUT_METRICS = [
    Metric("records_per_s", "records/s", True),
    Metric("mb_per_s", "MB/s", True, "{:,.1f}"),
]
