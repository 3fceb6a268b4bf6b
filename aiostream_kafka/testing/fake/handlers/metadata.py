"""ApiVersions, Metadata, DescribeCluster and FindCoordinator."""

from __future__ import annotations

from aiostream_kafka.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiostream_kafka.protocol.messages.describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from aiostream_kafka.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiostream_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiostream_kafka.protocol.primitives import ZERO_UUID
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import REGISTRY, serve
from aiostream_kafka.testing.fake.state import ClusterState, Topic, TopicError

__all__ = ["api_versions_response"]

_ApiVersion = ApiVersionsResponse.ApiVersion
_Broker = MetadataResponse.MetadataResponseBroker
_TopicMeta = MetadataResponse.MetadataResponseTopic
_PartitionMeta = MetadataResponse.MetadataResponsePartition


def api_versions_response(
    state: ClusterState, error_code: int = errors.NONE
) -> ApiVersionsResponse:
    """The ApiVersions answer: every served API with the versions served (never an API
    the fake would not answer, so clients do not send one), and the finalized features
    (``transaction.version``: which transaction protocol clients speak; ``group.version``
    1: KIP-848 groups are served)."""
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            _ApiVersion(
                api_key=key,
                min_version=spec.min_version,
                max_version=state.max_version(key, spec.max_version),
            )
            for key, spec in sorted(REGISTRY.items())
        ],
        throttle_time_ms=0,
        supported_features=[
            _SupportedFeature(name=name, min_version=0, max_version=high)
            for name, high in _SUPPORTED_FEATURES.items()
        ],
        finalized_features_epoch=1,
        finalized_features=[
            _FinalizedFeature(name=name, min_version_level=level, max_version_level=level)
            for name, level in _finalized(state).items()
        ],
    )


_SupportedFeature = ApiVersionsResponse.SupportedFeatureKey
_FinalizedFeature = ApiVersionsResponse.FinalizedFeatureKey
_SUPPORTED_FEATURES = {"group.version": 1, "transaction.version": 2}


def _finalized(state: ClusterState) -> dict[str, int]:
    return {"group.version": 1, "transaction.version": state.transaction_version}


@serve(ApiVersionsRequest)
async def api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return api_versions_response(ctx.state)


def _topic_metadata(state: ClusterState, topic: Topic, version: int) -> _TopicMeta:
    partitions = []
    for p in topic.partitions:
        alive = [r for r in p.replicas if state.brokers[r].alive]
        offline = [r for r in p.replicas if not state.brokers[r].alive]
        partitions.append(
            _PartitionMeta(
                error_code=errors.NONE if p.leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                partition_index=p.index,
                leader_id=p.leader,
                leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas),
                isr_nodes=alive,
                offline_replicas=offline,
            )
        )
    return _TopicMeta(
        error_code=errors.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
    )


@serve(MetadataRequest)
async def metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    state = ctx.state
    version = ctx.version
    auto_create = state.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
    topics: list[_TopicMeta] = []
    if request.topics is None or (version == 0 and not request.topics):
        topics = [_topic_metadata(state, t, version) for t in state.topics.values()]
    else:
        for wanted in request.topics:
            if wanted.name is None or (version >= 10 and wanted.topic_id != ZERO_UUID):
                by_id = state.topics_by_id.get(wanted.topic_id)
                if by_id is None:
                    topics.append(
                        _TopicMeta(
                            error_code=errors.UNKNOWN_TOPIC_ID, name=None, topic_id=wanted.topic_id
                        )
                    )
                else:
                    topics.append(_topic_metadata(state, by_id, version))
                continue
            found = state.topic(wanted.name)
            if found is None and auto_create:
                try:
                    found = state.create_topic(wanted.name)
                except TopicError as exc:
                    topics.append(_TopicMeta(error_code=exc.code, name=wanted.name))
                    continue
            if found is None:
                topics.append(
                    _TopicMeta(error_code=errors.UNKNOWN_TOPIC_OR_PARTITION, name=wanted.name)
                )
            else:
                topics.append(_topic_metadata(state, found, version))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            _Broker(node_id=b.node_id, host=b.host, port=ctx.port_of(b), rack=b.rack)
            for b in state.alive_brokers()
        ],
        cluster_id=state.cluster_id,
        controller_id=state.controller_id,
        topics=topics,
    )


@serve(DescribeClusterRequest)
async def describe_cluster(
    ctx: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    state = ctx.state
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=errors.NONE,
        endpoint_type=request.endpoint_type,
        cluster_id=state.cluster_id,
        controller_id=state.controller_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.node_id, host=b.host, port=ctx.port_of(b), rack=b.rack, is_fenced=False
            )
            for b in state.alive_brokers()
        ],
    )


@serve(FindCoordinatorRequest)
async def find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    state = ctx.state
    keys = request.coordinator_keys if ctx.version >= 4 else [request.key]
    coordinators = []
    for key in keys:
        node_id = state.coordinator_for(key)
        broker = state.brokers.get(node_id)
        if broker is None:
            coordinators.append(
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=-1,
                    host="",
                    port=-1,
                    error_code=errors.COORDINATOR_NOT_AVAILABLE,
                )
            )
        else:
            coordinators.append(
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node_id,
                    host=broker.host,
                    port=ctx.port_of(broker),
                    error_code=errors.NONE,
                )
            )
    if ctx.version >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    first = coordinators[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=first.error_code,
        node_id=first.node_id,
        host=first.host,
        port=first.port,
    )
