"""Consumer benchmark: ours beside aiokafka and confluent-kafka, same broker, one run.

Throughput -- every client reads the same topic (12 partitions) from the beginning to the
end, once for 100-byte and once for 1 KiB values, one record at a time and a batch at a
time:

================  =============================  ==================================
ours              aiokafka                       confluent-kafka (librdkafka)
================  =============================  ==================================
``stream()``      ``async for msg in consumer``  ``poll()``
``batches()``     ``getmany()``                  ``consume(num_messages=10000)``
================  =============================  ==================================

Pause scenario (seed 001, KAFKA-7548) -- 10 partitions of 1 KiB values; before every take
of one record, 9 random partitions are paused and the 10th resumed. For a fixed time it
counts records delivered, Fetch requests and the bytes of record sets the broker sent per
byte of value delivered (1.0 would be no framing and nothing fetched twice; record and
batch headers alone make it about 1.03 here). Fetch counts come from our metrics, from
wrapping aiokafka's client ``send`` and from librdkafka's statistics.

Every figure is the median of ``--rounds`` runs, the clients interleaved round by round;
the machine is shared (the broker runs on it too), so compare ratios within one run.
Usage: ``python benchmarks/consumer_bench.py [--quick] [--rounds N] [--bootstrap-servers B]``;
results go to ``results/consumer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PARTITIONS = 12
PAUSE_PARTITIONS = 10
TAKE_TIMEOUT_S = 2.0  # a take that waits this long found its partition drained: stop


# -- data ----------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int, partitions: int, value_size: int) -> None:
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 16384,  # Java's default; what most topics hold
            "enable.idempotence": True,
        }
    )
    value = b"v" * value_size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("produce did not finish")


@contextlib.asynccontextmanager
async def broker(bootstrap: str | None) -> AsyncIterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from aiostream_kafka.testing import KafkaCluster

    async with KafkaCluster(brokers=1) as cluster:
        yield cluster.bootstrap_servers


async def make_topic(bootstrap: str, partitions: int, count: int, value_size: int) -> str:
    from aiostream_kafka.testing import probe

    name = f"bench-{value_size}-{uuid.uuid4().hex[:8]}"
    await probe.create_topic(bootstrap, name, partitions, 1, {"retention.ms": "3600000"})
    started = time.monotonic()
    await asyncio.to_thread(produce, bootstrap, name, count, partitions, value_size)
    print(f"  {name}: {count:,} x {value_size} B in {time.monotonic() - started:.1f}s", flush=True)
    return name


# -- throughput ----------------------------------------------------------------------------


async def ours(bootstrap: str, topic: str, count: int, batches: bool) -> float:
    from aiostream_kafka.consumer import Consumer
    from aiostream_kafka.structs import TopicPartition

    async with Consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        seen = 0
        started = time.perf_counter()
        if batches:
            async for batch in consumer.batches():
                seen += len(batch)
                if seen >= count:
                    break
        else:
            async for _record in consumer.stream():
                seen += 1
                if seen >= count:
                    break
        elapsed = time.perf_counter() - started
    assert seen == count, seen
    return elapsed


async def aiokafka_run(bootstrap: str, topic: str, count: int, batches: bool) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        seen = 0
        started = time.perf_counter()
        if batches:
            while seen < count:
                fetched = await consumer.getmany(timeout_ms=1000)
                for records in fetched.values():
                    seen += len(records)
        else:
            async for _msg in consumer:
                seen += 1
                if seen >= count:
                    break
        elapsed = time.perf_counter() - started
    finally:
        await consumer.stop()
    assert seen == count, seen
    return elapsed


def _confluent(bootstrap: str, **extra: Any) -> Any:
    import confluent_kafka

    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex}",  # required by librdkafka; never joined
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    settings.update(extra)
    return confluent_kafka.Consumer(settings)


async def confluent_run(bootstrap: str, topic: str, count: int, batches: bool) -> float:
    import confluent_kafka

    consumer = _confluent(bootstrap)
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PARTITIONS)
            ]
        )
        seen = 0
        started = time.perf_counter()
        if batches:
            while seen < count:
                for msg in consumer.consume(num_messages=10_000, timeout=1.0):
                    if msg.error() is None:
                        seen += 1
        else:
            while seen < count:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    seen += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    assert seen == count, seen
    return elapsed


THROUGHPUT: dict[str, Callable[[str, str, int, bool], Any]] = {
    "ours": ours,
    "aiokafka": aiokafka_run,
    "confluent": confluent_run,
}


# -- the pause scenario ----------------------------------------------------------------------


async def pause_ours(bootstrap: str, topic: str, seconds: float, seed: int) -> dict[str, Any]:
    from aiostream_kafka.consumer import Consumer
    from aiostream_kafka.structs import TopicPartition

    rng = random.Random(seed)
    partitions = [TopicPartition(topic, p) for p in range(PAUSE_PARTITIONS)]
    delivered = records = 0
    async with Consumer(bootstrap) as consumer:
        consumer.assign(partitions)
        stream = consumer.stream()
        started = time.perf_counter()
        deadline = started + seconds
        drained = False
        while time.perf_counter() < deadline:
            active = rng.choice(partitions)
            consumer.pause(*[tp for tp in partitions if tp is not active])
            consumer.resume(active)
            try:
                async with asyncio.timeout(TAKE_TIMEOUT_S):
                    record = await anext(stream)
            except TimeoutError:
                drained = True
                break
            records += 1
            delivered += len(record.value)
        elapsed = _elapsed(started, drained)
        metrics = consumer.metrics()
        return {
            "records": records,
            "seconds": elapsed,
            "drained": drained,
            "fetch_requests": metrics.fetch_requests,
            "bytes_fetched": metrics.fetched_wire_bytes,
            "bytes_delivered": delivered,
        }


async def pause_aiokafka(bootstrap: str, topic: str, seconds: float, seed: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    rng = random.Random(seed)
    partitions = [TopicPartition(topic, p) for p in range(PAUSE_PARTITIONS)]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    counted = {"requests": 0, "bytes": 0}
    send = consumer._client.send

    async def counting_send(node_id: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        response = await send(node_id, request, *args, **kwargs)
        if getattr(request, "API_KEY", None) == 1:  # Fetch
            counted["requests"] += 1
            for _topic, parts in response.topics:
                for part in parts:
                    data = part[-1]
                    counted["bytes"] += len(data) if data else 0
        return response

    consumer._client.send = counting_send  # type: ignore[method-assign]
    delivered = records = 0
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning()
        started = time.perf_counter()
        deadline = started + seconds
        drained = False
        while time.perf_counter() < deadline:
            active = rng.choice(partitions)
            consumer.pause(*[tp for tp in partitions if tp is not active])
            consumer.resume(active)
            try:
                msg = await asyncio.wait_for(consumer.getone(), TAKE_TIMEOUT_S)
            except TimeoutError:
                drained = True
                break
            records += 1
            delivered += len(msg.value)
        elapsed = _elapsed(started, drained)
    finally:
        await consumer.stop()
    return {
        "records": records,
        "seconds": elapsed,
        "drained": drained,
        "fetch_requests": counted["requests"],
        "bytes_fetched": counted["bytes"],
        "bytes_delivered": delivered,
    }


async def pause_confluent(bootstrap: str, topic: str, seconds: float, seed: int) -> dict[str, Any]:
    import confluent_kafka

    rng = random.Random(seed)
    stats: list[dict[str, Any]] = []
    consumer = _confluent(
        bootstrap,
        **{"statistics.interval.ms": 200, "stats_cb": lambda s: stats.append(json.loads(s))},
    )
    partitions = [confluent_kafka.TopicPartition(topic, p) for p in range(PAUSE_PARTITIONS)]
    delivered = records = 0
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(PAUSE_PARTITIONS)
            ]
        )
        started = time.perf_counter()
        deadline = started + seconds
        drained = False
        while time.perf_counter() < deadline:
            active = rng.choice(partitions)
            consumer.pause([tp for tp in partitions if tp is not active])
            consumer.resume([active])
            msg = consumer.poll(TAKE_TIMEOUT_S)
            if msg is None:
                drained = True
                break
            if msg.error() is not None:
                raise RuntimeError(f"confluent-kafka poll: {msg.error()}")
            records += 1
            delivered += len(msg.value())
        elapsed = _elapsed(started, drained)
        consumer.pause(partitions)
        stats.clear()
        while not stats:  # one fresh statistics report, after the loop
            consumer.poll(0.1)
    finally:
        consumer.close()
    last = stats[-1]
    requests = sum(b.get("req", {}).get("Fetch", 0) for b in last["brokers"].values())
    fetched = sum(
        p.get("rxbytes", 0)
        for p in last["topics"][topic]["partitions"].values()
        if int(p.get("partition", -1)) >= 0
    )
    return {
        "records": records,
        "seconds": elapsed,
        "drained": drained,
        "fetch_requests": requests,
        "bytes_fetched": fetched,
        "bytes_delivered": delivered,
    }


def _elapsed(started: float, drained: bool) -> float:
    """Seconds spent taking records (the last, fruitless wait of a drained run excluded)."""
    return time.perf_counter() - started - (TAKE_TIMEOUT_S if drained else 0.0)


PAUSE: dict[str, Callable[[str, str, float, int], Any]] = {
    "ours": pause_ours,
    "aiokafka": pause_aiokafka,
    "confluent": pause_confluent,
}


# -- the run -------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="pause scenario duration")
    parser.add_argument("--quick", action="store_true", help="small data, one round")
    parser.add_argument("--output", default=str(HERE / "results" / "consumer.json"))
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    seconds = 2.0 if args.quick else args.seconds
    workloads = {100: 200_000 if args.quick else 1_000_000, 1024: 40_000 if args.quick else 200_000}
    pause_records = 100_000 if args.quick else 500_000

    import aiokafka
    import confluent_kafka

    async with broker(args.bootstrap_servers) as bootstrap:
        print(f"broker {bootstrap}; producing the data with confluent-kafka", flush=True)
        topics = {
            size: await make_topic(bootstrap, PARTITIONS, count, size)
            for size, count in workloads.items()
        }
        pause_topic = await make_topic(bootstrap, PAUSE_PARTITIONS, pause_records, 1024)
        times: dict[tuple[int, str, str], list[float]] = {}
        pauses: dict[str, list[dict[str, Any]]] = {}
        clients = list(THROUGHPUT)
        for round_no in range(rounds):
            order = clients[round_no % 3 :] + clients[: round_no % 3]
            for size, count in workloads.items():
                for mode in ("stream", "batches"):
                    for client in order:
                        elapsed = await THROUGHPUT[client](
                            bootstrap, topics[size], count, mode == "batches"
                        )
                        times.setdefault((size, mode, client), []).append(elapsed)
                        print(
                            f"  round {round_no + 1} {size:>5} B {mode:<7} {client:<9} "
                            f"{count / elapsed:>11,.0f} records/s",
                            flush=True,
                        )
            for client in order:
                result = await PAUSE[client](bootstrap, pause_topic, seconds, 7548 + round_no)
                pauses.setdefault(client, []).append(result)
                print(f"  round {round_no + 1} pause     {client:<9} {result}", flush=True)

    rows = []
    print()
    print(
        f"{'values':>7} {'iterator':<9} {'client':<10} {'records/s':>12} {'MB/s':>8} "
        f"{'vs aiokafka':>12} {'vs confluent':>13}"
    )
    for size, count in workloads.items():
        for mode in ("stream", "batches"):
            rate = {c: count / _median(times[(size, mode, c)]) for c in clients}
            for client in clients:
                row = {
                    "value_size": size,
                    "iterator": mode,
                    "client": client,
                    "records_per_s": rate[client],
                    "mb_per_s": rate[client] * size / 1e6,
                    "ours/client": rate["ours"] / rate[client],
                }
                rows.append(row)
                ratio_a = rate[client] / rate["aiokafka"]
                ratio_c = rate[client] / rate["confluent"]
                print(
                    f"{size:>6}B {mode:<9} {client:<10} {rate[client]:>12,.0f} "
                    f"{row['mb_per_s']:>8.1f} {ratio_a:>12.2f} {ratio_c:>13.2f}"
                )
    print()
    print(
        f"pause scenario: {PAUSE_PARTITIONS} partitions, 9 paused at random before each "
        f"take of one record, {seconds:.0f}s (median of {rounds})"
    )
    print(
        f"{'client':<10} {'records':>9} {'records/s':>10} {'fetches':>8} "
        f"{'bytes fetched/delivered':>24}"
    )
    pause_rows = []
    for client in clients:
        runs = pauses[client]
        summary = {
            "client": client,
            "records": _median([r["records"] for r in runs]),
            "records_per_s": _median([r["records"] / r["seconds"] for r in runs]),
            "drained": any(r["drained"] for r in runs),
            "fetch_requests": _median([r["fetch_requests"] for r in runs]),
            "fetched_per_delivered": _median(
                [r["bytes_fetched"] / max(1, r["bytes_delivered"]) for r in runs]
            ),
            "runs": runs,
        }
        pause_rows.append(summary)
        print(
            f"{client:<10} {summary['records']:>9,.0f} {summary['records_per_s']:>10,.0f} "
            f"{summary['fetch_requests']:>8,.0f} {summary['fetched_per_delivered']:>24.2f}"
        )
    out = {
        "benchmark": "consumer",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "aiokafka": aiokafka.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "rounds": rounds,
        "partitions": PARTITIONS,
        "records": {str(k): v for k, v in workloads.items()},
        "throughput": rows,
        "pause": {"partitions": PAUSE_PARTITIONS, "seconds": seconds, "results": pause_rows},
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    output = Path(args.output)
    await asyncio.to_thread(output.parent.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(output.write_text, json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
