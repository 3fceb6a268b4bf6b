"""Reading: the input partition (one offset range), the executor-side range reader shared
by the batch and the streaming reader, the driver-side loop runner, and the batch reader.

Spark runs ``read()`` in executor Python workers without an event loop: each call creates a
private loop, drives the async :class:`~aiostream_kafka.consumer.Consumer` (assigned,
sought, no group) with ``run_until_complete`` and yields the Arrow batches between those
calls, never from inside the loop. The generator's ``finally`` closes the consumer and
the loop, also when Spark stops reading early (``limit()``).

A range ends at a *position*, not at a record offset: compaction and transaction markers
leave gaps, so the reader stops when the consumer's position reaches the range's end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from aiostream_kafka.admin import Admin
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.errors import KafkaTimeoutError
from aiostream_kafka.protocol.error_codes import OffsetOutOfRangeError
from aiostream_kafka.structs import TopicPartition

from .arrow import RecordBatchBuilder
from .offsets import (
    DataLossError,
    OffsetRange,
    current_partitions,
    data_loss,
    data_loss_message,
    plan_ranges,
    resolve_bound,
)
from .options import OffsetBound, SourceOptions

__all__ = ["KafkaBatchReader", "KafkaInputPartition", "read_range", "run_with_admin"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 8192
#: How often a waiting reader checks whether its range end is reached without records
#: (compaction gaps and transaction markers at the end of a range).
_IDLE_CHECK_S = 0.5


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
    """Yield the records ``[part.start, part.end)`` of one partition as Arrow batches.

    Raises:
        DataLossError: records of the range are gone and ``failOnDataLoss`` is true.
        KafkaTimeoutError: no progress for ``kafkaConsumer.pollTimeoutMs``.
        KafkaError: the consumer failed.
    """
    if part.end <= part.start:
        return
    loop = asyncio.new_event_loop()
    agen = _read_range(opts, part)
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
        finally:
            loop.close()


async def _read_range(
    opts: SourceOptions, part: KafkaInputPartition
) -> AsyncGenerator[pa.RecordBatch, None]:
    tp = TopicPartition(part.topic, part.partition)
    start, end = part.start, part.end
    fail = opts.fail_on_data_loss
    kwargs: dict[str, Any] = {
        "max_partition_fetch_bytes": 8 * 1024 * 1024,
        "fetch_max_bytes": 64 * 1024 * 1024,
        "max_prefetch_bytes": 64 * 1024 * 1024,
        "max_prefetch_batches": 4,
        **opts.kafka.consumer_kwargs(),
    }
    kwargs["auto_offset_reset"] = "none" if fail else "earliest"
    builder = RecordBatchBuilder(part.topic, part.partition, opts.include_headers)
    timeout_s = opts.poll_timeout_ms / 1000
    read = 0
    async with Consumer(opts.kafka.bootstrap_servers, **kwargs) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        batches = consumer.batches()
        expected = start
        last_progress = time.monotonic()
        stalled_at_end = 0
        while True:
            position = consumer.position(tp)
            if position is not None and position >= end:
                break
            try:
                records = await asyncio.wait_for(batches.__anext__(), _IDLE_CHECK_S)
            except TimeoutError:
                # No records: the end may be reached through a gap, or the log may end
                # before the range does (truncated or recreated partition).
                log_end = (
                    consumer.last_stable_offset(tp)
                    if opts.kafka.isolation_level == "read_committed"
                    else consumer.highwater(tp)
                )
                position = consumer.position(tp)
                if log_end is not None and position is not None and position >= log_end < end:
                    stalled_at_end += 1
                    if stalled_at_end >= 3:
                        data_loss(
                            f"{tp.topic}-{tp.partition} ends at offset {log_end} but the "
                            f"query expected records up to {end}",
                            fail,
                        )
                        break
                if time.monotonic() - last_progress > timeout_s:
                    raise KafkaTimeoutError(
                        f"no records of {tp.topic}-{tp.partition} within "
                        f"{opts.poll_timeout_ms} ms at offset {position} (reading up to {end}); "
                        "raise the source option 'kafkaConsumer.pollTimeoutMs' if the "
                        "cluster is slow"
                    ) from None
                continue
            except OffsetOutOfRangeError as exc:
                # Only raised with failOnDataLoss (auto_offset_reset="none").
                raise DataLossError(
                    data_loss_message(
                        f"offset {expected} of {tp.topic}-{tp.partition} is out of range ({exc})"
                    )
                ) from exc
            except StopAsyncIteration:
                break
            stalled_at_end = 0
            last_progress = time.monotonic()
            if not records:
                continue
            first = records[0].offset
            if first > expected and not fail:
                log.info("%s: offsets %d..%d skipped", tp, expected, first - 1)
            if records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
            if records:
                builder.extend(records)
                expected = records[-1].offset + 1
                read += len(records)
                if len(builder) >= BATCH_ROWS:
                    yield builder.flush()
            if expected >= end:
                break
        if len(builder):
            yield builder.flush()
    log.debug("read %d records of %s [%d, %d)", read, tp, start, end)


# -- batch ----------------------------------------------------------------------------------


async def plan_batch(admin: Admin, opts: SourceOptions) -> list[OffsetRange]:
    """The ranges of a batch read: the selected partitions from the starting to the
    ending offsets, checked for data loss (an end before its start).

    Raises:
        ConfigError: offsets that do not fit the partitions (see ``resolve_bound``).
        DataLossError: an end before its start with ``failOnDataLoss``.
    """
    tps = await current_partitions(admin, opts)
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
    return plan_ranges(start, end, opts.min_partitions, opts.max_records_per_partition)


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
        """The range's records as Arrow batches (see :func:`read_range`)."""
        assert isinstance(partition, KafkaInputPartition)
        return read_range(self.opts, partition)
