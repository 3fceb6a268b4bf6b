"""The producer's batch calls: :meth:`~BatchCalls.send_batch`,
:meth:`~BatchCalls.enqueue_batch` (many records of one topic, one completion for all of
them: :mod:`aiostream_kafka.producer.batch`) and :meth:`~BatchCalls.pipe` (a stream of
records, their metadata in order).

``BatchCalls`` is a mixin of :class:`~aiostream_kafka.producer.Producer` (its methods are
the producer's, found by the ordinary method lookup: no extra call on any path). It reads
the producer's state; what it uses is declared below, and the producer defines it (the
per-record calls ``send`` and ``enqueue``, which the batch calls mirror, stay in
``producer.py``).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import TopicMetadata
from aiostream_kafka.concurrency import mark_retrieved
from aiostream_kafka.producer.accumulator import (
    PLAIN_OVERHEAD,
    Accumulator,
    HeaderList,
    ProducerBatch,
    record_size_upper_bound,
)
from aiostream_kafka.producer.batch import BatchCompletion, BatchMetadata
from aiostream_kafka.producer.partitioner import StickyPartitioner, partition_for_key
from aiostream_kafka.producer.record import BYTES, ProducerRecord, check_headers
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.records import HEADER_SIZE
from aiostream_kafka.serde import Serializer, serialize
from aiostream_kafka.structs import RecordMetadata, TopicPartition

__all__ = ["BatchCalls"]

_time_ns = time.time_ns
_BYTES_OR_NONE = frozenset({bytes, bytearray, memoryview, type(None)})
_ONLY_BYTES = frozenset({bytes})
# A batch call yields to the event loop after this many new batches (so that the sender
# starts on them while it appends more, with a few partitions' batches per request).
_YIELD_EVERY = 4


class _Run:
    """The records of one batch call bound for one partition (or, keyless, for the topic's
    sticky partitions), in the call's order: ``indexes`` are their positions in the call.
    ``pos`` is the next record to append.

    A *plain* run (``sizes`` given: bytes values, no keys, headers or timestamps, and a
    batch size where the hot path's framing bound holds) is appended as
    :meth:`Producer.enqueue`'s hot path appends one record, a batch's worth at a time:
    each record takes ``len(value) + PLAIN_OVERHEAD`` of the batch's ``room``, and the
    number that fit is guessed from the next record's size and corrected with sums of
    slices of ``sizes``. Others go through :meth:`ProducerBatch.append` one by one.
    """

    __slots__ = ("headers", "indexes", "keys", "n", "pos", "sizes", "timestamps", "values")

    def __init__(
        self,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[HeaderList | None] | None,
        timestamps: list[int] | int | None,
        indexes: Sequence[int],
        sizes: list[int] | None,
    ) -> None:
        self.values = values
        self.keys = keys
        self.headers = headers
        self.timestamps = timestamps
        self.indexes = indexes
        self.sizes = sizes
        self.n = len(values)
        self.pos = 0

    def first_size(self) -> int:
        """The size bound of the next record (what a new batch for it reserves)."""
        pos = self.pos
        return record_size_upper_bound(
            None if self.keys is None else self.keys[pos],
            self.values[pos],
            None if self.headers is None else self.headers[pos],
        )

    def wanted(self, first_size: int) -> int:
        """About the bytes the rest of the run takes, estimated from the next record's
        bound ``first_size`` (which includes a batch header): what a new batch for it
        needs to reserve at most."""
        return HEADER_SIZE + (self.n - self.pos) * (first_size - HEADER_SIZE)

    def fits(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` takes the next record (an empty batch always does)."""
        pos = self.pos
        if self.sizes is not None:
            return not batch.futures or self.sizes[pos] <= batch.room
        return batch.has_room_for(
            None if self.keys is None else self.keys[pos],
            self.values[pos],
            None if self.headers is None else self.headers[pos],
        )

    def _keys_or_nulls(self) -> list[Any]:
        """The run's keys; for a keyless run, a null key per record (made once), so that
        keyless records the plain path does not take (batches over 64 KiB, None values)
        are encoded a batch's worth per call too."""
        keys = self.keys
        if keys is None:
            keys = self.keys = [None] * self.n
        return keys

    def fill(self, batch: ProducerBatch, completion: BatchCompletion) -> None:
        """Append to ``batch`` the next records that fit (at least one: the caller checked
        :meth:`fits`) and attach them to ``completion`` as one segment."""
        pos = self.pos
        start = len(batch.futures)
        sizes = self.sizes
        if sizes is not None:
            # Records pos..end-1 fit while sum(size + PLAIN_OVERHEAD) - PLAIN_OVERHEAD
            # <= room (the last record needs only its own size within the room).
            room = batch.room
            limit = room + PLAIN_OVERHEAD
            n = self.n
            end = min(n, pos + max(1, limit // (sizes[pos] + PLAIN_OVERHEAD)))
            total = sum(sizes[pos:end]) + PLAIN_OVERHEAD * (end - pos)
            if total <= limit:
                while end < n:
                    more = total + sizes[end] + PLAIN_OVERHEAD
                    if more > limit:
                        break
                    total = more
                    end += 1
            else:
                while total > limit and end > pos + 1:
                    end -= 1
                    total -= sizes[end] + PLAIN_OVERHEAD
                # one record left that does not fit: only an empty batch takes it
            count = end - pos
            batch.extend_plain(self.values[pos:end], _time_ns() // 1_000_000, total)
        elif (
            self.headers is None
            and (self.timestamps is None or type(self.timestamps) is int)
            and (
                count := batch.extend_keyed(
                    self._keys_or_nulls(),
                    self.values,
                    pos,
                    self.n,
                    _time_ns() // 1_000_000 if self.timestamps is None else self.timestamps,
                )
            )
        ):
            end = pos + count  # keyed, no headers: a batch's worth in one call
        else:
            keys, values, headers, stamps = self.keys, self.values, self.headers, self.timestamps
            now = _time_ns() // 1_000_000 if stamps is None else 0
            end, n = pos, self.n
            while end < n:
                key = None if keys is None else keys[end]
                value = values[end]
                record_headers = None if headers is None else headers[end]
                if end > pos and not batch.has_room_for(key, value, record_headers):
                    break
                if stamps is None:
                    timestamp = now
                elif type(stamps) is int:
                    timestamp = stamps
                else:
                    timestamp = stamps[end]  # type: ignore[index]
                batch.append(key, value, record_headers, timestamp, None)
                end += 1
            count = end - pos
        completion.attach(batch, start, count, self.indexes[pos:end])
        self.pos = end


class BatchCalls:
    """The batch calls of :class:`~aiostream_kafka.producer.Producer` (a mixin)."""

    # The producer's state the batch calls use (set by Producer._setup and start()).
    _accumulator: Accumulator | None
    _state: str
    _cluster: Cluster
    _sticky: dict[str, Any]
    _partitioner: StickyPartitioner
    _max_block_s: float
    _key_serializer: Serializer | None
    _value_serializer: Serializer | None
    _size_check_from: int
    _plain_batches: bool
    _lingers: bool

    if TYPE_CHECKING:  # the producer's methods the batch calls use (defined in Producer)

        def _not_running(self) -> Exception: ...
        def _refusal(self) -> Exception | None: ...
        def _expedite_when_idle(self) -> None: ...
        def _sticky_partition(self, meta: TopicMetadata, *, moving: bool) -> int: ...
        def _check_size(
            self, topic: str, key: Any, value: Any, headers: HeaderList | None
        ) -> None: ...
        async def _wait_for_topic(self, topic: str, partition: int | None) -> TopicMetadata: ...
        async def _enqueue_record(
            self, record: ProducerRecord
        ) -> asyncio.Future[RecordMetadata]: ...

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        partition: int | None = None,
        timestamps_ms: int | Sequence[int] | None = None,
    ) -> BatchMetadata:
        """Send many records to ``topic`` with one call and one completion for all of
        them, without a future per record; return once every record is acknowledged.

        ``values[i]`` (with ``keys[i]``, ``headers[i]``, ``timestamps_ms[i]`` when given)
        is the call's record ``i``. Serializers apply as for :meth:`send`. Partitions are
        chosen as for :meth:`send`: ``partition`` for every record when given, else
        ``murmur2(key)`` for a keyed record, else the topic's sticky partition (KIP-480:
        the call fills one partition's batch, then the next). ``timestamps_ms`` is one
        timestamp for all or one per record (default: the time of the append).

        The records are appended a batch at a time in a tight loop; a call larger than
        the free ``buffer_memory`` waits for memory batch by batch (each wait bounded by
        ``max_block_ms``) while earlier batches are sent. The records of one partition
        keep the call's order (and idempotence keeps it through retries); records of
        concurrent calls may interleave between batches.

        Returns:
            :class:`~aiostream_kafka.producer.batch.BatchMetadata`: ``record_count`` and
            one ``BatchRun(partition, offset, indexes, log_append_time_ms)`` per run of
            records acknowledged together (record ``indexes[j]`` is at ``offset + j``).

        Raises:
            TypeError: a value, key, header or timestamp of the wrong type (naming its
                index), ``values`` that is itself bytes or str, or no serializer for
                non-bytes; nothing of the call was appended.
            ValueError: ``keys``, ``headers`` or ``timestamps_ms`` not as long as
                ``values``; nothing appended.
            RecordTooLargeError: a record over ``max_request_size`` or
                ``buffer_memory`` (naming its index); nothing of the call was appended.
            UnknownTopicOrPartitionError: the topic (or ``partition``) is not in the
                metadata within ``max_block_ms``; nothing appended.
            KafkaTimeoutError: no buffer memory within ``max_block_ms`` before any record
                of the call was appended; nothing appended.
            ProducerClosedError: the producer is closed; nothing appended.
            BatchDeliveryError: some records were not acknowledged (a batch failed or
                timed out, or the call could not append the rest: memory, closing);
                ``failed_indexes``/``failed_ranges`` name exactly those records, the rest
                were acknowledged (``delivered``), so retrying only those completes the
                call. ``first_error`` is the first failure's typed error.

        Cancelled (e.g. by a timeout) while appending or waiting, the records already
        appended are still sent (they cannot be taken back out of their batches); their
        outcome is logged (INFO, or WARNING naming the failed indexes), never lost as an
        unretrieved exception. The records not yet appended are not sent.
        """
        future = await self.enqueue_batch(
            topic,
            values,
            keys,
            headers=headers,
            partition=partition,
            timestamps_ms=timestamps_ms,
        )
        if self._lingers and not future.done():
            self._expedite_when_idle()
        return await future

    async def enqueue_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
        partition: int | None = None,
        timestamps_ms: int | Sequence[int] | None = None,
    ) -> asyncio.Future[BatchMetadata]:
        """:meth:`send_batch` without waiting for the acknowledgements: return once every
        record is in a batch, with one future of the call's
        :class:`~aiostream_kafka.producer.batch.BatchMetadata`.

        The call-time errors of :meth:`send_batch` (``TypeError``, ``ValueError``,
        ``RecordTooLargeError``, ``UnknownTopicOrPartitionError``, ``KafkaTimeoutError``
        for memory before the first record, ``ProducerClosedError``) are raised here, and
        then nothing of the call was appended. Once some records are appended, a failure to
        append the rest (memory, closing) is not raised here: the future fails with
        :class:`~aiostream_kafka.producer.batch.BatchDeliveryError` naming them, once the
        appended ones have an outcome.
        """
        acc = self._accumulator
        if self._state != "running" or acc is None:
            raise self._not_running()
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise TypeError(f"partition must be a non-negative int, got {partition!r}")
        values_, keys_, headers_, stamps, sizes = self._prepare_batch(
            topic, values, keys, headers, timestamps_ms
        )
        n = len(values_)
        completion = BatchCompletion(topic, n, acc.loop)
        if not n:
            completion.seal()
            return completion.future
        meta = self._cluster.snapshot.topics.get(topic)
        if (
            meta is None
            or meta.error_code
            or not meta.partitions
            or (partition is not None and partition not in meta.partitions)
        ):
            meta = await self._wait_for_topic(topic, partition)
        runs = self._plan_batch(meta, values_, keys_, headers_, stamps, sizes, partition)
        try:
            for tp, run in runs:
                if tp is None:
                    await self._append_sticky(acc, meta, run, completion)
                else:
                    await self._append_run(acc, tp, run, completion)
        except asyncio.CancelledError:
            if completion.appended:
                completion.abandon()  # its outcome is logged when known
                completion.seal()
            raise
        except Exception as exc:
            if not completion.appended:
                raise
            rest = sorted(itertools.chain.from_iterable(r.indexes[r.pos :] for _, r in runs))
            completion.seal(rest, exc)
            return completion.future
        completion.seal()
        return completion.future

    def _prepare_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
        timestamps_ms: int | Sequence[int] | None,
    ) -> tuple[list[Any], list[Any] | None, list[HeaderList | None] | None, Any, list[int] | None]:
        """Serialize and check a batch call's records before any of them is appended.
        Returns values, keys (None: all keyless), headers (None: none), the timestamps
        (None, one int or a list) and, when every value is ``bytes``, their sizes."""
        if isinstance(values, str | bytes | bytearray | memoryview):
            raise TypeError(
                f"values must be a sequence of record values, got {type(values).__name__}: "
                "for one record use send()"
            )
        serializer = self._value_serializer
        if serializer is not None:
            out = []
            for i, value in enumerate(values):
                try:
                    out.append(serialize(serializer, value, "value"))
                except Exception as exc:
                    exc.add_note(f"(values[{i}] of the batch call)")
                    raise
            values_: list[Any] = out
        else:
            values_ = list(values)
        n = len(values_)
        types = set(map(type, values_))
        only_bytes = types <= _ONLY_BYTES
        if not only_bytes and not types <= _BYTES_OR_NONE:
            _check_items(values_, "value")
        keys_: list[Any] | None = None
        if keys is not None:
            if isinstance(keys, str | bytes | bytearray | memoryview):
                raise TypeError(f"keys must be a sequence of keys, got {type(keys).__name__}")
            serializer = self._key_serializer
            if serializer is not None:
                keys_ = []
                for i, key in enumerate(keys):
                    try:
                        keys_.append(serialize(serializer, key, "key"))
                    except Exception as exc:
                        exc.add_note(f"(keys[{i}] of the batch call)")
                        raise
            else:
                keys_ = list(keys)
            if len(keys_) != n:
                raise ValueError(f"{len(keys_)} keys for {n} values")
            if not set(map(type, keys_)) <= _BYTES_OR_NONE:
                _check_items(keys_, "key")
            if keys_.count(None) == n:
                keys_ = None
        headers_: list[HeaderList | None] | None = None
        if headers is not None:
            headers_ = []
            for i, record_headers in enumerate(headers):
                try:
                    headers_.append(
                        None if record_headers is None else check_headers(record_headers)
                    )
                except TypeError as exc:
                    raise TypeError(f"headers[{i}]: {exc}") from None
            if len(headers_) != n:
                raise ValueError(f"{len(headers_)} header lists for {n} values")
            if headers_.count(None) == n:
                headers_ = None
        stamps: Any = None
        if timestamps_ms is not None:
            if type(timestamps_ms) is int:
                if timestamps_ms < 0:
                    raise TypeError(f"timestamps_ms must be >= 0, got {timestamps_ms}")
                stamps = timestamps_ms
            else:
                stamps = list(timestamps_ms)  # type: ignore[arg-type]
                if len(stamps) != n:
                    raise ValueError(f"{len(stamps)} timestamps for {n} values")
                if n and (not set(map(type, stamps)) <= {int} or min(stamps) < 0):
                    bad = next(i for i, t in enumerate(stamps) if type(t) is not int or t < 0)
                    raise TypeError(
                        f"timestamps_ms[{bad}] must be a non-negative int, got {stamps[bad]!r}"
                    )
        # Sizes: only records that may exceed a limit are measured exactly.
        limit = self._size_check_from
        sizes = list(map(len, values_)) if only_bytes else None
        if sizes is not None and keys_ is None and headers_ is None:
            suspects: Iterable[int] = range(n) if n and max(sizes) > limit else ()
        elif (
            sizes is not None
            and headers_ is None
            and max(sizes, default=0) + max(map(len, filter(None, keys_ or ())), default=0) <= limit
        ):
            suspects = ()  # no value and key together can reach the limit
        else:
            suspects = (
                i
                for i in range(n)
                if (headers_ is not None and headers_[i])
                or _length(values_[i]) + (0 if keys_ is None else _length(keys_[i])) > limit
            )
        for i in suspects:
            try:
                self._check_size(
                    topic,
                    None if keys_ is None else keys_[i],
                    values_[i],
                    None if headers_ is None else headers_[i],
                )
            except ec.RecordTooLargeError as exc:
                raise ec.RecordTooLargeError(
                    f"values[{i}] of the batch call (nothing of the call was sent): {exc}"
                ) from None
        return values_, keys_, headers_, stamps, sizes

    def _plan_batch(
        self,
        meta: TopicMetadata,
        values: list[Any],
        keys: list[Any] | None,
        headers: list[HeaderList | None] | None,
        stamps: Any,
        sizes: list[int] | None,
        partition: int | None,
    ) -> list[tuple[TopicPartition | None, _Run]]:
        """Split a batch call into runs, one per partition (None: the sticky partitions
        of keyless records), each in the call's order."""
        topic = meta.name
        n = len(values)
        if headers is not None or stamps is not None or not self._plain_batches:
            sizes = None  # not plain: record by record
        if partition is not None:
            run = _Run(values, keys, headers, stamps, range(n), None if keys else sizes)
            return [(TopicPartition(topic, partition), run)]
        if keys is None:
            return [(None, _Run(values, None, headers, stamps, range(n), sizes))]
        count = len(meta.partitions)
        by_partition: dict[int, list[int]] = {}
        keyless: list[int] = []
        for i, key in enumerate(keys):
            if key is None:
                keyless.append(i)
                continue
            p = partition_for_key(key, count)
            indexes = by_partition.get(p)
            if indexes is None:
                by_partition[p] = [i]
            else:
                indexes.append(i)

        def run_of(indexes: list[int], keyed: bool) -> _Run:
            return _Run(
                [values[i] for i in indexes],
                [keys[i] for i in indexes] if keyed else None,
                None if headers is None else [headers[i] for i in indexes],
                [stamps[i] for i in indexes] if isinstance(stamps, list) else stamps,
                indexes,
                None if keyed or sizes is None else [sizes[i] for i in indexes],
            )

        runs: list[tuple[TopicPartition | None, _Run]] = [
            (TopicPartition(topic, p), run_of(indexes, True))
            for p, indexes in sorted(by_partition.items())
        ]
        if keyless:
            runs.append((None, run_of(keyless, False)))
        return runs

    async def _batch_for(self, acc: Accumulator, tp: TopicPartition, run: _Run) -> ProducerBatch:
        """A batch of ``tp`` that takes ``run``'s next record, new unless another caller
        opened one while this one waited for memory."""
        first = run.first_size()
        reserved = acc.reservation(first, run.wanted(first))
        if not acc.pool.try_reserve(reserved):
            acc.wakeup.set()  # waiters make every batch sendable: let the sender run
            await acc.pool.reserve(reserved, self._max_block_s)
            refusal = self._refusal()  # closed, or the transaction ended meanwhile
            if refusal is not None:
                acc.pool.release(reserved)
                raise refusal
        return acc.open_reserved(tp, reserved, run.fits)

    async def _append_run(
        self, acc: Accumulator, tp: TopicPartition, run: _Run, completion: BatchCompletion
    ) -> None:
        """Append ``run`` to partition ``tp``, a batch at a time."""
        while run.pos < run.n:
            batch = acc.open_batch(tp)
            if batch is not None and run.fits(batch):
                run.fill(batch, completion)
                continue
            if batch is not None:
                batch.closed = True  # full: the sender may take it now
                acc.wakeup.set()
            run.fill(await self._batch_for(acc, tp, run), completion)
            completion.batches += 1
            if not completion.batches % _YIELD_EVERY:
                await asyncio.sleep(0)  # new batches: let the sender and the readers run
                refusal = self._refusal()
                if refusal is not None:
                    raise refusal

    async def _append_sticky(
        self, acc: Accumulator, meta: TopicMetadata, run: _Run, completion: BatchCompletion
    ) -> None:
        """Append keyless ``run`` to the topic's sticky partition (KIP-480), moving on to
        another partition each time the sticky batch is complete, as :meth:`enqueue`."""
        topic = meta.name
        while run.pos < run.n:
            batch = self._sticky.get(topic)
            if batch is not None and not batch.closed:
                if run.fits(batch):
                    run.fill(batch, completion)
                    continue
                batch.closed = True
                acc.wakeup.set()
            current = self._cluster.snapshot.topics.get(topic)
            if current is not None and not current.error_code and current.partitions:
                meta = current
            tp = TopicPartition(topic, self._sticky_partition(meta, moving=batch is not None))
            batch = acc.open_batch(tp)
            if batch is not None and run.fits(batch):
                self._sticky[topic] = batch
                run.fill(batch, completion)
                continue
            if batch is not None:
                batch.closed = True
                acc.wakeup.set()
            batch = await self._batch_for(acc, tp, run)
            self._sticky[topic] = batch
            run.fill(batch, completion)
            completion.batches += 1
            if not completion.batches % _YIELD_EVERY:
                await asyncio.sleep(0)  # new batches: let the sender and the readers run
                refusal = self._refusal()
                if refusal is not None:
                    raise refusal

    async def pipe(
        self,
        records: AsyncIterable[ProducerRecord] | Iterable[ProducerRecord],
        max_in_flight: int = 1000,
    ) -> AsyncIterator[RecordMetadata]:
        """Send every record of ``records`` and yield their metadata in the same order.

        At most ``max_in_flight`` records are buffered and not yet yielded: the source is
        read only as fast as acknowledgements come back and the consumer of this iterator
        takes them (fs2-kafka's ``pipe``). Metadata is yielded as soon as the oldest
        record is acknowledged.

        Raises the first record's delivery error, in order (records after it are still
        delivered by the producer, their results dropped), and what :meth:`send` raises.
        """
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        window: collections.deque[asyncio.Future[RecordMetadata]] = collections.deque()

        async def take() -> RecordMetadata:
            return await window.popleft()

        try:
            if isinstance(records, AsyncIterable):
                async for record in records:
                    while window and (len(window) >= max_in_flight or window[0].done()):
                        yield await take()
                    window.append(await self._enqueue_record(record))
            else:
                for record in records:
                    while window and (len(window) >= max_in_flight or window[0].done()):
                        yield await take()
                    window.append(await self._enqueue_record(record))
            while window:
                yield await take()
        finally:
            for future in window:  # abandoned: retrieve, so nothing is logged as lost
                future.add_done_callback(mark_retrieved)


def _length(data: Any) -> int:
    return 0 if data is None else len(data)


def _check_items(items: list[Any], what: str) -> None:
    """Raise the TypeError of the first item that is neither bytes-like nor None."""
    for i, item in enumerate(items):
        if item is not None and not isinstance(item, BYTES):
            try:
                serialize(None, item, what)
            except TypeError as exc:
                raise TypeError(f"{what}s[{i}]: {exc}") from None
