"""Instructions per record of ours' per-record produce calls, counted by callgrind.

``python -m benchmarks.callgrind_produce`` (valgrind needed; a local broker is started
unless ``--bootstrap-servers`` is given): for each build (compiled, pure) and each API,
two runs of a child process under ``valgrind --tool=callgrind``, one producing
``--small`` records and one ``--large``, after the same warm-up; the instructions per
record are the difference of the two totals over the difference of the counts, so the
interpreter's start, the imports, the producer's start and close and the warm-up cancel
out. What is left is everything the process executes per record: the call, the append,
encoding, the sender, the network calls, the completion and the garbage collector.

APIs (100 B keyless values, a 3-partition topic, the benchmark's producer settings:
``acks=all``, ``linger_ms=5``, ``batch_size=16384``, idempotence on, no compression):

* ``enqueue``: ``await producer.enqueue(...)`` per record, then each future awaited;
* ``nowait``: ``producer.enqueue_nowait(...)`` per record (``BufferFullError`` ->
  ``await wait_for_buffer()``), then ``flush()``;
* ``nowait_cb``: the same with ``on_delivery=`` one function counting the outcomes;
* ``send``: bursts of 1,000 tasks, each ``await producer.send(...)`` once (a request
  handler's call), the next burst when all are acknowledged.

Under callgrind the process runs ~50x slower, so a batch has less time to fill within
``linger_ms`` than in a real run: the sender's share per record is somewhat higher here
than at full speed, alike for every API.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import settings

ROOT = Path(__file__).resolve().parent.parent
R = TypeVar("R")
APIS = ("enqueue", "nowait", "nowait_cb", "send")
SIZE = 100
WARMUP = 2000
SEND_BURST = 1000


async def _child(api: str, records: int, topic: str, bootstrap: str) -> None:
    from aiostream_kafka import BufferFullError, Producer

    base = settings.PRODUCER
    values = settings.payloads(SIZE)
    k = len(values)
    delivered = [0, 0]

    def on_delivery(metadata: Any, error: BaseException | None) -> None:
        delivered[error is not None] += 1

    async with Producer(
        bootstrap,
        acks=base["acks"],
        linger_ms=base["linger_ms"],
        batch_size=base["batch_size"],
        enable_idempotence=base["enable_idempotence"],
        max_request_size=base["max_request_size"],
    ) as producer:

        async def run(n: int) -> None:
            if api == "enqueue":
                futures = [await producer.enqueue(topic, values[i % k]) for i in range(n)]
                for future in futures:
                    await future
            elif api in ("nowait", "nowait_cb"):
                callback = on_delivery if api == "nowait_cb" else None
                for i in range(n):
                    while True:
                        try:
                            producer.enqueue_nowait(topic, values[i % k], on_delivery=callback)
                            break
                        except BufferFullError:
                            await producer.wait_for_buffer()
                await producer.flush()
            else:
                for first in range(0, n, SEND_BURST):
                    async with asyncio.TaskGroup() as tg:
                        for i in range(first, min(first + SEND_BURST, n)):
                            tg.create_task(producer.send(topic, values[i % k]))

        await run(WARMUP)
        await run(records)
    if api == "nowait_cb" and (delivered[1] or delivered[0] != WARMUP + records):
        raise SystemExit(f"on_delivery: {delivered[0]} delivered, {delivered[1]} failed")


def _instructions(path: str) -> int:
    """The total ``Ir`` of a callgrind output file."""
    text = Path(path).read_text()
    match = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {path}")
    return int(match.group(1))


def callgrind(module: str, child: list[Any], env: dict[str, str] | None = None) -> int:
    """Run ``python -m module --child JSON(child)`` under callgrind (cwd: the checkout);
    return its total instructions. Raises RuntimeError when the child fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            module,
            "--child",
            json.dumps(child),
        ]
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{child} failed: {proc.stderr[-3000:]}")
        return _instructions(out)


async def on_broker(bootstrap: str | None, measure: Callable[[str], Awaitable[R]]) -> R:
    """``measure(bootstrap)`` against ``bootstrap``, or a local broker started for it."""
    if bootstrap:
        return await measure(bootstrap)
    from aiostream_kafka.testing import KafkaCluster

    async with KafkaCluster(brokers=1) as cluster:
        return await measure(cluster.bootstrap_servers)


def write_results(results: dict[str, Any], path: Path | None) -> None:
    text = json.dumps(results, indent=1)
    if path:
        path.write_text(text + "\n")
    sys.stdout.write(text + "\n")


def _measure(api: str, records: int, topic: str, bootstrap: str, pure: bool) -> int:
    env = dict(os.environ)
    env.pop("AIOSTREAM_KAFKA_PURE", None)
    if pure:
        env["AIOSTREAM_KAFKA_PURE"] = "1"
    return callgrind("benchmarks.callgrind_produce", [api, records, topic, bootstrap], env)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from aiostream_kafka import Admin, NewTopic

    async def measure_all(bootstrap: str) -> dict[str, Any]:
        topic = f"callgrind-{os.getpid()}"
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 3, 1, dict(settings.TOPIC_CONFIG))])
        results: dict[str, Any] = {}
        loop = asyncio.get_running_loop()
        for build in args.builds.split(","):
            for api in args.apis.split(","):
                totals = []
                try:
                    for n in (args.small, args.large):
                        totals.append(
                            await loop.run_in_executor(
                                None, _measure, api, n, topic, bootstrap, build == "pure"
                            )
                        )
                except RuntimeError as exc:
                    results.setdefault(build, {})[api] = {"error": str(exc)}
                    sys.stderr.write(f"{build:<8} {api:<10} failed: {exc}\n")
                    continue
                per_record = (totals[1] - totals[0]) / (args.large - args.small)
                results.setdefault(build, {})[api] = {
                    "instructions_per_record": round(per_record),
                    "totals": totals,
                    "records": [args.small, args.large],
                }
                sys.stderr.write(f"{build:<8} {api:<10} {per_record:>9,.0f} instructions/record\n")
        return results

    return await on_broker(args.bootstrap_servers, measure_all)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callgrind_produce")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--apis", default=",".join(APIS))
    parser.add_argument("--builds", default="compiled,pure")
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=12000)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if args.child:
        api, records, topic, bootstrap = json.loads(args.child)
        asyncio.run(_child(api, records, topic, bootstrap))
        return 0
    write_results(asyncio.run(_main(args)), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
