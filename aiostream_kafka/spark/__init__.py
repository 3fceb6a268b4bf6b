"""PySpark data source for Kafka, built on aiostream_kafka: ``format("aiostream_kafka")``.

::

    from aiostream_kafka.spark import register

    register(spark)
    df = (spark.read.format("aiostream_kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "orders")
          .load())

The schema and the options are those of Spark's built-in Kafka source and sink (see
``docs/spark.md``). Needs the ``spark`` extra (``pip install aiostream-kafka[spark]``).
"""

from __future__ import annotations

from typing import Any

from .source import NAME, KafkaDataSource

__all__ = ["NAME", "KafkaDataSource", "register"]


def register(spark: Any) -> None:
    """Register the data source with ``spark`` (a ``SparkSession``) under the name
    ``"aiostream_kafka"``; returns nothing. Registering twice is harmless."""
    spark.dataSource.register(KafkaDataSource)
