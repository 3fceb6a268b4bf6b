"""What a ``read_committed`` reader skips (KIP-98), sans-IO.

A Fetch response lists, per partition, the aborted transactions that overlap the data it
returns: producer id and first offset. Walking the batches in offset order, a producer's
transactional batches are aborted from its transaction's first offset until the ABORT
control batch that ends it; control batches themselves never hold user records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from aiostream_kafka.protocol.records import ControlRecordType, RecordBatch

__all__ = ["AbortedTransaction", "ReadCommittedFilter"]


class AbortedTransaction(Protocol):
    """An entry of a Fetch response's ``aborted_transactions``."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


class ReadCommittedFilter:
    """Tells, batch by batch in offset order, which batches of one partition's Fetch data
    a ``read_committed`` reader skips."""

    __slots__ = ("_aborted", "_aborting", "_next")

    def __init__(self, aborted_transactions: Iterable[AbortedTransaction] | None) -> None:
        self._aborted = sorted(aborted_transactions or (), key=lambda a: a.first_offset)
        self._next = 0
        self._aborting: set[int] = set()

    def skip(self, batch: RecordBatch) -> bool:
        """True for a control batch or a batch of an aborted transaction. Call it for every
        batch of the partition's data, in order (control batches end transactions)."""
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= batch.last_offset:
            self._aborting.add(aborted[self._next].producer_id)
            self._next += 1
        if batch.is_control:
            if batch.producer_id in self._aborting and any(
                r.type == ControlRecordType.ABORT for r in batch.control_records()
            ):
                self._aborting.discard(batch.producer_id)
            return True
        return batch.is_transactional and batch.producer_id in self._aborting
