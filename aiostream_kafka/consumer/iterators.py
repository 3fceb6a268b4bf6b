"""The async iterators that hand records to the application.

* :func:`record_stream` (``Consumer.stream()``) -- one :class:`Record` at a time, from every
  deliverable partition in turn: a chunk (one partition's share of one Fetch) at a time,
  then the next partition;
* :func:`batch_stream` (``Consumer.batches()``) -- the same, one chunk per item, as a
  ``list[Record]``;
* :class:`PartitionedStream` (``Consumer.partitioned_stream()``) -- one
  :class:`PartitionRecords` per assigned partition, each with its own queue, so one slow
  partition holds up only itself.

The record being handed out is kept in the partition's state (``head``, ``head_index``), not
in the iterator: an iterator abandoned half-way through a chunk loses nothing, and records
paused half-way through a chunk are handed out after ``resume``. Each record is handed out
once: the index moves before the record is yielded. Records of a partition come in offset
order.

Taking a chunk off a queue opens a slot, which wakes the poll scheduler: demand is what
makes fetching happen (seed 000: records are fetched only for partitions with demand).

Errors queued for a partition (a corrupt batch, an offset out of range with
``auto_offset_reset="none"``, a deleted topic...) are raised when the iterator reaches them,
after the records fetched before them. A deserializer error leaves the position at the
failing record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

from aiostream_kafka.serde import Deserializer
from aiostream_kafka.structs import Record, TopicPartition

from .config import ConsumerConfig
from .errors import RecordDeserializationError
from .partition import PartitionState
from .prefetch import PrefetchBuffer

__all__ = [
    "BatchStream",
    "PartitionBatches",
    "PartitionRecords",
    "PartitionedStream",
    "RecordStream",
    "StreamHost",
    "batch_stream",
    "record_stream",
]


class StreamHost(Protocol):
    """What the iterators read of the consumer's engine (``engine.FetchEngine``): the
    prefetch buffer they take records from, the assigned partitions, the deserializers,
    whether the consumer stopped or failed, and the checks and waits of a first call."""

    @property
    def buffer(self) -> PrefetchBuffer: ...
    @property
    def config(self) -> ConsumerConfig: ...
    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionState]: ...
    @property
    def assignment_event(self) -> asyncio.Event: ...
    @property
    def closed(self) -> bool: ...
    @property
    def fatal(self) -> BaseException | None: ...

    #: Iterators waiting for records right now (poll liveness): counted by them.
    waiting: int

    def check_usable(self) -> None:
        """Raise the fatal error, or ConsumerStateError if never started."""
        ...

    def check_source(self) -> None:
        """Raise NothingToConsumeError when nothing is assigned and nothing subscribed."""
        ...

    def set_mode(self, mode: str) -> None:
        """Fix which kind of iterator hands out records (``merged``, ``partitioned``)."""
        ...

    async def next_partition(self) -> PartitionState | None:
        """The next partition with deliverable data, waiting for one; None once closed."""
        ...


def _deserialize(
    tp: TopicPartition, record: Record, kd: Deserializer | None, vd: Deserializer | None
) -> Record:
    """Apply the deserializers; both run before the record changes, so a failure leaves it
    intact for the next attempt."""
    key: Any = record.key
    value: Any = record.value
    if kd is not None:
        try:
            key = kd(key)
        except Exception as exc:
            raise RecordDeserializationError(tp, record.offset, "key", exc) from exc
    if vd is not None:
        try:
            value = vd(value)
        except Exception as exc:
            raise RecordDeserializationError(tp, record.offset, "value", exc) from exc
    record.key = key
    record.value = value
    return record


def _deserialize_list(
    ps: PartitionState, records: list[Record], kd: Deserializer | None, vd: Deserializer | None
) -> tuple[list[Record], RecordDeserializationError | None]:
    """Deserialize ``records`` up to the first failure; return those done and the error."""
    for index, record in enumerate(records):
        try:
            _deserialize(ps.tp, record, kd, vd)
        except RecordDeserializationError as exc:
            return records[:index], exc
    return records, None


class RecordStream:
    """``Consumer.stream()``: records of every deliverable partition (see the module doc).

    A class, not an async generator, so that cancelling one ``__anext__`` (a timeout
    around it) leaves the iterator usable. Ends when the consumer closes.
    """

    __slots__ = ("_buffer", "_engine", "_head", "_kd", "_plain", "_ps", "_started", "_vd")

    def __init__(self, engine: StreamHost) -> None:
        self._engine = engine
        self._started = False  # the first __anext__ checks that there is anything to read
        self._buffer = engine.buffer
        self._kd = engine.config.key_deserializer
        self._vd = engine.config.value_deserializer
        self._plain = self._kd is None and self._vd is None
        self._ps: PartitionState | None = None
        self._head: list[Record] = []

    def __aiter__(self) -> RecordStream:
        return self

    async def __anext__(self) -> Record:
        """The next record.

        Raises:
            StopAsyncIteration: the consumer closed.
            NothingToConsumeError: at the first call, nothing is assigned or subscribed.
            KafkaError: an error queued for a partition, or the consumer's fatal error.
        """
        ps = self._ps
        if ps is not None:
            index = ps.head_index
            head = ps.head
            # Same chunk as last time, records left, not paused meanwhile: the hot path.
            if head is self._head and index < len(head) and not ps.paused:
                record = head[index]
                if not self._plain:
                    _deserialize(ps.tp, record, self._kd, self._vd)
                ps.head_index = index + 1
                return record
        return await self._next_slow()

    async def _next_slow(self) -> Record:
        engine = self._engine
        buffer = self._buffer
        if not self._started:
            engine.check_source()
            self._started = True
        ps = self._ps
        if ps is not None:
            self._ps = None
            if ps.head_chunk is not None and ps.head_index >= len(ps.head):
                buffer.finish_head(ps)
                buffer.rotate(ps)
                # The hot path never suspends; between chunks let the fetchers and the
                # scheduler run, so the slot just freed is refilled while we go on.
                await asyncio.sleep(0)
        while True:
            engine.check_usable()
            ps = await engine.next_partition()
            if ps is None:
                raise StopAsyncIteration
            if not buffer.load_head(ps):
                buffer.rotate(ps)
                continue
            self._ps = ps
            self._head = head = ps.head
            index = ps.head_index
            record = head[index]
            if not self._plain:
                _deserialize(ps.tp, record, self._kd, self._vd)
            ps.head_index = index + 1
            return record


class BatchStream:
    """``Consumer.batches()``: one partition's records of one Fetch per item (see the
    module doc). Ends when the consumer closes."""

    __slots__ = ("_engine", "_kd", "_plain", "_started", "_vd")

    def __init__(self, engine: StreamHost) -> None:
        self._engine = engine
        self._started = False
        self._kd = engine.config.key_deserializer
        self._vd = engine.config.value_deserializer
        self._plain = self._kd is None and self._vd is None

    def __aiter__(self) -> BatchStream:
        return self

    async def __anext__(self) -> list[Record]:
        """The next list of records (one partition, offset order).

        Raises:
            StopAsyncIteration: the consumer closed.
            NothingToConsumeError: at the first call, nothing is assigned or subscribed.
            KafkaError: an error queued for a partition, or the consumer's fatal error.
        """
        engine = self._engine
        buffer = engine.buffer
        if not self._started:
            engine.check_source()
            self._started = True
        while True:
            engine.check_usable()
            ps = await engine.next_partition()
            if ps is None:
                raise StopAsyncIteration
            batch = _take_batch(buffer, ps, self._plain, self._kd, self._vd)
            if batch is None:
                buffer.rotate(ps)
                continue
            return batch


def record_stream(engine: StreamHost) -> RecordStream:
    """Start a :class:`RecordStream`.

    Raises:
        ConsumerStateError: not started, or ``partitioned_stream()`` is in use.
        BaseException: the consumer's fatal error.
    """
    engine.check_usable()
    engine.set_mode("merged")
    return RecordStream(engine)


def batch_stream(engine: StreamHost) -> BatchStream:
    """Start a :class:`BatchStream` (raises as :func:`record_stream`)."""
    engine.check_usable()
    engine.set_mode("merged")
    return BatchStream(engine)


def _take_batch(
    buffer: PrefetchBuffer,
    ps: PartitionState,
    plain: bool,
    kd: Deserializer | None,
    vd: Deserializer | None,
) -> list[Record] | None:
    """Hand out the rest of ``ps``'s head chunk; None when it has nothing."""
    if not buffer.load_head(ps):
        return None
    head = ps.head
    index = ps.head_index
    batch = head if index == 0 else head[index:]
    if not plain:
        batch, error = _deserialize_list(ps, batch, kd, vd)
        if error is not None:
            if not batch:
                raise error
            ps.head_index = index + len(batch)
            return batch
    ps.head_index = len(head)
    buffer.finish_head(ps)
    buffer.rotate(ps)
    return batch


class PartitionRecords:
    """The records of one assigned partition, in offset order; an async iterator of
    :class:`Record`. Ends when the partition is revoked or the consumer closes.

    ``async for record in records`` takes one record at a time; ``records.batches()``
    iterates the same records a fetched chunk at a time.
    """

    def __init__(self, engine: StreamHost, ps: PartitionState) -> None:
        self._engine = engine
        self._ps = ps
        self._kd = engine.config.key_deserializer
        self._vd = engine.config.value_deserializer

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition."""
        return self._ps.tp

    @property
    def position(self) -> int | None:
        """The offset after the last record handed out (None: not positioned yet)."""
        return self._ps.delivered_position()

    def __repr__(self) -> str:
        tp = self._ps.tp
        return f"<PartitionRecords {tp.topic}[{tp.partition}]>"

    def __aiter__(self) -> PartitionRecords:
        return self

    async def __anext__(self) -> Record:
        """The next record of the partition.

        Raises:
            StopAsyncIteration: the partition was revoked or the consumer closed.
            KafkaError: an error queued for the partition, or the consumer's fatal error.
        """
        ps = self._ps
        while True:
            index = ps.head_index
            if index < len(ps.head) and not ps.paused and ps.assigned:
                record = ps.head[index]
                if self._kd is not None or self._vd is not None:
                    _deserialize(ps.tp, record, self._kd, self._vd)
                ps.head_index = index + 1
                return record
            await self._wait_for_head()

    def batches(self) -> PartitionBatches:
        """An async iterator of the partition's records a fetched chunk at a time."""
        return PartitionBatches(self)

    async def _wait_for_head(self) -> None:
        """Return once the head holds records (loading the next chunk as needed)."""
        ps = self._ps
        engine = self._engine
        while True:
            if engine.fatal is not None:
                raise engine.fatal
            if not ps.assigned or engine.closed:
                raise StopAsyncIteration
            if not ps.paused and engine.buffer.load_head(ps):
                return
            if ps.event is None:
                ps.event = asyncio.Event()
            ps.event.clear()
            engine.waiting += 1
            try:
                await ps.event.wait()
            finally:
                engine.waiting -= 1


class PartitionBatches:
    """The records of one partition, a fetched chunk (``list[Record]``) at a time."""

    def __init__(self, records: PartitionRecords) -> None:
        self._records = records

    def __aiter__(self) -> PartitionBatches:
        return self

    async def __anext__(self) -> list[Record]:
        """The next chunk of the partition's records.

        Raises:
            StopAsyncIteration: the partition was revoked or the consumer closed.
            KafkaError: an error queued for the partition, or the consumer's fatal error.
        """
        records = self._records
        ps = records._ps
        while True:
            await records._wait_for_head()
            batch = _take_batch(
                records._engine.buffer,
                ps,
                records._kd is None and records._vd is None,
                records._kd,
                records._vd,
            )
            if batch:
                return batch


class PartitionedStream:
    """Yields ``(TopicPartition, PartitionRecords)`` once per assigned partition, including
    partitions assigned later; ends when the consumer closes."""

    def __init__(self, engine: StreamHost) -> None:
        engine.check_usable()
        engine.set_mode("partitioned")
        self._engine = engine
        self._started = False

    def __aiter__(self) -> PartitionedStream:
        return self

    async def __anext__(self) -> tuple[TopicPartition, PartitionRecords]:
        """The next newly assigned partition and its records.

        Raises:
            StopAsyncIteration: the consumer closed.
            NothingToConsumeError: at the first call, nothing is assigned or subscribed.
            BaseException: the consumer's fatal error.
        """
        engine = self._engine
        if not self._started:
            engine.check_source()
            self._started = True
        while True:
            if engine.fatal is not None:
                raise engine.fatal
            if engine.closed:
                raise StopAsyncIteration
            for tp, ps in engine.partitions.items():
                if not ps.iterator_taken:
                    ps.iterator_taken = True
                    return tp, PartitionRecords(engine, ps)
            engine.assignment_event.clear()
            await engine.assignment_event.wait()
