"""Per-partition consumer state: positions, the prefetch queue and the record being handed out.

One :class:`PartitionState` exists per assignment of a partition (a revoked partition's
state is dropped; assigning it again makes a fresh one), so anything holding a reference
to an old state (an in-flight fetch, an iterator) can tell it is stale from ``assigned``.

Two positions are kept:

* ``fetch_position`` -- the offset the next Fetch asks for; it moves when fetched data is
  queued (or skipped: control batches and aborted transactions);
* the *delivered* position (:meth:`PartitionState.delivered_position`) -- the offset after
  the last record handed to the application. It is derived, not stored: from the record
  being handed out, else from the first queued chunk, else it equals ``fetch_position``
  (nothing is buffered). The offset a group commits (issue 7) is this one.

``generation`` counts the events that invalidate fetched data (seek, reset, truncation):
a fetch response asked under an older generation is dropped.

Where a partition is fetched from: its leader, or, for ``metadata_max_age_ms`` after the
leader named one (KIP-392 follower fetching, a consumer with ``client_rack``), its
*preferred read replica* (:meth:`PartitionState.fetch_node`). Any error from that replica
sends the partition back to its leader.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Collection
from typing import TYPE_CHECKING, Final

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol.records import RecordBatch
from aiostream_kafka.structs import Record, TopicPartition

if TYPE_CHECKING:
    from aiostream_kafka.cluster.metadata import PartitionMetadata

__all__ = ["Chunk", "PartitionState", "PendingError"]

EMPTY: Final[list[Record]] = []


class Chunk:
    """The record batches one Fetch returned for one partition (a "prefetch batch").

    ``batches`` are CRC-checked and already decompressed (so ``size`` is what the records
    will occupy); decoding into :class:`Record` happens when an iterator takes the chunk.
    ``start_offset`` is the offset the fetch asked for (records before it, at the start of
    the first batch, are dropped on decoding); ``next_offset`` is where the next fetch
    starts.
    """

    __slots__ = ("batches", "next_offset", "size", "start_offset", "wire")

    def __init__(
        self, batches: list[RecordBatch], start_offset: int, next_offset: int, size: int, wire: int
    ) -> None:
        self.batches = batches
        self.start_offset = start_offset
        self.next_offset = next_offset
        self.size = size
        self.wire = wire


class PendingError:
    """An error queued behind the data fetched before it, raised when an iterator reaches it.

    With ``retry`` it is raised once, then the partition is fetched again from
    ``start_offset`` (a corrupt batch may have been damaged in transit). Otherwise it is
    raised each time an iterator reaches it, until ``seek`` clears it (offset out of range
    or no offset with ``auto_offset_reset="none"``, log truncation) -- or, when ``fatal``
    (the topic is gone), until the partition is revoked.
    """

    __slots__ = ("error", "fatal", "retry", "start_offset")

    def __init__(
        self,
        error: KafkaError,
        start_offset: int | None,
        *,
        retry: bool = False,
        fatal: bool = False,
    ) -> None:
        self.error = error
        self.start_offset = start_offset
        self.retry = retry
        self.fatal = fatal


class PartitionState:
    """Everything the consumer knows about one assigned partition (see the module doc)."""

    __slots__ = (
        "assigned",
        "blocked",
        "carry",
        "event",
        "failed",
        "fetch_epoch",
        "fetch_position",
        "fetched_through",
        "generation",
        "head",
        "head_chunk",
        "head_index",
        "high_watermark",
        "in_flight",
        "in_ready",
        "iterator_taken",
        "last_stable_offset",
        "leader_epoch",
        "log_start_offset",
        "missing_since",
        "paused",
        "queue",
        "queued_bytes",
        "read_replica",
        "read_replica_failures",
        "read_replica_until",
        "reset_strategy",
        "retry_at",
        "throttled",
        "topic_id",
        "tp",
        "user_paused",
        "validating",
    )

    def __init__(self, tp: TopicPartition, reset_strategy: str | None) -> None:
        self.tp = tp
        self.topic_id: uuid.UUID | None = None
        self.assigned = True
        # Not fetched nor handed out: ``pause()``d by the user, throttled by a
        # ``process()`` run (records of it wait behind busy keys) or held by a revocation
        # (the engine's ``held``); each lifts only its own reason.
        self.paused = False
        self.user_paused = False
        self.throttled = False
        # Left by a ``process()`` run that ended with records of it taken and not
        # finished: the offset it rewound to and the offsets beyond it its handlers had
        # finished, for the next run (cleared by any other move of the position).
        self.carry: tuple[int, frozenset[int]] | None = None
        self.generation = 0
        self.fetch_position: int | None = None
        # Leader epoch of the last fetched batch: what KIP-320 validates after a leader
        # change (OffsetForLeaderEpoch asks the new leader where that epoch ends).
        self.fetch_epoch: int | None = None
        # The leader epoch the position is known to be valid under (-1: not yet seen).
        self.leader_epoch = -1
        self.reset_strategy = reset_strategy
        self.validating = False
        self.blocked = False
        self.failed = False
        self.retry_at = 0.0
        self.missing_since: float | None = None
        self.in_flight: int | None = None  # broker id of the Fetch that carries it
        # KIP-392: the replica the leader told us to fetch from (None: the leader), until
        # monotonic time read_replica_until; failures in a row of such replicas.
        self.read_replica: int | None = None
        self.read_replica_until = 0.0
        self.read_replica_failures = 0
        self.queue: deque[Chunk | PendingError] = deque()
        self.queued_bytes = 0  # decompressed bytes of the queued chunks and the head chunk
        self.head: list[Record] = EMPTY
        self.head_index = 0
        self.head_chunk: Chunk | None = None
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.fetched_through = -1  # highest next_offset fetched in this generation
        self.in_ready = False
        self.event: asyncio.Event | None = None
        self.iterator_taken = False

    def __repr__(self) -> str:
        return (
            f"<PartitionState {self.tp.topic}[{self.tp.partition}] fetch={self.fetch_position} "
            f"queued={len(self.queue)} paused={self.paused} assigned={self.assigned}>"
        )

    @property
    def has_position(self) -> bool:
        """Whether the partition knows where to fetch from."""
        return self.fetch_position is not None and self.reset_strategy is None

    def has_data(self) -> bool:
        """Whether anything (records or an error) waits to be handed out."""
        return self.head_index < len(self.head) or bool(self.queue)

    def fetchable(self, max_batches: int) -> bool:
        """Whether the next Fetch round may carry this partition: it has a validated
        position, is not paused, blocked or already in a Fetch, and its queue has room."""
        return (
            self.assigned
            and not self.paused
            and not self.blocked
            and not self.failed
            and not self.validating
            and self.in_flight is None
            and self.reset_strategy is None
            and self.fetch_position is not None
            and self.topic_id is not None
            and len(self.queue) < max_batches
        )

    def fetch_node(self, meta: PartitionMetadata, brokers: Collection[int], now: float) -> int:
        """The broker to fetch from now: the preferred read replica while it is valid
        (not expired, in the metadata and not offline), else the leader. An expired or
        vanished replica is forgotten here."""
        replica = self.read_replica
        if replica is None:
            return meta.leader
        if now < self.read_replica_until and replica in brokers:
            if replica not in meta.offline_replicas:
                return replica
        self.read_replica = None
        return meta.leader

    def prefer_replica(self, node_id: int, until: float) -> bool:
        """The leader named ``node_id`` as preferred read replica: fetch from it until
        ``until`` (kept as it is when the same replica is named again, as Java's
        consumer does). Return whether it changed."""
        if self.read_replica == node_id:
            return False
        self.read_replica = node_id
        self.read_replica_until = until
        return True

    def delivered_position(self) -> int | None:
        """The offset after the last record handed out (None: no position yet)."""
        chunk = self.head_chunk
        if chunk is not None:
            index = self.head_index
            if index >= len(self.head):
                return chunk.next_offset
            if index > 0:
                return self.head[index - 1].offset + 1
            return chunk.start_offset
        if self.queue:
            first = self.queue[0]
            if isinstance(first, Chunk) or first.start_offset is not None:
                return first.start_offset
        if self.reset_strategy is not None:
            return None
        return self.fetch_position

    def wake(self) -> None:
        """Wake the partition's own iterator, if one waits."""
        if self.event is not None:
            self.event.set()
