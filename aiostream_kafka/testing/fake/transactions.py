"""The transaction coordinator of the fake cluster (KIP-98, both protocol versions of
KIP-890): transactional ids, their producer ids and epochs, the partitions and groups of
the open transaction, the offsets it commits, its timeout.

States (Kafka's ``TransactionState``, without the Prepare* steps: the markers are
written at once, so ``CONCURRENT_TRANSACTIONS`` is never needed)::

    Empty --AddPartitions/AddOffsets/transactional Produce v12+--> Ongoing
    Ongoing --EndTxn(commit)--> CompleteCommit     Ongoing --EndTxn(abort)--> CompleteAbort
    Ongoing --transaction timeout / InitProducerId of a new instance--> CompleteAbort

* ``InitProducerId`` with a transactional id gives a producer id and epoch; a second one
  bumps the epoch (fencing the older instance) and aborts the transaction it left open.
  With the current producer id and epoch (KIP-360) it bumps the epoch of that producer;
  any other pair is ``PRODUCER_FENCED``. Past epoch 32766 a new producer id is given.
* Ending a transaction writes a COMMIT or ABORT marker into every partition of it (through
  :meth:`~.log.PartitionLog.write_marker`) and, on commit, stores the offsets committed
  with ``TxnOffsetCommit`` in their groups.
* Transaction protocol v2 is chosen by the request versions, as Kafka does: Produce v12+
  adds its partition itself, TxnOffsetCommit v5+ its group, and EndTxn v5+ bumps the
  epoch at every end and returns it (the markers carry the new epoch); a retried v5
  EndTxn of the previous epoch gets the same answer again.
* A transaction open longer than its ``transaction_timeout_ms`` is aborted with a bumped
  epoch (so the producer's next write is refused with ``INVALID_PRODUCER_EPOCH``), by a
  timer of the cluster's clock (no task); start times and marker timestamps are read
  from that clock too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.clock import Clock, Timer
from aiostream_kafka.testing.fake.groups import GroupCoordinator
from aiostream_kafka.testing.fake.log import PartitionLog


class _Partition(Protocol):
    @property
    def log(self) -> PartitionLog: ...
    @property
    def leader_epoch(self) -> int: ...


class ClusterState(Protocol):
    """What the coordinator uses of the cluster's state (``state.ClusterState``)."""

    @property
    def groups(self) -> GroupCoordinator: ...
    @property
    def clock(self) -> Clock: ...
    def partition(self, topic: str, index: int) -> _Partition | None: ...
    def new_producer_id(self) -> int: ...


__all__ = ["PendingOffset", "Transaction", "TransactionCoordinator"]

EMPTY = "Empty"
ONGOING = "Ongoing"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"

#: Kafka's ``transaction.max.timeout.ms`` default.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: The last epoch a producer id is used with before a new id is given (Kafka's
#: ``Short.MAX_VALUE - 1``: one epoch is kept for fencing).
_LAST_EPOCH = 2**15 - 2


@dataclass(slots=True)
class PendingOffset:
    """An offset committed in a transaction, stored in its group at commit."""

    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(slots=True, eq=False)
class Transaction:
    """The coordinator's record of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str = EMPTY
    #: The epoch before the last bump made by EndTxn v5 or a timeout (-1: none), to
    #: recognise a retried EndTxn.
    previous_epoch: int = -1
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    #: group id -> (topic, partition) -> offset
    offsets: dict[str, dict[tuple[str, int], PendingOffset]] = field(default_factory=dict)
    started_at: float = 0.0
    #: Wall-clock start of the open transaction (DescribeTransactions), ms.
    started_at_ms: int = -1
    timer: Timer | None = None
    #: Transactions that ran out of time (aborted by the coordinator).
    timed_out: int = 0


class TransactionCoordinator:
    """Every transactional id of the cluster (coordinator routing is the handlers' job)."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self.transactions: dict[str, Transaction] = {}
        self._by_producer_id: dict[int, Transaction] = {}
        #: Called with each marker written: ``(transactional id, commit)`` (tests).
        self.on_end: Callable[[str, bool], None] | None = None

    def by_producer_id(self, producer_id: int) -> Transaction | None:
        """The transaction record that owns ``producer_id``, if any."""
        return self._by_producer_id.get(producer_id)

    # -- InitProducerId ----------------------------------------------------------------

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int, int]:
        """``(error code, producer id, epoch)`` for an InitProducerId with a transactional
        id (see the module docstring)."""
        if not 0 < timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
            return errors.INVALID_TRANSACTION_TIMEOUT, -1, -1
        txn = self.transactions.get(transactional_id)
        if txn is None:
            pid = self._state.new_producer_id()
            txn = Transaction(transactional_id, pid, 0, timeout_ms)
            self.transactions[transactional_id] = txn
            self._by_producer_id[pid] = txn
            return errors.NONE, pid, 0
        if producer_id >= 0 and not (
            producer_id == txn.producer_id
            and producer_epoch in (txn.producer_epoch, txn.previous_epoch)
        ):
            return errors.PRODUCER_FENCED, -1, -1
        txn.timeout_ms = timeout_ms
        if txn.state == ONGOING:
            # A new instance fences the old one: its open transaction is aborted with the
            # new epoch, which the new instance then uses.
            self._bump(txn)
            self._end(txn, commit=False)
        else:
            self._bump(txn)
        txn.previous_epoch = -1
        return errors.NONE, txn.producer_id, txn.producer_epoch

    def _bump(self, txn: Transaction) -> None:
        txn.previous_epoch = txn.producer_epoch
        if txn.producer_epoch >= _LAST_EPOCH:
            del self._by_producer_id[txn.producer_id]
            txn.producer_id = self._state.new_producer_id()
            txn.producer_epoch = 0
            txn.previous_epoch = -1
            self._by_producer_id[txn.producer_id] = txn
        else:
            txn.producer_epoch += 1

    # -- checks ------------------------------------------------------------------------

    def check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> int:
        """The error code of a request naming this transactional id, producer id and epoch
        (``PRODUCER_FENCED`` for an old epoch; callers map it for old versions)."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != txn.producer_epoch:
            return errors.PRODUCER_FENCED
        return errors.NONE

    def _begin(self, txn: Transaction) -> None:
        if txn.state != ONGOING:
            txn.state = ONGOING
            txn.partitions.clear()
            txn.groups.clear()
            txn.offsets.clear()
            clock = self._state.clock
            txn.started_at = clock.monotonic()
            txn.started_at_ms = clock.wall_ms()
            txn.timer = clock.call_later(
                txn.timeout_ms / 1000, self._expire, txn, txn.producer_epoch
            )

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------

    def add_partitions(
        self, transactional_id: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """Add partitions to the open transaction (after :meth:`check`): an error code per
        partition (one unknown partition fails the request: the others are
        ``OPERATION_NOT_ATTEMPTED``)."""
        unknown = {tp for tp in partitions if self._state.partition(*tp) is None}
        if unknown:
            return {
                tp: errors.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else errors.OPERATION_NOT_ATTEMPTED
                for tp in partitions
            }
        txn = self.transactions[transactional_id]
        self._begin(txn)
        txn.partitions.update(partitions)
        return dict.fromkeys(partitions, errors.NONE)

    def verify_partitions(
        self, transactional_id: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4+ ``verify_only``: whether each partition is in the open
        transaction (``INVALID_TXN_STATE`` where not)."""
        txn = self.transactions[transactional_id]
        inside = txn.partitions if txn.state == ONGOING else set()
        return {tp: errors.NONE if tp in inside else errors.INVALID_TXN_STATE for tp in partitions}

    def add_group(self, transactional_id: str, group_id: str) -> int:
        """Add a group's offsets to the open transaction (after :meth:`check`)."""
        txn = self.transactions[transactional_id]
        self._begin(txn)
        txn.groups.add(group_id)
        return errors.NONE

    def produce_check(
        self, producer_id: int, producer_epoch: int, topic: str, partition: int, *, v2: bool
    ) -> int:
        """The error code for a transactional batch of ``producer_id`` written to a
        partition: an old epoch is ``INVALID_PRODUCER_EPOCH``; a v2 write (Produce v12+)
        joins the transaction, a v1 write must be to a partition added before
        (``INVALID_TXN_STATE``, as Kafka's verification answers)."""
        txn = self._by_producer_id.get(producer_id)
        if txn is None:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < txn.producer_epoch:
            return errors.INVALID_PRODUCER_EPOCH
        if producer_epoch > txn.producer_epoch:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if v2:
            self._begin(txn)
            txn.partitions.add((topic, partition))
            return errors.NONE
        if txn.state != ONGOING or (topic, partition) not in txn.partitions:
            return errors.INVALID_TXN_STATE
        return errors.NONE

    # -- TxnOffsetCommit -------------------------------------------------------------

    def stage_offsets(
        self,
        transactional_id: str,
        group_id: str,
        offsets: dict[tuple[str, int], PendingOffset],
        *,
        v2: bool,
    ) -> int:
        """Keep offsets to store in ``group_id`` when the transaction commits (after
        :meth:`check`); v2 (TxnOffsetCommit v5+) adds the group itself, v1 needs
        AddOffsetsToTxn first (``INVALID_TXN_STATE``)."""
        txn = self.transactions[transactional_id]
        if v2:
            self._begin(txn)
            txn.groups.add(group_id)
        elif txn.state != ONGOING or group_id not in txn.groups:
            return errors.INVALID_TXN_STATE
        txn.offsets.setdefault(group_id, {}).update(offsets)
        return errors.NONE

    def pending_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` with offsets in an open transaction (OffsetFetch
        ``require_stable`` answers them ``UNSTABLE_OFFSET_COMMIT``)."""
        out: set[tuple[str, int]] = set()
        for txn in self.transactions.values():
            if txn.state == ONGOING:
                out.update(txn.offsets.get(group_id, {}))
        return out

    # -- EndTxn ----------------------------------------------------------------------

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        v2: bool,
    ) -> tuple[int, int, int]:
        """``(error code, producer id, epoch)`` of an EndTxn (the id and epoch matter to
        v2 only: the bumped ones)."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return errors.INVALID_PRODUCER_ID_MAPPING, -1, -1
        wanted = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        if v2 and producer_epoch == txn.previous_epoch and txn.state != ONGOING:
            # A retry of the EndTxn that bumped the epoch (or an abort after a timeout).
            if txn.state == wanted:
                return errors.NONE, txn.producer_id, txn.producer_epoch
            return errors.INVALID_TXN_STATE, -1, -1
        if producer_epoch != txn.producer_epoch:
            return errors.PRODUCER_FENCED, -1, -1
        if txn.state == ONGOING:
            if v2:
                self._bump(txn)
            self._end(txn, commit=commit)
            return errors.NONE, txn.producer_id, txn.producer_epoch
        if v2 and not commit:
            # v2 may end a transaction that registered nothing: the epoch still moves on.
            self._bump(txn)
            txn.state = COMPLETE_ABORT
            return errors.NONE, txn.producer_id, txn.producer_epoch
        if not v2 and txn.state == wanted:
            return errors.NONE, txn.producer_id, txn.producer_epoch  # a retry
        return errors.INVALID_TXN_STATE, -1, -1

    def _end(self, txn: Transaction, *, commit: bool) -> None:
        """Write the markers (with the current epoch) and store or drop the offsets."""
        if txn.timer is not None:
            txn.timer.cancel()
            txn.timer = None
        now_ms = self._state.clock.wall_ms()
        for topic, index in sorted(txn.partitions):
            partition = self._state.partition(topic, index)
            if partition is None:
                continue  # deleted meanwhile
            partition.log.write_marker(
                txn.producer_id,
                txn.producer_epoch,
                commit=commit,
                leader_epoch=partition.leader_epoch,
                timestamp_ms=now_ms,
            )
        if commit:
            for group_id, offsets in txn.offsets.items():
                for (topic, index), pending in offsets.items():
                    self._state.groups.commit(
                        group_id,
                        topic,
                        index,
                        pending.offset,
                        pending.leader_epoch,
                        pending.metadata,
                    )
        txn.partitions.clear()
        txn.groups.clear()
        txn.offsets.clear()
        txn.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        if self.on_end is not None:
            self.on_end(txn.transactional_id, commit)

    def _expire(self, txn: Transaction, epoch: int) -> None:
        txn.timer = None
        if txn.state == ONGOING and txn.producer_epoch == epoch:
            self.abort(txn.transactional_id)

    def abort(self, transactional_id: str) -> bool:
        """Abort the open transaction of ``transactional_id`` as the coordinator does when
        it times out: the epoch is bumped (the producer is fenced from writing more) and
        ABORT markers are written. Return whether one was open.

        Raises ``KeyError`` for an unknown transactional id.
        """
        txn = self.transactions[transactional_id]
        if txn.state != ONGOING:
            return False
        self._bump(txn)
        txn.timed_out += 1
        self._end(txn, commit=False)
        return True

    def close(self) -> None:
        """Cancel every timer (the cluster stops)."""
        for txn in self.transactions.values():
            if txn.timer is not None:
                txn.timer.cancel()
                txn.timer = None
