"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords.

Topic changes take effect at once on every broker (there is one state), so the
``timeout_ms`` of these requests is never waited for.
"""

from __future__ import annotations

from typing import Any

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
)
from aiostream_kafka.protocol.messages.create_topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aiostream_kafka.protocol.messages.delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)
from aiostream_kafka.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiostream_kafka.protocol.primitives import ZERO_UUID
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.configs import check_topic_config
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.state import TopicError

_TopicResult = CreateTopicsResponse.CreatableTopicResult
_TopicConfig = CreateTopicsResponse.CreatableTopicConfigs
_DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs' ConfigSource of a topic's own setting


def _fail_create_topics(request: Any, version: int, code: int) -> Response:
    return CreateTopicsResponse(
        topics=[_TopicResult(name=t.name, error_code=code) for t in request.topics]
    )


@serve(CreateTopicsRequest, fail=_fail_create_topics)
async def create_topics(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    results = []
    seen: set[str] = set()
    for wanted in request.topics:
        if wanted.name in seen:
            results.append(
                _TopicResult(
                    name=wanted.name,
                    error_code=errors.INVALID_REQUEST,
                    error_message="Duplicate topic name.",
                )
            )
            continue
        seen.add(wanted.name)
        configs = {c.name: c.value for c in wanted.configs if c.value is not None}
        problems = [p for p in (check_topic_config(k, v) for k, v in configs.items()) if p]
        if problems:
            results.append(
                _TopicResult(
                    name=wanted.name, error_code=errors.INVALID_CONFIG, error_message=problems[0]
                )
            )
            continue
        assignments = [
            a.broker_ids for a in sorted(wanted.assignments, key=lambda a: a.partition_index)
        ]
        if assignments and (wanted.num_partitions != -1 or wanted.replication_factor != -1):
            results.append(
                _TopicResult(
                    name=wanted.name,
                    error_code=errors.INVALID_REQUEST,
                    error_message="Both numPartitions or replicationFactor and "
                    "replicasAssignments were set.",
                )
            )
            continue
        try:
            topic = ctx.state.create_topic(
                wanted.name,
                wanted.num_partitions,
                wanted.replication_factor,
                configs,
                assignments or None,
                validate_only=request.validate_only,
            )
        except TopicError as exc:
            results.append(
                _TopicResult(name=wanted.name, error_code=exc.code, error_message=exc.message)
            )
            continue
        rf = (
            len(topic.partitions[0].replicas)
            if topic.partitions
            else (
                wanted.replication_factor
                if wanted.replication_factor > 0
                else ctx.state.default_replication_factor
            )
        )
        partitions = len(topic.partitions) or (
            wanted.num_partitions if wanted.num_partitions > 0 else ctx.state.default_partitions
        )
        results.append(
            _TopicResult(
                name=topic.name,
                topic_id=topic.topic_id if not request.validate_only else ZERO_UUID,
                error_code=errors.NONE,
                num_partitions=partitions,
                replication_factor=rf,
                configs=[
                    _TopicConfig(
                        name=k,
                        value=v,
                        read_only=False,
                        config_source=_DYNAMIC_TOPIC_CONFIG,
                        is_sensitive=False,
                    )
                    for k, v in sorted(configs.items())
                ],
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _fail_delete_topics(request: Any, version: int, code: int) -> Response:
    if version >= 6:
        results = [
            DeleteTopicsResponse.DeletableTopicResult(
                name=t.name, topic_id=t.topic_id, error_code=code
            )
            for t in request.topics
        ]
    else:
        results = [
            DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=code)
            for name in request.topic_names
        ]
    return DeleteTopicsResponse(responses=results)


@serve(DeleteTopicsRequest, fail=_fail_delete_topics)
async def delete_topics(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    state = ctx.state
    wanted: list[tuple[str | None, Any]] = (
        [(t.name, t.topic_id) for t in request.topics]
        if ctx.version >= 6
        else [(name, ZERO_UUID) for name in request.topic_names]
    )
    results = []
    for name, topic_id in wanted:
        if topic_id != ZERO_UUID:
            by_id = state.topics_by_id.get(topic_id)
            if by_id is None:
                results.append(
                    DeleteTopicsResponse.DeletableTopicResult(
                        name=None, topic_id=topic_id, error_code=errors.UNKNOWN_TOPIC_ID
                    )
                )
                continue
            name = by_id.name
        try:
            topic = state.delete_topic(name or "")
        except TopicError as exc:
            results.append(
                DeleteTopicsResponse.DeletableTopicResult(
                    name=name, topic_id=topic_id, error_code=exc.code, error_message=exc.message
                )
            )
            continue
        results.append(
            DeleteTopicsResponse.DeletableTopicResult(
                name=topic.name, topic_id=topic.topic_id, error_code=errors.NONE
            )
        )
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


def _fail_create_partitions(request: Any, version: int, code: int) -> Response:
    return CreatePartitionsResponse(
        results=[
            CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code)
            for t in request.topics
        ]
    )


@serve(CreatePartitionsRequest, fail=_fail_create_partitions)
async def create_partitions(
    ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    results = []
    for wanted in request.topics:
        assignments = (
            [a.broker_ids for a in wanted.assignments] if wanted.assignments is not None else None
        )
        code, message = errors.NONE, None
        try:
            ctx.state.add_partitions(
                wanted.name, wanted.count, assignments, validate_only=request.validate_only
            )
        except TopicError as exc:
            code, message = exc.code, exc.message
        results.append(
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=wanted.name, error_code=code, error_message=message
            )
        )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def _fail_delete_records(request: Any, version: int, code: int) -> Response:
    return DeleteRecordsResponse(
        topics=[
            DeleteRecordsResponse.DeleteRecordsTopicResult(
                name=t.name,
                partitions=[
                    DeleteRecordsResponse.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index, low_watermark=-1, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


@serve(DeleteRecordsRequest, fail=_fail_delete_records)
async def delete_records(
    ctx: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    topics = []
    for wanted in request.topics:
        partitions = []
        for p in wanted.partitions:
            partition = ctx.state.partition(wanted.name, p.partition_index)
            code, low = errors.NONE, -1
            if partition is None:
                code = errors.UNKNOWN_TOPIC_OR_PARTITION
            elif partition.leader != ctx.node_id:
                code = errors.NOT_LEADER_OR_FOLLOWER
            else:
                try:
                    low = partition.log.delete_records(p.offset)
                except ValueError:
                    code = errors.OFFSET_OUT_OF_RANGE
            partitions.append(
                DeleteRecordsResponse.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low, error_code=code
                )
            )
        topics.append(
            DeleteRecordsResponse.DeleteRecordsTopicResult(name=wanted.name, partitions=partitions)
        )
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
