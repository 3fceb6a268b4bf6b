"""Classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup; OffsetCommit,
OffsetFetch, OffsetDelete; ListGroups, DescribeGroups, DeleteGroups.

The state machine is :mod:`aiostream_kafka.testing.fake.groups`; here requests are read,
routed (a broker that is not the group's coordinator answers ``NOT_COORDINATOR``) and
answered in their version's shape.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.delete_groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiostream_kafka.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from aiostream_kafka.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from aiostream_kafka.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from aiostream_kafka.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from aiostream_kafka.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
)
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from aiostream_kafka.protocol.primitives import ZERO_UUID
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.groups import DEAD
from aiostream_kafka.testing.fake.handlers.registry import serve


def _coordinator_error(ctx: RequestContext, group_id: str) -> int:
    if ctx.state.coordinator_for(group_id) != ctx.node_id:
        return errors.NOT_COORDINATOR
    return errors.NONE


@serve(JoinGroupRequest)
async def join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    code = _coordinator_error(ctx, request.group_id)
    consumer_group = ctx.state.consumer_groups.groups.get(request.group_id)
    if not code and consumer_group is not None and consumer_group.members:
        code = errors.INCONSISTENT_GROUP_PROTOCOL  # a KIP-848 group's id (no conversion)
    if not code and request.group_id in ctx.state.share_groups.groups:
        # Kafka 4's classicGroupJoin: a group of another type (a share group, even empty)
        # answers with no member id.
        return JoinGroupResponse(
            error_code=errors.INCONSISTENT_GROUP_PROTOCOL, generation_id=-1, member_id=""
        )
    if code:
        return JoinGroupResponse(error_code=code, generation_id=-1, member_id=request.member_id)
    version = ctx.version
    result = await ctx.state.groups.join(
        request.group_id,
        request.member_id,
        request.group_instance_id if version >= 5 else None,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        ),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        client_id=ctx.client_id,
        client_host=ctx.client_host,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error_code,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # Before v7 the name is not nullable: "" stands for none.
        protocol_name=result.protocol_name if version >= 7 else (result.protocol_name or ""),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=member_id, group_instance_id=instance_id, metadata=metadata
            )
            for member_id, instance_id, metadata in result.members
        ],
    )


@serve(SyncGroupRequest)
async def sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    code = _coordinator_error(ctx, request.group_id)
    if code:
        return SyncGroupResponse(error_code=code)
    version = ctx.version
    result = await ctx.state.groups.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=result.error_code,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@serve(HeartbeatRequest)
async def heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    code = _coordinator_error(ctx, request.group_id) or ctx.state.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


@serve(LeaveGroupRequest)
async def leave_group(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    code = _coordinator_error(ctx, request.group_id)
    if code:
        return LeaveGroupResponse(error_code=code)
    groups = ctx.state.groups
    if ctx.version < 3:
        code = groups.leave(request.group_id, request.member_id, None)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    members = []
    for m in request.members:
        members.append(
            LeaveGroupResponse.MemberResponse(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=groups.leave(request.group_id, m.member_id, m.group_instance_id),
            )
        )
    return LeaveGroupResponse(throttle_time_ms=0, error_code=errors.NONE, members=members)


def _fail_offset_commit(request: Any, version: int, code: int) -> Response:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


@serve(OffsetCommitRequest, fail=_fail_offset_commit)
async def offset_commit(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    state = ctx.state
    version = ctx.version
    code = _coordinator_error(ctx, request.group_id) or state.check_commit(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        request.group_instance_id if version >= 7 else None,
    )
    topics = []
    for wanted in request.topics:
        name: str | None = wanted.name
        if version >= 10:
            by_id = state.topics_by_id.get(wanted.topic_id)
            name = by_id.name if by_id is not None else None
        partitions = []
        for p in wanted.partitions:
            part_code = code
            if not part_code:
                if name is None or state.partition(name, p.partition_index) is None:
                    part_code = (
                        errors.UNKNOWN_TOPIC_ID
                        if version >= 10
                        else errors.UNKNOWN_TOPIC_OR_PARTITION
                    )
                else:
                    part_code = state.groups.commit(
                        request.group_id,
                        name,
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch if version >= 6 else -1,
                        p.committed_metadata,
                    )
            partitions.append(
                OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=part_code
                )
            )
        topics.append(
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=wanted.name, topic_id=wanted.topic_id, partitions=partitions
            )
        )
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)


def _offsets_of_group(
    ctx: RequestContext,
    group_id: str,
    wanted: list[tuple[str, UUID, list[int]]] | None,
    require_stable: bool = False,
) -> tuple[int, list[tuple[str, UUID, list[tuple[int, int, int, str | None, int]]]]]:
    """``(group error, [(name, id, [(partition, offset, epoch, metadata, error)])])``;
    with ``require_stable`` a partition whose offset an open transaction commits is
    ``UNSTABLE_OFFSET_COMMIT`` (KIP-447)."""
    code = _coordinator_error(ctx, group_id)
    if code:
        return code, []
    state = ctx.state
    committed = state.groups.committed(group_id)
    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            by_topic.setdefault(topic, []).append(partition)
        wanted = []
        for name, indexes in by_topic.items():
            known = state.topic(name)
            wanted.append((name, known.topic_id if known else ZERO_UUID, indexes))
    unstable = state.transactions.pending_offsets(group_id) if require_stable else set()
    out = []
    for name, topic_id, indexes in wanted:
        rows: list[tuple[int, int, int, str | None, int]] = []
        for index in indexes:
            found = committed.get((name, index))
            if (name, index) in unstable:
                rows.append((index, -1, -1, "", errors.UNSTABLE_OFFSET_COMMIT))
            elif found is None:
                rows.append((index, -1, -1, "", errors.NONE))
            else:
                rows.append((index, found.offset, found.leader_epoch, found.metadata, errors.NONE))
        out.append((name, topic_id, rows))
    return errors.NONE, out


@serve(OffsetFetchRequest)
async def offset_fetch(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.version
    state = ctx.state
    if version < 8:
        wanted = (
            None
            if request.topics is None
            else [(t.name, ZERO_UUID, list(t.partition_indexes)) for t in request.topics]
        )
        code, topics = _offsets_of_group(
            ctx, request.group_id, wanted, version >= 7 and request.require_stable
        )
        return OffsetFetchResponse(
            throttle_time_ms=0,
            error_code=code,
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=i,
                            committed_offset=o,
                            committed_leader_epoch=e,
                            metadata=m,
                            error_code=c,
                        )
                        for i, o, e, m, c in rows
                    ],
                )
                for name, _, rows in topics
            ],
        )
    groups = []
    for group in request.groups:
        wanted_topics: list[tuple[str, UUID, list[int]]] | None = None
        if group.topics is not None:
            wanted_topics = []
            for t in group.topics:
                name = t.name
                if version >= 10:
                    by_id = state.topics_by_id.get(t.topic_id)
                    name = by_id.name if by_id is not None else ""
                wanted_topics.append((name, t.topic_id, list(t.partition_indexes)))
        code, topics = _offsets_of_group(ctx, group.group_id, wanted_topics, request.require_stable)
        groups.append(
            OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=group.group_id,
                error_code=code,
                topics=[
                    OffsetFetchResponse.OffsetFetchResponseTopics(
                        name=name,
                        topic_id=topic_id,
                        partitions=[
                            OffsetFetchResponse.OffsetFetchResponsePartitions(
                                partition_index=i,
                                committed_offset=o,
                                committed_leader_epoch=e,
                                metadata=m,
                                error_code=c,
                            )
                            for i, o, e, m, c in rows
                        ],
                    )
                    for name, topic_id, rows in topics
                ],
            )
        )
    return OffsetFetchResponse(throttle_time_ms=0, groups=groups)


@serve(ListGroupsRequest)
async def list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    states = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if ctx.version >= 5 else set()
    listed = []
    consumer_groups = ctx.state.consumer_groups.groups
    for cgroup in consumer_groups.values():
        if (states and cgroup.state.lower() not in states) or (types and "consumer" not in types):
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=cgroup.group_id,
                protocol_type="consumer",
                group_state=cgroup.state,
                group_type="consumer",
            )
        )
    for sgroup in ctx.state.share_groups.groups.values():
        if (states and sgroup.state.lower() not in states) or (types and "share" not in types):
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=sgroup.group_id,
                protocol_type="share",
                group_state=sgroup.state,
                group_type="share",
            )
        )
    for group in ctx.state.groups.groups.values():
        if group.state == DEAD or group.group_id in consumer_groups:
            continue
        if states and group.state.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "consumer",
                group_state=group.state,
                group_type="classic",
            )
        )
    return ListGroupsResponse(throttle_time_ms=0, error_code=errors.NONE, groups=listed)


@serve(DescribeGroupsRequest)
async def describe_groups(
    ctx: RequestContext, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    described = []
    for group_id in request.groups:
        code = _coordinator_error(ctx, group_id)
        group = ctx.state.groups.groups.get(group_id)
        if code or group is None:
            if not code and ctx.version >= 6:
                code = errors.GROUP_ID_NOT_FOUND
            described.append(
                DescribeGroupsResponse.DescribedGroup(
                    error_code=code,
                    group_id=group_id,
                    group_state=DEAD,
                    protocol_type="",
                    protocol_data="",
                )
            )
            continue
        described.append(
            DescribeGroupsResponse.DescribedGroup(
                error_code=errors.NONE,
                group_id=group_id,
                group_state=group.state,
                protocol_type=group.protocol_type or "",
                protocol_data=group.protocol_name or "",
                members=[
                    DescribeGroupsResponse.DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata_for(group.protocol_name),
                        member_assignment=m.assignment,
                    )
                    for m in group.members.values()
                ],
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=described)


@serve(DeleteGroupsRequest)
async def delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    results = []
    for group_id in request.groups_names:
        code = _coordinator_error(ctx, group_id)
        cgroup = ctx.state.consumer_groups.groups.get(group_id)
        sgroup = ctx.state.share_groups.groups.get(group_id)
        if not code and sgroup is not None:
            if sgroup.members:
                code = errors.NON_EMPTY_GROUP
            else:
                ctx.state.share_groups.delete_group(group_id)
        elif not code and cgroup is not None:
            if cgroup.members:
                code = errors.NON_EMPTY_GROUP
            else:
                del ctx.state.consumer_groups.groups[group_id]
                ctx.state.groups.groups.pop(group_id, None)
        elif not code:
            code = ctx.state.groups.delete(group_id)
        results.append(
            DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code)
        )
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)


@serve(OffsetDeleteRequest)
async def offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    """Delete committed offsets of a group; refused (``GROUP_SUBSCRIBED_TO_TOPIC``) for a
    topic a member of a KIP-848 group subscribes to."""
    state = ctx.state
    group_id = request.group_id
    code = _coordinator_error(ctx, group_id)
    offsets = state.groups.committed(group_id)
    if (
        not code
        and group_id not in state.groups.groups
        and (group_id not in state.consumer_groups.groups)
    ):
        code = errors.GROUP_ID_NOT_FOUND
    if code:
        return OffsetDeleteResponse(throttle_time_ms=0, error_code=code)
    subscribed = state.consumer_groups.subscribed_topics(group_id)
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            if state.partition(wanted.name, p.partition_index) is None:
                part_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif wanted.name in subscribed:
                part_code = errors.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                offsets.pop((wanted.name, p.partition_index), None)
                part_code = errors.NONE
            partitions.append(
                OffsetDeleteResponse.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=part_code
                )
            )
        topics.append(
            OffsetDeleteResponse.OffsetDeleteResponseTopic(name=wanted.name, partitions=partitions)
        )
    return OffsetDeleteResponse(throttle_time_ms=0, error_code=errors.NONE, topics=topics)
