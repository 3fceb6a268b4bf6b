"""InitProducerId, AddPartitionsToTxn (v0-3 from producers, v4+ batched), AddOffsetsToTxn,
TxnOffsetCommit and EndTxn; DescribeTransactions, ListTransactions, DescribeProducers.

The state machine is :mod:`aiostream_kafka.testing.fake.transactions`; here requests are
read, routed (a broker that is not the transactional id's coordinator answers
``NOT_COORDINATOR``) and answered in their version's shape. ``PRODUCER_FENCED`` is
answered as ``INVALID_PRODUCER_EPOCH`` to versions older than KIP-588's.
"""

from __future__ import annotations

import re
from typing import Any

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiostream_kafka.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from aiostream_kafka.protocol.messages.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
)
from aiostream_kafka.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from aiostream_kafka.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aiostream_kafka.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiostream_kafka.protocol.messages.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from aiostream_kafka.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.transactions import PendingOffset

_INT16_MAX = 2**15 - 1
_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult


def _fenced(code: int, version: int, first_version: int) -> int:
    """``PRODUCER_FENCED`` as versions before ``first_version`` know it."""
    if code == errors.PRODUCER_FENCED and version < first_version:
        return errors.INVALID_PRODUCER_EPOCH
    return code


def _coordinator_error(ctx: RequestContext, transactional_id: str) -> int:
    if ctx.state.coordinator_for(transactional_id) != ctx.node_id:
        return errors.NOT_COORDINATOR
    return errors.NONE


@serve(InitProducerIdRequest)
async def init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    version = ctx.version
    pid = request.producer_id if version >= 3 else -1
    epoch = request.producer_epoch if version >= 3 else -1
    if request.transactional_id is not None:
        code = _coordinator_error(ctx, request.transactional_id)
        if not code:
            code, pid, epoch = ctx.state.transactions.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, pid, epoch
            )
        if code:
            pid = epoch = -1
        return InitProducerIdResponse(
            error_code=_fenced(code, version, 4), producer_id=pid, producer_epoch=epoch
        )
    if pid >= 0 and epoch + 1 <= _INT16_MAX:
        # KIP-360: an idempotent producer bumps its epoch after a sequence error.
        return InitProducerIdResponse(
            error_code=errors.NONE, producer_id=pid, producer_epoch=epoch + 1
        )
    return InitProducerIdResponse(
        error_code=errors.NONE, producer_id=ctx.state.new_producer_id(), producer_epoch=0
    )


def _topic_results(codes: dict[tuple[str, int], int]) -> list[_TopicResult]:
    by_topic: dict[str, list[_PartitionResult]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(
            _PartitionResult(partition_index=index, partition_error_code=code)
        )
    return [_TopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


def _add_partitions(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
    *,
    verify_only: bool = False,
) -> dict[tuple[str, int], int]:
    txns = ctx.state.transactions
    code = _coordinator_error(ctx, transactional_id) or txns.check(
        transactional_id, producer_id, producer_epoch
    )
    if code:
        return dict.fromkeys(partitions, _fenced(code, ctx.version, 2))
    if verify_only:
        return txns.verify_partitions(transactional_id, partitions)
    return txns.add_partitions(transactional_id, partitions)


def _fail_add_partitions(request: Any, version: int, code: int) -> Response:
    if version >= 4:
        return AddPartitionsToTxnResponse(error_code=code)
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            _TopicResult(
                name=t.name,
                results_by_partition=[
                    _PartitionResult(partition_index=p, partition_error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.v3_and_below_topics
        ]
    )


@serve(AddPartitionsToTxnRequest, fail=_fail_add_partitions)
async def add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if ctx.version < 4:
        codes = _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions],
        )
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes)
        )
    results = []
    for txn in request.transactions:
        codes = _add_partitions(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            [(t.name, p) for t in txn.topics for p in t.partitions],
            verify_only=txn.verify_only,
        )
        results.append(
            AddPartitionsToTxnResponse.AddPartitionsToTxnResult(
                transactional_id=txn.transactional_id, topic_results=_topic_results(codes)
            )
        )
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0, error_code=errors.NONE, results_by_transaction=results
    )


@serve(AddOffsetsToTxnRequest)
async def add_offsets_to_txn(
    ctx: RequestContext, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    txns = ctx.state.transactions
    tid = request.transactional_id
    code = _coordinator_error(ctx, tid) or txns.check(
        tid, request.producer_id, request.producer_epoch
    )
    if not code:
        code = txns.add_group(tid, request.group_id)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced(code, ctx.version, 2))


def _fail_txn_offset_commit(request: Any, version: int, code: int) -> Response:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


@serve(TxnOffsetCommitRequest, fail=_fail_txn_offset_commit)
async def txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    """Sent to the group's coordinator: the producer and the group member are checked,
    the offsets kept until the transaction ends."""
    state = ctx.state
    version = ctx.version
    group_id = request.group_id
    code = errors.NOT_COORDINATOR if state.coordinator_for(group_id) != ctx.node_id else 0
    code = code or state.transactions.check(
        request.transactional_id, request.producer_id, request.producer_epoch
    )
    if not code and version >= 3 and request.generation_id >= 0:
        code = state.check_group_member(
            group_id, request.generation_id, request.member_id, request.group_instance_id
        )
    offsets: dict[tuple[str, int], PendingOffset] = {}
    unknown = False
    for topic in request.topics:
        for p in topic.partitions:
            if state.partition(topic.name, p.partition_index) is None:
                unknown = True
            offsets[(topic.name, p.partition_index)] = PendingOffset(
                p.committed_offset,
                p.committed_leader_epoch if version >= 2 else -1,
                p.committed_metadata,
            )
    if not code and unknown:
        code = errors.UNKNOWN_TOPIC_OR_PARTITION
    if not code:
        code = state.transactions.stage_offsets(
            request.transactional_id, group_id, offsets, v2=version >= 5
        )
    code = _fenced(code, version, 3)
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


@serve(EndTxnRequest)
async def end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    tid = request.transactional_id
    code = _coordinator_error(ctx, tid)
    pid = epoch = -1
    if not code:
        code, pid, epoch = ctx.state.transactions.end_txn(
            tid,
            request.producer_id,
            request.producer_epoch,
            commit=request.committed,
            v2=ctx.version >= 5,
        )
    return EndTxnResponse(
        throttle_time_ms=0,
        error_code=_fenced(code, ctx.version, 2),
        producer_id=pid,
        producer_epoch=epoch,
    )


@serve(DescribeTransactionsRequest)
async def describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    states = []
    for tid in request.transactional_ids:
        code = _coordinator_error(ctx, tid)
        txn = ctx.state.transactions.transactions.get(tid)
        if code or txn is None:
            states.append(
                DescribeTransactionsResponse.TransactionState(
                    error_code=code or errors.TRANSACTIONAL_ID_NOT_FOUND,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(
            DescribeTransactionsResponse.TransactionState(
                error_code=errors.NONE,
                transactional_id=tid,
                transaction_state=txn.state,
                transaction_timeout_ms=txn.timeout_ms,
                transaction_start_time_ms=txn.started_at_ms if txn.state == "Ongoing" else -1,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[
                    DescribeTransactionsResponse.TopicData(topic=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


@serve(ListTransactionsRequest)
async def list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    """The transactional ids this broker coordinates, filtered as asked (states,
    producer ids, open longer than ``duration_filter`` ms, an id pattern)."""
    version = ctx.version
    states = {s for s in request.state_filters}
    pids = set(request.producer_id_filters)
    now_ms = ctx.state.clock.wall_ms()
    pattern = (
        re.compile(request.transactional_id_pattern)
        if version >= 2 and request.transactional_id_pattern
        else None
    )
    listed = []
    for tid, txn in sorted(ctx.state.transactions.transactions.items()):
        if ctx.state.coordinator_for(tid) != ctx.node_id:
            continue
        if (states and txn.state not in states) or (pids and txn.producer_id not in pids):
            continue
        if (
            version >= 1
            and request.duration_filter >= 0
            and (txn.state != "Ongoing" or now_ms - txn.started_at_ms < request.duration_filter)
        ):
            continue
        if pattern is not None and not pattern.fullmatch(tid):
            continue
        listed.append(
            ListTransactionsResponse.TransactionState(
                transactional_id=tid, producer_id=txn.producer_id, transaction_state=txn.state
            )
        )
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=errors.NONE, transaction_states=listed
    )


@serve(DescribeProducersRequest)
async def describe_producers(
    ctx: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    """The idempotent and transactional producers a partition's leader knows."""
    topics = []
    for wanted in request.topics:
        partitions = []
        for index in wanted.partition_indexes:
            out = DescribeProducersResponse.PartitionResponse(partition_index=index)
            partition = ctx.state.partition(wanted.name, index)
            if partition is None:
                out.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif partition.leader != ctx.node_id:
                out.error_code = errors.NOT_LEADER_OR_FOLLOWER
            else:
                log = partition.log
                out.active_producers = [
                    DescribeProducersResponse.ProducerState(
                        producer_id=pid,
                        producer_epoch=entry.epoch,
                        last_sequence=entry.last_sequence,
                        last_timestamp=-1,
                        coordinator_epoch=0,
                        current_txn_start_offset=log.open_transactions.get(pid, -1),
                    )
                    for pid, entry in sorted(log.producers.items())
                ]
            partitions.append(out)
        topics.append(
            DescribeProducersResponse.TopicResponse(name=wanted.name, partitions=partitions)
        )
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
