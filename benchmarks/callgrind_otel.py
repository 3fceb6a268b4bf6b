"""Instructions per record with OpenTelemetry off and with the API but no SDK (issue 31).

``python -m benchmarks.callgrind_otel`` (valgrind needed; a local broker is started unless
``--bootstrap-servers`` is given) counts, with callgrind, what a record costs in the two
modes a user without an SDK can be in: ``off`` (``opentelemetry=False``) and ``nosdk``
(``opentelemetry-api`` importable, no SDK configured: the default). Wall-clock throughput
of the same paths varies by several percent from run to run on a shared machine; the
instruction count does not, so a per-record check the no-SDK path should not make shows
here as a difference, however small.

Operations (100 B keyless values, a 3-partition topic, the benchmark's settings):

* ``enqueue``: ``await producer.enqueue(...)`` per record, then each future awaited;
* ``batches``: ``async for batch in consumer.batches()`` over an assigned topic filled
  beforehand, until the records are read.

Each (mode, operation) runs twice under callgrind, with ``--small`` and ``--large``
records (``batches``: 5x ``--large``); the instructions per record are the difference of
the totals over the difference of the counts (start-up, imports, the client's start and
close cancel out). The sender's batching and the fetches' sizes vary a little from run to
run, so each pair runs ``--repeat`` times, the modes alternating, and the median is
reported with every run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import settings
from benchmarks.callgrind_produce import callgrind, on_broker, write_results

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "nosdk")
OPERATIONS = ("enqueue", "batches")
SIZE = 100
WARMUP = 2000


async def _child(operation: str, mode: str, records: int, topic: str, bootstrap: str) -> None:
    from aiostream_kafka import Consumer, Producer, TopicPartition
    from aiostream_kafka.otel import telemetry_for

    if telemetry_for(True, None, None, client_id="probe") is not None:
        raise SystemExit("an SDK is configured in this process: the nosdk mode needs none")
    otel = mode != "off"
    if operation == "enqueue":
        base = settings.PRODUCER
        values = settings.payloads(SIZE)
        k = len(values)
        async with Producer(
            bootstrap,
            acks=base["acks"],
            linger_ms=base["linger_ms"],
            batch_size=base["batch_size"],
            enable_idempotence=base["enable_idempotence"],
            max_request_size=base["max_request_size"],
            opentelemetry=otel,
        ) as producer:
            for n in (WARMUP, records):
                futures = [await producer.enqueue(topic, values[i % k]) for i in range(n)]
                for future in futures:
                    await future
        return
    # batches: read WARMUP + records from the beginning of the filled topic
    wanted = WARMUP + records
    async with Consumer(bootstrap, opentelemetry=otel) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        for p in range(3):
            consumer.seek_to_beginning(TopicPartition(topic, p))
        got = 0
        async with asyncio.timeout(600):
            async for batch in consumer.batches():
                got += len(batch)
                if got >= wanted:
                    break


def _measure(operation: str, mode: str, records: int, topic: str, bootstrap: str) -> int:
    return callgrind("benchmarks.callgrind_otel", [operation, mode, records, topic, bootstrap])


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from aiostream_kafka import Admin, BufferFullError, NewTopic, Producer

    async def measure_all(bootstrap: str) -> dict[str, Any]:
        produce_topic = f"callgrind-otel-p-{os.getpid()}"
        consume_topic = f"callgrind-otel-c-{os.getpid()}"
        async with Admin(bootstrap) as admin:
            await admin.create_topics(
                [
                    NewTopic(t, 3, 1, dict(settings.TOPIC_CONFIG))
                    for t in (produce_topic, consume_topic)
                ]
            )
        async with Producer(bootstrap, linger_ms=5, opentelemetry=False) as producer:
            values = settings.payloads(SIZE)
            for i in range(WARMUP + args.large * 5):
                while True:
                    try:
                        producer.enqueue_nowait(consume_topic, values[i % len(values)])
                        break
                    except BufferFullError:
                        await producer.wait_for_buffer()
            await producer.flush()
        results: dict[str, Any] = {}
        loop = asyncio.get_running_loop()
        for operation in args.operations.split(","):
            topic = produce_topic if operation == "enqueue" else consume_topic
            large = args.large if operation == "enqueue" else args.large * 5
            runs: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(args.repeat):  # the modes alternate: drift hits both alike
                for mode in MODES:
                    totals = [
                        await loop.run_in_executor(
                            None, _measure, operation, mode, n, topic, bootstrap
                        )
                        for n in (args.small, large)
                    ]
                    per_record = (totals[1] - totals[0]) / (large - args.small)
                    runs[mode].append(round(per_record, 1))
                    sys.stderr.write(
                        f"{operation:<8} {mode:<6} {per_record:>10,.1f} instructions/record\n"
                    )
            for mode in MODES:
                results.setdefault(operation, {})[mode] = {
                    "instructions_per_record": statistics.median(runs[mode]),
                    "runs": runs[mode],
                    "records": [args.small, large],
                }
            off = results[operation]["off"]["instructions_per_record"]
            nosdk = results[operation]["nosdk"]["instructions_per_record"]
            results[operation]["nosdk_over_off"] = round(nosdk / off, 4)
        return results

    return await on_broker(args.bootstrap_servers, measure_all)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.callgrind_otel")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--small", type=int, default=2000)
    parser.add_argument("--large", type=int, default=12000, help="x5 for batches")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if args.child:
        operation, mode, records, topic, bootstrap = json.loads(args.child)
        asyncio.run(_child(operation, mode, records, topic, bootstrap))
        return 0
    write_results(asyncio.run(_main(args)), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
