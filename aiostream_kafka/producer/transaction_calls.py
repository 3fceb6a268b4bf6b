"""The producer's transaction calls: :meth:`~TransactionCalls.init_transactions`,
``begin_/commit_/abort_transaction``, :meth:`~TransactionCalls.send_offsets_to_transaction`
and :meth:`~TransactionCalls.transaction` with the :class:`TransactionScope` it returns.

A facade over :class:`~aiostream_kafka.producer.transactions.TransactionManager` (the
protocol, the states and the errors are there). ``TransactionCalls`` is a mixin of
:class:`~aiostream_kafka.producer.Producer`; what it uses of the producer is declared
below, and the producer defines it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.concurrency import shielded
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.producer.transactions import TransactionManager, TransactionStateError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.structs import ConsumerGroupMetadata, TopicPartition

# The producer's logger, as before these calls had a module of their own.
log = logging.getLogger("aiostream_kafka.producer.producer")

__all__ = ["TransactionCalls", "TransactionScope", "TransactionalProducer"]


class TransactionalProducer(Protocol):
    """What :class:`TransactionScope` uses of the producer."""

    @property
    def error(self) -> BaseException | None: ...
    @property
    def transaction_error(self) -> KafkaError | None: ...
    def begin_transaction(self) -> None: ...
    async def commit_transaction(self) -> None: ...
    async def abort_transaction(self) -> None: ...


ProducerT = TypeVar("ProducerT", bound=TransactionalProducer)


class TransactionCalls:
    """The transaction calls of :class:`~aiostream_kafka.producer.Producer` (a mixin)."""

    # The producer's state these calls use (set by Producer._setup).
    _txn: TransactionManager | None
    _state: str

    if TYPE_CHECKING:  # the producer's members these calls use (defined in Producer)

        @property
        def error(self) -> BaseException | None: ...
        @property
        def transaction_error(self) -> KafkaError | None: ...
        def _not_running(self) -> Exception: ...
        async def start(self) -> None: ...
        async def _flush(self) -> None: ...

    def _transactions(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise TransactionStateError(
                f"{what} needs a transactional producer: create it with transactional_id=..."
            )
        if self._state != "running" and not (
            self._state == "new" and what == "init_transactions()"
        ):
            raise self._not_running()
        return self._txn

    async def init_transactions(self) -> None:
        """Register the ``transactional_id`` with its transaction coordinator: get a
        producer id and epoch, fencing any older producer with the same id and aborting
        the transaction it left open. :meth:`start` (``async with``) already calls it;
        calling it again once it succeeded does nothing. On a producer not started yet it
        starts it.

        Returns None once the producer may begin transactions.

        Raises:
            KafkaTimeoutError: the coordinator did not answer within ``max_block_ms``
                (retriable: call it again).
            ProducerFencedError: fatal, the producer is unusable (so are
                ``TransactionalIdAuthorizationFailedError`` and
                ``InvalidTransactionTimeoutError``: ``transaction_timeout_ms`` above the
                broker's ``transaction.max.timeout.ms``).
            TransactionStateError: not a transactional producer, or a transaction is open.
            ProducerClosedError: the producer is closed.
        """
        txn = self._transactions("init_transactions()")
        if self._state == "new":
            await self.start()  # which initializes
            return
        await txn.init_transactions()

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on belong to it until
        :meth:`commit_transaction` or :meth:`abort_transaction`. Sends no request.

        Raises:
            TransactionStateError: not transactional, not initialized, or a transaction is
                already open.
            TransactionAbortableError: the last transaction failed and was not aborted.
            ProducerFencedError (or another fatal error): the producer is unusable.
            ProducerClosedError: the producer is closed.
        """
        self._transactions("begin_transaction()").begin_transaction()

    async def commit_transaction(self) -> None:
        """Commit the open transaction: send and wait for every record of it, then make
        the coordinator commit (EndTxn). Returns None once committed: consumers reading
        ``read_committed`` see its records, and the offsets it carries are the group's.

        Raises:
            TransactionAbortableError: a record of the transaction failed (its error is the
                ``__cause__``), or the coordinator refused the commit in a way that
                leaves the producer usable (the transaction timed out, an offset commit
                was refused...): call :meth:`abort_transaction`.
            KafkaTimeoutError: not done within ``max_block_ms``; the transaction stays
                ``COMMITTING``: call it again to finish.
            ProducerFencedError: fatal (so are ``InvalidProducerEpochError`` from the
                coordinator and ``TransactionalIdAuthorizationFailedError``); every record
                not yet acknowledged failed with it and the producer is unusable.
            TransactionStateError: no transaction is open.
            ProducerClosedError: the producer is closed.
        """
        await self._transactions("commit_transaction()").commit(self._flush)

    async def abort_transaction(self) -> None:
        """Abort the open (or failed) transaction: records not sent yet fail with
        :class:`~aiostream_kafka.producer.transactions.TransactionAbortedError`, those in
        flight are waited for, then the coordinator aborts (EndTxn): consumers reading
        ``read_committed`` never see its records, and its offsets are dropped. Returns
        None once the producer may begin the next transaction.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms`` (call it again).
            ProducerFencedError (or another fatal error): the producer is unusable.
            TransactionStateError: no transaction is open.
            ProducerClosedError: the producer is closed.
        """
        await self._transactions("abort_transaction()").abort()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Make ``offsets`` (of each partition, the *next* offset to consume, as
        ``Consumer.commit`` takes them) the consumer group's committed offsets if, and
        only if, the open transaction commits: consume-transform-produce exactly once.
        ``group_metadata`` is the consuming consumer's :meth:`Consumer.group_metadata`
        (a bare group id skips the KIP-447 generation check). Returns None once the group
        coordinator holds them as pending.

        Raises:
            TransactionAbortableError: the group coordinator refused them (its cause is a
                ``CommitFailedError`` when a rebalance moved the group on, so the
                partitions may belong to another member now; ``FencedInstanceIdError``,
                ``GroupAuthorizationFailedError``): abort the transaction.
            KafkaTimeoutError: not done within ``max_block_ms``.
            ProducerFencedError (or another fatal error): the producer is unusable.
            TransactionStateError: no transaction is open.
            TypeError: a negative or non-int offset.
        """
        txn = self._transactions("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        await txn.send_offsets(offsets, group_metadata)

    def transaction(self: ProducerT) -> TransactionScope[ProducerT]:
        """``async with producer.transaction():`` -- begin a transaction; commit it when
        the block ends normally, abort it when the block raises, then re-raise the
        block's exception. A commit that fails with ``TransactionAbortableError`` is
        aborted and that error raised. The abort runs to its end even when the task is
        being cancelled (then the cancellation goes on). If the abort itself fails with a
        fatal error (``ProducerFencedError``: another instance took the transactional id)
        that error is raised instead, the original one as its ``__cause__``, since the
        producer is unusable; any other failure of the abort is added to the original
        error's notes.

        Raises what :meth:`begin_transaction`, :meth:`commit_transaction` and
        :meth:`abort_transaction` raise.
        """
        return TransactionScope(self)


class TransactionScope(Generic[ProducerT]):
    """The async context manager :meth:`Producer.transaction` returns (``async with``
    gives the producer: ``TransactionScope[Producer]``)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: ProducerT) -> None:
        self._producer = producer

    async def __aenter__(self) -> ProducerT:
        self._producer.begin_transaction()
        return self._producer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                await self._producer.commit_transaction()
            except ec.TransactionAbortableError as commit_error:
                await self._abort(commit_error)
                raise
            return
        await self._abort(exc)  # then ``exc`` goes on

    async def _abort(self, cause: BaseException) -> None:
        """Abort after ``cause``. A fatal error of the abort (the producer was fenced) is
        raised, ``cause`` as its ``__cause__``: it supersedes, the producer is unusable.
        Any other failure of the abort is added to ``cause``'s notes."""
        producer = self._producer
        try:
            await shielded(
                producer.abort_transaction(), timeout=None, what="aborting a transaction"
            )
        except KafkaError as exc:
            if exc is producer.transaction_error and producer.error is exc:
                raise exc from cause
            log.warning("aborting the transaction after %r failed: %r", cause, exc)
            cause.add_note(f"aborting the transaction failed too: {type(exc).__name__}: {exc}")
