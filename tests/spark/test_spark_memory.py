"""What a task reading one partition holds does not grow with the partition: the
executor's range reader (``reader.read_range``, no Spark: the Python side of a task) reads
200k and then 1M small records in a process of its own (``_memory_read.py``), which
reports its peak RSS (VmHWM, reset before each read) per read. The bounds are
``fetch.task_memory_bound`` of the options, not timings.

The Spark-level figures (the Python worker and the JVM, beside the JVM connector, 1M and
10M records) are ``benchmarks/spark_bench.py --scenarios memory``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiostream_kafka.producer import Producer
from aiostream_kafka.testing import KafkaCluster

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak RSS reset"
)

SMALL, LARGE = 200_000, 1_000_000
#: Small limits: many responses and Arrow batches in either read.
SMALL_OPTIONS = {
    "maxRecordsPerArrowBatch": "10000",
    "maxBytesPerArrowBatch": "2000000",
    "kafka.max.partition.fetch.bytes": "2097152",
}
HELPER = Path(__file__).with_name("_memory_read.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_records(kafka_cluster: KafkaCluster) -> tuple[str, str]:
    """A topic of one partition holding 1M records of 10-byte values (no keys)."""
    bs = kafka_cluster.bootstrap_servers
    topic = "memory-small-records"

    async def fill() -> None:
        from aiostream_kafka.admin import Admin, NewTopic

        async with Admin(bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        value = b"v" * 10
        async with Producer(bs, linger_ms=5, batch_size=1 << 20) as producer:
            for _ in range(LARGE // 100_000):
                await producer.send_batch(topic, [value] * 100_000, partition=0)

    asyncio.run(asyncio.wait_for(fill(), 120))
    return bs, topic


def _reads(bs: str, topic: str, options: dict[str, str], keep: bool = False) -> list[Any]:
    """Read [0, 200k) twice (the first warms up), then [0, 1M); one report per read."""
    cmd = [sys.executable, str(HELPER), bs, topic, json.dumps(options), str(SMALL), str(LARGE)]
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run(
        cmd + (["--keep"] if keep else []),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    reports = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["rows"] for r in reports] == [SMALL, LARGE]
    return reports


def _bound(options: dict[str, str]) -> int:
    from aiostream_kafka.spark.fetch import task_memory_bound
    from aiostream_kafka.spark.options import parse_source_options

    opts = parse_source_options({"kafka.bootstrap.servers": "x:1", "subscribe": "t", **options})
    return task_memory_bound(opts)


def test_peak_memory_does_not_grow_with_the_partition(small_records: tuple[str, str]) -> None:
    bs, topic = small_records
    bound_kb = _bound(SMALL_OPTIONS) // 1024
    small, large = _reads(bs, topic, SMALL_OPTIONS)
    assert small["most_rows"] == large["most_rows"] == 10_000
    # five times the records, and the peak no higher than what one task may hold
    assert large["peak_kb"] - small["peak_kb"] < bound_kb, (small, large, bound_kb)
    # the measurement sees growth: a reader keeping its batches exceeds the bound
    small, large = _reads(bs, topic, SMALL_OPTIONS, keep=True)
    assert large["peak_kb"] - small["peak_kb"] > 2 * bound_kb, (small, large, bound_kb)


def test_default_limits_bound_a_read_of_small_records(small_records: tuple[str, str]) -> None:
    # One 8 MiB Fetch response holds ~400k of these records: decoded as one Arrow batch
    # it grew the process by ~100 MB; in runs of 32,768 records it stays within the bound.
    bs, topic = small_records
    bound_kb = _bound({}) // 1024
    small, large = _reads(bs, topic, {})
    assert large["most_rows"] == 32_768
    assert large["growth_kb"] < bound_kb, (large, bound_kb)
    assert large["peak_kb"] - small["peak_kb"] < bound_kb, (small, large, bound_kb)
