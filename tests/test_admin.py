"""Every Admin call round-trips against the real broker; bad input gets typed errors."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest
from helpers import KEEP_OLD_RECORDS, eventually

from aiostream_kafka import BootstrapError, ConfigError, KafkaTimeoutError
from aiostream_kafka.admin import (
    Admin,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewTopic,
    OffsetSpec,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopicFactory = Callable[..., Awaitable[str]]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def _produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    """Write records with aiokafka, a peer client, so these tests depend on no producer of
    ours."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(
                topic, f"v{i}".encode(), partition=partition, timestamp_ms=1_000_000 + i * 1000
            )
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture
async def admin(kafka_cluster: KafkaCluster):  # type: ignore[no-untyped-def]
    async with Admin(kafka_cluster.bootstrap_servers, default_api_timeout_ms=20_000) as client:
        yield client


async def test_create_describe_list_and_delete_topics(admin: Admin) -> None:
    name = _name("admin-topic")
    created = await admin.create_topics(
        [NewTopic(name, partitions=4, replication_factor=1, config={"retention.ms": "60000"})]
    )
    description = created[name]
    assert description is not None
    assert [p.partition for p in description.partitions] == [0, 1, 2, 3]
    assert all(p.leader == 1 and p.replicas == (1,) for p in description.partitions)

    listed = await admin.list_topics()
    assert name in listed and listed[name].topic_id == description.topic_id
    assert "__consumer_offsets" not in listed
    internal = await admin.list_topics(include_internal=True)
    assert all(t.is_internal for n, t in internal.items() if n.startswith("__"))

    described = await admin.describe_topics([name])
    assert described[name].topic_id == description.topic_id

    await admin.create_partitions({name: 6})
    assert len((await admin.describe_topics([name]))[name].partitions) == 6

    await admin.delete_topics([name])
    assert name not in await admin.list_topics()


async def test_creating_an_existing_topic_raises_its_typed_error(
    admin: Admin, new_topic: NewTopicFactory
) -> None:
    name = await new_topic()
    with pytest.raises(ec.TopicAlreadyExistsError, match=name):
        await admin.create_topics([NewTopic(name, 1, 1)])


async def test_invalid_replication_factor_raises_its_typed_error(admin: Admin) -> None:
    name = _name("too-many-replicas")
    with pytest.raises(ec.InvalidReplicationFactorError, match=name):
        await admin.create_topics([NewTopic(name, partitions=1, replication_factor=3)])


async def test_errors_are_per_topic(admin: Admin, new_topic: NewTopicFactory) -> None:
    existing = await new_topic()
    fresh = _name("fresh")
    with pytest.raises(ec.TopicAlreadyExistsError, match=existing):
        await admin.create_topics([NewTopic(fresh, 1, 1), NewTopic(existing, 1, 1)])
    assert fresh in await admin.list_topics()  # the good one of the batch was created


async def test_deleting_a_missing_topic_raises_at_once(admin: Admin) -> None:
    started = time.monotonic()
    with pytest.raises(ec.UnknownTopicOrPartitionError, match="no-such-topic"):
        await admin.delete_topics([_name("no-such-topic")])
    assert time.monotonic() - started < 10  # not retried until the 20 s timeout


async def test_validate_only_creates_nothing(admin: Admin) -> None:
    name = _name("validate-only")
    assert await admin.create_topics([NewTopic(name, 2, 1)], validate_only=True) == {name: None}
    assert name not in await admin.list_topics()


async def test_describe_cluster(admin: Admin, kafka_cluster: KafkaCluster) -> None:
    description = await admin.describe_cluster()
    assert description.cluster_id
    assert (
        description.controller_id in {b.node_id for b in description.brokers}
        or description.controller_id >= 0
    )
    ports = {b.port for b in description.brokers}
    assert {int(a.rpartition(":")[2]) for a in kafka_cluster.bootstrap_servers.split(",")} == ports


async def test_list_offsets_earliest_latest_and_by_timestamp(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=2, config=KEEP_OLD_RECORDS)
    await _produce(kafka_cluster.bootstrap_servers, topic, 10, partition=0)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    found = await admin.list_offsets({tp0: OffsetSpec.latest(), tp1: OffsetSpec.latest()})
    assert found[tp0].offset == 10 and found[tp1].offset == 0
    assert (await admin.list_offsets({tp0: OffsetSpec.earliest()}))[tp0].offset == 0
    # Record i has timestamp 1_000_000 + i * 1000: the first at or after 1_004_500 is #5.
    by_time = await admin.list_offsets({tp0: OffsetSpec.for_timestamp(1_004_500)})
    assert by_time[tp0].offset == 5 and by_time[tp0].timestamp_ms == 1_005_000
    newest = await admin.list_offsets({tp0: OffsetSpec.max_timestamp()})
    assert newest[tp0].offset == 9 and newest[tp0].timestamp_ms == 1_009_000
    after_all = await admin.list_offsets({tp0: OffsetSpec.for_timestamp(10**13)})
    assert after_all[tp0].offset == -1


async def test_list_offsets_of_a_missing_partition_or_topic(
    admin: Admin, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(partitions=1)
    with pytest.raises(ec.UnknownTopicOrPartitionError, match="partition 5"):
        await admin.list_offsets({TopicPartition(topic, 5): OffsetSpec.latest()})
    with pytest.raises(ec.UnknownTopicOrPartitionError):
        await admin.list_offsets({TopicPartition(_name("missing"), 0): OffsetSpec.latest()})


async def test_delete_records_moves_the_low_watermark(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(config=KEEP_OLD_RECORDS)
    await _produce(kafka_cluster.bootstrap_servers, topic, 8)
    tp = TopicPartition(topic, 0)
    assert await admin.delete_records({tp: 5}) == {tp: 5}
    assert (await admin.list_offsets({tp: OffsetSpec.earliest()}))[tp].offset == 5
    with pytest.raises(ec.OffsetOutOfRangeError):
        await admin.delete_records({tp: 100})


async def test_describe_and_incrementally_alter_configs(
    admin: Admin, new_topic: NewTopicFactory
) -> None:
    topic = await new_topic(config={"retention.ms": "60000"})
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    configs = (await admin.describe_configs([resource]))[resource]
    assert configs["retention.ms"].value == "60000" and not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].is_default

    await admin.incremental_alter_configs(
        {
            resource: [
                AlterConfigOp("retention.ms", "120000"),
                AlterConfigOp("cleanup.policy", "compact"),
            ]
        }
    )

    async def current() -> dict[str, ConfigEntry]:
        return (await admin.describe_configs([resource], keys=["retention.ms", "cleanup.policy"]))[
            resource
        ]

    after = await eventually(current, lambda c: c["retention.ms"].value == "120000")
    assert after["cleanup.policy"].value == "compact"
    assert set(after) == {"retention.ms", "cleanup.policy"}

    await admin.incremental_alter_configs(
        {resource: [AlterConfigOp("retention.ms", op=AlterConfigOpType.DELETE)]}
    )
    reverted = await eventually(current, lambda c: c["retention.ms"].is_default)
    assert reverted["retention.ms"].source == ConfigSource.DEFAULT_CONFIG

    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    broker_configs = (await admin.describe_configs([broker], keys=["auto.create.topics.enable"]))[
        broker
    ]
    assert broker_configs["auto.create.topics.enable"].value == "false"

    with pytest.raises(ec.InvalidConfigError):
        await admin.incremental_alter_configs(
            {resource: [AlterConfigOp("retention.ms", "not-a-number")]}
        )


async def test_consumer_groups_offsets_lag_describe_and_delete(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    from aiokafka import AIOKafkaConsumer

    topic = await new_topic(partitions=2, config=KEEP_OLD_RECORDS)
    await _produce(kafka_cluster.bootstrap_servers, topic, 6, partition=0)
    await _produce(kafka_cluster.bootstrap_servers, topic, 3, partition=1)
    group = _name("group")
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        seen = 0
        while seen < 9:
            batch = await consumer.getmany(timeout_ms=2000)
            seen += sum(len(v) for v in batch.values())
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        from aiokafka.structs import OffsetAndMetadata as PeerOffset
        from aiokafka.structs import TopicPartition as PeerTP

        await consumer.commit(
            {PeerTP(topic, 0): PeerOffset(4, "meta"), PeerTP(topic, 1): PeerOffset(3, "")}
        )

        listed = {g.group_id: g for g in await admin.list_consumer_groups()}
        assert listed[group].protocol_type == "consumer"
        description = (await admin.describe_consumer_groups([group]))[group]
        assert description.state == "Stable"
        assert len(description.members) == 1
        assert sorted(description.members[0].assignment) == [tp0, tp1]

        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets[tp0].offset == 4 and offsets[tp0].metadata == "meta"
        assert offsets[tp1].offset == 3
        only = await admin.list_consumer_group_offsets(group, [tp1])
        assert set(only) == {tp1}
        assert await admin.consumer_group_lag(group) == {tp0: 2, tp1: 0}

        with pytest.raises(ec.NonEmptyGroupError):
            await admin.delete_consumer_groups([group])
    finally:
        await consumer.stop()
    await admin.delete_consumer_groups([group])
    assert group not in {g.group_id for g in await admin.list_consumer_groups()}
    with pytest.raises(ec.GroupIdNotFoundError):
        await admin.delete_consumer_groups([group])


async def test_alter_consumer_group_offsets_from_outside_the_group(
    admin: Admin, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory
) -> None:
    """A commit from outside the group creates it (empty, with the offsets: what lag tools
    read, confluent-kafka's Admin too) and is refused while the group has a member."""
    from aiokafka import AIOKafkaConsumer
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CkTP
    from confluent_kafka.admin import AdminClient

    from aiostream_kafka.admin import OffsetAndMetadata

    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2, config=KEEP_OLD_RECORDS)
    await _produce(bs, topic, 5, partition=0)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    group = _name("outside")
    await admin.alter_consumer_group_offsets(group, {tp0: 3, tp1: OffsetAndMetadata(0, "m")})
    offsets = await admin.list_consumer_group_offsets(group)
    assert {tp: om.offset for tp, om in offsets.items()} == {tp0: 3, tp1: 0}
    assert offsets[tp1].metadata == "m"
    assert await admin.consumer_group_lag(group) == {tp0: 2, tp1: 0}
    assert (await admin.describe_consumer_groups([group]))[group].state == "Empty"

    peer = AdminClient({"bootstrap.servers": bs})
    request = ConsumerGroupTopicPartitions(group, [CkTP(topic, 0), CkTP(topic, 1)])
    answer = peer.list_consumer_group_offsets([request])[group].result(timeout=20)
    assert sorted((tp.partition, tp.offset) for tp in answer.topic_partitions) == [(0, 3), (1, 0)]

    with pytest.raises(ValueError, match="negative"):
        await admin.alter_consumer_group_offsets(group, {tp0: -1})
    with pytest.raises(TypeError, match="mapping"):
        await admin.alter_consumer_group_offsets(group, [tp0])  # type: ignore[arg-type]

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bs, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        await eventually(
            lambda: admin.describe_consumer_groups([group]),
            lambda d: d[group].state == "Stable",
        )
        started = time.monotonic()
        with pytest.raises((ec.UnknownMemberIdError, ec.IllegalGenerationError)) as caught:
            await admin.alter_consumer_group_offsets(group, {tp0: 5})
        assert "active members" in str(caught.value)
        assert time.monotonic() - started < 10  # refused at once, not retried
    finally:
        await consumer.stop()
    assert (await admin.list_consumer_group_offsets(group))[tp0].offset == 3
    await admin.delete_consumer_groups([group])


async def test_an_unknown_group(admin: Admin) -> None:
    group = _name("nobody")
    with pytest.raises(ec.GroupIdNotFoundError, match=group):
        await admin.describe_consumer_groups([group])
    assert await admin.list_consumer_group_offsets(group) == {}
    assert await admin.consumer_group_lag(group) == {}


# -- bad input -----------------------------------------------------------------------------


async def test_unreachable_bootstrap_times_out_naming_the_addresses() -> None:
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    started = time.monotonic()
    with pytest.raises(BootstrapError) as info:
        async with Admin(bootstrap, default_api_timeout_ms=1500):
            pass
    elapsed = time.monotonic() - started
    for port in ports:
        assert f"127.0.0.1:{port}" in str(info.value)
        assert f"127.0.0.1:{port}" in info.value.causes
    assert isinstance(info.value, KafkaTimeoutError)  # what start() documented before
    assert 1.4 <= elapsed < 10  # the configured timeout, not a hang


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bootstrap_servers": ""}, "bootstrap_servers is empty"),
        ({"bootstrap_servers": "localhost"}, "'localhost' is not 'host:port'"),
        ({"bootstrap_servers": "h:99999"}, "port in 1-65535"),
        (
            {"bootstrap_servers": "h:9092", "request_timeout_ms": -5},
            "request_timeout_ms must be > 0",
        ),
        (
            {"bootstrap_servers": "h:9092", "request_timeout_ms": "30s"},
            "request_timeout_ms must be an int",
        ),
        ({"bootstrap_servers": "h:9092", "security_protocol": "SASL_SSL"}, "security_protocol"),
        (
            {
                "bootstrap_servers": "h:9092",
                "reconnect_backoff_ms": 500,
                "reconnect_backoff_max_ms": 100,
            },
            "reconnect_backoff_max_ms",
        ),
        ({"bootstrap_servers": "h:9092", "linger": 5}, "unknown Admin option"),
    ],
)
def test_invalid_config_is_refused_before_any_io(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Admin(**kwargs)  # type: ignore[arg-type]


def test_ipv6_bootstrap_addresses_parse() -> None:
    admin = Admin("[::1]:9092,host:19092")
    assert admin.config.addresses == [("::1", 9092), ("host", 19092)]


async def test_concurrent_metadata_refreshes_collapse_into_one(admin: Admin) -> None:
    cluster = admin.cluster
    before = cluster.snapshot.fetched_at
    snapshots = await asyncio.gather(*(cluster.refresh() for _ in range(20)))
    assert len({id(s) for s in snapshots}) == 1  # one request served them all
    assert snapshots[0].fetched_at > before
