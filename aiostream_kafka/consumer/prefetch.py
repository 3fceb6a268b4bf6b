"""Prefetch queues and the byte budget they share, with the gauges that watch them.

Bounds, as the architecture asks (every unit stated):

* per partition, at most ``max_prefetch_batches`` *chunks* queued (a chunk is what one Fetch
  returned for one partition); the chunk being handed out is not in the queue;
* across all partitions, at most ``max_prefetch_bytes`` of record batches held, counted
  **decompressed**: a compressed batch is inflated when it arrives, so the count is the
  memory the records will really take.

The byte bound holds at every moment, not on average. A fetch round *reserves* budget
before its request leaves (the request's ``max_bytes`` is the reservation divided by the
observed decompression ratio), and when the response arrives a batch is admitted only if
it fits in that reservation plus whatever is free. What does not fit is dropped and its
partition fetched again later from the same offset (counted in ``dropped_bytes``). The
only exception is a single batch larger than the whole budget, admitted alone when nothing
else is held (a broker returns such a batch whole, KIP-74, and refusing it would stall the
partition forever); ``max_prefetch_bytes >= max_partition_fetch_bytes`` makes that rare.

Pausing never touches a queue. Only seek, reset and revocation discard queued data
(:meth:`PrefetchBuffer.discard`), so nothing fetched is fetched twice because of a pause
(KAFKA-7548, seed 001).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields

from aiostream_kafka.errors import ProtocolError, reraisable
from aiostream_kafka.protocol.records import HEADER_SIZE, LegacyBatch, RecordBatch
from aiostream_kafka.structs import Record, TopicPartition
from aiostream_kafka.telemetry.stats import Window

from .errors import CorruptPartitionDataError
from .partition import EMPTY, Chunk, PartitionState, PendingError

__all__ = ["FetchMetrics", "PrefetchBuffer", "decode_chunk", "inflate"]

# The v2 batch header, field by field (see protocol/records.py): used to re-frame a
# decompressed batch as an uncompressed one.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOG_OVERHEAD = 12
_CODEC_MASK = 0x07


def inflate(batch: RecordBatch) -> RecordBatch:
    """Return ``batch`` with its records decompressed (itself when not compressed).

    The result is framed as an uncompressed batch with the same header fields, so decoding
    it later costs no second decompression, and its ``size_in_bytes`` is the memory it
    holds. Its CRC field is the original's (already verified) and no longer matches.

    A compressed legacy message (:class:`~aiostream_kafka.protocol.records.LegacyBatch`,
    magic 0/1) becomes the batch of its decompressed inner messages.
    """
    if isinstance(batch, LegacyBatch):
        return batch.inflate()
    if not batch.attributes & _CODEC_MASK:
        return batch
    payload = batch.records_payload()
    header = _HEADER.pack(
        batch.base_offset,
        HEADER_SIZE - _LOG_OVERHEAD + len(payload),
        batch.partition_leader_epoch,
        batch.magic,
        batch.crc,
        batch.attributes & ~_CODEC_MASK,
        batch.last_offset_delta,
        batch.base_timestamp,
        batch.max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.record_count,
    )
    return RecordBatch(header + payload, 0)


def decode_chunk(ps: PartitionState, chunk: Chunk) -> list[Record]:
    """Decode a chunk into records, dropping those before the offset it was fetched at.

    Raises:
        CorruptPartitionDataError: a batch whose records do not decode.
    """
    topic, partition = ps.tp
    out: list[Record] = []
    try:
        for batch in chunk.batches:
            records = batch.records(topic, partition)
            if out:
                out += records
            else:
                out = records
    except ProtocolError as exc:
        raise CorruptPartitionDataError(ps.tp, chunk.start_offset, str(exc)) from exc
    start = chunk.start_offset
    if out and out[0].offset < start:
        # A fetch returns whole batches: the first may begin before the offset asked for.
        skip = 1
        while skip < len(out) and out[skip].offset < start:
            skip += 1
        out = out[skip:]
    return out


@dataclass(slots=True)
class FetchMetrics:
    """Counters and gauges of the fetch path (for tests, benchmarks and diagnostics).

    Bytes are record-batch bytes: ``*_wire_*`` as the broker sent them, the others
    decompressed. ``refetched_bytes`` counts complete batches received again at offsets
    already received in the same generation (no seek in between): it stays 0 unless data
    had to be dropped. ``dropped_bytes`` counts batches received but not admitted (budget).
    """

    fetch_requests: int = 0
    fetch_responses: int = 0
    fetch_errors: int = 0
    throttled_responses: int = 0
    throttle_time_ms: int = 0
    full_fetches: int = 0
    incremental_fetches: int = 0
    session_resets: int = 0
    partitions_sent: int = 0
    partitions_forgotten: int = 0
    fetched_wire_bytes: int = 0
    fetched_batch_wire_bytes: int = 0
    fetched_bytes: int = 0
    fetched_records: int = 0
    refetched_bytes: int = 0
    dropped_bytes: int = 0
    discarded_bytes: int = 0
    leader_hints: int = 0
    position_resets: int = 0
    position_validations: int = 0
    log_truncations: int = 0
    delivered_wire_bytes: int = 0
    delivered_bytes: int = 0
    prefetched_bytes: int = 0
    prefetched_bytes_peak: int = 0
    max_prefetch_bytes: int = 0
    #: ``time.time()`` of the last Fetch response (0: none yet), for liveness probes.
    last_fetch_at: float = 0.0
    #: ``time.time()`` of the last Fetch response that returned records for a partition or
    #: found it read up to its high watermark (0: none yet): progress, not just answers.
    last_progress_at: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The counters as a plain dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class PrefetchBuffer:
    """The prefetch queues' shared byte budget, the rotation of partitions with data for
    the merged iterators, and the signals between fetchers and iterators.

    ``on_room`` is called whenever a queue slot or budget is freed (it wakes the poll
    scheduler); it must not block.
    """

    def __init__(self, max_bytes: int, max_batches: int, on_room: Callable[[], None]) -> None:
        self.max_bytes = max_bytes
        self.max_batches = max_batches
        self.used = 0
        self.reserved = 0
        # Decompressed bytes per wire byte of recent responses (>= 1); fetch sizes are the
        # reservation divided by it so that inflated data still fits.
        self.expansion = 1.0
        self.metrics = FetchMetrics(max_prefetch_bytes=max_bytes)
        # Fetch round trips (ms) per broker node id, for the pushed client metrics (KIP-714).
        self.fetch_latency: dict[int, Window] = {}
        self.merged = True  # False once partitioned_stream() is used
        # Told of each chunk an iterator takes (OpenTelemetry's receive: see
        # aiostream_kafka.otel.consumer); None, the common case, costs one check a chunk.
        self.observer: Callable[[TopicPartition, list[Record]], None] | None = None
        self._on_room = on_room
        self._ready: deque[PartitionState] = deque()
        self.data_event = asyncio.Event()

    # -- the budget --------------------------------------------------------------------------

    def free(self) -> int:
        """Bytes neither held nor reserved."""
        return self.max_bytes - self.used - self.reserved

    def reserve(self, nbytes: int) -> None:
        """Reserve ``nbytes`` for a fetch round about to be sent."""
        self.reserved += nbytes

    def unreserve(self, nbytes: int) -> None:
        """Give back a round's reservation (its response was admitted or failed)."""
        self.reserved -= nbytes
        self._on_room()

    def observe_expansion(self, wire: int, inflated: int) -> None:
        """Track the decompression ratio of admitted data (fast up, slow down)."""
        if wire <= 0:
            return
        ratio = max(1.0, inflated / wire)
        if ratio >= self.expansion:
            self.expansion = ratio
        else:
            self.expansion = max(1.0, 0.9 * self.expansion + 0.1 * ratio)

    def _hold(self, ps: PartitionState, nbytes: int) -> None:
        ps.queued_bytes += nbytes
        self.used += nbytes
        metrics = self.metrics
        metrics.prefetched_bytes = self.used
        if self.used > metrics.prefetched_bytes_peak:
            metrics.prefetched_bytes_peak = self.used

    def _release(self, ps: PartitionState, nbytes: int) -> None:
        ps.queued_bytes -= nbytes
        self.used -= nbytes
        self.metrics.prefetched_bytes = self.used

    # -- fetcher side ------------------------------------------------------------------------

    def add_chunk(self, ps: PartitionState, chunk: Chunk) -> None:
        """Queue a fetched chunk (its bytes were admitted against the budget)."""
        ps.queue.append(chunk)
        self._hold(ps, chunk.size)
        self._signal(ps)

    def add_error(self, ps: PartitionState, pending: PendingError) -> None:
        """Queue an error behind the partition's data; the partition is blocked until it is
        raised (and, unless ``pending.retry``, until a seek)."""
        ps.queue.append(pending)
        ps.blocked = True
        if pending.fatal:
            ps.failed = True
        self._signal(ps)

    def _signal(self, ps: PartitionState) -> None:
        ps.wake()
        if self.merged and not ps.paused and not ps.in_ready:
            ps.in_ready = True
            self._ready.append(ps)
        self.data_event.set()

    def resumed(self, ps: PartitionState) -> None:
        """A paused partition was resumed: its buffered data is deliverable again."""
        if ps.has_data():
            self._signal(ps)
        self._on_room()

    # -- iterator side -----------------------------------------------------------------------

    def next_ready(self) -> PartitionState | None:
        """The next partition (round-robin) whose data the merged iterators may hand out."""
        ready = self._ready
        while ready:
            ps = ready[0]
            if ps.assigned and not ps.paused and ps.has_data():
                return ps
            ready.popleft()
            ps.in_ready = False
        return None

    def rotate(self, ps: PartitionState) -> None:
        """Move ``ps`` behind the others after one of its chunks was handed out."""
        ready = self._ready
        if ready and ready[0] is ps:
            ready.popleft()
            if ps.assigned and ps.queue:
                ready.append(ps)
            else:
                ps.in_ready = False

    def load_head(self, ps: PartitionState) -> bool:
        """Make ``ps.head`` hold undelivered records, taking the next queued chunk if the
        current head is used up. Returns False when the partition has nothing queued.

        Raises:
            KafkaError: the next queued item is an error: raised once and removed if the
                partition may retry (it is then fetched again), else raised every time.
        """
        while ps.head_index >= len(ps.head):
            if ps.head_chunk is not None:
                self.finish_head(ps)
            if not ps.queue:
                return False
            item = ps.queue[0]
            if isinstance(item, PendingError):
                if item.retry:
                    ps.queue.popleft()
                    if not ps.queue:
                        ps.blocked = False
                    self._on_room()
                # Otherwise it stays: raised again on every attempt until a seek (or, for
                # a failed partition, revocation) clears it; nobody waits silently on it.
                raise reraisable(item.error)
            ps.queue.popleft()
            try:
                records = decode_chunk(ps, item)
            except CorruptPartitionDataError:
                # The rest was fetched after the bad batch: drop it and fetch again from
                # there next time (retry), as for a CRC error.
                self.discard(ps)
                self._release(ps, item.size)
                ps.generation += 1  # a Fetch in flight asked for an offset past it
                ps.fetch_position = item.start_offset
                ps.fetched_through = -1
                raise
            ps.head = records
            ps.head_index = 0
            ps.head_chunk = item
            self._on_room()
            if self.observer is not None:
                self.observer(ps.tp, records)
        return True

    def finish_head(self, ps: PartitionState) -> None:
        """The head chunk is fully handed out: release its bytes."""
        chunk = ps.head_chunk
        if chunk is None:
            return
        ps.head_chunk = None
        ps.head = EMPTY
        ps.head_index = 0
        self._release(ps, chunk.size)
        metrics = self.metrics
        metrics.delivered_bytes += chunk.size
        metrics.delivered_wire_bytes += chunk.wire
        self._on_room()

    def discard(self, ps: PartitionState) -> None:
        """Drop everything buffered for ``ps`` (seek, reset, revocation)."""
        dropped = 0
        if ps.head_chunk is not None:
            dropped += ps.head_chunk.size
            ps.head_chunk = None
        ps.head = EMPTY
        ps.head_index = 0
        for item in ps.queue:
            if isinstance(item, Chunk):
                dropped += item.size
        ps.queue.clear()
        if dropped:
            self._release(ps, dropped)
            self.metrics.discarded_bytes += dropped
        self._on_room()

    async def wait_data(self) -> None:
        """Wait until some partition gets data, or :meth:`wake_all` is called."""
        self.data_event.clear()
        await self.data_event.wait()

    def wake_all(self) -> None:
        """Wake every waiting iterator (close, failure, assignment change)."""
        self.data_event.set()
