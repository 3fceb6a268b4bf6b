"""The read schema, as Spark and Arrow declare it.

The schema is the built-in Kafka source's: ``key binary, value binary, topic string,
partition int, offset long, timestamp timestamp, timestampType int`` and, with
``includeHeaders``, ``headers array<struct<key: string, value: binary>>``. Spark checks
that the Arrow batches ``read()`` yields have exactly the declared types, timestamps as
``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["arrow_schema", "spark_schema"]

_HEADER_SPARK = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_HEADER_ARROW = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def spark_schema(include_headers: bool) -> StructType:
    """The Spark schema of a read (the built-in source's)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER_SPARK)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema matching :func:`spark_schema` exactly."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.field("element", _HEADER_ARROW))))
    return pa.schema(fields)
