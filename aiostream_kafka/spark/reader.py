"""Reading: the input partition (one offset range), the executor-side range reader shared
by the batch and the streaming reader, the driver-side loop runner, and the batch reader.

Spark runs ``read()`` in executor Python workers without an event loop: each call creates a
private loop, drives the async :class:`~.fetch.RangeFetcher` (Fetch requests of its own,
record batches decoded straight into Arrow columns) with ``run_until_complete`` and yields
the Arrow batches between those calls, never from inside the loop. The generator's
``finally`` closes the fetcher's connections and the loop, also when Spark stops reading
early (``limit()``).

A range ends at a *position*, not at a record offset: compaction and transaction markers
leave gaps, so the reader stops when the fetch position reaches the range's end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from aiostream_kafka.admin import Admin
from aiostream_kafka.structs import TopicPartition

from .fetch import RangeFetcher
from .offsets import (
    OffsetRange,
    current_partitions,
    data_loss,
    plan_batch_ranges,
    resolve_bound,
)
from .options import OffsetBound, SourceOptions

__all__ = [
    "KafkaBatchReader",
    "KafkaInputPartition",
    "read_partition",
    "read_range",
    "run_with_admin",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class KafkaInputPartition(InputPartition):
    """One Spark input partition: the records ``[start, end)`` of one Kafka partition."""

    def __init__(self, index: int, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(index)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"

    @classmethod
    def from_ranges(cls, ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
        """Input partitions for ``ranges``, numbered in order."""
        return [cls(i, r.topic, r.partition, r.start, r.end) for i, r in enumerate(ranges)]


def run_with_admin(opts: SourceOptions, fn: Callable[[Admin], Awaitable[T]]) -> T:
    """Run ``fn(admin)`` to completion in a private event loop (driver side: Spark's
    planning calls are synchronous), with an Admin opened and closed around it.

    Raises:
        ConfigError: bad client options.
        KafkaError: from ``fn``, or no broker answered.
    """

    async def main() -> T:
        async with Admin(opts.kafka.bootstrap_servers, **opts.kafka.client_kwargs()) as admin:
            return await fn(admin)

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def read_range(opts: SourceOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[part.start, part.end)`` of one partition as Arrow batches
    (one per Fetch response; see :mod:`.fetch`).

    Raises:
        DataLossError: records of the range are gone and ``failOnDataLoss`` is true.
        KafkaTimeoutError: no progress for ``kafkaConsumer.pollTimeoutMs``.
        KafkaError: fetching failed (not retriable), or a batch is corrupt.
    """
    if part.end <= part.start:
        return
    tp = TopicPartition(part.topic, part.partition)
    fetcher = RangeFetcher(opts, tp, part.start, part.end)
    loop = asyncio.new_event_loop()
    agen = fetcher.batches()
    try:
        while True:
            try:
                batch = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                break
            yield batch
    finally:
        try:
            loop.run_until_complete(agen.aclose())
            loop.run_until_complete(fetcher.close())
        finally:
            loop.close()
    log.debug("read %d records of %s [%d, %d)", fetcher.read, tp, part.start, part.end)


def read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """``read()`` of both readers: the range of a :class:`KafkaInputPartition`, or nothing
    for the ``InputPartition(None)`` PySpark puts in place of an empty partition list
    (a read with no ranges: an empty topic, an empty ``assign``, equal start and end).

    Raises:
        TypeError: any other partition (not one of this source's).
        DataLossError, KafkaTimeoutError, KafkaError: see :func:`read_range`.
    """
    if isinstance(partition, KafkaInputPartition):
        return read_range(opts, partition)
    if type(partition) is InputPartition and partition.value is None:
        return iter(())
    raise TypeError(f"not an aiostream_kafka input partition: {partition!r}")


# -- batch ----------------------------------------------------------------------------------


async def plan_batch(admin: Admin, opts: SourceOptions) -> list[OffsetRange]:
    """The ranges of a batch read: the selected partitions from the starting to the
    ending offsets, checked for data loss (an end before its start), split as the
    built-in source splits a batch read (see :func:`~.offsets.plan_batch_ranges`). No ranges
    (nothing to read) is a read of no rows.

    Raises:
        UnknownTopicOrPartitionError: a subscribed or assigned topic (or an assigned
            partition) does not exist, as the built-in source fails.
        ConfigError: offsets that do not fit the partitions (see ``resolve_bound``).
        DataLossError: an end before its start with ``failOnDataLoss``.
    """
    tps = await current_partitions(admin, opts, must_exist=True)
    starting = opts.starting or OffsetBound("earliest")
    ending = opts.ending or OffsetBound("latest")
    start = await resolve_bound(admin, opts, starting, tps, starting=True)
    end = await resolve_bound(admin, opts, ending, tps, starting=False)
    for tp in tps:
        if end[tp] < start[tp]:
            data_loss(
                f"{tp.topic}-{tp.partition}: the ending offset {end[tp]} is before the "
                f"starting offset {start[tp]}",
                opts.fail_on_data_loss,
            )
    return plan_batch_ranges(start, end, opts.min_partitions, opts.max_records_per_partition)


class KafkaBatchReader(DataSourceReader):
    """The batch reader: plans the ranges on the driver, reads one per task."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        """One input partition per offset range (split per ``minPartitions``).

        Raises:
            ConfigError, DataLossError, KafkaError: see ``plan_batch``.
        """
        ranges = run_with_admin(self.opts, lambda admin: plan_batch(admin, self.opts))
        log.info("batch read of %d ranges, %d offsets", len(ranges), sum(r.size for r in ranges))
        return list(KafkaInputPartition.from_ranges(ranges))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches (see :func:`read_partition`)."""
        return read_partition(self.opts, partition)
