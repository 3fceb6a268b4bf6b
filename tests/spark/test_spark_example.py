"""``examples/spark_pipeline.py`` runs as a user would run it (a subprocess against the
session broker) and does what it says: every order of at least 250 read from the source
topic is written once to the sink topic, with its source-offset header, and once to
Parquet."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from helpers import read_records

from aiostream_kafka.testing import KafkaCluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


async def test_the_spark_pipeline_example_writes_each_large_order_once(
    spark: Any, kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    source, sink = f"orders-{uuid.uuid4().hex[:8]}", f"large-orders-{uuid.uuid4().hex[:8]}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--bootstrap-servers", bs, "--source-topic", source,
        "--sink-topic", sink, "--orders", "600", "--workdir", str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), 300)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(
            f"the example did not finish\n{out.decode()}\n{err.decode()}"
        ) from None
    stdout = out.decode()
    assert process.returncode == 0, f"{stdout}\n{err.decode()[-3000:]}"
    assert f"produced 600 orders to {source!r}" in stdout

    read = await read_records(bs, source, 3, "read_uncommitted")
    orders = [json.loads(r.value or b"") for r in read]
    assert len(orders) == 600
    where = {
        o["id"]: f"{r.partition}-{r.offset}".encode() for o, r in zip(orders, read, strict=True)
    }
    large = {o["id"]: o for o in orders if o["amount"] >= 250}
    assert 0 < len(large) < 600

    written = await read_records(bs, sink, 3, "read_uncommitted")
    ids = [json.loads(r.value or b"")["id"] for r in written]
    assert sorted(ids) == sorted(large), "each large order exactly once in the sink topic"
    for record in written:
        order = json.loads(record.value or b"")
        assert order == large[order["id"]]
        assert record.key == order["customer"].encode()
        ((name, value),) = record.headers
        assert (name, value) == ("source-offset", where[order["id"]])  # the source record

    parquet = spark.read.parquet(str(tmp_path / "large-orders.parquet")).collect()
    assert sorted(r["id"] for r in parquet) == sorted(large)
    assert f"Parquet: {len(large)} large orders; topic {sink!r}: {len(large)} records" in stdout
