"""``process_exactly_once``: a consume-transform-produce loop in transactions.

Each batch the consumer hands out (one partition's records of one fetch) is transformed
and written in one transaction together with the batch's offsets
(``send_offsets_to_transaction``), so the output of a batch and the group's progress past
it are committed together or not at all. When a transaction is aborted after an
abortable error, the consumer is sought back to the batch's first offset, so the batch is
read and transformed again; records written by the aborted attempt are never visible to
``read_committed`` readers.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Union

from aiostream_kafka.consumer import Consumer, ConsumerStateError
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.producer import Producer, ProducerRecord
from aiostream_kafka.protocol.error_codes import TransactionAbortableError
from aiostream_kafka.structs import Record, RecordMetadata, TopicPartition

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
) -> int:
    """Read ``consumer``'s batches and, for each, write ``transform(batch)`` with
    ``producer`` in one transaction that also commits the batch's offsets for the
    consumer's group. Returns the number of transactions committed, once the consumer's
    iterator ends (the consumer closed or drained) or after ``max_transactions``.

    ``consumer`` must be subscribed through a ``group_id`` with ``enable_auto_commit``
    off (the transactions commit the offsets); read its input ``read_committed`` when
    that input is itself written in transactions. ``producer`` must be transactional.
    ``transform`` gets the batch (records of one partition, in offset order) and returns
    the :class:`ProducerRecord` s to write (possibly none), as an iterable, an async
    iterable, or an awaitable of an iterable; it may run again for the same records after
    an abort, so it should not have other side effects.

    A transaction that fails with an abortable error (``TransactionAbortableError``: a
    record was refused, the group moved on in a rebalance...) is aborted, the consumer is
    sought back to the batch (unless the partition was revoked meanwhile: its new owner
    continues from the committed offset) and the loop goes on.

    Raises:
        ConfigError: the consumer has no group or auto-commits, or the producer is not
            transactional.
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
    committed = 0
    async for batch in consumer.batches():
        if not batch:
            continue
        first = batch[0]
        tp = TopicPartition(first.topic, first.partition)
        try:
            async with producer.transaction():
                result = transform(batch)
                if inspect.isawaitable(result):
                    result = await result
                # A record that fails makes the commit raise; its future needs no reader.
                if isinstance(result, AsyncIterable):
                    async for record in result:
                        (await producer.enqueue_record(record)).add_done_callback(_retrieve)
                else:
                    for record in result:
                        (await producer.enqueue_record(record)).add_done_callback(_retrieve)
                await producer.send_offsets_to_transaction(
                    {tp: batch[-1].offset + 1}, consumer.group_metadata()
                )
        except TransactionAbortableError as exc:
            log.warning(
                "exactly-once: the transaction of %s offsets %d..%d was aborted (%s); "
                "reading them again",
                tp, first.offset, batch[-1].offset, exc.__cause__ or exc,
            )  # fmt: skip
            try:
                consumer.seek(tp, first.offset)
            except ConsumerStateError:
                log.info("exactly-once: %s was revoked meanwhile; its new owner goes on", tp)
            continue
        committed += 1
        if max_transactions is not None and committed >= max_transactions:
            break
    return committed


def _retrieve(future: asyncio.Future[RecordMetadata]) -> None:
    if not future.cancelled():
        future.exception()
