"""Event-loop stalls while producing and consuming large compressed batches.

``python -m benchmarks.loop_stall`` starts a local broker (``aiostream_kafka.testing.
KafkaCluster``) unless ``--bootstrap-servers`` or ``KAFKA_BOOTSTRAP_SERVERS`` names one,
creates a fresh topic and, while a *lag monitor* runs on the same event loop,

* **produce**: a producer with ``compression_type=gzip``, ``batch_size=1 MiB`` and a linger
  long enough to fill every batch sends ``--mib`` MiB (default 64) of record values made
  of random words (compressible, about 3:1 with gzip, but not trivially so), then flushes;
* **consume**: a consumer (manual assignment, from the beginning) reads every record back
  and checks the count and the bytes.

The monitor is a task that sleeps 1 ms in a loop and records how late each wake-up is
(time since it went to sleep minus the 1 ms asked for): a wake-up late by *d* means the
loop was busy with something else, or idle-waiting on the OS timer, for *d*. Reported per
phase: the longest stall, the 99th and 50th percentiles of the lateness (the 50th is the
timer's noise floor, about 0.1 ms here), how many wake-ups were over 5 and 10 ms late,
and throughput.

The producing task yields (``await asyncio.sleep(0)``) every ``--yield-every`` records, so
the stalls measured are the client's, not those of an application that appends thousands
of records without ever letting the loop run. Decoding records into ``Record`` objects
(in the consuming task, a fetched chunk at a time) is part of the consume figures.

Results are printed; ``--json PATH`` also writes them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.__main__ import broker  # the given broker, or a local one for the run

MIB = 1024 * 1024


class LagMonitor:
    """A task that sleeps ``interval`` seconds in a loop and records each wake-up's
    lateness (seconds)."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        interval = self.interval
        clock = time.perf_counter
        samples = self.samples
        while True:
            start = clock()
            await asyncio.sleep(interval)
            samples.append(clock() - start - interval)

    def start(self) -> None:
        self.samples = []
        self._task = asyncio.create_task(self._run(), name="lag-monitor")

    async def stop(self) -> dict[str, float]:
        """Stop the monitor; return its figures in milliseconds."""
        task, self._task = self._task, None
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        lags = sorted(max(0.0, s) * 1000 for s in self.samples)
        if not lags:
            return {"samples": 0}

        def pct(p: float) -> float:
            return lags[min(len(lags) - 1, int(p / 100 * len(lags)))]

        return {
            "samples": len(lags),
            "max_ms": round(lags[-1], 2),
            "p99_ms": round(pct(99), 2),
            "p50_ms": round(pct(50), 3),
            "over_5ms": sum(1 for lag in lags if lag > 5),
            "over_10ms": sum(1 for lag in lags if lag > 10),
        }


def make_values(value_size: int, distinct: int, seed: int = 15) -> list[bytes]:
    """``distinct`` values of ``value_size`` bytes, random words from a 4,000-word
    vocabulary of random letters (gzip gets about 3:1 out of them)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = [
        "".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(4000)
    ]
    values = []
    for _ in range(distinct):
        words: list[str] = []
        length = 0
        while length <= value_size:
            word = rng.choice(vocabulary)
            words.append(word)
            length += len(word) + 1
        values.append(" ".join(words).encode()[:value_size])
    assert all(len(v) == value_size for v in values)
    return values


async def produce(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    from aiostream_kafka import Producer

    values = make_values(args.value_size, 2048)
    count = args.mib * MIB // args.value_size
    monitor = LagMonitor()
    async with Producer(
        bootstrap,
        compression_type=None if args.codec == "none" else args.codec,
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        max_request_size=max(args.batch_size + 64 * 1024, 1024 * 1024),
        buffer_memory=max(32 * MIB, 8 * args.batch_size),
    ) as producer:
        await producer.send(topic, b"warm-up")  # metadata, connection, producer id
        k = len(values)
        every = args.yield_every
        monitor.start()
        started = time.perf_counter()
        futures = []
        for i in range(count):
            futures.append(await producer.enqueue(topic, values[i % k]))
            if i % every == every - 1:
                await asyncio.sleep(0)
        await producer.flush()
        for future in futures:
            future.result()
        seconds = time.perf_counter() - started
        lag = await monitor.stop()
    return {
        "records": count,
        "value_bytes": count * args.value_size,
        "seconds": round(seconds, 3),
        "mib_per_s": round(count * args.value_size / MIB / seconds, 1),
        "records_per_s": round(count / seconds),
        **lag,
    }


async def consume(args: argparse.Namespace, bootstrap: str, topic: str) -> dict[str, Any]:
    from aiostream_kafka import Consumer, TopicPartition

    count = args.mib * MIB // args.value_size
    expected = count + 1  # the warm-up record
    monitor = LagMonitor()
    seen = 0
    value_bytes = 0
    async with Consumer(bootstrap, group_id=None, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(args.partitions)])
        monitor.start()
        started = time.perf_counter()
        async for batch in consumer.batches():
            seen += len(batch)
            value_bytes += sum(len(r.value or b"") for r in batch)
            if seen >= expected:
                break
        seconds = time.perf_counter() - started
        lag = await monitor.stop()
    if seen != expected or value_bytes != count * args.value_size + len(b"warm-up"):
        raise RuntimeError(f"read {seen} records / {value_bytes} bytes, expected {expected}")
    return {
        "records": seen,
        "value_bytes": value_bytes,
        "seconds": round(seconds, 3),
        "mib_per_s": round(value_bytes / MIB / seconds, 1),
        "records_per_s": round(seen / seconds),
        **lag,
    }


_OFFLOAD_DEFAULTS: dict[int, int] = {}


def _inline_codecs(inline: bool) -> None:
    """Make every codec job run on the event loop (``inline``) or restore the thresholds
    from which they go to a worker thread."""
    from aiostream_kafka.protocol import compression

    sizes: Any = getattr(compression, "OFFLOAD_MIN_BYTES", None)
    if sizes is None:  # a client from before codec jobs could leave the loop
        return
    if not _OFFLOAD_DEFAULTS:
        _OFFLOAD_DEFAULTS.update(sizes)
    for codec, size in _OFFLOAD_DEFAULTS.items():
        sizes[codec] = 1 << 62 if inline else size


def codec_job_costs(args: argparse.Namespace) -> dict[str, Any]:
    """What one compress / decompress of the run's data costs here, by input size (ms)."""
    from aiostream_kafka.protocol.compression import compress, decompress

    values = make_values(args.value_size, 2048)
    blob = b"".join(values)
    out: dict[str, Any] = {}
    for codec in ("gzip", "lz4", "zstd"):
        from aiostream_kafka.protocol.compression import CompressionType

        ct = CompressionType[codec.upper()]
        row = {}
        for kib in (16, 64, 256, 1024):
            data = blob[: kib * 1024]
            packed = compress(ct, data)
            best_c = best_d = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                compress(ct, data)
                best_c = min(best_c, time.perf_counter() - t)
                t = time.perf_counter()
                decompress(ct, packed)
                best_d = min(best_d, time.perf_counter() - t)
            row[f"{kib}KiB"] = {
                "compress_ms": round(best_c * 1000, 2),
                "decompress_ms": round(best_d * 1000, 2),
                "ratio": round(len(data) / len(packed), 2),
            }
        out[codec] = row
    return out


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.loop_stall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mib", type=int, default=64, help="MiB of record values to send")
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--codec", default="gzip", help="gzip, zstd, lz4, snappy or none")
    parser.add_argument("--batch-size", type=int, default=MIB)
    parser.add_argument("--linger-ms", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--yield-every", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="produce+consume rounds")
    parser.add_argument("--codec-costs", action="store_true", help="also time the codecs")
    parser.add_argument(
        "--inline-codecs",
        choices=("no", "yes", "alternate"),
        default="no",
        help="run every codec job on the event loop, as before they could go to a worker "
        "thread (yes), or alternate rounds with and without (alternate)",
    )
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from aiostream_kafka import Admin, NewTopic

    results: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "bootstrap_servers")},
        "cores": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "rounds": [],
    }
    if args.codec_costs:
        results["codec_job_costs"] = codec_job_costs(args)
        print(json.dumps(results["codec_job_costs"], indent=1), flush=True)
    async with broker(args.bootstrap_servers) as (bootstrap, desc):
        results["broker"] = desc
        for n in range(args.rounds):
            mode = args.inline_codecs
            inline = mode == "yes" or (mode == "alternate" and n % 2 == 1)
            _inline_codecs(inline)
            topic = f"loop-stall-{uuid.uuid4().hex[:8]}"
            async with Admin(bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, args.partitions, 1)])
            try:
                row: dict[str, Any] = {
                    "produce": await produce(args, bootstrap, topic),
                    "consume": await consume(args, bootstrap, topic),
                }
            finally:
                async with Admin(bootstrap) as admin:
                    await admin.delete_topics([topic])
            row["codec_jobs"] = "inline" if inline else "offloaded"
            results["rounds"].append(row)
            for phase in ("produce", "consume"):
                r = row[phase]
                print(
                    f"round {n + 1} {row['codec_jobs']:9s} {phase:7s}: "
                    f"longest stall {r['max_ms']:7.2f} ms, "
                    f"p99 {r['p99_ms']:6.2f} ms, p50 {r['p50_ms']:5.3f} ms, "
                    f">5ms {r['over_5ms']:4d}, >10ms {r['over_10ms']:4d}; "
                    f"{r['mib_per_s']:6.1f} MiB/s, {r['records_per_s']:7d} rec/s "
                    f"({r['seconds']:.2f} s)",
                    flush=True,
                )
    results["load_average_end"] = os.getloadavg()
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
