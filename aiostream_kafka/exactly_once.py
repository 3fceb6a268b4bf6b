"""``process_exactly_once``: a consume-transform-produce loop in transactions.

Each batch the consumer hands out (one partition's records of one fetch) is transformed
and its output written in the open transaction; the transaction also commits the
offsets past every batch it holds (``send_offsets_to_transaction``), so the output and
the group's progress past the input are committed together or not at all. A transaction
holds one batch by default; with ``transaction_records`` / ``transaction_ms`` it spans
batches (and partitions) until it holds that many input records or has been open that
long, whichever comes first (an idle input commits what is open when the time is up).

When a transaction is aborted after an abortable error -- or because a partition it read
from was revoked (a rebalance) before the commit -- every partition it read from that is
still assigned is sought back to the transaction's first offset for it, so those records
are read and transformed again; a revoked partition's new owner goes on from the group's
committed offset. Records written by an aborted attempt are never visible to
``read_committed`` readers.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Union

from aiostream_kafka.concurrency import mark_retrieved, shielded
from aiostream_kafka.consumer import Consumer, ConsumerStateError
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.producer import Producer, ProducerRecord, TransactionState
from aiostream_kafka.protocol.error_codes import TransactionAbortableError
from aiostream_kafka.structs import Record, TopicPartition

log = logging.getLogger(__name__)

__all__ = ["Transform", "process_exactly_once"]

#: What ``transform`` may return for a batch: records to write, as an iterable, an async
#: iterable, or an awaitable of an iterable.
TransformResult = Union[  # noqa: UP007 -- a runtime alias
    Iterable[ProducerRecord],
    AsyncIterable[ProducerRecord],
    Awaitable[Iterable[ProducerRecord]],
]
Transform = Callable[[list[Record]], TransformResult]


async def process_exactly_once(
    consumer: Consumer,
    producer: Producer,
    transform: Transform,
    *,
    max_transactions: int | None = None,
    transaction_records: int = 1,
    transaction_ms: float | None = None,
) -> int:
    """Read ``consumer``'s batches and write ``transform(batch)`` for each with
    ``producer``, in transactions that also commit the batches' offsets for the
    consumer's group. Returns the number of transactions committed, once the consumer's
    iterator ends (the consumer closed or drained; what is open is committed first) or
    after ``max_transactions``.

    A transaction is committed once it holds ``transaction_records`` input records
    (default 1: one transaction per batch) or has been open ``transaction_ms``
    milliseconds (default: no time limit; keep it well under the producer's
    ``transaction_timeout_ms``), whichever comes first.

    ``consumer`` must be subscribed through a ``group_id`` with ``enable_auto_commit``
    off (the transactions commit the offsets); read its input ``read_committed`` when
    that input is itself written in transactions. ``producer`` must be transactional.
    ``transform`` gets the batch (records of one partition, in offset order) and returns
    the :class:`ProducerRecord` s to write (possibly none), as an iterable, an async
    iterable, or an awaitable of an iterable; it may run again for the same records after
    an abort, so it should not have other side effects.

    A transaction that fails with an abortable error (``TransactionAbortableError``: a
    record was refused, the group moved on in a rebalance...), or that read from a
    partition revoked before its commit, is aborted; the partitions it read from that are
    still assigned are sought back to its first offsets, and the loop goes on.

    Raises:
        ConfigError: the consumer has no group or auto-commits, the producer is not
            transactional, or ``transaction_records`` / ``transaction_ms`` is not
            positive.
        ProducerFencedError: another instance took the producer's transactional id (any
            fatal transaction error is raised; the producer is then unusable).
        KafkaTimeoutError: a commit did not complete within ``max_block_ms``; the
            transaction is left ``COMMITTING`` (``producer.commit_transaction()`` finishes
            it).
        Exception: what ``transform`` raises (the transaction is aborted first) and what
            the consumer's iterator raises.
    """
    if consumer.config.group_id is None or consumer.config.enable_auto_commit:
        raise ConfigError(
            "process_exactly_once needs a consumer with a group_id and enable_auto_commit=False"
            " (the transactions commit the offsets)"
        )
    if producer.transactional_id is None:
        raise ConfigError("process_exactly_once needs a producer with a transactional_id")
    if (
        isinstance(transaction_records, bool)
        or not isinstance(transaction_records, int)
        or (transaction_records < 1)
    ):
        raise ConfigError(f"transaction_records must be an int >= 1, got {transaction_records!r}")
    if transaction_ms is not None and not transaction_ms > 0:
        raise ConfigError(f"transaction_ms must be > 0 or None, got {transaction_ms!r}")
    open_txn = _OpenTransaction(consumer, producer)
    committed = 0
    batches = consumer.batches()
    loop = asyncio.get_running_loop()
    try:
        while max_transactions is None or committed < max_transactions:
            wait: float | None = None
            if open_txn.records and transaction_ms is not None:
                wait = max(0.0, open_txn.started + transaction_ms / 1000 - loop.time())
            try:
                async with asyncio.timeout(wait):
                    batch = await anext(batches)
            except TimeoutError:  # open long enough and the input is idle: commit it
                committed += await open_txn.end()
                continue
            except StopAsyncIteration:
                break
            if not batch:
                continue
            if not open_txn.records:
                producer.begin_transaction()
                open_txn.started = loop.time()
            try:
                await open_txn.add(batch, transform)
            except TransactionAbortableError as exc:
                await open_txn.abort(exc)
                continue
            except BaseException as exc:
                await open_txn.abort(exc, shielded=True)
                raise
            due = transaction_ms is not None and (
                loop.time() - open_txn.started >= transaction_ms / 1000
            )
            if open_txn.records >= transaction_records or due:
                committed += await open_txn.end()
        if open_txn.records and (max_transactions is None or committed < max_transactions):
            committed += await open_txn.end()
    except BaseException as exc:
        if open_txn.records:
            await open_txn.abort(exc, shielded=True)
        raise
    return committed


class _OpenTransaction:
    """The transaction being filled: the input records it holds and, per partition, the
    first offset read in it and the offset past the last."""

    def __init__(self, consumer: Consumer, producer: Producer) -> None:
        self.consumer = consumer
        self.producer = producer
        self.records = 0
        self.started = 0.0
        self.first: dict[TopicPartition, int] = {}
        self.next: dict[TopicPartition, int] = {}

    async def add(self, batch: list[Record], transform: Transform) -> None:
        """Transform ``batch`` and write its output in the transaction."""
        first = batch[0]
        tp = TopicPartition(first.topic, first.partition)
        self.first.setdefault(tp, first.offset)
        self.next[tp] = batch[-1].offset + 1
        self.records += len(batch)
        producer = self.producer
        result = transform(batch)
        if inspect.isawaitable(result):
            result = await result
        # A record that fails makes the commit raise; its future needs no reader.
        if isinstance(result, AsyncIterable):
            async for record in result:
                (await producer.enqueue_record(record)).add_done_callback(mark_retrieved)
        else:
            for record in result:
                (await producer.enqueue_record(record)).add_done_callback(mark_retrieved)

    async def end(self) -> int:
        """Commit the transaction with its offsets (1), or abort it (0) when one of its
        partitions was revoked meanwhile or the commit fails with an abortable error."""
        consumer, producer = self.consumer, self.producer
        revoked = sorted(set(self.next) - consumer.assignment(), key=str)
        if revoked:
            await self.abort(None, why=f"{', '.join(map(str, revoked))} revoked before the commit")
            return 0
        try:
            await producer.send_offsets_to_transaction(dict(self.next), consumer.group_metadata())
            await producer.commit_transaction()
        except TransactionAbortableError as exc:
            await self.abort(exc)
            return 0
        self._clear()
        return 1

    async def abort(
        self, cause: BaseException | None, *, why: str = "", shielded: bool = False
    ) -> None:
        """Abort the transaction and seek its still-assigned partitions back to their
        first offsets in it (not when the loop is ending: ``shielded``, for an error or a
        cancellation, aborts only, at most ``max_block_ms``)."""
        producer = self.producer
        reason = why or f"{type(cause).__name__}: {cause}"
        if shielded:
            try:
                await _shielded_abort(producer)
            finally:
                self._clear()
            return
        log.warning(
            "exactly-once: the transaction over %s was aborted (%s); reading them again",
            ", ".join(f"{tp} {o}..{self.next[tp] - 1}" for tp, o in self.first.items()),
            reason,
        )
        await producer.abort_transaction()
        assigned = self.consumer.assignment()
        for tp, offset in self.first.items():
            if tp not in assigned:
                log.info("exactly-once: %s was revoked meanwhile; its new owner goes on", tp)
                continue
            try:
                self.consumer.seek(tp, offset)
            except ConsumerStateError:
                log.info("exactly-once: %s was revoked meanwhile; its new owner goes on", tp)
        self._clear()

    def _clear(self) -> None:
        self.records = 0
        self.first = {}
        self.next = {}


async def _shielded_abort(producer: Producer) -> None:
    """Abort the open transaction for a loop that is ending (an error or a cancellation):
    shielded, bounded by ``max_block_ms``; a failure is logged, the loop's own error goes
    on."""
    if producer.transaction_state is not TransactionState.IN_TRANSACTION and (
        producer.transaction_state is not TransactionState.ABORTABLE_ERROR
    ):
        return
    try:
        await shielded(producer.abort_transaction(), timeout=None, what="aborting a transaction")
    except Exception as exc:
        log.warning("exactly-once: aborting the open transaction failed: %r", exc)
