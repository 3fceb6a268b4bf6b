"""Idempotent production (KIP-98) and epoch bumps (KIP-360).

An idempotent producer gets a producer id and epoch from ``InitProducerId`` and numbers the
records of each partition from 0: a batch carries the sequence of its first record. The
partition leader accepts a batch only if its sequence follows the last one it wrote for
that producer id and epoch, and answers a batch equal to one of the last five it wrote
with that batch's original offset instead of writing it again. Hence:

* a retry carries the same producer id, epoch and sequence as the first attempt, so a
  batch the broker already wrote is not written twice;
* up to five requests may be in flight per connection and order is still kept, because a
  batch sent after one that failed is refused (``OUT_OF_ORDER_SEQUENCE_NUMBER``) and
  retried after it;
* a retried batch is sent only once no batch with a lower sequence of its partition is in
  flight (the Java client's rule), so retries go out in sequence order;
* a leader with no state for the producer id (its first batch to the partition) accepts
  any sequence, so "refused and retried after" does not hold there: until a partition has
  acknowledged a batch of the current epoch, only one of its batches is in flight.

When the broker's and the producer's sequences can no longer be reconciled -- the broker
reports a gap that no batch of ours still in flight or waiting for a retry can fill, or
an unknown producer id, or a sequenced batch failed for good, leaving a hole -- the
producer bumps its epoch (KIP-360): it stops sending, waits until nothing is in flight,
moves to epoch + 1 and restarts every partition's sequence at 0. Brokers accept a higher
epoch from a known producer id when its first batch has sequence 0, so for an idempotent
(non-transactional) producer the bump needs no request, as in the Java client; only an
exhausted epoch (32767) takes a new producer id from ``InitProducerId``. Batches not yet
acknowledged are re-stamped with the new epoch and sequences, in their original order;
nothing is asked of the user.

What a bump cannot undo: a batch whose earlier attempt may have been written (its answer
was lost) and that is resent under the new epoch could be written twice, since the broker
deduplicates only within one epoch. The producer therefore bumps only when nothing is in
flight, and a connection cut alone never causes a bump (those batches are retried under
their original epoch and sequence).
"""

from __future__ import annotations

import bisect
import logging

from aiostream_kafka.producer.accumulator import ProducerBatch
from aiostream_kafka.protocol.records import NO_SEQUENCE
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["IdempotenceState", "PartitionSequences"]

_MAX_SEQUENCE = 0x7FFFFFFF


class PartitionSequences:
    """Sequence bookkeeping of one partition for the current producer id and epoch."""

    __slots__ = ("in_flight", "last_acked", "next_sequence")

    def __init__(self) -> None:
        self.next_sequence = 0
        self.last_acked = -1
        # Base sequences of the batches sent and not yet answered, ascending.
        self.in_flight: list[int] = []


class IdempotenceState:
    """Producer id, epoch and per-partition sequences of an idempotent producer."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: dict[TopicPartition, PartitionSequences] = {}
        # Why an epoch bump is needed, or None.
        self.bump_reason: str | None = None

    @property
    def has_producer_id(self) -> bool:
        """True once InitProducerId has answered."""
        return self.producer_id >= 0

    def _state(self, tp: TopicPartition) -> PartitionSequences:
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionSequences()
        return state

    def can_send(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` may be sent now.

        A retried batch only when no batch before it in its partition is still in flight.
        A new batch at once, except while its partition has no acknowledged batch of the
        current epoch: a leader that has no state for this producer id (new, or not yet
        loaded) takes any sequence as the first, so a second batch sent beside a first
        that fails (``NOT_LEADER_OR_FOLLOWER`` from a partition still loading) would be
        written before the first one's retry. Until the first acknowledgement, one batch
        of the partition at a time."""
        state = self.partitions.get(batch.tp)
        if batch.base_sequence == NO_SEQUENCE or batch.producer_epoch != self.producer_epoch:
            return state is None or not state.in_flight or state.last_acked >= 0
        return state is None or not state.in_flight or state.in_flight[0] >= batch.base_sequence

    def sequence_for(self, batch: ProducerBatch) -> int:
        """The base sequence to stamp ``batch`` with (assigning the next ones to a new
        batch, or one sequenced under an older epoch)."""
        if batch.base_sequence != NO_SEQUENCE and batch.producer_epoch == self.producer_epoch:
            return batch.base_sequence
        state = self._state(batch.tp)
        sequence = state.next_sequence
        # Sequences wrap to 0 after 2**31 - 1, as the broker expects.
        state.next_sequence = (sequence + batch.record_count) & _MAX_SEQUENCE
        return sequence

    def sent(self, batch: ProducerBatch) -> None:
        """Record that ``batch`` (already stamped) is in flight."""
        bisect.insort(self._state(batch.tp).in_flight, batch.base_sequence)

    def answered(self, batch: ProducerBatch, acknowledged: bool) -> None:
        """Record the end of one attempt of ``batch``."""
        if batch.producer_epoch != self.producer_epoch:
            return  # from before a bump: the new epoch's bookkeeping does not know it
        state = self.partitions.get(batch.tp)
        if state is None:
            return
        try:
            state.in_flight.remove(batch.base_sequence)
        except ValueError:
            pass
        if acknowledged:
            last = (batch.base_sequence + batch.record_count - 1) & _MAX_SEQUENCE
            if state.last_acked < 0 or _after(last, state.last_acked):
                state.last_acked = last

    def follows_last_acked(self, batch: ProducerBatch) -> bool:
        """Whether ``batch`` is the very next one after the last acknowledged batch of its
        partition: then an out-of-order answer means the broker lost our state, not that
        an earlier batch is being retried."""
        state = self.partitions.get(batch.tp)
        expected = 0 if state is None else (state.last_acked + 1) & _MAX_SEQUENCE
        return batch.producer_epoch == self.producer_epoch and batch.base_sequence == expected

    def request_bump(self, reason: str) -> None:
        """Ask for an epoch bump (KIP-360) once nothing is in flight."""
        if self.bump_reason is None:
            log.warning("idempotent producer: bumping the epoch: %s", reason)
            self.bump_reason = reason

    def reset(self, producer_id: int, producer_epoch: int) -> None:
        """Take a new producer id/epoch: every partition's sequence restarts at 0."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.partitions.clear()
        self.bump_reason = None


def _after(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes after ``b``, allowing for the wrap at 2**31."""
    return 0 < ((a - b) & _MAX_SEQUENCE) < (1 << 30)
