"""Unit tests of the transaction manager's state machine, fed scripted answers (no broker):
the KIP-1050 classification of error codes a real broker cannot be made to return on
demand (fenced, epoch, authorization, loading), the ``max_block_ms`` deadline of the
retries, and the request versions chosen per protocol. The behaviour against brokers --
commit, abort, fencing, coordinator failover, a killed worker -- is tested on real ones
in tests/test_transactions.py and tests/test_transactions_faults.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from aiostream_kafka import (
    CommitFailedError,
    ConsumerGroupMetadata,
    InvalidProducerEpochError,
    KafkaTimeoutError,
    ProducerFencedError,
    TopicPartition,
    TransactionAbortableError,
    TransactionalIdAuthorizationFailedError,
    TransactionState,
    TransactionStateError,
)
from aiostream_kafka.errors import KafkaError, NetworkError
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.producer.idempotence import IdempotenceState
from aiostream_kafka.producer.transactions import TransactionManager
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiostream_kafka.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aiostream_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiostream_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aiostream_kafka.protocol.versions import ApiVersionTable

Answer = Callable[[Request, int], Response]


class FakeConnection:
    """Answers each request with the next scripted answer for its type."""

    def __init__(self, node: int, script: dict[type[Request], list[Answer]], v2: bool) -> None:
        self.node_id = node
        self.description = f"broker {node}"
        self.script = script
        self.sent: list[tuple[Request, int]] = []
        # A Kafka 4 broker's ranges; the finalized transaction.version decides the protocol.
        self.api_versions = ApiVersionTable(
            {22: (0, 5), 25: (0, 4), 26: (0, 5), 28: (0, 5), 0: (3, 13)},
            finalized_features={"transaction.version": 2 if v2 else 1},
        )

    def version_for(self, request_type: type[Request]) -> int:
        return self.api_versions.version_for(request_type.API_KEY)

    async def request(self, request: Request, *, version: int | None = None) -> Response:
        version = self.version_for(type(request)) if version is None else version
        self.sent.append((request, version))
        answers = self.script[type(request)]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        return answer(request, version)


class FakeCluster:
    def __init__(self, script: dict[type[Request], list[Answer]], v2: bool = True) -> None:
        self.config = SimpleNamespace(retry_backoff_ms=10, retry_backoff_max_ms=40)
        self.lookups = 0
        self.find_errors: list[KafkaError] = []
        self.conn = FakeConnection(1, script, v2)

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        self.lookups += 1
        if self.find_errors:
            raise self.find_errors.pop(0)
        return 1

    async def connection(self, node: int) -> FakeConnection:
        return self.conn


def init_answer(code: int = 0, pid: int = 7, epoch: int = 3) -> Answer:
    return lambda request, version: InitProducerIdResponse(
        error_code=code, producer_id=pid if code == 0 else -1, producer_epoch=epoch
    )


def end_answer(code: int = 0, pid: int = -1, epoch: int = -1) -> Answer:
    return lambda request, version: EndTxnResponse(
        error_code=code, producer_id=pid, producer_epoch=epoch
    )


def manager(cluster: FakeCluster, **options: Any) -> tuple[TransactionManager, list[KafkaError]]:
    fatal: list[KafkaError] = []
    config = ProducerConfig(transactional_id="t", **options)
    txn = TransactionManager(
        "t", config, cluster, IdempotenceState(), on_fatal=fatal.append, on_change=lambda: None
    )  # type: ignore[arg-type]
    return txn, fatal


async def _noop() -> None:
    return None


async def test_init_retries_coordinator_moves_and_loading_then_succeeds() -> None:
    cluster = FakeCluster(
        {
            InitProducerIdRequest: [
                init_answer(16),  # NOT_COORDINATOR: look it up again
                init_answer(14),  # COORDINATOR_LOAD_IN_PROGRESS
                init_answer(51),  # CONCURRENT_TRANSACTIONS (an old transaction ending)
                init_answer(0),
            ]
        }
    )
    cluster.find_errors = [NetworkError("no broker yet")]
    txn, fatal = manager(cluster)
    await txn.init_transactions()
    assert txn.state is TransactionState.READY
    assert (txn.idem.producer_id, txn.idem.producer_epoch) == (7, 3)
    assert txn.v2 and not fatal
    assert cluster.lookups == 3  # the failed lookup, the first, the one after NOT_COORDINATOR
    await txn.init_transactions()  # done already: nothing sent
    assert len(cluster.conn.sent) == 4


async def test_init_gives_up_at_max_block_ms_and_can_be_called_again() -> None:
    cluster = FakeCluster({InitProducerIdRequest: [init_answer(15)]})
    txn, _ = manager(cluster, max_block_ms=200)
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="max_block_ms=200"):
        await txn.init_transactions()
    assert time.monotonic() - started < 1.0
    assert txn.state is TransactionState.INITIALIZING
    cluster.conn.script[InitProducerIdRequest] = [init_answer(0)]
    await txn.init_transactions()
    assert txn.state is TransactionState.READY


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (90, ProducerFencedError),
        (47, InvalidProducerEpochError),  # from the coordinator: fenced (Java's reading)
        (53, TransactionalIdAuthorizationFailedError),
    ],
)
async def test_fatal_coordinator_errors_end_the_producer(code: int, error: type) -> None:
    cluster = FakeCluster({InitProducerIdRequest: [init_answer(code)]})
    txn, fatal = manager(cluster)
    with pytest.raises(error):
        await txn.init_transactions()
    assert txn.state is TransactionState.FATAL_ERROR
    assert fatal == [txn.error] and isinstance(txn.error, error)
    with pytest.raises(error):  # every later call raises it
        await txn.init_transactions()
    with pytest.raises(error):
        txn.begin_transaction()


async def test_v2_end_txn_takes_the_bumped_epoch_and_v1_caps_versions() -> None:
    for v2 in (True, False):
        cluster = FakeCluster(
            {
                InitProducerIdRequest: [init_answer(0, pid=7, epoch=3)],
                EndTxnRequest: [end_answer(51), end_answer(0, pid=7, epoch=4)],
                AddOffsetsToTxnRequest: [lambda r, v: AddOffsetsToTxnResponse(error_code=0)],
                TxnOffsetCommitRequest: [
                    lambda r, v: TxnOffsetCommitResponse(
                        topics=[
                            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                                name="in",
                                partitions=[
                                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                                        partition_index=0, error_code=0
                                    )
                                ],
                            )
                        ]
                    )
                ],
            },
            v2=v2,
        )
        txn, _ = manager(cluster)
        await txn.init_transactions()
        assert txn.v2 is v2
        txn.begin_transaction()
        with pytest.raises(TransactionStateError, match="already open"):
            txn.begin_transaction()
        await txn.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g", 3, "m"))
        await txn.commit(_noop)
        assert txn.state is TransactionState.READY
        sent = {type(r): v for r, v in cluster.conn.sent}
        if v2:
            assert AddOffsetsToTxnRequest not in sent  # TxnOffsetCommit v5 adds the group
            assert (sent[TxnOffsetCommitRequest], sent[EndTxnRequest]) == (5, 5)
            assert txn.idem.producer_epoch == 4  # from EndTxn v5
        else:
            assert AddOffsetsToTxnRequest in sent
            assert (sent[TxnOffsetCommitRequest], sent[EndTxnRequest]) == (4, 4)
            assert txn.idem.producer_epoch == 3
        commit = next(r for r, _ in cluster.conn.sent if isinstance(r, TxnOffsetCommitRequest))
        assert (commit.generation_id, commit.member_id) == (3, "m")


async def test_an_empty_transaction_ends_without_a_request() -> None:
    cluster = FakeCluster(
        {InitProducerIdRequest: [init_answer(0)], EndTxnRequest: [end_answer(48)]}
    )
    txn, _ = manager(cluster)
    await txn.init_transactions()
    txn.begin_transaction()
    await txn.commit(_noop)
    txn.begin_transaction()
    await txn.abort()
    assert not any(isinstance(r, EndTxnRequest) for r, _ in cluster.conn.sent)


async def test_a_stale_generation_makes_the_transaction_abortable() -> None:
    refused = lambda r, v: TxnOffsetCommitResponse(  # noqa: E731
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name="in",
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=0, error_code=22
                    )
                ],
            )
        ]
    )
    cluster = FakeCluster(
        {
            InitProducerIdRequest: [init_answer(0)],
            TxnOffsetCommitRequest: [refused],
            EndTxnRequest: [end_answer(0, 7, 4)],
        }
    )
    txn, fatal = manager(cluster)
    await txn.init_transactions()
    txn.begin_transaction()
    with pytest.raises(TransactionAbortableError) as abortable:
        await txn.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g", 1, "m"))
    assert isinstance(abortable.value.__cause__, CommitFailedError)
    assert txn.state is TransactionState.ABORTABLE_ERROR and not fatal
    with pytest.raises(TransactionAbortableError):
        await txn.commit(_noop)
    await txn.abort()  # the group was added (v2): EndTxn(abort)
    assert txn.state is TransactionState.READY
    assert isinstance(cluster.conn.sent[-1][0], EndTxnRequest)


@pytest.mark.parametrize("timed_out", [True, False])
async def test_invalid_txn_state_is_abortable_only_past_the_transaction_timeout(
    timed_out: bool,
) -> None:
    cluster = FakeCluster(
        {
            InitProducerIdRequest: [init_answer(0)],
            EndTxnRequest: [end_answer(48)],
        }
    )
    txn, fatal = manager(cluster, transaction_timeout_ms=100)
    await txn.init_transactions()
    txn.begin_transaction()
    txn.partitions.add(TopicPartition("out", 0))  # as if a record had been sent
    if timed_out:
        txn._began -= 1.0
    with pytest.raises(TransactionAbortableError if timed_out else KafkaError) as raised:
        await txn.commit(_noop)
    if timed_out:
        assert txn.state is TransactionState.ABORTABLE_ERROR and not fatal
        assert "transaction_timeout_ms=100" in str(raised.value)
    else:
        assert txn.state is TransactionState.FATAL_ERROR and fatal
