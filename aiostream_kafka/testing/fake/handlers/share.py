"""Share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe (the coordinator),
ShareFetch, ShareAcknowledge (the partition leaders, in share sessions), and the Admin's
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets.

The state machines are :mod:`aiostream_kafka.testing.fake.share_groups`; here requests
are read, routed (``NOT_COORDINATOR`` from a broker that is not the group's coordinator,
``NOT_LEADER_OR_FOLLOWER`` for a partition led elsewhere) and answered.

Share sessions as KIP-932 defines them: ShareFetch epoch 0 opens one (replacing the
member's session on this broker, whose records are released; no acknowledgements
allowed), each request then carries the next epoch (``INVALID_SHARE_SESSION_EPOCH``;
``SHARE_SESSION_NOT_FOUND`` without a session), -1 closes it (acknowledgements only) and
releases what it still holds, as does the connection closing. A ShareFetch that acquires
fewer than ``min_bytes`` waits up to ``max_wait_ms`` (on the cluster's clock) for an
append or a release on one of its partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.share_acknowledge import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
)
from aiostream_kafka.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from aiostream_kafka.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from aiostream_kafka.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.consumer_groups import heartbeat_response
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.log import StoredBatch
from aiostream_kafka.testing.fake.share_groups import (
    AckResult,
    PartitionKey,
    SessionKey,
    ShareSession,
)
from aiostream_kafka.testing.fake.state import Partition

_RECORD_LIMIT_MODE = 1
_FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1


def _group_type_error(ctx: RequestContext, group_id: str) -> tuple[int, str | None]:
    if ctx.state.coordinator_for(group_id) != ctx.node_id:
        return errors.NOT_COORDINATOR, None
    classic = ctx.state.groups.groups.get(group_id)
    # A classic group (even empty, with only its offsets) or a consumer group owns the id.
    if group_id in ctx.state.consumer_groups.groups or (
        classic is not None and (classic.members or classic.offsets or classic.state != "Dead")
    ):
        return errors.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
    return errors.NONE, None


# -- the coordinator -------------------------------------------------------------------


@serve(ShareGroupHeartbeatRequest)
async def share_group_heartbeat(
    ctx: RequestContext, request: ShareGroupHeartbeatRequest
) -> ShareGroupHeartbeatResponse:
    code, message = _group_type_error(ctx, request.group_id)
    if code:
        return ShareGroupHeartbeatResponse(
            error_code=code, error_message=message, member_id=request.member_id or None,
            member_epoch=-1,
        )  # fmt: skip
    result = ctx.state.share_groups.heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        rack_id=request.rack_id,
        subscribed=request.subscribed_topic_names,
        client_id=ctx.client_id,
        client_host=ctx.client_host,
    )
    return heartbeat_response(result, ShareGroupHeartbeatResponse)


@serve(ShareGroupDescribeRequest)
async def share_group_describe(
    ctx: RequestContext, request: ShareGroupDescribeRequest
) -> ShareGroupDescribeResponse:
    state = ctx.state
    names: dict[UUID, str] = {t.topic_id: t.name for t in state.topics.values()}
    out = []
    for group_id in request.group_ids:
        code, message = _group_type_error(ctx, group_id)
        group = state.share_groups.groups.get(group_id)
        if not code and group is None:
            code, message = errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        if code or group is None:
            out.append(
                ShareGroupDescribeResponse.DescribedGroup(
                    error_code=code, error_message=message, group_id=group_id,
                    group_state="Dead",
                )
            )  # fmt: skip
            continue
        out.append(
            ShareGroupDescribeResponse.DescribedGroup(
                error_code=errors.NONE,
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name="simple",
                members=[
                    ShareGroupDescribeResponse.Member(
                        member_id=m.member_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=list(m.subscribed),
                        assignment=ShareGroupDescribeResponse.Assignment(
                            topic_partitions=[
                                ShareGroupDescribeResponse.TopicPartitions(
                                    topic_id=t, topic_name=names.get(t, ""), partitions=sorted(ps)
                                )
                                for t, ps in sorted(m.assigned.items(), key=lambda i: str(i[0]))
                            ]
                        ),
                    )
                    for m in group.members.values()
                ],
            )
        )
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=out)


# -- the partition leaders -------------------------------------------------------------


@dataclass(slots=True)
class _PartitionOut:
    """What one partition's answer collects."""

    error_code: int = errors.NONE
    error_message: str | None = None
    ack: AckResult | None = None
    batches: dict[int, StoredBatch] = field(default_factory=dict)
    ranges: list[tuple[int, int, int]] = field(default_factory=list)
    leader: tuple[int, int] = (-1, -1)


def _locate(ctx: RequestContext, topic_id: UUID, index: int) -> tuple[int, Partition | None]:
    """The partition led here, or the error code saying why not."""
    topic = ctx.state.topics_by_id.get(topic_id)
    if topic is None:
        return errors.UNKNOWN_TOPIC_ID, None
    if not 0 <= index < len(topic.partitions):
        return errors.UNKNOWN_TOPIC_OR_PARTITION, None
    partition = topic.partitions[index]
    if partition.leader != ctx.node_id:
        return errors.NOT_LEADER_OR_FOLLOWER, partition
    return errors.NONE, partition


def _ack_batches(batches: list[Any]) -> list[tuple[int, int, list[int]]]:
    return [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]


def _acknowledge(
    ctx: RequestContext,
    group_id: str,
    member_id: str,
    acks: dict[PartitionKey, list[tuple[int, int, list[int]]]],
    outs: dict[PartitionKey, _PartitionOut],
    *,
    renew_allowed: bool,
) -> None:
    coordinator = ctx.state.share_groups
    for key, batches in acks.items():
        out = outs.setdefault(key, _PartitionOut())
        code, partition = _locate(ctx, *key)
        if code or partition is None:
            out.ack = AckResult(code)
            if partition is not None:
                out.leader = (partition.leader, partition.leader_epoch)
            continue
        sp = coordinator.partitions.get(group_id, {}).get(key)
        if sp is None:
            out.ack = AckResult(errors.INVALID_RECORD_STATE, "no records acquired here")
            continue
        out.ack = coordinator.acknowledge(sp, member_id, batches, renew_allowed=renew_allowed)


def _renew_allowed(ctx: RequestContext, group_id: str, is_renew_ack: bool) -> bool:
    return ctx.version >= 2 and is_renew_ack and ctx.state.share_groups.renew_enabled(group_id)


def _open_session(ctx: RequestContext, key: SessionKey) -> ShareSession:
    coordinator = ctx.state.share_groups
    coordinator.close_session(key)
    session = ShareSession(key)
    coordinator.sessions[key] = session
    hooks = ctx.connection.on_close

    def closed() -> None:
        if coordinator.sessions.get(key) is session:
            coordinator.close_session(key)

    hooks.append(closed)

    def detach() -> None:
        if closed in hooks:
            hooks.remove(closed)

    session.detach = detach
    return session


def _session_error(
    ctx: RequestContext, key: SessionKey, epoch: int
) -> tuple[int, ShareSession | None]:
    session = ctx.state.share_groups.sessions.get(key)
    if session is None:
        return errors.SHARE_SESSION_NOT_FOUND, None
    if epoch != _FINAL_EPOCH and epoch != session.next_epoch:
        return errors.INVALID_SHARE_SESSION_EPOCH, None
    return errors.NONE, session


def _fail_share_fetch(request: Any, version: int, code: int) -> Response:
    return ShareFetchResponse(error_code=code, acquisition_lock_timeout_ms=0, responses=[])


@serve(ShareFetchRequest, fail=_fail_share_fetch)
async def share_fetch(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    state = ctx.state
    coordinator = state.share_groups
    group_id, member_id = request.group_id or "", request.member_id or ""
    epoch = request.share_session_epoch
    lock_ms = coordinator.lock_ms(group_id) if group_id else 0

    def refused(code: int, message: str | None = None) -> ShareFetchResponse:
        return ShareFetchResponse(
            throttle_time_ms=0, error_code=code, error_message=message,
            acquisition_lock_timeout_ms=lock_ms, responses=[],
        )  # fmt: skip

    if not group_id:
        return refused(errors.INVALID_GROUP_ID, "GroupId can't be empty.")
    if not member_id:
        return refused(errors.INVALID_REQUEST, "MemberId can't be empty.")
    listed: list[PartitionKey] = []
    acks: dict[PartitionKey, list[tuple[int, int, list[int]]]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.topic_id, p.partition_index)
            listed.append(key)
            if p.acknowledgement_batches:
                acks[key] = _ack_batches(p.acknowledgement_batches)
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    session_key: SessionKey = (ctx.node_id, group_id, member_id)
    outs: dict[PartitionKey, _PartitionOut] = {}
    renew = _renew_allowed(ctx, group_id, request.is_renew_ack if ctx.version >= 2 else False)
    if epoch == 0:
        if acks:
            return refused(
                errors.INVALID_REQUEST, "a session opening ShareFetch has acknowledgements"
            )
        session = _open_session(ctx, session_key)
        session.partitions.update(listed)
    elif epoch == _FINAL_EPOCH:
        if forgotten or any(k not in acks for k in listed):
            return refused(errors.INVALID_REQUEST, "a final ShareFetch only acknowledges")
        code, found = _session_error(ctx, session_key, epoch)
        if code:
            return refused(code)
        _acknowledge(ctx, group_id, member_id, acks, outs, renew_allowed=renew)
        coordinator.close_session(session_key)
        return _fetch_response(ctx, outs, lock_ms)
    else:
        code, found = _session_error(ctx, session_key, epoch)
        if code or found is None:
            return refused(code)
        session = found
        session.next_epoch = session.next_epoch + 1 if session.next_epoch < _INT32_MAX else 1
        session.partitions.update(listed)
        session.partitions.difference_update(forgotten)
    _acknowledge(ctx, group_id, member_id, acks, outs, renew_allowed=renew)
    if ctx.version >= 2 and request.is_renew_ack:
        return _fetch_response(ctx, outs, lock_ms)  # renewals only: no fetching

    max_records = request.max_records if request.max_records > 0 else 500
    record_limit = ctx.version >= 2 and request.share_acquire_mode == _RECORD_LIMIT_MODE
    clock = state.clock
    deadline = clock.monotonic() + max(0, request.max_wait_ms) / 1000
    got_records = got_bytes = 0
    while True:
        watched: list[Any] = []  # logs and share partitions to wait on
        failed = False
        for key in sorted(session.partitions, key=lambda k: (str(k[0]), k[1])):
            code, partition = _locate(ctx, *key)
            if code:
                out = outs.setdefault(key, _PartitionOut())
                out.error_code = code
                if partition is not None:
                    out.leader = (partition.leader, partition.leader_epoch)
                failed = True
                continue
            assert partition is not None
            sp = coordinator.share_partition(group_id, key[0], key[1], partition.log)
            watched += [partition.log, sp]
            if got_records >= max_records or got_bytes >= request.max_bytes:
                continue
            acquired = coordinator.acquire(
                sp, partition.log, member_id, session_key, max_records - got_records,
                max(1, request.max_bytes - got_bytes), record_limit=record_limit,
            )  # fmt: skip
            if acquired.count:
                out = outs.setdefault(key, _PartitionOut())
                out.ranges += acquired.ranges
                for stored in acquired.batches:
                    if stored.base_offset not in out.batches:
                        out.batches[stored.base_offset] = stored
                        got_bytes += len(stored.data)
                got_records += acquired.count
        left = deadline - clock.monotonic()
        if got_bytes >= max(request.min_bytes, 1) or failed or left <= 0 or not watched:
            break
        if coordinator.sessions.get(session_key) is not session:
            break  # the session ended while waiting
        await _wait(ctx, watched, left)
    return _fetch_response(ctx, outs, lock_ms)


async def _wait(ctx: RequestContext, watched: list[Any], seconds: float) -> None:
    """Until an append or a release on one of ``watched`` (logs and share partitions), or
    ``seconds`` of the cluster's clock."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    hooks: list[list[Callable[[], None]]] = []
    for item in watched:
        if hasattr(item, "add_listener"):
            item.add_listener(wake)
        else:
            item.listeners.append(wake)
            hooks.append(item.listeners)
    timer = ctx.state.clock.call_later(seconds, wake)
    try:
        await woken
    finally:
        timer.cancel()
        for item in watched:
            if hasattr(item, "remove_listener"):
                item.remove_listener(wake)
        for listeners in hooks:
            if wake in listeners:
                listeners.remove(wake)


def _endpoint_of(ctx: RequestContext, node_id: int) -> Any:
    broker = ctx.state.brokers.get(node_id)
    if broker is None or not broker.alive:
        return None
    return broker


def _fetch_response(
    ctx: RequestContext, outs: dict[PartitionKey, _PartitionOut], lock_ms: int
) -> ShareFetchResponse:
    topics: dict[UUID, ShareFetchResponse.ShareFetchableTopicResponse] = {}
    endpoints: dict[int, ShareFetchResponse.NodeEndpoint] = {}
    for (topic_id, index), out in sorted(outs.items(), key=lambda i: (str(i[0][0]), i[0][1])):
        topic = topics.setdefault(
            topic_id,
            ShareFetchResponse.ShareFetchableTopicResponse(topic_id=topic_id, partitions=[]),
        )
        leader_id, leader_epoch = out.leader
        broker = (
            _endpoint_of(ctx, leader_id)
            if out.error_code == errors.NOT_LEADER_OR_FOLLOWER
            else None
        )
        if broker is not None:
            endpoints[broker.node_id] = ShareFetchResponse.NodeEndpoint(
                node_id=broker.node_id, host=broker.host, port=ctx.port_of(broker), rack=broker.rack
            )
        topic.partitions.append(
            ShareFetchResponse.PartitionData(
                partition_index=index,
                error_code=out.error_code,
                error_message=out.error_message,
                acknowledge_error_code=out.ack.error_code if out.ack is not None else 0,
                acknowledge_error_message=out.ack.message if out.ack is not None else None,
                current_leader=ShareFetchResponse.LeaderIdAndEpoch(
                    leader_id=leader_id, leader_epoch=leader_epoch
                ),
                records=b"".join(out.batches[b].data for b in sorted(out.batches)),
                acquired_records=[
                    ShareFetchResponse.AcquiredRecords(
                        first_offset=first, last_offset=last, delivery_count=count
                    )
                    for first, last, count in sorted(out.ranges)
                ],
            )
        )
    return ShareFetchResponse(
        throttle_time_ms=0,
        error_code=errors.NONE,
        acquisition_lock_timeout_ms=lock_ms,
        responses=list(topics.values()),
        node_endpoints=list(endpoints.values()),
    )


def _fail_share_acknowledge(request: Any, version: int, code: int) -> Response:
    return ShareAcknowledgeResponse(error_code=code, responses=[])


@serve(ShareAcknowledgeRequest, fail=_fail_share_acknowledge)
async def share_acknowledge(
    ctx: RequestContext, request: ShareAcknowledgeRequest
) -> ShareAcknowledgeResponse:
    coordinator = ctx.state.share_groups
    group_id, member_id = request.group_id or "", request.member_id or ""
    lock_ms = coordinator.lock_ms(group_id) if group_id else 0

    def refused(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
        return ShareAcknowledgeResponse(
            throttle_time_ms=0, error_code=code, error_message=message,
            acquisition_lock_timeout_ms=lock_ms, responses=[],
        )  # fmt: skip

    if not group_id:
        return refused(errors.INVALID_GROUP_ID, "GroupId can't be empty.")
    if not member_id:
        return refused(errors.INVALID_REQUEST, "MemberId can't be empty.")
    epoch = request.share_session_epoch
    if epoch == 0:
        return refused(errors.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a session")
    key: SessionKey = (ctx.node_id, group_id, member_id)
    code, session = _session_error(ctx, key, epoch)
    if code or session is None:
        return refused(code)
    if epoch != _FINAL_EPOCH:
        session.next_epoch = session.next_epoch + 1 if session.next_epoch < _INT32_MAX else 1
    acks = {
        (t.topic_id, p.partition_index): _ack_batches(p.acknowledgement_batches)
        for t in request.topics
        for p in t.partitions
    }
    outs: dict[PartitionKey, _PartitionOut] = {}
    renew = _renew_allowed(ctx, group_id, request.is_renew_ack if ctx.version >= 2 else False)
    _acknowledge(ctx, group_id, member_id, acks, outs, renew_allowed=renew)
    if epoch == _FINAL_EPOCH:
        coordinator.close_session(key)
    topics: dict[UUID, ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse] = {}
    for (topic_id, index), out in sorted(outs.items(), key=lambda i: (str(i[0][0]), i[0][1])):
        topic = topics.setdefault(
            topic_id,
            ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(
                topic_id=topic_id, partitions=[]
            ),
        )
        ack = out.ack or AckResult(errors.NONE)
        topic.partitions.append(
            ShareAcknowledgeResponse.PartitionData(
                partition_index=index,
                error_code=ack.error_code,
                error_message=ack.message,
                current_leader=ShareAcknowledgeResponse.LeaderIdAndEpoch(
                    leader_id=out.leader[0], leader_epoch=out.leader[1]
                ),
            )
        )
    return ShareAcknowledgeResponse(
        throttle_time_ms=0,
        error_code=errors.NONE,
        acquisition_lock_timeout_ms=lock_ms,
        responses=list(topics.values()),
    )


# -- the Admin's offsets calls ---------------------------------------------------------


@serve(DescribeShareGroupOffsetsRequest)
async def describe_share_group_offsets(
    ctx: RequestContext, request: DescribeShareGroupOffsetsRequest
) -> DescribeShareGroupOffsetsResponse:
    """The start offset (and, v1, the lag) of each partition asked for (every partition
    the group has state for when the topics are null); -1 where it has none."""
    state = ctx.state
    coordinator = state.share_groups
    _Group = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    _Topic = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseTopic
    _Part = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition
    groups = []
    for wanted in request.groups:
        code, message = _group_type_error(ctx, wanted.group_id)
        if code:
            groups.append(_Group(group_id=wanted.group_id, error_code=code, error_message=message))
            continue
        held = coordinator.partitions.get(wanted.group_id, {})
        asked: dict[str, list[int]] = {}
        if wanted.topics is None:
            for topic_id, index in held:
                topic = state.topics_by_id.get(topic_id)
                if topic is not None:
                    asked.setdefault(topic.name, []).append(index)
        else:
            for t in wanted.topics:
                asked.setdefault(t.topic_name, []).extend(t.partitions)
        topics = []
        for name, indexes in sorted(asked.items()):
            topic = state.topic(name)
            parts = []
            for index in sorted(set(indexes)):
                part = _Part(partition_index=index, start_offset=-1, leader_epoch=-1, lag=-1)
                if topic is None or not 0 <= index < len(topic.partitions):
                    part.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
                    part.error_message = "This server does not host this topic-partition."
                else:
                    sp = held.get((topic.topic_id, index))
                    if sp is not None:
                        partition = topic.partitions[index]
                        part.start_offset = sp.reported_start
                        part.leader_epoch = partition.leader_epoch
                        part.lag = sp.lag(partition.log.high_watermark)
                parts.append(part)
            topics.append(
                _Topic(
                    topic_name=name,
                    topic_id=topic.topic_id if topic is not None else UUID(int=0),
                    partitions=parts,
                )
            )
        groups.append(_Group(group_id=wanted.group_id, topics=topics, error_code=errors.NONE))
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=groups)


def _offsets_change_error(ctx: RequestContext, group_id: str) -> tuple[int, str | None]:
    code, message = _group_type_error(ctx, group_id)
    if code:
        return code, message
    group = ctx.state.share_groups.groups.get(group_id)
    if group is None:
        return errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
    if group.members:
        return errors.NON_EMPTY_GROUP, f"Share group {group_id} is not empty."
    return errors.NONE, None


@serve(AlterShareGroupOffsetsRequest)
async def alter_share_group_offsets(
    ctx: RequestContext, request: AlterShareGroupOffsetsRequest
) -> AlterShareGroupOffsetsResponse:
    """Set start offsets of an empty share group (``NON_EMPTY_GROUP`` with members)."""
    code, message = _offsets_change_error(ctx, request.group_id)
    if code:
        return AlterShareGroupOffsetsResponse(
            throttle_time_ms=0, error_code=code, error_message=message
        )
    _Topic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
    _Part = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponsePartition
    responses = []
    for t in request.topics:
        topic = ctx.state.topic(t.topic_name)
        parts = []
        for p in t.partitions:
            out = _Part(partition_index=p.partition_index, error_code=errors.NONE)
            if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                out.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
                out.error_message = "This server does not host this topic-partition."
            elif p.start_offset < 0:
                out.error_code = errors.INVALID_REQUEST
                out.error_message = f"start offset {p.start_offset} is negative"
            else:
                ctx.state.share_groups.set_start_offset(
                    request.group_id, topic.topic_id, p.partition_index, p.start_offset
                )
            parts.append(out)
        responses.append(
            _Topic(
                topic_name=t.topic_name,
                topic_id=topic.topic_id if topic is not None else UUID(int=0),
                partitions=parts,
            )
        )
    return AlterShareGroupOffsetsResponse(
        throttle_time_ms=0, error_code=errors.NONE, responses=responses
    )


@serve(DeleteShareGroupOffsetsRequest)
async def delete_share_group_offsets(
    ctx: RequestContext, request: DeleteShareGroupOffsetsRequest
) -> DeleteShareGroupOffsetsResponse:
    """Forget an empty share group's state of whole topics."""
    code, message = _offsets_change_error(ctx, request.group_id)
    if code:
        return DeleteShareGroupOffsetsResponse(
            throttle_time_ms=0, error_code=code, error_message=message
        )
    _Topic = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
    responses = []
    for t in request.topics:
        topic = ctx.state.topic(t.topic_name)
        if topic is None:
            responses.append(
                _Topic(
                    topic_name=t.topic_name, topic_id=UUID(int=0),
                    error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
                    error_message=f"Topic {t.topic_name} does not exist.",
                )
            )  # fmt: skip
            continue
        ctx.state.share_groups.delete_state(request.group_id, topic.topic_id)
        responses.append(
            _Topic(topic_name=t.topic_name, topic_id=topic.topic_id, error_code=errors.NONE)
        )
    return DeleteShareGroupOffsetsResponse(
        throttle_time_ms=0, error_code=errors.NONE, responses=responses
    )
