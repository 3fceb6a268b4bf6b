"""``python -m benchmarks`` (``make bench``): every scenario, every client, one broker.

Starts a local broker (or uses ``--bootstrap-servers`` / ``KAFKA_BOOTSTRAP_SERVERS``),
creates fresh topics, runs each scenario for aiostream_kafka, aiokafka, confluent-kafka and
the Java client's perf tools -- each run in its own subprocess, the clients alternating,
several rounds -- and writes ``benchmarks/results/`` (``results.json``, ``results.md``,
PNG plots). ``--publish`` puts the run's scenarios into ``docs/img/bench/results.json``
(replacing those scenarios' figures, keeping the others' with the run they came from), draws
their plots into ``docs/img/bench/`` and writes ``docs/benchmarks.md``; ``--publish-from``
does the same with a run's saved ``results.json``, and ``--republish`` writes the page again
from the published JSON, both without running anything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from benchmarks import report, settings
from benchmarks.runner import ROOT, Context, log, run_cases
from benchmarks.scenarios import FAMILIES, OPT_IN, QUICK_SKIPS, family


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small counts, 1 round (< 3 min)")
    parser.add_argument(
        "--profile", choices=sorted(settings.PROFILES), help="full (default), quick or smoke"
    )
    parser.add_argument("--rounds", type=int, help="measured rounds (default: the profile's)")
    parser.add_argument("--warmup-rounds", type=int, help="unmeasured rounds first")
    parser.add_argument(
        "--scenarios",
        default=None,
        help=f"comma-separated, of {','.join(FAMILIES)} (default: all but "
        f"{','.join(sorted(OPT_IN))}; --quick skips codec)",
    )
    parser.add_argument(
        "--clients",
        default=",".join(settings.CLIENTS),
        help="comma-separated client names (default: all but the opt-in "
        f"{','.join(settings.OPT_IN_CLIENTS)})",
    )
    parser.add_argument("--bootstrap-servers", default=None, help="use this broker")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "benchmarks" / "results", help="results folder"
    )
    parser.add_argument(
        "--publish",
        action="store_true",
        help="put this run's scenarios into docs/ (the page's other scenarios are kept)",
    )
    parser.add_argument(
        "--publish-from",
        type=Path,
        metavar="RESULTS_JSON",
        help="run nothing: publish this saved run (a results.json) as --publish would",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--republish",
        action="store_true",
        help="run nothing: write docs/benchmarks.md again from docs/img/bench/results.json",
    )
    return parser.parse_args(argv)


@contextlib.asynccontextmanager
async def broker(bootstrap: str | None) -> AsyncIterator[tuple[str, str]]:
    bootstrap = bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        yield bootstrap, "external (given)"
        return
    from aiostream_kafka.testing import KafkaCluster
    from aiostream_kafka.testing.jars import KAFKA_VERSION

    log("starting a local Kafka broker ...")
    async with KafkaCluster(brokers=1) as cluster:
        yield (
            cluster.bootstrap_servers,
            f"local, 1 broker, Kafka {KAFKA_VERSION} ({cluster.source})",
        )


def publish(data: dict[str, Any], plots: bool) -> list[Path]:
    """``--publish`` of a run's document: opt-in families alone each to a JSON of their own
    (their hand-written sections show them); otherwise merged into the published results,
    the run's families replacing theirs (``report.publish``). Returns the paths written."""
    if all(f in OPT_IN for f in data["families"]):
        return report.publish_opt_in(data, ROOT / "docs")
    return report.publish(data, ROOT / "docs", plots=plots)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.republish:
        log(f"wrote {report.republish(ROOT / 'docs')}")
        return 0
    if args.publish_from is not None:
        data = json.loads(args.publish_from.read_text())
        for path in publish(data, plots=not args.no_plots):
            log(f"published {path}")
        return 0
    profile_name = args.profile or ("quick" if args.quick else "full")
    profile = dataclasses.replace(settings.PROFILES[profile_name])
    if args.rounds is not None:
        profile.rounds = args.rounds
    if args.warmup_rounds is not None:
        profile.warmup_rounds = args.warmup_rounds
    if args.scenarios:
        families = [f.strip() for f in args.scenarios.split(",") if f.strip()]
        unknown = set(families) - set(FAMILIES)
        if unknown:
            raise SystemExit(f"unknown scenario(s): {sorted(unknown)}; known: {FAMILIES}")
    else:
        families = [
            f
            for f in FAMILIES
            if f not in OPT_IN and (profile_name == "full" or f not in QUICK_SKIPS)
        ]
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(settings.CLIENTS) - set(settings.OPT_IN_CLIENTS)
    if unknown or "ours" not in clients:
        raise SystemExit(f"--clients: 'ours' plus any of {settings.PEERS}; got {clients}")

    started = time.monotonic()
    machine = report.machine_info()
    log(
        f"profile {profile.name}: {profile.rounds} round(s) + {profile.warmup_rounds} warm-up; "
        f"scenarios {','.join(families)}; clients {','.join(clients)}"
    )
    standalone: dict[str, Any] = {}
    async with broker(args.bootstrap_servers) as (bootstrap, broker_desc):
        log(f"broker: {bootstrap} ({broker_desc})")
        machine["broker"] = broker_desc
        ctx = Context(bootstrap, profile, clients)
        try:
            for name in families:
                module = family(name)
                log(f"== {name}: {module.TITLE}")
                if hasattr(module, "run_standalone"):
                    standalone[name] = await module.run_standalone(ctx)
                    continue
                proxy = None
                cases = await module.cases(ctx)
                if any(c.proxied for c in cases):
                    from benchmarks.kafka_proxy import CountingProxy

                    proxy = CountingProxy(bootstrap)
                    await proxy.start()
                    ctx.proxy = proxy
                try:
                    await run_cases(ctx, cases)
                finally:
                    if proxy is not None:
                        await proxy.close()
                ctx.cases.extend(cases)
        finally:
            for topic in ctx.extra.get("topics_to_delete", []):
                await ctx.delete_topic(topic)
    machine["load_average_end"] = report.load_average()
    wall = time.monotonic() - started
    data = report.build_json(ctx, families, machine, standalone, wall)
    paths = report.write(data, args.output, plots=not args.no_plots)
    log(f"wrote {', '.join(str(p) for p in paths)} (wall time {wall:.0f}s)")
    if args.publish:
        for path in publish(data, plots=not args.no_plots):
            log(f"published {path}")
    sys.stdout.write(report.summary_table(data) + "\n")
    return 1 if any(c.errors for c in ctx.cases) else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
