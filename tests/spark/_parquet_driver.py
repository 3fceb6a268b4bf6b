"""A Spark driver of its own for the crash test (``test_spark_crash.py``): a stream from
Kafka into a Parquet file sink, run in a child process so that the test can SIGKILL it.

    python _parquet_driver.py run BOOTSTRAP TOPIC SINK CHECKPOINT
        reads on (4,000 offsets per trigger, 8 Spark partitions) until killed
    python _parquet_driver.py finish BOOTSTRAP TOPIC SINK CHECKPOINT RESULT
        Trigger.AvailableNow to the end, then writes the sink's (partition, offset) rows,
        read back through the sink's ``_spark_metadata`` log, to RESULT as JSON
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    """Run the mode ``argv[0]`` (see the module doc)."""
    mode, bootstrap, topic, sink, checkpoint = argv[:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from aiostream_kafka.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiostream-kafka-crash-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4000")
        .option("minPartitions", "8")
        .load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "run":
        print("started", flush=True)
        writer.trigger(processingTime="0 seconds").start().awaitTermination()
        return
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    rows = spark.read.parquet(sink).select("partition", "offset").collect()
    with open(argv[5], "w") as out:
        json.dump([[r.partition, r.offset] for r in rows], out)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
