"""Produce (idempotent and transactional writes; the coordinator's side of transactions is
:mod:`.transactions`)."""

from __future__ import annotations

import struct
from typing import Any
from uuid import UUID

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.error_codes import ERRORS_BY_NAME
from aiostream_kafka.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.log import DEFAULT_MAX_BATCH_BYTES
from aiostream_kafka.testing.fake.state import ClusterState

_TopicResponse = ProduceResponse.TopicProduceResponse
_PartitionResponse = ProduceResponse.PartitionProduceResponse
_INVALID_REQUIRED_ACKS = ERRORS_BY_NAME["INVALID_REQUIRED_ACKS"].code
#: A v2 batch's producer id and epoch (at byte 43); its magic is byte 16, its
#: attributes bytes 21-22.
_PRODUCER = struct.Struct(">qh")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


def _topic_name(state: ClusterState, name: str, topic_id: UUID, version: int) -> str | None:
    if version >= 13:
        topic = state.topics_by_id.get(topic_id)
        return topic.name if topic is not None else None
    return name


def _max_batch_bytes(configs: dict[str, str]) -> int:
    try:
        return int(configs.get("max.message.bytes", DEFAULT_MAX_BATCH_BYTES))
    except ValueError:
        return DEFAULT_MAX_BATCH_BYTES


def _fail_produce(request: Any, version: int, code: int) -> Response:
    return ProduceResponse(
        responses=[
            _TopicResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[
                    _PartitionResponse(index=p.index, error_code=code, base_offset=-1)
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )


@serve(ProduceRequest, fail=_fail_produce)
async def produce(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    state = ctx.state
    version = ctx.version
    responses = []
    endpoints: dict[int, ProduceResponse.NodeEndpoint] = {}
    for topic_data in request.topic_data:
        name = _topic_name(state, topic_data.name, topic_data.topic_id, version)
        partition_responses = []
        for data in topic_data.partition_data:
            out = _PartitionResponse(
                index=data.index, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
            )
            partition = state.partition(name, data.index) if name is not None else None
            if request.acks not in (0, 1, -1):
                out.error_code = _INVALID_REQUIRED_ACKS
            elif partition is None:
                out.error_code = (
                    errors.UNKNOWN_TOPIC_ID if version >= 13 else errors.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif partition.leader != ctx.node_id:
                out.error_code = errors.NOT_LEADER_OR_FOLLOWER
                leader = state.brokers.get(partition.leader)
                if leader is not None and leader.alive:
                    out.current_leader = ProduceResponse.LeaderIdAndEpoch(
                        leader_id=leader.node_id, leader_epoch=partition.leader_epoch
                    )
                    endpoints[leader.node_id] = ProduceResponse.NodeEndpoint(
                        node_id=leader.node_id,
                        host=leader.host,
                        port=ctx.port_of(leader),
                        rack=leader.rack,
                    )
            elif data.records is None:
                out.error_code = errors.INVALID_RECORD
            elif (code := _transaction_check(state, data.records, partition.topic, data.index,
                                             version)):  # fmt: skip
                out.error_code = code
            else:
                topic = state.topics[partition.topic]
                result = partition.log.append(
                    bytes(data.records),
                    leader_epoch=partition.leader_epoch,
                    max_batch_bytes=_max_batch_bytes(topic.configs),
                )
                out.error_code = result.error_code
                out.error_message = result.message
                if result.error_code == errors.NONE:
                    out.base_offset = result.base_offset
                    out.log_start_offset = result.log_start_offset
            partition_responses.append(out)
        responses.append(
            _TopicResponse(
                name=topic_data.name,
                topic_id=topic_data.topic_id,
                partition_responses=partition_responses,
            )
        )
    if request.acks == 0:
        return None
    return ProduceResponse(
        responses=responses, throttle_time_ms=0, node_endpoints=list(endpoints.values())
    )


def _transaction_check(
    state: ClusterState,
    records: bytes | bytearray | memoryview,
    topic: str,
    index: int,
    version: int,
) -> int:
    """The error code of a transactional write (0 for any other): its producer's epoch
    and transaction, as the coordinator knows them (Produce v12+ joins the transaction,
    transaction protocol v2)."""
    if len(records) < 61:
        return errors.NONE
    magic = records[16]
    attributes = (records[21] << 8) | records[22]
    if magic != 2 or not attributes & _TRANSACTIONAL or attributes & _CONTROL:
        return errors.NONE
    producer_id, producer_epoch = _PRODUCER.unpack_from(records, 43)
    return state.transactions.produce_check(
        producer_id, producer_epoch, topic, index, v2=version >= 12
    )
