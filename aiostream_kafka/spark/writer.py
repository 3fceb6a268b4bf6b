"""Writing: the batch and streaming Arrow writers (the built-in Kafka sink's columns).

Columns: ``value`` (binary or string, required), ``key`` (binary or string), ``headers``
(``array<struct<key: string, value: binary>>``), ``topic`` (string; the ``topic`` option,
when set, wins), ``partition`` (int; else the producer's partitioner chooses).

Each Spark task opens one idempotent :class:`~aiostream_kafka.producer.Producer` in a
private event loop, enqueues the rows of each Arrow batch with one
:meth:`~aiostream_kafka.producer.Producer.enqueue_batch` call per topic and partition
(so requests stay pipelined), flushes and waits for every acknowledgement before
returning its commit message: a task that returns has all
its rows in Kafka. A failed and retried task (or a micro-batch replayed after a crash)
writes its rows again: the sink is **at-least-once**, like the built-in one. The producer's
idempotence removes the duplicates of its own retries within one task, not those of a
retried task.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from aiostream_kafka.concurrency import mark_retrieved
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.producer import BatchMetadata, Producer, ProducerConfig

from .options import SinkOptions

__all__ = [
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "check_sink_schema",
    "producer_kwargs",
]

log = logging.getLogger(__name__)

#: At most this many rows enqueued but not yet acknowledged before the writer waits for the
#: oldest call (bounds the futures and row lists held; the producer's ``buffer_memory``
#: bounds the bytes).
_MAX_PENDING_ROWS = 200_000

#: The sink's ``batch.size`` unless ``kafka.batch.size`` is set (capped by
#: ``kafka.max.request.size``): a task has its rows at hand, so waiting to fill a batch
#: costs no latency, and each batch costs the Python producer (and the broker) a fixed
#: amount of work. Measured, one task, 500k keyed 100-byte rows, one local broker:
#: 16 KiB (the Java client's default) 373-458k rows/s, 128-512 KiB 663-810k rows/s.
SINK_BATCH_SIZE = 256 * 1024
_DEFAULT = ProducerConfig()


def _is_bytes_like(dtype: DataType) -> bool:
    return isinstance(dtype, (BinaryType, StringType))


def _header_type_ok(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dtype.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and _is_bytes_like(fields["value"])
    )


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Check the DataFrame's columns against the sink's (as the built-in sink does).

    Raises:
        ConfigError: no ``value`` column, no topic (column or option), or a column of a
            type the sink cannot write; the message names the column and the fix.
    """
    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in columns:
        raise ConfigError(
            "Required attribute 'value' not found: the DataFrame written to Kafka needs a "
            "'value' column (binary or string), e.g. df.selectExpr('CAST(x AS STRING) AS value')"
        )
    for name in ("key", "value"):
        if name in columns and not _is_bytes_like(columns[name]):
            raise ConfigError(
                f"{name} attribute type must be a string or binary, got "
                f"{columns[name].simpleString()}: cast it, e.g. CAST({name} AS STRING)"
            )
    if opts.topic is None:
        if "topic" not in columns:
            raise ConfigError(
                "topic option required when no 'topic' attribute is present: set "
                '.option("topic", "name") or add a string column named topic'
            )
    if "topic" in columns and not isinstance(columns["topic"], StringType):
        raise ConfigError(
            f"topic attribute type must be a string, got {columns['topic'].simpleString()}"
        )
    if "partition" in columns and not isinstance(columns["partition"], IntegerType):
        raise ConfigError(
            "partition attribute type must be an int, got "
            f"{columns['partition'].simpleString()}: CAST(partition AS INT)"
        )
    if "headers" in columns and not _header_type_ok(columns["headers"]):
        raise ConfigError(
            "headers attribute type must be array<struct<key:string,value:binary>>, got "
            f"{columns['headers'].simpleString()}"
        )


@dataclass(frozen=True)
class KafkaCommitMessage(WriterCommitMessage):
    """What a task reports: the rows it wrote (all acknowledged)."""

    rows: int
    batch_id: int | None = None


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """Column ``name`` as Python values (strings as UTF-8 bytes), or None when absent."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    array = batch.column(index)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary())
    return array.to_pylist()  # type: ignore[no-any-return]


def _headers(raw: list[dict[str, Any]] | None) -> list[tuple[str, bytes | None]] | None:
    if not raw:
        return None
    out: list[tuple[str, bytes | None]] = []
    for h in raw:
        value = h["value"]
        out.append((h["key"], value.encode() if isinstance(value, str) else value))
    return out


_NULL_TOPIC = (
    "a row has a null 'topic' and no 'topic' option is set: give every row a topic or set "
    '.option("topic", "name")'
)


@dataclass(frozen=True, slots=True)
class Run:
    """Rows of one Arrow batch written with one producer call: same topic and partition
    (None: the producer's partitioner chooses, per key)."""

    topic: str
    partition: int | None
    values: list[Any]
    keys: list[Any] | None
    headers: list[list[tuple[str, bytes | None]] | None] | None


def _take(items: list[Any], rows: list[int]) -> list[Any]:
    """``[items[i] for i in rows]``, picked in C (``itemgetter``)."""
    if len(rows) == 1:
        return [items[rows[0]]]
    return list(itemgetter(*rows)(items))


def split_by_key(run: Run, partitions: int) -> list[Run]:
    """``run`` (no partition named, some keys) as one run per partition its keyed rows
    go to under the default partitioner (:func:`.keyhash.key_partitions`: the producer
    then skips hashing each key), plus the keyless rows left to the producer's sticky
    partitioner, in row order within each run. The rows are grouped with numpy (a
    stable sort by partition) and picked with ``itemgetter``: no Python loop per row."""
    import numpy as np

    from .keyhash import key_partitions

    assert run.keys is not None and run.partition is None
    keys = run.keys
    array = pa.array(keys, pa.binary())
    chosen = np.asarray(key_partitions(array, partitions), dtype=np.int64)
    if array.null_count:
        chosen[array.is_null().to_numpy(zero_copy_only=False)] = -1  # keyless: sticky
    order = np.argsort(chosen, kind="stable")
    ordered = chosen[order]
    starts = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist()]
    if len(starts) == 1 and ordered[0] >= 0:  # every row to one partition
        return [Run(run.topic, int(ordered[0]), run.values, keys, run.headers)]
    values, headers = run.values, run.headers
    out = []
    keyless: Run | None = None
    for first, end in zip(starts, [*starts[1:], len(ordered)], strict=True):
        rows = order[first:end].tolist()
        p = int(ordered[first])
        piece = Run(
            run.topic,
            None if p < 0 else p,
            _take(values, rows),
            None if p < 0 else _take(keys, rows),
            None if headers is None else _take(headers, rows),
        )
        if p < 0:
            keyless = piece  # last, as before: after the partitions' runs
        else:
            out.append(piece)
    if keyless is not None:
        out.append(keyless)
    return out


def plan_runs(batch: pa.RecordBatch, topic_option: str | None) -> list[Run]:
    """Split one Arrow batch into producer calls: one call per (topic, partition) with
    the rows in their order (one call for the whole batch with a ``topic`` option and no
    ``partition`` column).

    Rows are grouped by their topic and partition column, in row order, except in a topic
    where some rows name a partition and others do not (keyed rows may hash to a named
    one): such a topic is written in runs of consecutive rows instead, so that rows
    naming a partition or with a key keep their order within the partition. (Keyless rows
    without a partition go where the producer's sticky partitioner puts them, which
    guarantees no order, as with one call per row.)

    Raises:
        ConfigError: a row has no topic (null column, no option).
    """
    n = batch.num_rows
    if n == 0:
        return []
    values = _column(batch, "value")
    assert values is not None
    keys = _column(batch, "key")
    if keys is not None and keys.count(None) == n:
        keys = None
    raw_headers = _column(batch, "headers")
    headers = None if raw_headers is None else [_headers(h) for h in raw_headers]
    if headers is not None and headers.count(None) == n:
        headers = None
    partitions = _column(batch, "partition")
    if partitions is not None and partitions.count(None) == n:
        partitions = None
    topics: list[Any] | None = None
    if topic_option is None:
        index = batch.schema.get_field_index("topic")
        topics = batch.column(index).to_pylist()
        if None in topics:
            raise ConfigError(_NULL_TOPIC)
        if topics.count(topics[0]) == n:
            topic_option, topics = topics[0], None
    if topics is None and partitions is None:
        assert topic_option is not None
        return [Run(topic_option, None, values, keys, headers)]
    row_topics = topics if topics is not None else [topic_option] * n
    row_partitions = partitions if partitions is not None else [None] * n
    # rows of each (topic, partition), in order; a topic with named and unnamed
    # partitions keeps consecutive runs (its group key gets the run's first row)
    mixed = set()
    if partitions is not None:
        named = {t for t, p in zip(row_topics, row_partitions, strict=True) if p is not None}
        unnamed = {t for t, p in zip(row_topics, row_partitions, strict=True) if p is None}
        mixed = named & unnamed
    groups: dict[tuple[str, int | None, int], list[int]] = {}
    previous: tuple[str, int | None] | None = None
    run_start = 0
    for i, (topic, partition) in enumerate(zip(row_topics, row_partitions, strict=True)):
        if (topic, partition) != previous:
            previous, run_start = (topic, partition), i
        group = (topic, partition, run_start if topic in mixed else -1)
        rows = groups.get(group)
        if rows is None:
            groups[group] = [i]
        else:
            rows.append(i)
    runs = []
    for (topic, partition, _), rows in groups.items():
        run_keys = None if keys is None else [keys[i] for i in rows]
        run_headers = None if headers is None else [headers[i] for i in rows]
        runs.append(Run(topic, partition, [values[i] for i in rows], run_keys, run_headers))
    return runs


def producer_kwargs(opts: SinkOptions) -> dict[str, Any]:
    """The writer's :class:`~aiostream_kafka.producer.Producer` settings: idempotent, the
    ``kafka.*`` options, and ``batch_size`` :data:`SINK_BATCH_SIZE` (at most
    ``max_request_size`` and an eighth of ``buffer_memory``, not below 16 KiB) unless
    ``kafka.batch.size`` is set."""
    kwargs = {"enable_idempotence": True, **opts.kafka.producer_kwargs()}
    if "batch_size" not in kwargs:
        request = kwargs.get("max_request_size", _DEFAULT.max_request_size)
        memory = kwargs.get("buffer_memory", _DEFAULT.buffer_memory)
        if request > 0 and memory > 0:  # (else the producer names the bad setting)
            # at least 8 batches in buffer_memory, as 16 KiB in the default 32 MiB allows
            # many more; never below the Java client's 16 KiB
            kwargs["batch_size"] = min(SINK_BATCH_SIZE, request, max(memory // 8, 16_384))
    return kwargs


async def _write_batches(
    opts: SinkOptions, batches: Iterator[pa.RecordBatch], next_batch: Any
) -> int:
    """Produce every row, one batch call per :class:`Run`; return the number written once
    all are acknowledged."""
    kwargs = producer_kwargs(opts)
    rows = 0
    pending: deque[tuple[asyncio.Future[BatchMetadata], int]] = deque()
    pending_rows = 0
    async with Producer(opts.kafka.bootstrap_servers, **kwargs) as producer:
        while True:
            batch = next_batch(batches)
            if batch is None:
                break
            runs = plan_runs(batch, opts.topic)
            if any(run.keys is not None and run.partition is None for run in runs):
                runs = [
                    piece
                    for run in runs
                    for piece in (
                        [run]
                        if run.keys is None or run.partition is not None
                        else split_by_key(run, len(await producer.partitions_for(run.topic)))
                    )
                ]
            for run in runs:
                future = await producer.enqueue_batch(
                    run.topic,
                    run.values,
                    run.keys,
                    headers=run.headers,
                    partition=run.partition,
                )
                future.add_done_callback(mark_retrieved)  # a failure is raised once awaited
                pending.append((future, len(run.values)))
                pending_rows += len(run.values)
            rows += batch.num_rows
            while pending and (pending[0][0].done() or pending_rows > _MAX_PENDING_ROWS):
                future, count = pending.popleft()
                await future
                pending_rows -= count
        await producer.flush()
        for future, _ in pending:
            await future
    return rows


def write_partition(opts: SinkOptions, iterator: Iterator[pa.RecordBatch]) -> int:
    """Write one task's rows in a private event loop; return how many were written (all
    acknowledged). The batches are pulled from Spark's iterator outside the loop.

    Raises:
        ConfigError: a row without a topic.
        KafkaError: a record could not be delivered.
    """
    loop = asyncio.new_event_loop()
    try:

        def next_batch(it: Iterator[pa.RecordBatch]) -> pa.RecordBatch | None:
            return next(it, None)

        return loop.run_until_complete(_write_batches(opts, iterator, next_batch))
    finally:
        loop.close()


def _batch_id() -> int | None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None
    value = ctx.getLocalProperty("streaming.sql.batchId")
    return int(value) if value is not None else None


def _committed_rows(messages: list[WriterCommitMessage | None]) -> int:
    """Rows the tasks that sent ``messages`` wrote (all acknowledged)."""
    return sum(m.rows for m in messages if isinstance(m, KafkaCommitMessage))


class KafkaBatchWriter(DataSourceArrowWriter):
    """The batch writer (``df.write.format("aiostream_kafka").mode("append")``)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        """Produce the task's rows; return once all are acknowledged.

        Raises:
            ConfigError, KafkaError: see :func:`write_partition`.
        """
        rows = write_partition(self.opts, iterator)
        log.info("task wrote %d rows", rows)
        return KafkaCommitMessage(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every task's rows are acknowledged before it returns."""
        log.info("wrote %d rows", _committed_rows(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows already written stay in Kafka (at-least-once); only logs."""
        rows = _committed_rows(messages)
        log.warning("write aborted; %d rows written by finished tasks stay in Kafka", rows)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """The streaming writer (``writeStream.format("aiostream_kafka")``)."""

    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        """Produce the task's rows of one micro-batch; return once all are acknowledged.

        Raises:
            ConfigError, KafkaError: see :func:`write_partition`.
        """
        rows = write_partition(self.opts, iterator)
        return KafkaCommitMessage(rows, _batch_id())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: the rows are acknowledged; logs the count."""
        log.info("micro-batch %d: wrote %d rows", batchId, _committed_rows(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already written stay in Kafka and are written again when the micro-batch
        is replayed (at-least-once); only logs."""
        log.warning("micro-batch %d aborted; its rows may be written again on replay", batchId)
