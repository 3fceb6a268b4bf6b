"""Fetch (v4+, sessions of KIP-227, long polling), ListOffsets and OffsetForLeaderEpoch.

A Fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` for an append to
one of its partitions (a listener on their logs), then answers with what is there.
``max_bytes`` bounds the response and ``partition_max_bytes`` each partition, except
that the first batch of the first partition with data is returned whole (KIP-74).
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any
from uuid import UUID

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.fetch_sessions import (
    FINAL_EPOCH,
    FetchSession,
    SessionPartition,
    TopicRef,
)
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.state import ClusterState, Partition

_PartitionData = FetchResponse.PartitionData
_TopicResponse = FetchResponse.FetchableTopicResponse
_READ_COMMITTED = 1
_EARLIEST = -2
_LATEST = -1
_MAX_TIMESTAMP = -3
_EARLIEST_LOCAL = -4
_EARLIEST_PENDING_UPLOAD = -5
_LATEST_TIERED = -6
_EPOCH = struct.Struct(">i")


def _leader_epoch_error(requested: int, partition: Partition) -> int:
    if requested < 0 or requested == partition.leader_epoch:
        return errors.NONE
    if requested < partition.leader_epoch:
        return errors.FENCED_LEADER_EPOCH
    return errors.UNKNOWN_LEADER_EPOCH


def _resolve(state: ClusterState, ref: TopicRef) -> str | None:
    if isinstance(ref, str):
        return ref
    topic = state.topics_by_id.get(ref)
    return topic.name if topic is not None else None


class _FetchRound:
    """One evaluation of a Fetch's partitions (run again after each wake-up)."""

    def __init__(self, ctx: RequestContext, request: FetchRequest, parts: list[SessionPartition]):
        self.ctx = ctx
        self.request = request
        self.parts = parts
        self.bytes = 0
        self.errors = 0
        self.data: list[tuple[SessionPartition, _PartitionData]] = []
        self.endpoints: dict[int, FetchResponse.NodeEndpoint] = {}

    def run(self) -> None:
        state = self.ctx.state
        version = self.ctx.version
        remaining = self.request.max_bytes
        committed = self.request.isolation_level == _READ_COMMITTED
        for part in self.parts:
            out = _PartitionData(
                partition_index=part.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=[] if committed else None,
                preferred_read_replica=-1,
                records=None,
            )
            name = _resolve(state, part.topic)
            partition = state.partition(name, part.partition) if name is not None else None
            if partition is None:
                out.error_code = (
                    errors.UNKNOWN_TOPIC_ID
                    if isinstance(part.topic, UUID)
                    else errors.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif partition.leader != self.ctx.node_id:
                out.error_code = errors.NOT_LEADER_OR_FOLLOWER
                leader = state.brokers.get(partition.leader)
                if leader is not None and leader.alive and version >= 12:
                    out.current_leader = FetchResponse.LeaderIdAndEpoch(
                        leader_id=leader.node_id, leader_epoch=partition.leader_epoch
                    )
                    self.endpoints[leader.node_id] = FetchResponse.NodeEndpoint(
                        node_id=leader.node_id,
                        host=leader.host,
                        port=self.ctx.port_of(leader),
                        rack=leader.rack,
                    )
            else:
                log = partition.log
                out.high_watermark = log.high_watermark
                out.last_stable_offset = log.last_stable_offset
                out.log_start_offset = log.log_start_offset
                out.error_code = _leader_epoch_error(part.current_leader_epoch, partition)
                if out.error_code == errors.NONE and not (
                    log.log_start_offset <= part.fetch_offset <= log.high_watermark
                ):
                    out.error_code = errors.OFFSET_OUT_OF_RANGE
                if out.error_code == errors.NONE:
                    upto = log.last_stable_offset if committed else log.high_watermark
                    limit = min(part.max_bytes, remaining)
                    records = log.read(part.fetch_offset, limit, min_one=self.bytes == 0, upto=upto)
                    out.records = records
                    if committed and log.aborted:
                        out.aborted_transactions = [
                            FetchResponse.AbortedTransaction(
                                producer_id=a.producer_id, first_offset=a.first_offset
                            )
                            for a in log.aborted_between(part.fetch_offset, upto)
                        ]
                    self.bytes += len(records)
                    remaining = max(0, remaining - len(records))
            if out.error_code != errors.NONE:
                self.errors += 1
            self.data.append((part, out))

    def partitions(self) -> list[Partition]:
        """The partitions of this fetch led here (to wait for appends on)."""
        out = []
        for part in self.parts:
            name = _resolve(self.ctx.state, part.topic)
            partition = self.ctx.state.partition(name, part.partition) if name else None
            if partition is not None and partition.leader == self.ctx.node_id:
                out.append(partition)
        return out


def _requested(request: FetchRequest, version: int) -> list[SessionPartition]:
    parts = []
    for topic in request.topics:
        ref: TopicRef = topic.topic_id if version >= 13 else topic.topic
        for p in topic.partitions:
            parts.append(
                SessionPartition(
                    ref, p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch
                )
            )
    return parts


def _forgotten(request: FetchRequest, version: int) -> list[tuple[TopicRef, int]]:
    out: list[tuple[TopicRef, int]] = []
    for topic in request.forgotten_topics_data:
        ref: TopicRef = topic.topic_id if version >= 13 else topic.topic
        out += [(ref, p) for p in topic.partitions]
    return out


def _fail_fetch(request: Any, version: int, code: int) -> Response:
    return FetchResponse(error_code=code, session_id=0, responses=[])


@serve(FetchRequest, fail=_fail_fetch)
async def fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    version = ctx.version
    sessions = ctx.broker.fetch_sessions
    session: FetchSession | None = None
    full = True
    session_id = request.session_id if version >= 7 else 0
    epoch = request.session_epoch if version >= 7 else FINAL_EPOCH
    if session_id == 0 and epoch not in (0, FINAL_EPOCH):
        return FetchResponse(error_code=errors.INVALID_FETCH_SESSION_EPOCH, session_id=0)
    if session_id != 0 and epoch in (0, FINAL_EPOCH):
        sessions.remove(session_id)
    if epoch == 0:
        session = sessions.create()
        session.update(_requested(request, version))
        parts = list(session.partitions.values())
    elif session_id != 0 and epoch != FINAL_EPOCH:
        session = sessions.get(session_id)
        if session is None:
            return FetchResponse(error_code=errors.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
        if epoch != session.next_epoch:
            return FetchResponse(error_code=errors.INVALID_FETCH_SESSION_EPOCH, session_id=0)
        session.next_epoch = session.next_epoch + 1 if session.next_epoch < 2**31 - 1 else 1
        session.update(_requested(request, version))
        session.forget(_forgotten(request, version))
        parts = list(session.partitions.values())
        full = False
        sessions.incremental_fetches += 1
    else:
        parts = _requested(request, version)

    # The long poll waits in real time, also under a ManualClock (see clock.py): a client
    # waiting on it must get its answer without the test advancing the cluster's clock.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000
    while True:
        round_ = _FetchRound(ctx, request, parts)
        round_.run()
        left = deadline - loop.time()
        if round_.bytes >= max(request.min_bytes, 1) or round_.errors or left <= 0:
            break
        woken = loop.create_future()

        def wake(woken: asyncio.Future[None] = woken) -> None:
            if not woken.done():
                woken.set_result(None)

        watched = round_.partitions()
        for partition in watched:
            partition.log.add_listener(wake)
        try:
            await asyncio.wait_for(woken, left)
        except TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.log.remove_listener(wake)

    topics: dict[TopicRef, _TopicResponse] = {}
    for part, data in round_.data:
        if not full and not (
            data.records
            or data.error_code
            or data.high_watermark != part.sent_high_watermark
            or data.last_stable_offset != part.sent_last_stable_offset
            or data.log_start_offset != part.sent_log_start_offset
        ):
            continue
        part.sent_high_watermark = data.high_watermark
        part.sent_last_stable_offset = data.last_stable_offset
        part.sent_log_start_offset = data.log_start_offset
        topic = topics.get(part.topic)
        if topic is None:
            if isinstance(part.topic, str):
                topic = _TopicResponse(topic=part.topic, partitions=[])
            else:
                topic = _TopicResponse(
                    topic=_resolve(ctx.state, part.topic) or "", topic_id=part.topic, partitions=[]
                )
            topics[part.topic] = topic
        topic.partitions.append(data)
    return FetchResponse(
        throttle_time_ms=0,
        error_code=errors.NONE,
        session_id=session.session_id if session is not None else 0,
        responses=list(topics.values()),
        node_endpoints=list(round_.endpoints.values()),
    )


def _fail_list_offsets(request: Any, version: int, code: int) -> Response:
    return ListOffsetsResponse(
        topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    ListOffsetsResponse.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=-1,
                        offset=-1,
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


@serve(ListOffsetsRequest, fail=_fail_list_offsets)
async def list_offsets(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    committed = ctx.version >= 2 and request.isolation_level == _READ_COMMITTED
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            out = ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, timestamp=-1, offset=-1, leader_epoch=-1
            )
            partition = ctx.state.partition(wanted.name, p.partition_index)
            if partition is None:
                out.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif partition.leader != ctx.node_id:
                out.error_code = errors.NOT_LEADER_OR_FOLLOWER
            else:
                out.error_code = _leader_epoch_error(p.current_leader_epoch, partition)
            if partition is not None and out.error_code == errors.NONE:
                log = partition.log
                out.leader_epoch = partition.leader_epoch
                ts = p.timestamp
                if ts in (_EARLIEST, _EARLIEST_LOCAL):
                    out.offset = log.log_start_offset
                elif ts == _LATEST or ts == _LATEST_TIERED:
                    out.offset = log.last_stable_offset if committed else log.high_watermark
                elif ts == _EARLIEST_PENDING_UPLOAD:
                    out.offset = -1
                elif ts == _MAX_TIMESTAMP:
                    found = log.max_timestamp()
                    if found is not None:
                        out.offset, out.timestamp = found
                elif ts >= 0:
                    found = log.offset_for_timestamp(ts)
                    if found is not None:
                        out.offset, out.timestamp = found
                else:
                    out.error_code = errors.INVALID_REQUEST
            partitions.append(out)
        topics.append(
            ListOffsetsResponse.ListOffsetsTopicResponse(name=wanted.name, partitions=partitions)
        )
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


@serve(OffsetForLeaderEpochRequest)
async def offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            out = OffsetForLeaderEpochResponse.EpochEndOffset(
                partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            partition = ctx.state.partition(wanted.topic, p.partition)
            if partition is None:
                out.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif partition.leader != ctx.node_id:
                out.error_code = errors.NOT_LEADER_OR_FOLLOWER
            else:
                out.error_code = _leader_epoch_error(p.current_leader_epoch, partition)
            if partition is not None and out.error_code == errors.NONE:
                out.leader_epoch, out.end_offset = _epoch_end(partition, p.leader_epoch)
            partitions.append(out)
        topics.append(
            OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                topic=wanted.topic, partitions=partitions
            )
        )
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def _epoch_end(partition: Partition, epoch: int) -> tuple[int, int]:
    """``(largest epoch <= epoch, the offset where the next epoch began)`` (KIP-101)."""
    if epoch > partition.leader_epoch:
        return -1, -1
    if epoch == partition.leader_epoch:
        return epoch, partition.log.log_end_offset
    found = -1
    for stored in partition.log.batches:
        (batch_epoch,) = _EPOCH.unpack_from(stored.data, 12)
        if batch_epoch > epoch:
            return (found if found >= 0 else epoch), stored.base_offset
        found = batch_epoch
    return epoch, partition.log.log_end_offset
