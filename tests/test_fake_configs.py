"""FakeCluster configs (issue 34, part two): topic configs described with their defaults,
altered incrementally (set, delete, append, subtract) or wholesale (AlterConfigs, by
confluent-kafka), validated as Kafka validates them, and used (max.message.bytes). No
JVM: these run in the unit tier."""

from __future__ import annotations

import uuid

import pytest

from aiostream_kafka import Producer
from aiostream_kafka.admin import (
    Admin,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewTopic,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.testing import FakeCluster


def _name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


async def test_incremental_alter_list_configs_and_validation() -> None:
    async with FakeCluster() as cluster, Admin(cluster.bootstrap_servers) as admin:
        topic = _name()
        await admin.create_topics([NewTopic(topic, 1, 1)])
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        configs = (await admin.describe_configs([resource]))[resource]
        assert configs["retention.ms"].value == "604800000"
        assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG
        assert configs["cleanup.policy"].value == "delete"
        op = AlterConfigOpType
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp("cleanup.policy", "compact", op=op.APPEND)]}
        )
        assert cluster.state.topics[topic].configs == {"cleanup.policy": "delete,compact"}
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp("cleanup.policy", "delete", op=op.SUBTRACT)]}
        )
        assert cluster.state.topics[topic].configs == {"cleanup.policy": "compact"}
        with pytest.raises(ec.InvalidConfigError, match="append"):
            await admin.incremental_alter_configs(
                {resource: [AlterConfigOp("retention.ms", "1", op=op.APPEND)]}
            )
        with pytest.raises(ec.InvalidConfigError, match="Unknown topic config"):
            await admin.incremental_alter_configs({resource: [AlterConfigOp("no.such", "1")]})
        with pytest.raises(ec.InvalidConfigError, match="one of"):
            await admin.incremental_alter_configs(
                {resource: [AlterConfigOp("compression.type", "brotli")]}
            )
        # Nothing of a refused request was applied.
        assert cluster.state.topics[topic].configs == {"cleanup.policy": "compact"}
        with pytest.raises(ec.InvalidConfigError):
            await admin.create_topics([NewTopic(_name(), 1, 1, config={"retention.ms": "x"})])


async def test_an_altered_max_message_bytes_is_enforced_by_produce() -> None:
    async with FakeCluster() as cluster, Admin(cluster.bootstrap_servers) as admin:
        topic = cluster.create_topic(_name())
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp("max.message.bytes", "200")]}
        )
        async with Producer(cluster.bootstrap_servers, compression_type=None) as producer:
            with pytest.raises(ec.MessageTooLargeError):
                await producer.send(topic, b"x" * 500)
            await producer.send(topic, b"small")


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_kafka_alter_configs_replaces_the_topic_configs() -> None:
    """AlterConfigs (the legacy call) replaces every config set on the topic."""
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    cluster = FakeCluster()
    cluster.start_blocking()
    try:
        topic = cluster.create_topic(_name(), config={"retention.ms": "1000"})
        client = admin_mod.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = admin_mod.ConfigResource("topic", topic, set_config={"segment.ms": "5000"})
        for future in client.alter_configs([resource]).values():
            future.result(15)
        assert cluster.state.topics[topic].configs == {"segment.ms": "5000"}
        described = client.describe_configs([admin_mod.ConfigResource("topic", topic)])
        (entries,) = [f.result(15) for f in described.values()]
        assert entries["segment.ms"].value == "5000"
        assert entries["retention.ms"].value == "604800000" and entries["retention.ms"].is_default
    finally:
        cluster.stop_blocking()
