"""The executor-side range reader: Fetch requests of its own, records decoded into columns.

A Spark task reads one offset range ``[start, end)`` of one partition. Instead of a
:class:`~aiostream_kafka.consumer.Consumer` (which decodes every record into a Python
object), :class:`RangeFetcher` sends sessionless Fetch requests for that one partition to
its leader through the client's :class:`~aiostream_kafka.cluster.Cluster`, keeps the
record batches whole and decodes them into Arrow columns with :mod:`.columns`.

Per response, as the consumer's fetcher does (``aiostream_kafka/consumer/fetcher.py``):

* batches are CRC-checked (``kafka.check.crcs``, default on); batches wholly before the
  fetch position are skipped, records before ``start`` or at/after ``end`` are cut;
* control batches are skipped; with ``read_committed`` the response's aborted
  transactions are applied (a producer's transactional batches are dropped from its
  aborted transaction's first offset until its ABORT marker);
* the position moves past every complete batch, records or not, and the read stops when
  it reaches ``end`` -- a *position*, so compaction gaps and markers end ranges correctly.

The next Fetch is sent before the current response is decoded, so the broker prepares it
meanwhile.

Memory: a task holds at most two Fetch responses (the one being decoded and the next,
requested ahead; each at most ``kafka.max.partition.fetch.bytes``, 8 MiB by default, or
one record batch when a batch is larger: the broker always returns a whole first batch)
and two Arrow batches (the one Spark is taking and the one being decoded). Each response
is decoded in runs of consecutive Kafka batches of at most ``maxRecordsPerArrowBatch``
records (32,768) and ``maxBytesPerArrowBatch`` bytes of records sections, decompressed
(8 MiB), one Arrow batch per run, decompressed and decoded only as Spark takes the
batches; the decoder's temporaries (a few hundred bytes a record) are per run too. A Kafka
batch alone over the bytes limit is decoded whole (it decompresses whole). So what a task
holds does not depend on how many records its range has: at most
:func:`task_memory_bound` (57 MiB with the defaults), and much less with small records.

Errors per partition: a leader change (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...)
applies the response's KIP-951 hint or refreshes the metadata, then fetches again from the
same position; OFFSET_OUT_OF_RANGE is data loss (records before the log start were
deleted: with ``failOnDataLoss=false`` the read goes on from the log start, which the
response gives or, when it says -1 as Kafka 4 brokers do, a ListOffsets for the earliest
offset finds; a position past the log end ends the range); a log that
ends before the range does (truncated, re-created) is data loss too; an unknown topic or
partition is data loss once the metadata confirms it is gone. Network errors and other
retriable errors are retried after ``retry_backoff_ms``; a task without progress for
``kafkaConsumer.pollTimeoutMs`` fails with :class:`KafkaTimeoutError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from aiostream_kafka.admin import Admin, OffsetSpec
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.cluster.metadata import BrokerMetadata
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import ConfigError, KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.protocol.records import RecordBatch, decode_columns, iter_batches
from aiostream_kafka.protocol.transactions import ReadCommittedFilter
from aiostream_kafka.structs import TopicPartition

from . import columns
from .arrow import arrow_schema
from .offsets import data_loss

__all__ = ["DECODE_BYTES_PER_RECORD", "RangeFetcher", "task_memory_bound"]

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1
_CORRUPT_MESSAGE = 2
_LEADER_ERRORS = ec.LEADER_MOVED_CODES
_TOPIC_ERRORS = ec.TOPIC_GONE_CODES
#: Fetch long-poll wait; three empty polls at a log end short of the range = data loss.
_MAX_WAIT_MS = 500
_STALLS_AT_END = 3
#: Defaults of ``kafka.max.partition.fetch.bytes`` and ``kafka.fetch.max.bytes``.
_PARTITION_MAX_BYTES = 8 << 20
_FETCH_MAX_BYTES = 64 << 20
_TIMESTAMP = pa.timestamp("us", tz="UTC")

T = TypeVar("T")

#: What decoding costs a record, at most, beside its keys, values and headers: the
#: decoder's numpy temporaries (positions, lengths, views) and the Arrow columns made of
#: them (offset, timestamp, type, partition, topic, the binary offsets).
DECODE_BYTES_PER_RECORD = 400


def task_memory_bound(opts: Any) -> int:
    """The most a task reading one range holds at once, in bytes, beyond its worker's own
    (the module doc says what): two Fetch responses of ``kafka.max.partition.fetch.bytes``
    (capped by ``kafka.fetch.max.bytes``) and two Arrow batches of
    ``maxBytesPerArrowBatch`` bytes and ``maxRecordsPerArrowBatch`` records at
    :data:`DECODE_BYTES_PER_RECORD`. A single record batch larger than these counts in
    their place; this does not count it."""
    consumer = dict(opts.kafka.consumer)
    response = min(
        int(consumer.get("max_partition_fetch_bytes", _PARTITION_MAX_BYTES)),
        int(consumer.get("fetch_max_bytes", _FETCH_MAX_BYTES)),
    )
    arrow = opts.max_bytes_per_arrow_batch
    arrow += opts.max_records_per_arrow_batch * DECODE_BYTES_PER_RECORD
    return int(2 * response + 2 * arrow)


class _Retry(KafkaError):
    """This fetch got nothing usable; back off and fetch again from the same position."""


class _OutOfRange(KafkaError):
    """OFFSET_OUT_OF_RANGE without a log start offset: ask the broker where the log is."""


class RangeFetcher:
    """Reads ``[start, end)`` of ``tp`` as Arrow record batches (see the module doc)."""

    def __init__(
        self,
        opts: Any,
        tp: TopicPartition,
        start: int,
        end: int,
        *,
        cluster: Cluster | None = None,
    ) -> None:
        """``cluster``: connections to use (an executor worker's, kept between its reads);
        :meth:`close` closes only those the fetcher opened itself."""
        self.opts = opts
        self.tp = tp
        self.position = start
        self.start = start
        self.end = end
        consumer = dict(opts.kafka.consumer)
        self.partition_max_bytes = int(
            consumer.get("max_partition_fetch_bytes", _PARTITION_MAX_BYTES)
        )
        self.max_bytes = int(consumer.get("fetch_max_bytes", _FETCH_MAX_BYTES))
        self.min_bytes = int(consumer.get("fetch_min_bytes", 1))
        self.max_wait_ms = min(int(consumer.get("fetch_max_wait_ms", _MAX_WAIT_MS)), _MAX_WAIT_MS)
        self.check_crcs = bool(consumer.get("check_crcs", True))
        self.rack = str(consumer.get("client_rack") or "")
        self.read_committed = opts.kafka.isolation_level == "read_committed"
        self.include_headers = bool(opts.include_headers)
        self.fail = bool(opts.fail_on_data_loss)
        self.schema = arrow_schema(self.include_headers)
        self.max_records = int(opts.max_records_per_arrow_batch)
        self.max_record_bytes = int(opts.max_bytes_per_arrow_batch)
        try:
            self.config = ClientConfig(
                bootstrap_servers=opts.kafka.bootstrap_servers, **opts.kafka.client_kwargs()
            )
        except TypeError as exc:
            raise ConfigError(f"bad client option: {exc}") from None
        self.owns_cluster = cluster is None
        self.cluster = Cluster(self.config) if cluster is None else cluster
        self.read = 0
        self._stalls = 0
        self._needs_refresh = False
        self._check_gone_next = False

    # -- the loop ---------------------------------------------------------------------------

    async def batches(self) -> AsyncGenerator[pa.RecordBatch, None]:
        """The range's records as Arrow batches: those of each Fetch response with records,
        in runs bounded by the options (:meth:`arrow_batches`)."""
        tp = self.tp
        timeout_s = self.opts.poll_timeout_ms / 1000
        backoff_s = self.config.retry_backoff_ms / 1000
        await self.cluster.refresh([tp.topic])
        last_progress = time.monotonic()
        pending: asyncio.Task[FetchResponse] | None = None
        # The request in flight while the previous answer is decoded.
        scope = TaskScope(f"fetching {tp}")
        try:
            while self.position < self.end:
                try:
                    if pending is None:
                        pending = scope.spawn(
                            self._send(self.position), name="fetch", crash=Crash.AWAITED
                        )
                    response = await pending
                    pending = None
                    low = self.position
                    kept = self._take(response)
                except _OutOfRange:
                    pending = None
                    if await self._out_of_range():
                        last_progress = time.monotonic()
                    elif time.monotonic() - last_progress > timeout_s:
                        raise self._timeout() from None
                    else:
                        await asyncio.sleep(backoff_s)
                    continue
                except _Retry:
                    pending = None
                    if time.monotonic() - last_progress > timeout_s:
                        raise self._timeout() from None
                    await asyncio.sleep(backoff_s)
                    continue
                except (NetworkError, KafkaTimeoutError) as exc:
                    pending = None
                    log.info("fetching %s: %s; retrying", tp, exc)
                    if time.monotonic() - last_progress > timeout_s:
                        raise self._timeout() from exc
                    await asyncio.sleep(backoff_s)
                    await self._refresh_quietly()
                    continue
                if kept is None:  # nothing new: a long poll at the log end
                    if self._stalls >= _STALLS_AT_END:
                        break
                    if time.monotonic() - last_progress > timeout_s:
                        raise self._timeout()
                    continue
                last_progress = time.monotonic()
                self._stalls = 0
                if self.position < self.end:  # the broker prepares the next while we decode
                    pending = scope.spawn(
                        self._send(self.position), name="fetch", crash=Crash.AWAITED
                    )
                if kept:
                    batches = self.arrow_batches(kept, low)
                    # Only the runs left to decode keep the response's buffer alive: while
                    # the next one is awaited, this one is gone (two responses at most).
                    del kept, response
                    for batch in batches:
                        yield batch
                    del batches
        finally:
            # The prefetched answer is not needed any more.
            await scope.aclose()

    def _timeout(self) -> KafkaTimeoutError:
        tp = self.tp
        return KafkaTimeoutError(
            f"no records of {tp.topic}-{tp.partition} within {self.opts.poll_timeout_ms} ms "
            f"at offset {self.position} (reading up to {self.end}); raise the source option "
            "'kafkaConsumer.pollTimeoutMs' if the cluster is slow"
        )

    async def _refresh_quietly(self) -> None:
        try:
            await self.cluster.refresh([self.tp.topic])
        except KafkaError as exc:
            log.info("metadata refresh for %s failed: %s", self.tp, exc)

    async def _out_of_range(self) -> bool:
        """The position is out of range and the response did not say where the log starts:
        look the log's start and end up. Records deleted before the position are data
        loss (the read goes on from the log start with ``failOnDataLoss=false``), as is a
        position past the log end (the range ends). Returns whether the position moved
        (False: it is within the log now, fetch again)."""
        tp = self.tp
        kafka = self.opts.kafka
        async with Admin(kafka.bootstrap_servers, **kafka.client_kwargs()) as admin:
            first = await admin.list_offsets({tp: OffsetSpec.earliest()})
            last = await admin.list_offsets({tp: OffsetSpec.latest()})  # the high watermark
        earliest, latest = first[tp].offset, last[tp].offset
        if self.position < earliest:
            data_loss(
                f"offsets {self.position} to {min(earliest, self.end) - 1} of "
                f"{tp.topic}-{tp.partition} were deleted (the log now starts at {earliest})",
                self.fail,
            )
            self.position = min(earliest, self.end)
            return True
        if self.position > latest:
            data_loss(
                f"offset {self.position} of {tp.topic}-{tp.partition} is past the log end "
                f"{latest} (log start {earliest}); the query expected records up to {self.end}",
                self.fail,
            )
            self.position = self.end
            return True
        log.info(
            "fetching %s at %d: out of range, but the log is now [%d, %d); fetching again",
            tp,
            self.position,
            earliest,
            latest,
        )
        return False

    async def close(self) -> None:
        """Close the connections (unless they were given: their owner closes them)."""
        if self.owns_cluster:
            await self.cluster.close()

    # -- one request --------------------------------------------------------------------------

    async def _send(self, offset: int) -> FetchResponse:
        tp = self.tp
        if self._needs_refresh:
            self._needs_refresh = False
            if self._check_gone_next:
                self._check_gone_next = False
                await self._check_gone()
                if self.position >= self.end:
                    raise _Retry
            else:
                await self._refresh_quietly()
        snapshot = self.cluster.snapshot
        topic = snapshot.topics.get(tp.topic)
        meta = snapshot.partition(tp)
        if topic is None or topic.error_code or meta is None:
            await self._check_gone()
            raise _Retry
        if meta.leader < 0:
            await self._refresh_quietly()
            raise _Retry
        conn = await self.cluster.connection(meta.leader, Lane.FETCH)
        version = conn.version_for(FetchRequest)
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            isolation_level=1 if self.read_committed else 0,
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=tp.topic,
                    topic_id=topic.topic_id,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=tp.partition,
                            current_leader_epoch=meta.leader_epoch,
                            fetch_offset=offset,
                            partition_max_bytes=self.partition_max_bytes,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id=self.rack,
        )
        response = await conn.request(
            request,
            version=version,
            timeout_ms=self.config.request_timeout_ms + self.max_wait_ms,
        )
        assert isinstance(response, FetchResponse)
        if response.error_code:
            error = ec.error_from_code(response.error_code, f"Fetch of {tp}: top-level error")
            if not error.retriable:
                raise error
            log.info("fetching %s: %s; retrying", tp, error)
            await self._refresh_quietly()
            raise _Retry
        for t in response.responses:
            for pd in t.partitions:
                if pd.partition_index == tp.partition:
                    if offset != self.position:  # sent ahead, but the position moved
                        raise _Retry
                    return response
        raise _Retry

    async def _check_gone(self) -> None:
        """The partition is not in the metadata: refresh; if still missing, data loss."""
        tp = self.tp
        snapshot = await self.cluster.refresh([tp.topic])
        topic = snapshot.topics.get(tp.topic)
        if topic is None or topic.error_code or snapshot.partition(tp) is None:
            data_loss(
                f"{tp.topic}-{tp.partition} no longer exists (reading offsets "
                f"{self.position} to {self.end})",
                self.fail,
            )
            self.position = self.end  # nothing more to read

    # -- one response -------------------------------------------------------------------------

    def _partition(self, response: FetchResponse) -> FetchResponse.PartitionData:
        for t in response.responses:
            for pd in t.partitions:
                if pd.partition_index == self.tp.partition:
                    return pd
        raise _Retry

    def _take(self, response: FetchResponse) -> list[RecordBatch] | None:
        """File one response: the batches with records to decode (moving the position past
        every complete batch), or None when there was nothing new."""
        pd = self._partition(response)
        if pd.error_code:
            self._error(pd, response)
            raise _Retry
        data = pd.records
        start = self.position
        if data:
            kept = self._filter(data, pd)
            if self.position > start:
                return kept
        # No complete batch: at the log end (or before a gap the broker will cross).
        log_end = pd.last_stable_offset if self.read_committed else pd.high_watermark
        if log_end is not None and 0 <= log_end <= self.position < self.end:
            self._stalls += 1
            if self._stalls >= _STALLS_AT_END:
                tp = self.tp
                data_loss(
                    f"{tp.topic}-{tp.partition} ends at offset {log_end} but the query "
                    f"expected records up to {self.end}",
                    self.fail,
                )
        return None

    def _filter(
        self, data: bytes | memoryview, pd: FetchResponse.PartitionData
    ) -> list[RecordBatch]:
        """The batches of ``data`` past the position that hold readable records;
        control batches and (read_committed) aborted ones are skipped, not kept."""
        committed = ReadCommittedFilter(pd.aborted_transactions) if self.read_committed else None
        kept: list[RecordBatch] = []
        position = self.position
        for batch in iter_batches(data, verify_crc=self.check_crcs):
            if batch.next_offset <= position:
                continue  # wholly before the position
            if batch.base_offset >= self.end:
                break
            if committed.skip(batch) if committed is not None else batch.is_control:
                position = batch.next_offset
                continue
            kept.append(batch)
            position = batch.next_offset
        self.position = position
        return kept

    def _error(self, pd: FetchResponse.PartitionData, response: FetchResponse) -> None:
        tp = self.tp
        code = pd.error_code
        if code == _OFFSET_OUT_OF_RANGE:
            log_start = pd.log_start_offset
            if 0 <= log_start and self.position < log_start:
                data_loss(
                    f"offsets {self.position} to {min(log_start, self.end) - 1} of "
                    f"{tp.topic}-{tp.partition} were deleted (the log now starts at "
                    f"{log_start})",
                    self.fail,
                )
                self.position = min(log_start, self.end)
                return
            # Kafka 4 brokers answer log_start_offset -1 here: ask (see _out_of_range).
            raise _OutOfRange(f"offset {self.position} of {tp} is out of range")
        if code == _CORRUPT_MESSAGE:
            raise ec.error_from_code(code, f"fetching {tp} at offset {self.position}")
        if code in _LEADER_ERRORS:
            leader = pd.current_leader
            if leader.leader_id >= 0 and leader.leader_epoch >= 0:
                endpoints = {
                    n.node_id: BrokerMetadata(n.node_id, n.host, n.port, n.rack)
                    for n in response.node_endpoints
                }
                if self.cluster.apply_leader_hint(
                    tp, leader.leader_id, leader.leader_epoch, endpoints.get(leader.leader_id)
                ):
                    return
            self._schedule_refresh()
            return
        if code in _TOPIC_ERRORS:
            self._schedule_refresh(check_gone=True)
            return
        error = ec.error_from_code(code, f"fetching {tp} at offset {self.position}")
        if not error.retriable:
            raise error
        self._schedule_refresh()

    def _schedule_refresh(self, check_gone: bool = False) -> None:
        # Called from synchronous code: the next _send sees a stale snapshot; make it
        # refresh by dropping the partition's leader knowledge.
        self._needs_refresh = True
        self._check_gone_next = check_gone

    # -- decoding -----------------------------------------------------------------------------

    def arrow_batches(self, kept: list[RecordBatch], low: int) -> Iterator[pa.RecordBatch]:
        """The records of ``kept`` from offset ``low`` (the fetch position) and before
        ``end`` as Arrow batches of at most ``max_records`` records each, made from runs of
        consecutive Kafka batches of at most ``max_records`` records and ``max_record_bytes``
        bytes of records sections (decompressed; the compressed size without the numpy
        decoder). A Kafka batch larger than that is decoded alone (a batch decompresses
        whole) and handed out in slices of ``max_records``. The batches are decompressed
        and decoded one run at a time, as the caller takes them."""
        if columns.available():
            limit = DEFAULT_MAX_DECOMPRESSED_BYTES
            segments = (columns.Segment.of(b, limit) for b in kept)
            runs: Iterator[list[Any]] = _runs(
                segments, lambda s: s.count, lambda s: len(s.payload), self
            )
        else:
            runs = _runs(kept, lambda b: b.record_count, lambda b: b.size_in_bytes, self)
        step = self.max_records
        for run in runs:
            batch = self._to_arrow(run, low)
            del run
            if batch is None:
                continue
            if batch.num_rows <= step:
                yield batch
                continue
            for at in range(0, batch.num_rows, step):
                yield batch.slice(at, step)

    def _to_arrow(self, run: list[Any], low: int) -> pa.RecordBatch | None:
        """The records of ``run`` (Kafka batches, or their segments with the numpy decoder)
        from offset ``low`` and before ``end`` as one Arrow batch (None if there are none)."""
        max_bytes = DEFAULT_MAX_DECOMPRESSED_BYTES
        if columns.available():
            segments = [
                b if isinstance(b, columns.Segment) else columns.Segment.of(b, max_bytes)
                for b in run
            ]
            cols = columns.decode_segments(segments, self.include_headers)
            del segments
            offsets = pa.array(cols.offsets, pa.int64())
            timestamps = pa.array(cols.timestamps, pa.int64())
            ts_types = pa.array(cols.timestamp_types, pa.int32())
            keys, values = cols.keys, cols.values
            headers = cols.headers
        else:
            o: list[int] = []
            t: list[int] = []
            k: list[bytes | None] = []
            v: list[bytes | None] = []
            h: list[Any] = []
            tt: list[int] = []
            for b in run:
                bo, bt, bk, bv, bh = decode_columns(b, max_decompressed_bytes=max_bytes)
                o += bo
                t += bt
                k += bk
                v += bv
                h += bh
                tt += [int(b.timestamp_type)] * len(bo)
            offsets = pa.array(o, pa.int64())
            timestamps = pa.array(t, pa.int64())
            ts_types = pa.array(tt, pa.int32())
            keys = pa.array(k, pa.binary())
            values = pa.array(v, pa.binary())
            headers = [hs or None for hs in h] if self.include_headers else None
        n = len(offsets)
        lo, hi = self._bounds(offsets, low)
        if hi <= lo:
            return None
        if lo or hi < n:
            offsets, timestamps, ts_types = (
                offsets.slice(lo, hi - lo),
                timestamps.slice(lo, hi - lo),
                ts_types.slice(lo, hi - lo),
            )
            keys, values = keys.slice(lo, hi - lo), values.slice(lo, hi - lo)
            if headers is not None:
                headers = headers[lo:hi]
        count = hi - lo
        arrays = [
            keys,
            values,
            pa.repeat(pa.scalar(self.tp.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.tp.partition, pa.int32()), count),
            offsets,
            pc.multiply(timestamps, 1000).cast(_TIMESTAMP),
            ts_types,
        ]
        if self.include_headers:
            arrays.append(_headers_array(headers or [], count, self.schema.field("headers").type))
        self.read += count
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _bounds(self, offsets: pa.Array, low: int) -> tuple[int, int]:
        """The row range of ``offsets`` (ascending) inside ``[low, end)``."""
        n = len(offsets)
        if not n:
            return 0, 0
        first = offsets[0].as_py()
        last = offsets[n - 1].as_py()
        lo = 0
        if first < low:
            lo = int(pc.sum(pc.less(offsets, low)).as_py() or 0)
        hi = n
        if last >= self.end:
            hi = n - int(pc.sum(pc.greater_equal(offsets, self.end)).as_py() or 0)
        return lo, hi


def _runs(
    items: Iterable[T],
    count: Callable[[T], int],
    size: Callable[[T], int],
    limits: RangeFetcher,
) -> Iterator[list[T]]:
    """``items`` in runs of consecutive items of at most ``limits.max_records`` records
    (``count``) and ``limits.max_record_bytes`` bytes (``size``) together; an item over
    either limit is a run of its own. Items are taken as the runs are (lazily)."""
    run: list[T] = []
    records = nbytes = 0
    for item in items:
        n, b = count(item), size(item)
        if run and (records + n > limits.max_records or nbytes + b > limits.max_record_bytes):
            yield run
            run, records, nbytes = [], 0, 0
        run.append(item)
        records += n
        nbytes += b
    if run:
        yield run


def _headers_array(headers: list[Any], count: int, type_: pa.DataType) -> pa.Array:
    """The ``headers`` column: null for a record without headers (as the built-in source),
    else its ``(key, value)`` pairs. Without any headers in the batch: one all-null array,
    no Python object per row."""
    if headers.count(None) == len(headers):
        return pa.nulls(count, type_)
    return pa.array(
        [None if hs is None else [{"key": k, "value": v} for k, v in hs] for hs in headers],
        type_,
    )
