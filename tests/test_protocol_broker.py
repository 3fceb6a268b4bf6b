"""Every API the client uses, sent to a real broker at the highest version both support;
the response must decode into its generated class (issue: protocol integration)."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiostream_kafka.admin import Admin
from aiostream_kafka.net import BrokerConnection, ConnectionSettings
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.messages import API_KEYS, API_NAMES
from aiostream_kafka.protocol.records import RecordBatchBuilder
from aiostream_kafka.protocol.versions import client_version_ranges
from aiostream_kafka.testing import KafkaCluster

USED_APIS = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "SaslHandshake", "SaslAuthenticate", "ApiVersions", "CreateTopics",
    "DeleteTopics", "DeleteRecords", "InitProducerId", "OffsetForLeaderEpoch",
    "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "DescribeConfigs",
    "AlterConfigs", "IncrementalAlterConfigs", "CreatePartitions", "DeleteGroups",
    "OffsetDelete", "DescribeCluster", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    "DescribeProducers", "DescribeTransactions", "ListTransactions",
]  # fmt: skip

_BY_NAME = {name: API_KEYS[key] for key, name in API_NAMES.items()}


def _request(name: str, topic: str, topic_id: object) -> Request:
    """A meaningful request for ``name`` (defaults where the broker's answer to them is
    a well-formed error response)."""
    request_type = _BY_NAME[name][0]
    m = request_type
    if name == "Produce":
        builder = RecordBatchBuilder()
        builder.append(b"k", b"v", timestamp_ms=int(time.time() * 1000))
        return m(
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                m.TopicProduceData(  # type: ignore[attr-defined]
                    name=topic,
                    topic_id=topic_id,
                    partition_data=[m.PartitionProduceData(index=0, records=builder.build())],  # type: ignore[attr-defined]
                )
            ],
        )
    if name == "Fetch":
        return m(
            replica_id=-1,
            max_wait_ms=0,
            max_bytes=1 << 20,
            topics=[
                m.FetchTopic(  # type: ignore[attr-defined]
                    topic=topic,
                    topic_id=topic_id,
                    partitions=[m.FetchPartition(partition=0, partition_max_bytes=1 << 20)],  # type: ignore[attr-defined]
                )
            ],
        )
    if name == "Metadata":
        return m(topics=None)
    if name == "ListOffsets":
        return m(
            replica_id=-1,
            topics=[
                m.ListOffsetsTopic(  # type: ignore[attr-defined]
                    name=topic,
                    partitions=[m.ListOffsetsPartition(partition_index=0, timestamp=-1)],  # type: ignore[attr-defined]
                )
            ],
        )
    if name == "ApiVersions":
        return m(client_software_name="aiostream-kafka", client_software_version="0.1.0")
    if name == "InitProducerId":
        return m(transactional_id=None, transaction_timeout_ms=60_000)
    if name == "DescribeConfigs":
        return m(resources=[m.DescribeConfigsResource(resource_type=2, resource_name=topic)])  # type: ignore[attr-defined]
    if name == "CreateTopics":
        return m(
            topics=[m.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)],
            timeout_ms=5000,
        )  # type: ignore[attr-defined]
    if name == "FindCoordinator":
        return m(key_type=0, coordinator_keys=["g"], key="g")
    if name == "ListGroups" or name == "DescribeCluster" or name == "ListTransactions":
        return m()
    return m()


def _without_fields_the_version_lacks(request: Request, version: int) -> Request:
    """Reset to default any non-ignorable field that ``version`` does not carry (the
    requests above fill fields of several versions at once)."""
    for info in type(request).FIELDS:
        if info.versions is None or not info.versions[0] <= version <= info.versions[1]:
            default = getattr(type(request)(), info.name)
            setattr(request, info.name, default)
    return request


@pytest.fixture
async def connection(kafka_cluster: KafkaCluster):  # type: ignore[no-untyped-def]
    host, _, port = kafka_cluster.bootstrap_servers.split(",")[0].rpartition(":")
    conn = await BrokerConnection.open(host, int(port), ConnectionSettings())
    yield conn
    await conn.close()


@pytest.fixture(scope="module")
async def existing_topic(kafka_cluster: KafkaCluster) -> tuple[str, object]:
    from aiostream_kafka.admin import NewTopic

    name = f"protocol-apis-{int(time.time() * 1000)}"
    async with Admin(kafka_cluster.bootstrap_servers) as admin:
        created = await admin.create_topics([NewTopic(name, 1, 1)])
    description = created[name]
    assert description is not None
    return name, description.topic_id


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.real_broker(
                reason="checks that the broker lists 40+ APIs (KRaft, ACLs, quotas, share "
                "groups...); the fake lists only what it serves"
            ),
        )
        if name == "ApiVersions"
        else name
        for name in USED_APIS
    ],
)
async def test_api_round_trips_at_the_highest_common_version(
    name: str,
    connection: BrokerConnection,
    existing_topic: tuple[str, object],
    kafka_cluster: KafkaCluster,
) -> None:
    request_type, response_type = _BY_NAME[name]
    version = connection.version_for(request_type)
    if connection.api_versions is not None:
        broker_range = connection.api_versions.broker_range(request_type.API_KEY)
        assert broker_range is not None, f"the broker does not list {name}"
        assert version == min(client_version_ranges()[request_type.API_KEY][1], broker_range[1])
    if name == "AddPartitionsToTxn":
        assert version == 3  # v4+ are the brokers' own (KIP-890)
    topic, topic_id = existing_topic
    topic_for_request = f"{topic}-new" if name == "CreateTopics" else topic
    request = _without_fields_the_version_lacks(
        _request(name, topic_for_request, topic_id), version
    )
    response: Response = await connection.request(request, version=version)
    # A fresh broker answers "loading" (14) or "not available" (15) until its coordinators
    # are up; those are well-formed answers too, but ask again for a real one.
    for _ in range(100):
        if getattr(response, "error_code", 0) not in (14, 15) and not any(
            getattr(c, "error_code", 0) in (14, 15) for c in getattr(response, "coordinators", [])
        ):
            break
        await asyncio.sleep(0.1)
        response = await connection.request(request, version=version)
    assert isinstance(response, response_type)
    # Spot checks that the decoded content is real, not just well-formed.
    if name == "Produce":
        partition = response.responses[0].partition_responses[0]  # type: ignore[attr-defined]
        assert partition.error_code == 0 and partition.base_offset >= 0
    elif name == "Metadata":
        assert [b.node_id for b in response.brokers] == [1] or not kafka_cluster.managed  # type: ignore[attr-defined]
        assert any(t.name == topic for t in response.topics)  # type: ignore[attr-defined]
    elif name == "ApiVersions":
        assert response.error_code == 0 and len(response.api_keys) > 40  # type: ignore[attr-defined]
    elif name == "InitProducerId":
        assert response.error_code == 0 and response.producer_id >= 0  # type: ignore[attr-defined]
    elif name == "DescribeCluster":
        assert response.error_code == 0 and response.cluster_id  # type: ignore[attr-defined]
    elif name == "CreateTopics":
        assert response.topics[0].error_code == 0  # type: ignore[attr-defined]
    elif name == "DescribeConfigs":
        assert any(c.name == "retention.ms" for c in response.results[0].configs)  # type: ignore[attr-defined]
    elif name == "ListOffsets":
        assert response.topics[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
    elif name == "FindCoordinator":
        coordinator = response.coordinators[0] if response.coordinators else response  # type: ignore[attr-defined]
        assert coordinator.error_code == 0 and coordinator.node_id >= 0
    elif name == "SaslHandshake":
        assert response.error_code != 0  # a PLAINTEXT listener refuses SASL  # type: ignore[attr-defined]
    assert not connection.closed
