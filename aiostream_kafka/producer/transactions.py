"""Transactions (KIP-98) for a producer with a ``transactional_id``, on both versions of
the transaction protocol (KIP-890).

A transactional id names one logical producer across restarts. ``InitProducerId`` with it
returns a producer id and epoch and *fences* every older instance: the coordinator bumps
the epoch, aborts the transaction the old instance left open, and refuses the old epoch
from then on. A transaction is then: the partitions written (and the consumer groups whose
offsets are committed) are registered with the transaction coordinator, the records are
written as usual (idempotent, tagged with the transactional id), and ``EndTxn`` makes the
coordinator write a commit or abort marker into every registered partition. Consumers
reading ``read_committed`` see the records of committed transactions only.

Two protocol versions, chosen once, at :meth:`TransactionManager.init_transactions`, from
the cluster's finalized feature ``transaction.version`` (in the coordinator's ApiVersions
answer):

* **v1** (below 2): every partition is registered with ``AddPartitionsToTxn`` before its
  first Produce in the transaction (the sender holds its batches back meanwhile; partitions
  found while one request is in flight go into the next one), a group with
  ``AddOffsetsToTxn`` before ``TxnOffsetCommit``. Produce is capped at v11 and
  TxnOffsetCommit at v4 (higher versions mean v2 to the broker), EndTxn at v4. The epoch
  stays the same from one transaction to the next unless an error left the sequences
  unknown: then aborting also bumps it (``InitProducerId`` with the current id and epoch,
  KIP-360).
* **v2** (2 and above, Kafka 4.0+): Produce v12+ registers its partitions itself, as
  TxnOffsetCommit v5 does its group; ``EndTxn`` v5 bumps the epoch at the end of *every*
  transaction and returns the new one, so a late write of a finished transaction can never
  join the next one, and every partition's sequence restarts at 0.

A transaction that registered nothing (no record sent, no offsets) ends without any
request, as in the Java client.

Errors (KIP-1050), whatever call they surface in:

* *retriable* -- the coordinator moved or is loading, ``CONCURRENT_TRANSACTIONS`` (the
  previous transaction's markers are still being written), a lost connection: retried
  inside the call with exponential back-off, rediscovering the coordinator
  (``FindCoordinator`` key type 1) when it moved, until ``max_block_ms``; then
  :class:`~aiostream_kafka.errors.KafkaTimeoutError`, and the same call may be made again.
* *abortable* -- the transaction cannot commit but the producer is fine: a record that
  failed, a rejected offset commit (a rebalance moved the group on), authorization of a
  topic or group, ``TRANSACTION_ABORTABLE``, and ``INVALID_TXN_STATE`` once the
  transaction outlived ``transaction_timeout_ms`` (the coordinator aborted it). Raised
  as :class:`~aiostream_kafka.protocol.error_codes.TransactionAbortableError` whose
  ``__cause__`` is the typed error; the state is ``ABORTABLE_ERROR`` until
  :meth:`abort` succeeds, and every other transactional call raises it meanwhile.
* *fatal* -- ``PRODUCER_FENCED`` (a newer instance took the transactional id),
  ``INVALID_PRODUCER_EPOCH`` from the coordinator, ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``
  and the errors the Java client also deems fatal: the state is ``FATAL_ERROR``, every
  record not yet acknowledged fails with the error, and every later call raises it. Only
  closing is left.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import (
    CommitFailedError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    UnsupportedVersionError,
)
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.producer.errors import broker_error
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.base import Request
from aiostream_kafka.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiostream_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from aiostream_kafka.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aiostream_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiostream_kafka.protocol.messages.produce import ProduceRequest
from aiostream_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aiostream_kafka.protocol.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.structs import ConsumerGroupMetadata, TopicPartition

if TYPE_CHECKING:
    from aiostream_kafka.cluster.cluster import Cluster
    from aiostream_kafka.producer.accumulator import Accumulator
    from aiostream_kafka.producer.config import ProducerConfig
    from aiostream_kafka.producer.idempotence import IdempotenceState

log = logging.getLogger(__name__)

__all__ = [
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionState",
    "TransactionStateError",
]

T = TypeVar("T")

_TRANSACTION_KEY_TYPE = 1
_GROUP_KEY_TYPE = 0
#: The highest versions that still mean transaction protocol v1 to a broker (KIP-890):
#: Produce v12, TxnOffsetCommit v5 and EndTxn v5 are v2 requests.
PRODUCE_V1_MAX = 11
TXN_OFFSET_COMMIT_V1_MAX = 4
END_TXN_V1_MAX = 4
_V2_MIN: dict[type[Request], int] = {
    ProduceRequest: 12,
    TxnOffsetCommitRequest: 5,
    EndTxnRequest: 5,
}
# CONCURRENT_TRANSACTIONS usually means the previous transaction's markers are still being
# written, which takes milliseconds: retry it sooner than other errors (the Java client's
# 20 ms for AddPartitionsToTxn).
_CONCURRENT_BACKOFF_S = 0.02
#: Errors after which the coordinator is looked up again.
_COORDINATOR_GONE = (
    NetworkError,
    KafkaTimeoutError,
    ec.NotCoordinatorError,
    ec.CoordinatorNotAvailableError,
)

# Coordinator answers that make the transaction abortable (KIP-1050), as in the Java client.
_ABORTABLE_CODES = frozenset(
    {
        22,  # ILLEGAL_GENERATION (TxnOffsetCommit: the group moved on)
        25,  # UNKNOWN_MEMBER_ID
        29,  # TOPIC_AUTHORIZATION_FAILED
        30,  # GROUP_AUTHORIZATION_FAILED
        55,  # OPERATION_NOT_ATTEMPTED (another partition of the request failed)
        59,  # UNKNOWN_PRODUCER_ID
        82,  # FENCED_INSTANCE_ID
        120,  # TRANSACTION_ABORTABLE
    }
)
_INVALID_TXN_STATE = 48
_COMMIT_FAILED_CODES = frozenset({22, 25})


class TransactionState(enum.Enum):
    """Where a transactional producer is (``Producer.transaction_state``).

    ``UNINITIALIZED`` until ``init_transactions()`` succeeded (``INITIALIZING`` while it
    runs), ``READY`` between transactions, ``IN_TRANSACTION`` after
    ``begin_transaction()``, ``COMMITTING``/``ABORTING`` while ending one (``COMMITTING``
    also after a commit that timed out: call ``commit_transaction()`` again),
    ``ABORTABLE_ERROR`` after an abortable error (only ``abort_transaction()`` is
    accepted), ``FATAL_ERROR`` once fenced or refused for good (close the producer).
    """

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


class TransactionStateError(KafkaError):
    """A transactional call that does not fit the producer's state (Java's
    ``IllegalStateException``): ``send()`` outside a transaction, ``begin_transaction()``
    twice, ``commit_transaction()`` without a transaction, a transactional call on a
    producer without ``transactional_id``. Nothing was sent; the state is unchanged."""


class TransactionAbortedError(KafkaError):
    """A record of a transaction that was aborted before the record was sent: its future
    fails with this (``__cause__``: the abortable error that led to the abort, if any)."""


# The states in which a transaction is open (its records may be sent).
_SENDING = (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)


class TransactionManager:
    """The transaction state of one producer; its calls run on the caller's task, except
    the partition registration of protocol v1, a task started for the sender."""

    def __init__(
        self,
        transactional_id: str,
        config: ProducerConfig,
        cluster: Cluster,
        idempotence: IdempotenceState,
        on_fatal: Callable[[KafkaError], None],
        on_change: Callable[[], None],
    ) -> None:
        self.transactional_id = transactional_id
        self.config = config
        self.cluster = cluster
        self.idem = idempotence
        self.acc: Accumulator | None = None  # set by the producer at start
        self._on_fatal = on_fatal
        self._on_change = on_change
        self.state = TransactionState.UNINITIALIZED
        #: The abortable error (a TransactionAbortableError) or the fatal one, or None.
        self.error: KafkaError | None = None
        #: Transaction protocol v2 (KIP-890 part 2), decided at init_transactions().
        self.v2 = False
        self._max_block_s = config.max_block_ms / 1000
        self._coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}
        # The current transaction: partitions registered (v2: written to), whether any
        # offsets were added, when it began, and whether aborting it must bump the epoch.
        self.partitions: set[TopicPartition] = set()
        self._offsets_added = False
        self._began = 0.0
        self._bump_on_abort = False
        # v1: partitions waiting for AddPartitionsToTxn, and the task sending it.
        self._to_add: set[TopicPartition] = set()
        self._adding: frozenset[TopicPartition] = frozenset()
        self._enrol_task: asyncio.Task[None] | None = None
        # Owns the registration task; its crash (a bug) makes the transaction abortable.
        self._scope = TaskScope(
            f"transactional id {self.transactional_id!r}", on_fail=self._enrol_crashed
        )
        self._lock = asyncio.Lock()  # one coordinator operation at a time

    # -- state ------------------------------------------------------------------------------

    def _set(self, state: TransactionState) -> None:
        if self.state is not state:
            log.debug("transactional id %r: %s -> %s", self.transactional_id,
                      self.state.value, state.value)  # fmt: skip
            self.state = state
            self._on_change()

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open, ending or failed (not yet aborted)."""
        return self.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.COMMITTING,
            TransactionState.ABORTING,
            TransactionState.ABORTABLE_ERROR,
        )

    @property
    def fatal_error(self) -> KafkaError | None:
        """The fatal error, once ``FATAL_ERROR``; else None."""
        return self.error if self.state is TransactionState.FATAL_ERROR else None

    @property
    def _started(self) -> bool:
        """Whether the coordinator knows of the transaction (so it must be ended)."""
        return bool(self.partitions) or self._offsets_added

    def fatal(self, error: KafkaError) -> KafkaError:
        """Enter ``FATAL_ERROR`` with ``error`` (the first one stays); return the error."""
        if self.state is not TransactionState.FATAL_ERROR:
            log.error("transactional id %r: fatal error, the producer stops: %s",
                      self.transactional_id, error)  # fmt: skip
            self.error = error
            self._set(TransactionState.FATAL_ERROR)
            self._on_fatal(error)
        assert self.error is not None
        return self.error

    def _abortable(self, cause: KafkaError, what: str = "") -> KafkaError:
        """Make the open transaction abortable because of ``cause``; return the error to
        raise (a TransactionAbortableError, or the fatal error if fatal already)."""
        if self.state is TransactionState.FATAL_ERROR:
            assert self.error is not None
            return self.error
        if isinstance(cause, ec.TransactionAbortableError) and cause is self.error:
            return cause
        error = ec.TransactionAbortableError(
            f"the transaction of transactional id {self.transactional_id!r} cannot commit"
            f"{': ' + what if what else ''}: {type(cause).__name__}: {cause}; abort it "
            "(abort_transaction()) to go on"
        )
        error.__cause__ = cause
        if self.state in _SENDING or self.state is TransactionState.ABORTABLE_ERROR:
            if self.state is not TransactionState.ABORTABLE_ERROR:
                log.warning("transactional id %r: the transaction must be aborted: %s",
                            self.transactional_id, cause)  # fmt: skip
                self.error = error
                self._set(TransactionState.ABORTABLE_ERROR)
        return error

    def record_failed(self, error: KafkaError) -> None:
        """The sender gave up on a record of the transaction: it cannot commit."""
        if self.state in _SENDING:
            self._abortable(error, "a record was not written")

    def bump_on_abort(self) -> None:
        """The sequences of a partition are no longer known (v1): aborting must bump the
        epoch (v2's EndTxn always does)."""
        self._bump_on_abort = True

    def _check_not_fatal(self) -> None:
        if self.state is TransactionState.FATAL_ERROR:
            assert self.error is not None
            raise self.error

    def _refuse(self, what: str, *expected: TransactionState) -> KafkaError:
        """The error of a call ``what`` made in the wrong state."""
        if self.state is TransactionState.FATAL_ERROR:
            assert self.error is not None
            return self.error
        if self.state is TransactionState.ABORTABLE_ERROR:
            assert self.error is not None
            error = ec.TransactionAbortableError(
                f"{what}: the transaction failed and must be aborted first "
                f"(abort_transaction()): {self.error.__cause__ or self.error}"
            )
            error.__cause__ = self.error.__cause__
            return error
        hints = {
            TransactionState.UNINITIALIZED: "init_transactions() has not completed",
            TransactionState.INITIALIZING: "init_transactions() has not completed",
            TransactionState.READY: "no transaction is open: call begin_transaction() first",
            TransactionState.IN_TRANSACTION: "a transaction is already open",
            TransactionState.COMMITTING: "the transaction is being committed (after a "
            "timeout, call commit_transaction() again)",
            TransactionState.ABORTING: "the transaction is being aborted (after a timeout, "
            "call abort_transaction() again)",
        }
        allowed = " or ".join(s.value for s in expected)
        return TransactionStateError(
            f"{what} is not possible in state {self.state.value} (needs {allowed}): "
            f"{hints.get(self.state, '')}"
        )

    def send_refusal(self) -> KafkaError | None:
        """Why a record may not be sent now (None: it may)."""
        if self.state is TransactionState.IN_TRANSACTION:
            return None
        return self._refuse("send()", TransactionState.IN_TRANSACTION)

    def unsent_refusal(self) -> KafkaError | None:
        """The error to fail records not yet sent with, when the transaction is being
        aborted or must be; None while they may go."""
        if self.state is TransactionState.ABORTING:
            error = TransactionAbortedError(
                f"the transaction of transactional id {self.transactional_id!r} was aborted "
                "before this record was sent"
            )
            if self.error is not None:
                error.__cause__ = self.error
            return error
        if self.state in (TransactionState.ABORTABLE_ERROR, TransactionState.FATAL_ERROR):
            return self.error
        return None

    def produce_version_cap(self) -> int | None:
        """The highest Produce version transactional requests may use (v1: 11)."""
        return None if self.v2 else PRODUCE_V1_MAX

    # -- partitions (v1: AddPartitionsToTxn) --------------------------------------------

    def needs_enrolment(self, tp: TopicPartition) -> bool:
        """Whether the batches of ``tp`` must wait before their first Produce of this
        transaction (v1: until AddPartitionsToTxn registered the partition). Called by the
        sender for every partition with queued batches."""
        if tp in self.partitions:
            return False
        if self.v2:
            # Produce v12+ registers it; remember it so that the transaction is ended.
            self.partitions.add(tp)
            return False
        if self.state in _SENDING and tp not in self._adding:
            self._to_add.add(tp)
        return True

    def maybe_enrol(self, wakeup: asyncio.Event) -> None:
        """Start one AddPartitionsToTxn for the partitions waiting, unless one is in flight
        (those found meanwhile go in the next one)."""
        if (
            self._to_add
            and self._enrol_task is None
            and self.state in _SENDING
            and not self._scope.closed
        ):
            self._adding = frozenset(self._to_add)
            self._to_add.clear()
            self._enrol_task = self._scope.spawn(
                self._enrol(self._adding, wakeup),
                name=f"aiostream-kafka AddPartitionsToTxn {self.transactional_id}",
                crash=Crash.FAIL_OWNER,
            )

    def _enrol_crashed(self, exc: Exception) -> None:
        if self.state is not TransactionState.FATAL_ERROR:
            error = KafkaError(f"registering the transaction's partitions failed: {exc!r}")
            error.__cause__ = exc
            self._abortable(error, "its partitions could not be registered")

    async def _enrol(self, tps: frozenset[TopicPartition], wakeup: asyncio.Event) -> None:
        deadline = time.monotonic() + self._max_block_s
        pid, epoch = self.idem.producer_id, self.idem.producer_epoch

        async def attempt(conn: BrokerConnection) -> None:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(tps):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            request = AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
            response = await conn.request(request)
            assert isinstance(response, AddPartitionsToTxnResponse)
            if response.error_code:
                raise self._coordinator_error(response.error_code, "AddPartitionsToTxn")
            failed: list[tuple[int, str]] = []
            for topic in response.results_by_topic_v3_and_below:
                for part in topic.results_by_partition:
                    if part.partition_error_code:
                        failed.append(
                            (part.partition_error_code, f"{topic.name}-{part.partition_index}")
                        )
            # A retriable error (the coordinator moved, the previous transaction still
            # ending) retries the whole request; OPERATION_NOT_ATTEMPTED only echoes
            # another partition's error, so that one is reported.
            failed.sort(key=lambda f: (not ec.is_retriable(f[0]), f[0] == 55))
            if failed:
                code, where = failed[0]
                raise self._coordinator_error(code, f"AddPartitionsToTxn of {where}")

        try:
            await self._coordinator_call("AddPartitionsToTxn", attempt, deadline)
        except KafkaError as exc:
            if self.state not in (TransactionState.FATAL_ERROR,):
                self._abortable(exc, "its partitions could not be registered")
        else:
            # Whatever the state now (an abort may be waiting for this task), the
            # coordinator has them: the transaction must be ended.
            if self.idem.producer_epoch == epoch:
                self.partitions |= tps
                log.debug("transactional id %r: added %s", self.transactional_id, sorted(tps))
        finally:
            self._adding = frozenset()
            self._enrol_task = None
            wakeup.set()

    async def _enrolment_done(self) -> None:
        task = self._enrol_task
        if task is not None:
            await asyncio.wait([task])

    async def stop(self) -> None:
        """Stop the registration task, if any (used by close)."""
        await self._scope.aclose()

    # -- requests ---------------------------------------------------------------------------

    def _coordinator_error(self, code: int, what: str, message: str | None = None) -> KafkaError:
        """Classify a transaction coordinator's error ``code`` (KIP-1050): a retriable error
        is returned as is (the call retries it); an abortable one makes the transaction
        abortable; anything else is fatal."""
        typed = broker_error(code, f"{what} (transactional id {self.transactional_id!r})",
                             message)  # fmt: skip
        if typed.retriable:
            return typed
        if code in _COMMIT_FAILED_CODES:
            failed = CommitFailedError(
                f"{what}: the group's generation or member id is no longer current (a "
                f"rebalance happened): {typed}"
            )
            failed.__cause__ = typed
            return self._abortable(failed, "the consumer group moved on")
        if code in _ABORTABLE_CODES:
            return self._abortable(typed)
        if code == _INVALID_TXN_STATE and self._timed_out():
            return self._abortable(
                typed,
                f"it ran longer than transaction_timeout_ms={self.config.transaction_timeout_ms}"
                " and the coordinator aborted it",
            )
        return self.fatal(typed)

    def _timed_out(self) -> bool:
        return (
            self.in_transaction
            and (time.monotonic() - self._began) * 1000 >= self.config.transaction_timeout_ms
        )

    async def _coordinator_connection(self, group_id: str | None = None) -> BrokerConnection:
        """A connection to the transaction coordinator (or to ``group_id``'s coordinator),
        found with FindCoordinator and cached until it moves."""
        key_type = _TRANSACTION_KEY_TYPE if group_id is None else _GROUP_KEY_TYPE
        key = self.transactional_id if group_id is None else group_id
        node = self._coordinator if group_id is None else self._group_coordinators.get(group_id)
        if node is None:
            try:
                node = await self.cluster.find_coordinator(key, key_type)
            except KafkaError as exc:
                if exc.retriable or exc.error_code is None:
                    raise
                raise self._coordinator_error(exc.error_code, f"FindCoordinator({key!r})") from exc
            if group_id is None:
                self._coordinator = node
            else:
                self._group_coordinators[group_id] = node
        return await self.cluster.connection(node)

    def _forget_coordinator(self, group_id: str | None) -> None:
        if group_id is None:
            self._coordinator = None
        else:
            self._group_coordinators.pop(group_id, None)

    async def _coordinator_call(
        self,
        what: str,
        attempt: Callable[[BrokerConnection], Awaitable[T]],
        deadline: float,
        group_id: str | None = None,
    ) -> T:
        """Run ``attempt`` on a connection to the coordinator until it succeeds, retrying
        retriable errors with exponential back-off (rediscovering the coordinator after it
        moved or a connection failed) until ``deadline``, which also cuts the attempt in
        progress.

        Raises:
            KafkaTimeoutError: still failing (or the attempt still running) at the
                deadline; it names the last error.
            KafkaError: the first error that is not retriable (already classified).
        """
        backoff = Backoff.of(self.cluster.config)

        async def once() -> T:
            return await attempt(await self._coordinator_connection(group_id))

        async def between(error: Exception) -> float | None:
            if isinstance(error, _COORDINATOR_GONE):
                self._forget_coordinator(group_id)  # look it up again
            self._check_not_fatal()
            if isinstance(error, ec.ConcurrentTransactionsError):
                # An earlier transaction still ending: it ends soon, ask again soon.
                backoff.reset()
                return min(_CONCURRENT_BACKOFF_S, backoff.initial_s)
            return None

        return await retry_until(
            f"{what} for transactional id {self.transactional_id!r}",
            once,
            deadline=deadline,
            limit=f"max_block_ms={self.config.max_block_ms}",
            backoff=backoff,
            between=between,
        )

    def _version(self, conn: BrokerConnection, request_type: type[Request], v1_max: int) -> int:
        version = conn.version_for(request_type)
        if not self.v2:
            return min(version, v1_max)
        if version < _V2_MIN[request_type]:
            raise self.fatal(
                UnsupportedVersionError(
                    f"{conn.description} finalizes transaction.version 2 but speaks "
                    f"{request_type.__name__} only up to v{version}"
                )
            )
        return version

    # -- InitProducerId -------------------------------------------------------------------

    async def _init_producer_id(
        self, deadline: float, current: tuple[int, int] | None
    ) -> tuple[int, int]:
        """InitProducerId: a new epoch (fencing older instances), or with ``current``
        (KIP-360) the bump of our own epoch. Returns the producer id and epoch."""

        async def attempt(conn: BrokerConnection) -> tuple[int, int]:
            version = conn.version_for(InitProducerIdRequest)
            if current is not None and version < 3:
                raise self.fatal(
                    UnsupportedVersionError(
                        f"{conn.description} cannot bump a producer's epoch (InitProducerId "
                        f"v3, Kafka 2.5+; it speaks v{version}): the producer cannot go on "
                        "after this abortable error"
                    )
                )
            request = InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.config.transaction_timeout_ms,
                producer_id=NO_PRODUCER_ID if current is None else current[0],
                producer_epoch=NO_PRODUCER_EPOCH if current is None else current[1],
            )
            response = await conn.request(request, version=version)
            assert isinstance(response, InitProducerIdResponse)
            if response.error_code:
                raise self._coordinator_error(response.error_code, "InitProducerId")
            if current is None:
                self.v2 = _supports_v2(conn)
            return response.producer_id, response.producer_epoch

        return await self._coordinator_call("InitProducerId", attempt, deadline)

    async def init_transactions(self) -> None:
        """Get the producer id and epoch for the transactional id, fencing older
        instances and aborting what they left open. Idempotent once it succeeded.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms`` (call it again).
            ProducerFencedError, TransactionalIdAuthorizationFailedError,
                InvalidTransactionTimeoutError, ...: fatal.
            TransactionStateError: a transaction is open.
        """
        self._check_not_fatal()
        async with self._lock:
            if self.state is TransactionState.READY:
                return
            if self.state not in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
                raise self._refuse("init_transactions()", TransactionState.UNINITIALIZED)
            self._set(TransactionState.INITIALIZING)
            deadline = time.monotonic() + self._max_block_s
            pid, epoch = await self._init_producer_id(deadline, None)
            self.idem.reset(pid, epoch)
            log.info("transactional id %r: producer id %d epoch %d, transaction protocol v%d",
                     self.transactional_id, pid, epoch, 2 if self.v2 else 1)  # fmt: skip
            self._set(TransactionState.READY)

    # -- begin, offsets, end ------------------------------------------------------------

    def begin_transaction(self) -> None:
        """Open a transaction (no request: the coordinator learns of it with its first
        partition or offsets).

        Raises:
            TransactionStateError: not ``READY``.
            TransactionAbortableError, or the fatal error: see the module docs.
        """
        if self.state is not TransactionState.READY:
            raise self._refuse("begin_transaction()", TransactionState.READY)
        self.partitions.clear()
        self._to_add.clear()
        self._offsets_added = False
        self._bump_on_abort = False
        self._began = time.monotonic()
        self.error = None
        self._set(TransactionState.IN_TRANSACTION)

    async def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata,
    ) -> None:
        """Add the consumer group's ``offsets`` to the transaction (v1: AddOffsetsToTxn to
        the transaction coordinator, then TxnOffsetCommit to the group coordinator; v2:
        TxnOffsetCommit v5 alone). They become the group's committed offsets when, and
        only if, the transaction commits."""
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            if isinstance(om.offset, bool) or not isinstance(om.offset, int) or om.offset < 0:
                raise TypeError(f"the offset of {tp} must be a non-negative int, got {value!r}")
            wanted[TopicPartition(*tp)] = om
        group_id = group_metadata.group_id
        if not isinstance(group_id, str) or not group_id:
            raise TypeError(f"group_metadata.group_id must be a non-empty str, got {group_id!r}")
        async with self._lock:
            if self.state is not TransactionState.IN_TRANSACTION:
                raise self._refuse("send_offsets_to_transaction()", TransactionState.IN_TRANSACTION)
            if not wanted:
                return
            deadline = time.monotonic() + self._max_block_s
            if not self.v2:
                await self._coordinator_call(
                    "AddOffsetsToTxn", self._add_offsets_attempt(group_id), deadline
                )
            # v2: the TxnOffsetCommit itself adds the group, so the transaction must be
            # ended even when its answer is lost.
            self._offsets_added = True
            pending = dict(wanted)
            await self._coordinator_call(
                "TxnOffsetCommit",
                self._txn_offset_commit_attempt(pending, group_metadata),
                deadline,
                group_id=group_id,
            )

    def _add_offsets_attempt(self, group_id: str) -> Callable[[BrokerConnection], Awaitable[None]]:
        async def attempt(conn: BrokerConnection) -> None:
            request = AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.idem.producer_id,
                producer_epoch=self.idem.producer_epoch,
                group_id=group_id,
            )
            response = await conn.request(request)
            assert isinstance(response, AddOffsetsToTxnResponse)
            if response.error_code:
                raise self._coordinator_error(
                    response.error_code, f"AddOffsetsToTxn(group {group_id!r})"
                )

        return attempt

    def _txn_offset_commit_attempt(
        self,
        pending: dict[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
    ) -> Callable[[BrokerConnection], Awaitable[None]]:
        """One TxnOffsetCommit of the offsets still ``pending`` (those accepted are removed,
        so a retry carries only the others)."""

        async def attempt(conn: BrokerConnection) -> None:
            version = self._version(conn, TxnOffsetCommitRequest, TXN_OFFSET_COMMIT_V1_MAX)
            by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]]
            by_topic = {}
            for tp, om in pending.items():
                by_topic.setdefault(tp.topic, []).append(
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=tp.partition,
                        committed_offset=om.offset,
                        committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                        committed_metadata=om.metadata,
                    )
                )
            request = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.idem.producer_id,
                producer_epoch=self.idem.producer_epoch,
                # KIP-447 (v3+): the coordinator refuses a stale generation or member.
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
            response = await conn.request(request, version=version)
            assert isinstance(response, TxnOffsetCommitResponse)
            retry: KafkaError | None = None
            for topic in response.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    code = part.error_code
                    if code == 0:
                        pending.pop(tp, None)
                        continue
                    error = self._coordinator_error(
                        code, f"TxnOffsetCommit of {tp.topic}-{tp.partition} for group "
                        f"{group.group_id!r}"
                    )  # fmt: skip
                    if not error.retriable:
                        raise error
                    retry = retry or error
            if retry is not None:
                raise retry
            if pending:
                raise NetworkError(f"the group coordinator did not answer for {sorted(pending)}")

        return attempt

    async def commit(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Flush, then EndTxn(commit). After a timeout (``KafkaTimeoutError``) the state
        stays ``COMMITTING`` and calling it again goes on where it stopped.

        Raises:
            TransactionAbortableError: a record failed, or the coordinator's answer was
                abortable; abort next.
            KafkaTimeoutError: not done within ``max_block_ms``.
            TransactionStateError, or the fatal error.
        """
        async with self._lock:
            if self.state not in _SENDING:
                raise self._refuse("commit_transaction()", TransactionState.IN_TRANSACTION)
            self._set(TransactionState.COMMITTING)
            deadline = time.monotonic() + self._max_block_s
            try:
                async with asyncio.timeout(self._max_block_s):
                    await flush()
            except TimeoutError:
                raise KafkaTimeoutError(
                    f"commit_transaction(): the transaction's records were not all "
                    f"acknowledged within max_block_ms={self.config.max_block_ms}; call "
                    "commit_transaction() again (or abort_transaction() after an error)"
                ) from None
            await self._enrolment_done()
            if self.state is not TransactionState.COMMITTING:  # a record failed meanwhile
                raise self._refuse("commit_transaction()", TransactionState.IN_TRANSACTION)
            if self._started:
                await self._end(True, deadline)
            self._complete()

    async def abort(self) -> None:
        """Fail the records not yet sent, wait for those in flight, then EndTxn(abort)
        (and, v1, bump the epoch when the sequences are no longer known). After a timeout
        the state stays ``ABORTING`` and calling it again goes on.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms``.
            TransactionStateError, or the fatal error (e.g. fenced).
        """
        self._check_not_fatal()
        async with self._lock:
            if self.state not in (
                TransactionState.IN_TRANSACTION,
                TransactionState.ABORTABLE_ERROR,
                TransactionState.ABORTING,
            ):
                raise self._refuse(
                    "abort_transaction()",
                    TransactionState.IN_TRANSACTION,
                    TransactionState.ABORTABLE_ERROR,
                )
            self._set(TransactionState.ABORTING)
            deadline = time.monotonic() + self._max_block_s
            acc = self.acc
            if acc is not None:
                acc.wakeup.set()  # the sender fails what was not sent
                pending = [b.done for b in acc.incomplete]
                if pending:
                    _, late = await asyncio.wait(pending, timeout=self._max_block_s)
                    if late:
                        raise KafkaTimeoutError(
                            f"abort_transaction(): {len(late)} batch(es) still in flight after "
                            f"max_block_ms={self.config.max_block_ms}; call abort_transaction() "
                            "again"
                        )
            await self._enrolment_done()
            if self._started:
                await self._end(False, deadline)
            if not self.v2 and self._bump_on_abort:
                # KIP-360: the sequences of some partition are unknown; a new epoch
                # restarts them all at 0.
                pid, epoch = await self._init_producer_id(
                    deadline, (self.idem.producer_id, self.idem.producer_epoch)
                )
                log.info("transactional id %r: epoch bumped to %d after an abortable error",
                         self.transactional_id, epoch)  # fmt: skip
                self.idem.reset(pid, epoch)
            self._complete()

    async def _end(self, commit: bool, deadline: float) -> None:
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        pid, epoch = self.idem.producer_id, self.idem.producer_epoch

        async def attempt(conn: BrokerConnection) -> None:
            version = self._version(conn, EndTxnRequest, END_TXN_V1_MAX)
            request = EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=pid,
                producer_epoch=epoch,
                committed=commit,
            )
            response = await conn.request(request, version=version)
            assert isinstance(response, EndTxnResponse)
            if response.error_code:
                raise self._coordinator_error(response.error_code, what)
            if version >= 5 and response.producer_id >= 0:
                # v2: the coordinator bumped the epoch (or, exhausted, gave a new id);
                # every sequence restarts at 0.
                self.idem.reset(response.producer_id, response.producer_epoch)

        await self._coordinator_call(what, attempt, deadline)

    def _complete(self) -> None:
        self.partitions.clear()
        self._to_add.clear()
        self._offsets_added = False
        self._bump_on_abort = False
        self.error = None
        self._set(TransactionState.READY)


def _supports_v2(conn: BrokerConnection) -> bool:
    """Whether transaction protocol v2 applies with the coordinator on ``conn``: the
    cluster finalizes ``transaction.version`` 2+ and the broker speaks the v2 requests."""
    table = conn.api_versions
    if table is None or table.finalized_features.get("transaction.version", 0) < 2:
        return False
    for request_type, low in _V2_MIN.items():
        broker = table.broker_range(request_type.API_KEY)
        if broker is None or broker[1] < low:
            return False
    return True
