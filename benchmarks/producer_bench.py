"""Producer throughput: ours beside aiokafka and confluent-kafka, one broker, one topic.

Every client sends keyless records with ``acks=all`` and its own default ``linger_ms``
(ours 5, as Kafka 4; confluent-kafka/librdkafka 5; aiokafka 0) to the same 3-partition
topic on the same broker, in the same run, and the time from the first send to the last
acknowledgement is measured (each client is started and has sent one warm-up record
before the clock starts). Cases:

* ``ours enqueue``      -- ``await producer.enqueue(...)`` in a loop (pipelined), then wait
  for every future;
* ``ours 1000 tasks``   -- 1,000 tasks each looping ``await producer.send(...)``;
* ``aiokafka send``     -- ``await producer.send(...)`` (returns once buffered) in a loop,
  then wait for every future: aiokafka's fastest pattern;
* ``aiokafka 1000 tasks`` -- 1,000 tasks each looping ``await producer.send_and_wait(...)``;
* ``confluent produce`` -- ``producer.produce(...)`` in a loop with ``poll(0)``, then
  ``flush()``: librdkafka does the work in its own C threads.

Idempotence: ours is on by default; aiokafka's and librdkafka's are off by default, and
each client runs with its defaults.

Each case runs in its own subprocess (no shared interpreter state); cases are interleaved
round by round and the best round is kept. Results go to ``results/producer.json``.

Usage: ``python benchmarks/producer_bench.py [--rounds N] [--quick] [--bootstrap HOST:PORT]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

PARTITIONS = 3
# Records per case and value size: enough for a few seconds of the faster clients.
COUNTS = {100: 300_000, 1024: 100_000}
SLOW_FACTOR = {"aiokafka send": 3, "aiokafka 1000 tasks": 6, "ours 1000 tasks": 2}
CASES = [
    "ours enqueue",
    "ours 1000 tasks",
    "aiokafka send",
    "aiokafka 1000 tasks",
    "confluent produce",
]
TASKS = 1000


# -- one case, in a subprocess -------------------------------------------------------------


async def _ours_enqueue(bs: str, topic: str, value: bytes, n: int) -> float:
    from aiostream_kafka.producer import Producer

    async with Producer(bs, acks="all") as producer:
        await producer.send(topic, value)  # warm up: connections, metadata, producer id
        started = time.perf_counter()
        futures = [await producer.enqueue(topic, value) for _ in range(n)]
        for future in futures:
            await future
        return time.perf_counter() - started


async def _ours_tasks(bs: str, topic: str, value: bytes, n: int) -> float:
    from aiostream_kafka.producer import Producer

    async with Producer(bs, acks="all") as producer:

        async def worker(count: int) -> None:
            for _ in range(count):
                await producer.send(topic, value)

        await producer.send(topic, value)
        started = time.perf_counter()
        await asyncio.gather(*(worker(n // TASKS) for _ in range(TASKS)))
        return time.perf_counter() - started


async def _aiokafka_send(bs: str, topic: str, value: bytes, n: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bs, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value)
        started = time.perf_counter()
        futures = [await producer.send(topic, value) for _ in range(n)]
        for future in futures:
            await future
        return time.perf_counter() - started
    finally:
        await producer.stop()


async def _aiokafka_tasks(bs: str, topic: str, value: bytes, n: int) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bs, acks="all")
    await producer.start()
    try:

        async def worker(count: int) -> None:
            for _ in range(count):
                await producer.send_and_wait(topic, value)

        await producer.send_and_wait(topic, value)
        started = time.perf_counter()
        await asyncio.gather(*(worker(n // TASKS) for _ in range(TASKS)))
        return time.perf_counter() - started
    finally:
        await producer.stop()


def _confluent(bs: str, topic: str, value: bytes, n: int) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": bs, "acks": "all"})
    errors: list[Any] = []
    producer.produce(topic, value)
    producer.flush(30)
    started = time.perf_counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # its queue is full: serve callbacks and retry
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} not delivered, errors {errors[:3]}")
    return elapsed


def run_case(case: str, bs: str, topic: str, size: int, n: int) -> float:
    """Seconds to send ``n`` records of ``size`` bytes with ``case``, from the first send
    to the last acknowledgement (client start-up and a warm-up record excluded)."""
    value = os.urandom(size // 2).hex().encode()[:size]
    if case == "ours enqueue":
        return asyncio.run(_ours_enqueue(bs, topic, value, n))
    if case == "ours 1000 tasks":
        return asyncio.run(_ours_tasks(bs, topic, value, n))
    if case == "aiokafka send":
        return asyncio.run(_aiokafka_send(bs, topic, value, n))
    if case == "aiokafka 1000 tasks":
        return asyncio.run(_aiokafka_tasks(bs, topic, value, n))
    if case == "confluent produce":
        return _confluent(bs, topic, value, n)
    raise ValueError(case)


# -- the driver ---------------------------------------------------------------------------


def _subprocess(case: str, bs: str, topic: str, size: int, n: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--case",
            case,
            "--bootstrap",
            bs,
            "--topic",
            topic,
            "--size",
            str(size),
            "--count",
            str(n),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return float(out.stdout.strip().splitlines()[-1])


async def _create_topic(bs: str, topic: str) -> None:
    from aiostream_kafka.testing.probe import create_topic

    await create_topic(bs, topic, PARTITIONS, 1, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a tenth of the records, 1 round")
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--json", default=str(HERE / "results" / "producer.json"))
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:  # a child: run one case, print its seconds
        print(run_case(args.case, args.bootstrap, args.topic, args.size, args.count))
        return 0

    cluster = None
    bs = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bs:
        from aiostream_kafka.testing import KafkaCluster

        cluster = KafkaCluster(brokers=1)
        cluster.start_blocking()
        bs = cluster.bootstrap_servers
    try:
        topic = f"producer-bench-{os.getpid()}"
        asyncio.run(_create_topic(bs, topic))
        rounds = 1 if args.quick else args.rounds
        results: dict[str, dict[str, dict[str, float]]] = {}
        for size, base in COUNTS.items():
            best: dict[str, float] = {}
            counts = {}
            for case in CASES:
                n = base // SLOW_FACTOR.get(case, 1) // (10 if args.quick else 1)
                counts[case] = n - n % TASKS
            for _ in range(rounds):
                for case in CASES:
                    seconds = _subprocess(case, bs, topic, size, counts[case])
                    rate = counts[case] / seconds
                    best[case] = max(best.get(case, 0.0), rate)
                    sys.stderr.write(f"  {size} B {case}: {rate:,.0f} records/s\n")
            results[str(size)] = {
                case: {
                    "records_per_s": round(rate),
                    "mb_per_s": round(rate * size / 1e6, 2),
                    "records": counts[case],
                }
                for case, rate in best.items()
            }
        _report(results)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "machine": platform.machine(),
                    "cpus": os.cpu_count(),
                    "rounds": rounds,
                    "partitions": PARTITIONS,
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
    finally:
        if cluster is not None:
            cluster.close_blocking()
    return 0


def _report(results: dict[str, dict[str, dict[str, float]]]) -> None:
    print(
        f"{'value':>6} {'case':<22} {'records/s':>12} {'MB/s':>8} {'vs aiokafka':>12} "
        f"{'vs confluent':>13}"
    )
    for size, cases in results.items():
        aio = cases["aiokafka send"]["records_per_s"]
        conf = cases["confluent produce"]["records_per_s"]
        for case, r in cases.items():
            rate = r["records_per_s"]
            print(
                f"{size:>5}B {case:<22} {rate:>12,.0f} {r['mb_per_s']:>8.2f} "
                f"{rate / aio:>11.2f}x {rate / conf:>12.2f}x"
            )


if __name__ == "__main__":
    raise SystemExit(main())
