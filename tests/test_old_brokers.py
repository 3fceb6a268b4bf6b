"""Against an older Apache Kafka broker (2.8.2, ZooKeeper mode, started by the harness from
its Maven Central jars): legacy message sets consumed as they are stored, and the Admin
group calls in the request shapes such a broker speaks.

Why 2.8.2: a broker keeps messages in a legacy format (magic 0 or 1) only for a topic with
``message.format.version`` below 0.11, which brokers ignore from
``inter.broker.protocol.version`` 3.0 on (KIP-724), and KRaft implies 3.0 or later; so a
ZooKeeper-mode broker is needed, whose default protocol version is its own (2.8 here).
Kafka 4 rejects Produce v0-v2, which carry legacy message sets, and cannot store them.
2.8 is also the last release whose OffsetFetch stops at v7 (3.0 added v8, KIP-709:
checked with ApiVersions against 3.2.3, which offers v8) and whose ListGroups has no
group type (v5, Kafka 3.8).

Legacy data reaches the broker two ways here, and both are read back:

* Produce v2 requests built by hand (:func:`produce_v2`) carrying message sets from the
  tests' own encoder (``tests/legacy_messages.py``): plain messages and gzip, snappy and
  lz4 wrappers, as pre-0.11 clients wrote them;
* our Producer's v2 batches, which the broker converts on write to the topic's format
  (it rebuilds compressed wrappers itself, e.g. magic 0 with absolute inner offsets and
  the KAFKA-3160 lz4 header checksum).

The log segment on disk is read to check that the broker stored legacy messages (Fetch
returns them as stored), and the consumer's fetcher is watched to check that it met them.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from legacy_messages import Msg, message_set, wrapper

from aiostream_kafka import Consumer, Producer
from aiostream_kafka.admin import Admin
from aiostream_kafka.consumer import fetcher as fetcher_module
from aiostream_kafka.protocol.compression import CompressionType
from aiostream_kafka.protocol.records import LegacyBatch, RecordBatch, iter_batches
from aiostream_kafka.structs import Record, TimestampType, TopicPartition
from aiostream_kafka.testing import KafkaCluster, probe

pytestmark = pytest.mark.real_broker(
    reason="runs older Kafka releases (2.x ZooKeeper mode, legacy message formats) from their jars"
)

OLD_VERSION = "2.8.2"
MESSAGE_FORMAT = {0: "0.9.0", 1: "0.10.2"}  # message.format.version -> magic 0 / magic 1
_OFFSET_FETCH_KEY = 9
_LIST_GROUPS_KEY = 16


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("old_cluster",)


@pytest.fixture(scope="module")
def old_cluster() -> Iterator[KafkaCluster]:
    """One Kafka 2.8.2 broker (and its ZooKeeper) for the module."""
    cluster = KafkaCluster(version=OLD_VERSION, source="local")
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topic(cluster: KafkaCluster, config: dict[str, str] | None = None) -> str:
    topic = _name("old")
    await probe.create_topic(cluster.bootstrap_servers, topic, 1, 1, config)
    return topic


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


async def produce_v2(
    cluster: KafkaCluster, topic: str, message_set_bytes: bytes
) -> tuple[int, int]:
    """Send one Produce v2 request (acks=all) writing ``message_set_bytes`` to partition 0
    of ``topic`` on the (single) broker; return ``(base_offset, log_append_time)``.

    Produce v0-v2 carry legacy message sets (v3 demands v2 batches); our client has no
    codec for them (Kafka 4 removed them), so the request is written by hand:
    acks int16, timeout int32, [topic string, [partition int32, records bytes]].
    """
    body = struct.pack(">hi", -1, 10_000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">ii", 1, 0) + struct.pack(">i", len(message_set_bytes))
    body += message_set_bytes
    request = struct.pack(">hhi", 0, 2, 7) + _string("legacy-producer") + body
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(struct.pack(">i", len(request)) + request)
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        response = await reader.readexactly(size)
    finally:
        writer.close()
    # correlation id, [topic string, [partition int32, error int16, base_offset int64,
    # log_append_time int64]], throttle_time_ms int32
    pos = 4 + 4
    pos += 2 + struct.unpack_from(">h", response, pos)[0] + 4
    partition, error, base_offset, log_append_time = struct.unpack_from(">ihqq", response, pos)
    assert (partition, error) == (0, 0), f"Produce v2 failed with error code {error}"
    return base_offset, log_append_time


def stored_batches(cluster: KafkaCluster, topic: str) -> list[RecordBatch]:
    """The batches of the topic's first log segment, as the broker wrote them on disk."""
    assert cluster.directory is not None
    segment = cluster.directory / "node-1" / "data" / f"{topic}-0" / ("0" * 20 + ".log")
    return list(iter_batches(Path(segment).read_bytes()))


class _FetchWatch:
    """Records the type and magic of every batch the consumer's fetcher met, and for each
    partition's data read to its end how many bytes no complete batch covered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.leftovers: list[int] = []

    def __call__(self, data: Any, **kwargs: Any) -> Iterator[RecordBatch]:
        covered = 0
        for batch in iter_batches(data, **kwargs):
            self.seen.append((type(batch).__name__, batch.magic))
            covered += batch.size_in_bytes
            yield batch
        self.leftovers.append(len(data) - covered)


async def consume(
    cluster: KafkaCluster, topic: str, count: int, *, start: int = 0, **options: Any
) -> list[Record]:
    """The first ``count`` records of partition 0 of ``topic`` from offset ``start``."""
    tp = TopicPartition(topic, 0)
    out: list[Record] = []
    async with Consumer(cluster.bootstrap_servers, **options) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        async with asyncio.timeout(30):
            async for record in consumer.stream():
                out.append(record)
                if len(out) == count:
                    break
    return out


def _values(records: list[Record]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records]


# -- legacy message sets (item: consumers against legacy data) -----------------------------


@pytest.mark.parametrize("magic", [0, 1])
async def test_legacy_message_sets_written_by_old_clients_are_consumed(
    old_cluster: KafkaCluster, magic: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await create_topic(old_cluster, {"message.format.version": MESSAGE_FORMAT[magic]})
    now = int(time.time() * 1000)
    expected: list[tuple[int, bytes | None, bytes | None]] = []
    timestamps: list[int] = []

    async def write(data: bytes, msgs: list[Msg]) -> None:
        base, _ = await produce_v2(old_cluster, topic, data)
        assert base == len(expected)
        for i, m in enumerate(msgs):
            expected.append((base + i, m.key, m.value))
            timestamps.append(m.timestamp)

    plain = [Msg(0, b"k0", b"plain-0", now), Msg(1, None, b"plain-1", now + 1),
             Msg(2, b"k2", None, now + 2)]  # fmt: skip
    await write(message_set(plain, magic=magic), plain)
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4):
        # As old clients wrote wrappers: inner offsets 0..n-1 (the broker assigns the real
        # ones), the wrapper's the last; magic 0 lz4 with the KAFKA-3160 header checksum.
        inner = [
            Msg(i, f"{codec.name}-k{i}".encode(), f"{codec.name}-v{i}".encode() * 20, now + 10 + i)
            for i in range(4)
        ]
        await write(wrapper(inner, codec, magic=magic, offset=3, timestamp=now + 13), inner)
    # A wrapper large enough to be inflated in a worker thread (gzip >= 64 KiB).
    big = [Msg(i, None, os.urandom(30_000), now + 30) for i in range(3)]
    await write(wrapper(big, CompressionType.GZIP, magic=magic, offset=2, timestamp=now + 30), big)
    # And v2 batches from our producer, converted by the broker on write (one gzip batch
    # it re-compresses into a wrapper, one uncompressed). Legacy formats know no
    # idempotence: the broker would refuse it.
    for compression in ("gzip", None):
        async with Producer(
            old_cluster.bootstrap_servers,
            enable_idempotence=False,
            compression_type=compression,
            linger_ms=100,
        ) as producer:
            batch = [(f"p-{compression}-{i}".encode(), now + 20 + i) for i in range(3)]
            metas = await asyncio.gather(
                *(
                    producer.send(topic, b"v" * 50 + key, key=key, partition=0, timestamp_ms=ts)
                    for key, ts in batch
                )
            )
        assert [m.offset for m in metas] == list(range(len(expected), len(expected) + 3))
        for (key, ts), meta in zip(batch, metas, strict=True):
            expected.append((meta.offset, key, b"v" * 50 + key))
            timestamps.append(ts)

    # The broker stored legacy messages: plain runs and wrappers of the topic's magic.
    on_disk = stored_batches(old_cluster, topic)
    assert on_disk and all(isinstance(b, LegacyBatch) and b.magic == magic for b in on_disk)
    assert {b.compression for b in on_disk} == {
        CompressionType.NONE,
        CompressionType.GZIP,
        CompressionType.SNAPPY,
        CompressionType.LZ4,
    }

    watch = _FetchWatch()
    monkeypatch.setattr(fetcher_module, "iter_batches", watch)
    offloaded: list[RecordBatch] = []
    inflate_all = fetcher_module._inflate_all

    def spy(batches: list[RecordBatch]) -> list[RecordBatch | Exception]:
        offloaded.extend(batches)
        return inflate_all(batches)

    monkeypatch.setattr(fetcher_module, "_inflate_all", spy)
    records = await consume(old_cluster, topic, len(expected))
    assert watch.seen and {seen for seen in watch.seen} == {("LegacyBatch", magic)}
    assert [(type(b).__name__, b.compression) for b in offloaded] == [
        ("LegacyBatch", CompressionType.GZIP)
    ]
    assert _values(records) == expected
    if magic == 0:
        assert {(r.timestamp_ms, r.timestamp_type) for r in records} == {
            (-1, TimestampType.NO_TIMESTAMP_TYPE)
        }
    else:
        assert [r.timestamp_ms for r in records] == timestamps
        assert {r.timestamp_type for r in records} == {TimestampType.CREATE_TIME}
    assert all(r.headers == [] and r.leader_epoch is None for r in records)

    # From inside a wrapper (the gzip one holds offsets 3-6): the records before the
    # position are skipped. With check_crcs off the same records come.
    tail = await consume(old_cluster, topic, len(expected) - 5, start=5, check_crcs=False)
    assert _values(tail) == expected[5:]


async def test_legacy_messages_cut_at_the_fetch_size_are_fetched_whole_later(
    old_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Responses of 1 KiB end inside a message: the partial message is dropped and fetched
    again from its offset, for plain messages and wrappers alike."""
    topic = await create_topic(old_cluster, {"message.format.version": MESSAGE_FORMAT[1]})
    now = int(time.time() * 1000)
    expected: list[tuple[int, bytes | None, bytes | None]] = []
    for round_ in range(6):
        plain = [Msg(i, f"r{round_}-p{i}".encode(), bytes([65 + i]) * 150, now) for i in range(3)]
        base, _ = await produce_v2(old_cluster, topic, message_set(plain, magic=1))
        expected += [(base + i, m.key, m.value) for i, m in enumerate(plain)]
        inner = [Msg(i, f"r{round_}-w{i}".encode(), bytes(range(256)) * 2, now) for i in range(3)]
        data = wrapper(inner, CompressionType.GZIP, magic=1, offset=2, timestamp=now)
        base, _ = await produce_v2(old_cluster, topic, data)
        expected += [(base + i, m.key, m.value) for i, m in enumerate(inner)]
    watch = _FetchWatch()
    monkeypatch.setattr(fetcher_module, "iter_batches", watch)
    records = await consume(
        old_cluster,
        topic,
        len(expected),
        max_partition_fetch_bytes=1024,
        fetch_max_bytes=1024,
    )
    assert _values(records) == expected
    # Responses did end inside a message (a partial plain message or wrapper).
    assert sum(1 for n in watch.leftovers if n > 0) >= 3, watch.leftovers


async def test_legacy_log_append_time_is_the_brokers_for_every_inner_message(
    old_cluster: KafkaCluster,
) -> None:
    topic = await create_topic(
        old_cluster,
        {"message.format.version": MESSAGE_FORMAT[1], "message.timestamp.type": "LogAppendTime"},
    )
    client_ts = 1_000_000_000_000  # the client's clock: replaced by the broker's
    inner = [Msg(i, None, f"w{i}".encode(), client_ts + i) for i in range(3)]
    base, appended = await produce_v2(
        old_cluster, topic, wrapper(inner, CompressionType.SNAPPY, magic=1, offset=2,
                                    timestamp=client_ts + 2)
    )  # fmt: skip
    plain = [Msg(0, None, b"p", client_ts)]
    base2, appended2 = await produce_v2(old_cluster, topic, message_set(plain, magic=1))
    assert (base, base2) == (0, 3) and appended > client_ts and appended2 >= appended
    records = await consume(old_cluster, topic, 4)
    assert [(r.offset, r.value, r.timestamp_ms, r.timestamp_type) for r in records] == [
        (0, b"w0", appended, TimestampType.LOG_APPEND_TIME),
        (1, b"w1", appended, TimestampType.LOG_APPEND_TIME),
        (2, b"w2", appended, TimestampType.LOG_APPEND_TIME),
        (3, b"p", appended2, TimestampType.LOG_APPEND_TIME),
    ]


# -- Admin against an older broker (item: OffsetFetch < v8, ListGroups < v5, no key 69) ------


@pytest.fixture
async def old_admin(old_cluster: KafkaCluster) -> AsyncIterator[Admin]:
    async with Admin(old_cluster.bootstrap_servers, default_api_timeout_ms=20_000) as client:
        yield client


async def test_group_offsets_lag_and_listing_on_kafka_2_8(
    old_cluster: KafkaCluster, old_admin: Admin
) -> None:
    host, port = old_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    apis = await probe.api_versions(host, int(port))
    # The shapes under test: single-group OffsetFetch, ListGroups without a group type.
    assert apis[_OFFSET_FETCH_KEY][1] == 7 and apis[_LIST_GROUPS_KEY][1] == 4

    topic = _name("old-group")
    await probe.create_topic(old_cluster.bootstrap_servers, topic, 2, 1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Producer(old_cluster.bootstrap_servers) as producer:
        for i in range(6):
            await producer.send(topic, f"a{i}".encode(), partition=0)
        for i in range(3):
            await producer.send(topic, f"b{i}".encode(), partition=1)

    group = _name("old-members")
    async with Consumer(old_cluster.bootstrap_servers, group_id=group) as consumer:
        consumer.subscribe([topic])
        seen: dict[TopicPartition, int] = {}
        async with asyncio.timeout(60):
            async for record in consumer.stream():
                tp = TopicPartition(record.topic, record.partition)
                seen[tp] = record.offset
                if seen.get(tp0) == 5 and seen.get(tp1) == 2:
                    break
        await consumer.commit({tp0: 4, tp1: 3})

        listed = {g.group_id: g for g in await old_admin.list_consumer_groups()}
        assert listed[group].group_type == "classic"
        assert listed[group].protocol_type == "consumer"
        assert listed[group].state == "Stable"
        # No ListGroups type filter before v5: filtered here, every group being classic.
        classic = await old_admin.list_consumer_groups(types=["classic"])
        assert group in {g.group_id for g in classic}
        assert group not in {
            g.group_id for g in await old_admin.list_consumer_groups(types=["consumer"])
        }
        # No ConsumerGroupDescribe (key 69) on 2.8: DescribeGroups, a classic group.
        described = (await old_admin.describe_consumer_groups([group]))[group]
        assert (described.type, described.state, described.group_epoch) == (
            "classic",
            "Stable",
            None,
        )
        assert sorted(described.members[0].assignment) == [tp0, tp1]

        offsets = await old_admin.list_consumer_group_offsets(group)
        assert {tp: om.offset for tp, om in offsets.items()} == {tp0: 4, tp1: 3}
        only = await old_admin.list_consumer_group_offsets(group, [tp1])
        assert set(only) == {tp1} and only[tp1].offset == 3
        assert await old_admin.consumer_group_lag(group) == {tp0: 2, tp1: 0}

    # Once the member left: still listed, as classic, now empty.
    listed = {g.group_id: g for g in await old_admin.list_consumer_groups()}
    assert (listed[group].group_type, listed[group].state) == ("classic", "Empty")
    nobody = _name("nobody")
    assert await old_admin.list_consumer_group_offsets(nobody) == {}
    assert await old_admin.consumer_group_lag(nobody) == {}


async def test_the_consumer_group_protocol_on_kafka_2_8_is_a_typed_error_naming_classic(
    old_cluster: KafkaCluster,
) -> None:
    """Kafka 2.8 has no ConsumerGroupHeartbeat: the member fails within seconds with an
    error that names the broker and the way out, and the iterator raises it."""
    from aiostream_kafka.errors import UnsupportedVersionError

    topic = await create_topic(old_cluster)
    started = time.monotonic()
    async with Consumer(
        old_cluster.bootstrap_servers, group_id=_name("old-848"), group_protocol="consumer"
    ) as consumer:
        consumer.subscribe([topic])
        with pytest.raises(UnsupportedVersionError) as caught:
            await asyncio.wait_for(anext(consumer.stream()), 20)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert 'group_protocol="classic"' in message and "ConsumerGroupHeartbeat" in message
    assert "older than Kafka 3.0" in message or "3.0-3.6" in message
