"""The floor of a Python data source: PySpark's own cost, without Kafka.

Streams: ``spark_bench.py --scenarios stream`` runs this source beside ours and the JVM connector:
the same micro-batches (``--records`` rows in ``--max-offsets-per-trigger`` per trigger,
spread over ``--partitions`` input partitions, values of ``--value-size`` bytes, the Kafka
source's columns) into the same Parquet sink, with rows made in memory by the executor's
Python worker (a few ms a task) instead of fetched. What it takes is what any Python
data source pays in PySpark: the driver-side streaming runner's start, the Python worker
per task, the Arrow transfer to the JVM. Ours minus the floor is our connector's own cost;
the JVM connector pays none of the floor.

Batch reads: ``spark_bench.py --scenarios read`` reads the same rows (made in memory, one
input partition per ``--partitions``) into the same Parquet output.

Writes: ``spark_bench.py --scenarios write`` writes the same table to this source's Arrow
writer, which only counts the rows of each Arrow batch PySpark hands it (and its commit
stores the total in the ``countFile`` option's file, for the benchmark to check).

Registered as ``aiostream_kafka_floor`` by :func:`register_floor`; its classes are pickled
by value, so executors need not import ``benchmarks``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

try:  # PySpark 4.2+
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover -- an older PySpark: the floor needs AvailableNow

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        def prepareForTriggerAvailableNow(self) -> None:
            raise NotImplementedError


FORMAT = "aiostream_kafka_floor"

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


class FloorPartition(InputPartition):
    """Rows ``[start, end)`` of one input partition."""

    def __init__(self, partition: int, start: int, end: int, value_size: int) -> None:
        super().__init__(partition)
        self.partition = partition
        self.start = start
        self.end = end
        self.value_size = value_size


def make_rows(partition: InputPartition) -> Iterator[Any]:
    """The rows of ``partition``, made in memory as one Arrow batch."""
    assert isinstance(partition, FloorPartition)
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]

    n = partition.end - partition.start
    offsets = np.arange(partition.start, partition.end, dtype=np.int64)
    value = pa.array([b"x" * partition.value_size] * n, pa.binary())
    key = pa.array([b"%d" % (i % 10_000) for i in range(n)], pa.binary())
    stamps = pa.array(offsets.astype("datetime64[ms]").astype("datetime64[us]"))
    yield pa.RecordBatch.from_arrays(
        [
            key,
            value,
            pa.array(["floor"] * n),
            pa.array(np.full(n, partition.partition, np.int32)),
            pa.array(offsets),
            stamps.cast(pa.timestamp("us", tz="UTC")),
            pa.array(np.zeros(n, np.int32)),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


class FloorBatchReader(DataSourceReader):
    """``records`` rows split evenly over ``partitions`` input partitions."""

    def __init__(self, options: dict[str, str]) -> None:
        self.records = int(options["records"])
        self.splits = int(options["partitions"])
        self.value_size = int(options["valuesize"])

    def partitions(self) -> list[InputPartition]:
        step = -(-self.records // self.splits)
        return [
            FloorPartition(p, lo, min(lo + step, self.records), self.value_size)
            for p, lo in enumerate(range(0, self.records, step))
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return make_rows(partition)


class FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets count rows: ``{"rows": n}``; each micro-batch takes up to ``perTrigger``
    rows, split evenly over ``partitions`` input partitions, until ``records``."""

    def __init__(self, options: dict[str, str]) -> None:
        self.records = int(options["records"])
        self.splits = int(options["partitions"])
        self.per_trigger = int(options["pertrigger"])
        self.value_size = int(options["valuesize"])

    def initialOffset(self) -> dict[str, int]:
        return {"rows": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """All rows are there from the start: nothing to pin."""

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        begin = 0 if start is None else start["rows"]
        return {"rows": min(begin + self.per_trigger, self.records)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        first, last = start["rows"], end["rows"]
        if last <= first:
            return []
        step = -(-(last - first) // self.splits)
        return [
            FloorPartition(p, lo, min(lo + step, last), self.value_size)
            for p, lo in enumerate(range(first, last, step))
        ]

    def commit(self, end: dict[str, int]) -> None:
        """Nothing kept."""

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return make_rows(partition)


class FloorCommit(WriterCommitMessage):
    """A task's row count."""

    def __init__(self, rows: int) -> None:
        self.rows = rows


class FloorArrowWriter(DataSourceArrowWriter):
    """Counts the rows PySpark hands over; writes nothing anywhere."""

    def __init__(self, options: dict[str, str]) -> None:
        self.count_file = options["countfile"]

    def write(self, iterator: Iterator[Any]) -> FloorCommit:
        return FloorCommit(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, FloorCommit))
        with open(self.count_file, "w") as f:
            f.write(str(rows))


class FloorSource(DataSource):
    """The floor source (batch and streaming reads, batch writes)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> FloorBatchReader:
        return FloorBatchReader(dict(self.options))

    def streamReader(self, schema: Any) -> FloorStreamReader:
        return FloorStreamReader(dict(self.options))

    def writer(self, schema: Any, overwrite: bool) -> FloorArrowWriter:
        return FloorArrowWriter(dict(self.options))


def register_floor(spark: Any) -> None:
    """Register :data:`FORMAT` in ``spark``."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    spark.dataSource.register(FloorSource)
