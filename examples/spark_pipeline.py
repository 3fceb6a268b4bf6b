"""A Spark Structured Streaming pipeline on Kafka through aiostream_kafka.

It reads the topic ``orders`` as a stream (``format("aiostream_kafka")``), parses the JSON
values, keeps the large orders, and writes them twice, each query with its own checkpoint:

* to the topic ``large-orders`` (key = customer, value = JSON, a header with the source
  offset), and
* to Parquet files.

With no ``--bootstrap-servers`` it starts an embedded local Kafka broker
(``aiostream_kafka.testing.KafkaCluster``), creates the topics and produces sample orders.
The queries run with ``Trigger.AvailableNow`` (read what is there, then stop); restart the
script with the same ``--workdir`` and they go on from their checkpoints.

    python examples/spark_pipeline.py                            # embedded broker
    python examples/spark_pipeline.py --bootstrap-servers 127.0.0.1:9092 --workdir /tmp/p
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiostream_kafka import Admin, NewTopic, Producer, TopicAlreadyExistsError


@contextlib.contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, or an embedded one started for the run."""
    if bootstrap:
        yield bootstrap
        return
    from aiostream_kafka.testing import KafkaCluster

    print("starting an embedded Kafka broker (the first run downloads Kafka from Maven)...")
    cluster = KafkaCluster(brokers=1)
    cluster.start_blocking()
    try:
        print(f"broker up at {cluster.bootstrap_servers}")
        yield cluster.bootstrap_servers
    finally:
        cluster.close_blocking()


async def prepare(bootstrap: str, source: str, sink: str, orders: int) -> None:
    """Create the topics (if missing) and produce ``orders`` sample orders."""
    async with Admin(bootstrap) as admin:
        for name in (source, sink):
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([NewTopic(name, partitions=3, replication_factor=1)])
    rng = random.Random(7)
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(orders):
            customer = f"customer-{rng.randrange(50)}"
            order = {"id": i, "customer": customer, "amount": round(rng.uniform(1, 500), 2)}
            await producer.enqueue(source, value=json.dumps(order).encode(), key=customer.encode())
        await producer.flush()
    print(f"produced {orders} orders to {source!r}")


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiostream_kafka.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiostream-kafka-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)  # format("aiostream_kafka")
    return spark


def run_pipeline(spark: Any, bootstrap: str, source: str, sink: str, workdir: Path) -> None:
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")  # several micro-batches
        .load()
    )
    schema = "id long, customer string, amount double"
    large = (
        orders.select(
            F.col("key"),
            F.from_json(F.col("value").cast("string"), schema).alias("order"),
            F.col("partition"),
            F.col("offset"),
        )
        .where(F.col("order.amount") >= 250)
        .select(
            F.col("key"),
            F.to_json(F.col("order")).alias("value"),
            F.array(
                F.struct(
                    F.lit("source-offset").alias("key"),
                    F.concat_ws("-", "partition", "offset").cast("binary").alias("value"),
                )
            ).alias("headers"),
            F.col("order.id").alias("id"),
            F.col("order.customer").alias("customer"),
            F.col("order.amount").alias("amount"),
        )
    )
    to_kafka = (
        large.select("key", "value", "headers")
        .writeStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(workdir / "checkpoints" / "to-kafka"))
        .trigger(availableNow=True)
        .start()
    )
    to_parquet = (
        large.select("id", "customer", "amount")
        .writeStream.format("parquet")
        .option("path", str(workdir / "large-orders.parquet"))
        .option("checkpointLocation", str(workdir / "checkpoints" / "to-parquet"))
        .trigger(availableNow=True)
        .start()
    )
    started = time.monotonic()
    for query in (to_kafka, to_parquet):
        query.awaitTermination()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        rows = sum(p["numInputRows"] for p in batches)
        print(f"query {query.id}: {rows} input rows in {len(batches)} micro-batches")
    print(f"both queries done in {time.monotonic() - started:.1f}s")


def report(spark: Any, bootstrap: str, sink: str, workdir: Path) -> None:
    parquet = spark.read.parquet(str(workdir / "large-orders.parquet"))
    written = (
        spark.read.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", sink)
        .option("includeHeaders", "true")
        .load()
    )
    print(f"Parquet: {parquet.count()} large orders; topic {sink!r}: {written.count()} records")
    written.selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "headers[0].key AS header"
    ).show(5, truncate=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", default=None, help="an existing cluster")
    parser.add_argument("--source-topic", default="orders")
    parser.add_argument("--sink-topic", default="large-orders")
    parser.add_argument("--orders", type=int, default=2000, help="sample orders to produce")
    parser.add_argument("--workdir", default=None, help="checkpoints and Parquet (kept)")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        workdir = Path(
            args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="pipeline-"))
        )
        bootstrap = stack.enter_context(kafka(args.bootstrap_servers))
        asyncio.run(prepare(bootstrap, args.source_topic, args.sink_topic, args.orders))
        spark = spark_session()
        stack.callback(spark.stop)
        run_pipeline(spark, bootstrap, args.source_topic, args.sink_topic, workdir)
        report(spark, bootstrap, args.sink_topic, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
