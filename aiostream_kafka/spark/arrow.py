"""The read schema (Spark's and Arrow's) and the column-wise builder of Arrow batches.

The schema is the built-in Kafka source's: ``key binary, value binary, topic string,
partition int, offset long, timestamp timestamp, timestampType int`` and, with
``includeHeaders``, ``headers array<struct<key: string, value: binary>>``. Spark checks
that the Arrow batches ``read()`` yields have exactly the declared types, timestamps as
``timestamp[us, tz=UTC]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
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

from aiostream_kafka.structs import Record

__all__ = ["RecordBatchBuilder", "arrow_schema", "spark_schema"]

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


class RecordBatchBuilder:
    """Collects the records of one partition and turns them into Arrow record batches,
    column by column (one ``pa.array`` per column, not one Python tuple per row)."""

    __slots__ = (
        "_headers",
        "_keys",
        "_offsets",
        "_schema",
        "_timestamps",
        "_ts_types",
        "_values",
        "include_headers",
        "partition",
        "topic",
    )

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self._schema = arrow_schema(include_headers)
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._ts_types: list[int] = []
        self._headers: list[list[dict[str, object]]] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def extend(self, records: Sequence[Record]) -> None:
        """Add records (of this builder's partition, in offset order)."""
        self._keys.extend([r.key for r in records])
        self._values.extend([r.value for r in records])
        self._offsets.extend([r.offset for r in records])
        self._timestamps.extend([r.timestamp_ms for r in records])
        self._ts_types.extend([int(r.timestamp_type) for r in records])
        if self.include_headers:
            self._headers.extend([[{"key": k, "value": v} for k, v in r.headers] for r in records])

    def flush(self) -> pa.RecordBatch:
        """The records added since the last flush as one record batch; the builder empties."""
        n = len(self._offsets)
        ms = pa.array(self._timestamps, pa.int64())
        columns: list[pa.Array] = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self._offsets, pa.int64()),
            pc.multiply(ms, 1000).cast(_TIMESTAMP),
            pa.array(self._ts_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, self._schema.field("headers").type))
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)
