"""KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The state machine is :mod:`aiostream_kafka.testing.fake.consumer_groups`; here requests
are read, routed (a broker that is not the group's coordinator answers
``NOT_COORDINATOR``) and answered with topic ids.
"""

from __future__ import annotations

from typing import Any, TypeVar
from uuid import UUID

from aiostream_kafka.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from aiostream_kafka.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.consumer_groups import Assignment, HeartbeatResult
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.state import ClusterState

R = TypeVar("R")


def _coordinator_error(ctx: RequestContext, group_id: str) -> int:
    if ctx.state.coordinator_for(group_id) != ctx.node_id:
        return errors.NOT_COORDINATOR
    classic = ctx.state.groups.groups.get(group_id)
    if classic is not None and classic.members:
        # A classic group with members: Kafka would convert it; the fake does not.
        return errors.GROUP_ID_NOT_FOUND
    return errors.NONE


@serve(ConsumerGroupHeartbeatRequest)
async def consumer_group_heartbeat(
    ctx: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    code = _coordinator_error(ctx, request.group_id)
    if not code and request.group_id in ctx.state.share_groups.groups:
        # Kafka 4's getOrMaybeCreateConsumerGroup: a share group (even empty) owns the id
        # until it is deleted; the answer carries only the error.
        return ConsumerGroupHeartbeatResponse(
            error_code=errors.GROUP_ID_NOT_FOUND,
            error_message=f"Group {request.group_id} is not a consumer group",
        )
    if code:
        return ConsumerGroupHeartbeatResponse(
            error_code=code, member_id=request.member_id or None, member_epoch=-1
        )
    owned: Assignment | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            owned.setdefault(tp.topic_id, set()).update(tp.partitions)
    result = ctx.state.consumer_groups.heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_names=request.subscribed_topic_names,
        subscribed_regex=request.subscribed_topic_regex if ctx.version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.client_id,
        client_host=ctx.client_host,
        generate_member_id=ctx.version == 0,
    )
    return heartbeat_response(result, ConsumerGroupHeartbeatResponse)


def heartbeat_response(result: HeartbeatResult, response_type: type[R]) -> R:
    """The answer to a ConsumerGroupHeartbeat or a ShareGroupHeartbeat (``response_type``,
    whose ``Assignment`` and ``TopicPartitions`` have the same fields in both): topics in
    a stable order, partitions sorted."""
    kind: Any = response_type
    assignment = None
    if result.assignment is not None:
        assignment = kind.Assignment(
            topic_partitions=[
                kind.TopicPartitions(topic_id=topic_id, partitions=sorted(ps))
                for topic_id, ps in sorted(result.assignment.items(), key=lambda i: str(i[0]))
            ]
        )
    response: R = kind(
        throttle_time_ms=0,
        error_code=result.error_code,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )
    return response


def _described(
    state: ClusterState, assignment: Assignment
) -> ConsumerGroupDescribeResponse.Assignment:
    names: dict[UUID, str] = {t.topic_id: t.name for t in state.topics.values()}
    return ConsumerGroupDescribeResponse.Assignment(
        topic_partitions=[
            ConsumerGroupDescribeResponse.TopicPartitions(
                topic_id=topic_id, topic_name=names.get(topic_id, ""), partitions=sorted(ps)
            )
            for topic_id, ps in sorted(assignment.items(), key=lambda i: str(i[0]))
        ]
    )


@serve(ConsumerGroupDescribeRequest)
async def consumer_group_describe(
    ctx: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    state = ctx.state
    groups = []
    for group_id in request.group_ids:
        code = errors.NOT_COORDINATOR if state.coordinator_for(group_id) != ctx.node_id else 0
        group = state.consumer_groups.groups.get(group_id)
        if code or group is None:
            why = (
                "is not a consumer group" if group_id in state.share_groups.groups else "not found."
            )
            groups.append(
                ConsumerGroupDescribeResponse.DescribedGroup(
                    error_code=code or errors.GROUP_ID_NOT_FOUND,
                    error_message=None if code else f"Group {group_id} {why}",
                    group_id=group_id,
                    group_state="Dead",
                )
            )
            continue
        groups.append(
            ConsumerGroupDescribeResponse.DescribedGroup(
                error_code=errors.NONE,
                group_id=group_id,
                group_state=group.state,
                group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor,
                authorized_operations=-2147483648,
                members=[
                    ConsumerGroupDescribeResponse.Member(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        subscribed_topic_names=list(m.subscribed_names),
                        subscribed_topic_regex=m.subscribed_regex,
                        assignment=_described(state, m.assigned),
                        target_assignment=_described(state, group.target.get(m.member_id, {})),
                        member_type=1,
                    )
                    for m in group.members.values()
                ],
            )
        )
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)
