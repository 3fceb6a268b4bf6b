"""FakeCluster (issue 34): an in-process broker served with the generated codec, used by
our clients, aiokafka and confluent-kafka; fault injection seen by the clients; frames
that are not Kafka close only their own connection. No JVM: these run in the unit tier.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import sys
import time
import uuid
from collections import defaultdict
from typing import TypeVar

import pytest
from helpers import eventually

from aiostream_kafka import Consumer, Producer, TopicPartition
from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.protocol.headers import decode_response, encode_request
from aiostream_kafka.protocol.messages.api_versions import ApiVersionsRequest
from aiostream_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiostream_kafka.testing import FakeCluster, KafkaCluster, probe
from aiostream_kafka.testing.fake.groups import GroupCoordinator as FakeGroupCoordinator
from aiostream_kafka.testing.fake.groups import JoinResult as FakeJoinResult

T = TypeVar("T")

GROUP_SETTINGS = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 200,
    "max_poll_interval_ms": 20_000,
    "metadata_max_age_ms": 1_000,
}


async def _now(value: T) -> T:
    return value


def _name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _read(bs: str, topic: str, partitions: int, count: int, timeout_s: float = 20.0) -> list:
    """``count`` records of ``topic`` read from the start by a consumer without a group."""
    out = []
    async with Consumer(bs, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        async with asyncio.timeout(timeout_s):
            async for record in consumer.stream():
                out.append(record)
                if len(out) >= count:
                    break
    return out


# -- protocol basics ------------------------------------------------------------------


async def test_starts_in_milliseconds_and_advertises_what_it_serves() -> None:
    async with FakeCluster(brokers=3) as cluster:
        print(f"FakeCluster(brokers=3) started in {cluster.startup_seconds * 1000:.2f} ms")
        assert cluster.startup_seconds is not None and cluster.startup_seconds < 1.0
        assert len(cluster.bootstrap_servers.split(",")) == 3
        host, _, port = cluster.bootstrap_servers.split(",")[1].rpartition(":")
        apis = await probe.api_versions(host, int(port))
        assert apis[0] == (3, 13)  # Produce: the versions the codec has
        assert apis[1] == (4, 18)  # Fetch
        assert 18 in apis and 3 in apis and 11 in apis
        assert apis[24] == (0, 5)  # AddPartitionsToTxn
        assert 57 not in apis  # UpdateFeatures: not served, so not advertised
        brokers = await probe.metadata_brokers(host, int(port))
        assert sorted(b[0] for b in brokers) == [1, 2, 3]


async def test_api_versions_in_an_unknown_version_is_answered_in_v0() -> None:
    """KIP-511: the client learns the served range from a v0 answer."""
    async with FakeCluster() as cluster:
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            frame = bytearray(encode_request(ApiVersionsRequest(), 3, 7, "x"))
            struct.pack_into(">h", frame, 6, 99)  # version 99
            writer.write(bytes(frame))
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            corr, response = decode_response(18, 0, await reader.readexactly(size))
            assert corr == 7
            assert response.error_code == 35  # type: ignore[attr-defined]
            assert any(k.api_key == 18 for k in response.api_keys)  # type: ignore[attr-defined]
        finally:
            writer.close()


async def _metadata(bs: str, request: MetadataRequest, version: int = 12) -> MetadataResponse:
    host, _, port = bs.split(",")[0].rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode_request(request, version, 1, "test"))
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
        _, response = decode_response(3, version, await reader.readexactly(size))
        assert isinstance(response, MetadataResponse)
        return response
    finally:
        writer.close()


async def test_metadata_auto_create_is_off_by_default_and_can_be_turned_on() -> None:
    wanted = MetadataRequest.MetadataRequestTopic
    topic = _name()
    request = MetadataRequest(topics=[wanted(name=topic)], allow_auto_topic_creation=True)
    async with FakeCluster() as cluster:
        response = await _metadata(cluster.bootstrap_servers, request)
        assert response.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert not cluster.state.topics
    async with FakeCluster(auto_create_topics=True, default_partitions=2) as cluster:
        refused = MetadataRequest(topics=[wanted(name=topic)], allow_auto_topic_creation=False)
        assert (await _metadata(cluster.bootstrap_servers, refused)).topics[0].error_code == 3
        response = await _metadata(cluster.bootstrap_servers, request)
        assert response.topics[0].error_code == 0
        assert len(response.topics[0].partitions) == 2
        by_id = MetadataRequest(topics=[wanted(name=None, topic_id=response.topics[0].topic_id)])
        assert (await _metadata(cluster.bootstrap_servers, by_id)).topics[0].name == topic


async def test_admin_topics_partitions_records_and_cluster() -> None:
    async with FakeCluster(brokers=3) as cluster:
        bs = cluster.bootstrap_servers
        topic = _name()
        async with Admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, partitions=3, replication_factor=2)])
            described = (await admin.describe_topics([topic]))[topic]
            leaders = {p.leader for p in described.partitions}
            assert len(leaders) == 3, "leaders are spread over the brokers"
            await admin.create_partitions({topic: 4})
            assert len((await admin.describe_topics([topic]))[topic].partitions) == 4
            cluster_info = await admin.describe_cluster()
            assert sorted(b.node_id for b in cluster_info.brokers) == [1, 2, 3]
            async with Producer(bootstrap_servers=bs) as producer:
                for i in range(10):
                    await producer.send(topic, b"%d" % i, partition=0)
            tp = TopicPartition(topic, 0)
            await admin.delete_records({tp: 4})
            assert cluster.control.offsets(topic, 0) == (4, 10)
            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()


# -- produce and fetch ----------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_round_trip_with_every_codec_keeps_keyed_order(compression: str | None) -> None:
    async with FakeCluster(brokers=2) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=3)
        count = 600
        async with Producer(bs, compression_type=compression, linger_ms=5) as producer:
            futures = [
                await producer.enqueue(topic, b"%d" % i, key=b"key-%d" % (i % 7))
                for i in range(count)
            ]
        metas = [f.result() for f in futures]
        records = await _read(bs, topic, 3, count)
        assert sorted(int(r.value) for r in records) == list(range(count))
        by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
        for r in records:
            by_key[r.key].append((r.partition, int(r.value)))
        for key, seen in by_key.items():
            assert len({p for p, _ in seen}) == 1, f"{key!r} spread over partitions"
            values = [v for _, v in seen]
            assert values == sorted(values), f"{key!r} out of order"
        for meta, i in zip(metas, range(count), strict=True):
            assert cluster.records(topic, meta.partition)[0].partition == meta.partition
            assert meta.offset >= 0, i


async def test_idempotent_resend_of_a_written_batch_lands_once() -> None:
    """The first answer is held past the producer's request timeout: the producer sends
    the batch again (same sequence), and the fake answers with the first offset."""
    async with FakeCluster() as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        cluster.control.delay("Produce", 1.5, count=1)
        async with Producer(bs, request_timeout_ms=500, delivery_timeout_ms=20_000) as producer:
            meta = await asyncio.wait_for(producer.send(topic, b"once"), 15)
        assert meta.offset == 0
        assert [r.value for r in cluster.records(topic, 0)] == [b"once"]
        assert len(cluster.control.requests("Produce")) >= 2


async def test_not_leader_on_produce_is_retried_and_lands_once() -> None:
    async with FakeCluster(brokers=2) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        cluster.control.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)
        async with Producer(bs, retry_backoff_ms=10) as producer:
            meta = await asyncio.wait_for(producer.send(topic, b"x"), 15)
        assert meta.offset == 0
        assert [r.value for r in cluster.records(topic, 0)] == [b"x"]
        assert len(cluster.control.requests("Produce")) == 3


async def test_a_moved_leader_is_followed_by_the_producer() -> None:
    async with FakeCluster(brokers=3) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        async with Producer(bs, retry_backoff_ms=10) as producer:
            await producer.send(topic, b"a")
            old = cluster.state.partition(topic, 0).leader  # type: ignore[union-attr]
            new = cluster.control.move_leader(topic, 0)
            assert new != old
            await asyncio.wait_for(producer.send(topic, b"b"), 15)
        assert [r.value for r in cluster.records(topic, 0)] == [b"a", b"b"]
        produced_on = {e.node_id for e in cluster.control.requests("Produce")}
        assert {old, new} <= produced_on


async def test_a_stopped_broker_is_reconnected_after_its_restart() -> None:
    async with FakeCluster(brokers=1) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        async with Producer(bs, retry_backoff_ms=20, reconnect_backoff_ms=20) as producer:
            await producer.send(topic, b"before")
            await cluster.control.stop_broker(1)
            sending = asyncio.ensure_future(producer.send(topic, b"during"))
            await asyncio.sleep(0.5)
            assert not sending.done()
            await cluster.control.start_broker(1)
            meta = await asyncio.wait_for(sending, 20)
        assert meta.offset == 1
        assert [r.value for r in cluster.records(topic, 0)] == [b"before", b"during"]


async def test_long_poll_returns_when_a_record_arrives() -> None:
    async with FakeCluster() as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        async with Consumer(bs, auto_offset_reset="earliest", fetch_max_wait_ms=10_000) as c:
            c.assign([TopicPartition(topic, 0)])
            stream = c.stream()
            first = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.5)  # the fetch is waiting in the broker now
            fetches = len(cluster.control.requests("Fetch"))
            async with Producer(bs) as producer:
                sent_at = time.monotonic()
                await producer.send(topic, b"wake")
            record = await asyncio.wait_for(first, 5)
            latency = time.monotonic() - sent_at
        assert record.value == b"wake"
        assert latency < 2.0, f"the long poll answered {latency:.2f}s after the produce"
        assert fetches <= 3, f"{fetches} fetches in 0.5 s: not long polling"


async def test_fetch_sessions_are_incremental() -> None:
    async with FakeCluster() as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=4)
        async with Producer(bs) as producer:
            for i in range(40):
                await producer.send(topic, b"%d" % i, partition=i % 4)
        sessions = cluster.state.brokers[1].fetch_sessions
        async with Consumer(bs, auto_offset_reset="earliest", fetch_max_wait_ms=50) as c:
            c.assign([TopicPartition(topic, p) for p in range(4)])
            stream = c.stream()
            async with asyncio.timeout(20):
                got = [await anext(stream) for _ in range(40)]
                await eventually(lambda: _now(sessions.incremental_fetches), lambda n: n >= 3)
            assert len(sessions) == 1
        assert sorted(int(r.value) for r in got) == list(range(40))


# -- groups ---------------------------------------------------------------------------


async def _assigned(consumer: Consumer, want: int, timeout_s: float = 20.0) -> set:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(consumer.assignment()) == want:
            return consumer.assignment()
        await asyncio.sleep(0.05)
    raise AssertionError(f"assignment {consumer.assignment()} never reached {want} partitions")


async def test_group_of_two_rebalances_when_one_leaves() -> None:
    async with FakeCluster(brokers=2) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=4)
        group = _name("g")
        first = Consumer(bs, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]
        second = Consumer(bs, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]
        async with first:
            first.subscribe([topic])
            pulling = asyncio.ensure_future(_pull(first))
            await _assigned(first, 4)
            async with second:
                second.subscribe([topic])
                pulling2 = asyncio.ensure_future(_pull(second))
                a = await _assigned(first, 2)
                b = await _assigned(second, 2)
                assert a | b == {TopicPartition(topic, p) for p in range(4)}
                pulling2.cancel()
            await _assigned(first, 4)
            pulling.cancel()
        described = cluster.state.groups.groups[group]
        assert described.generation_id >= 3


async def _pull(consumer: Consumer) -> None:
    async for _ in consumer.stream():
        pass


async def test_committed_offsets_survive_a_consumer_restart() -> None:
    async with FakeCluster() as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        group = _name("g")
        async with Producer(bs) as producer:
            for i in range(10):
                await producer.send(topic, b"%d" % i)
        settings = {**GROUP_SETTINGS, "auto_offset_reset": "earliest"}
        async with Consumer(bs, group_id=group, **settings) as consumer:  # type: ignore[arg-type]
            consumer.subscribe([topic])
            seen = []
            async with asyncio.timeout(20):
                async for record in consumer.stream():
                    seen.append(record.offset)
                    if len(seen) == 6:
                        await consumer.commit({TopicPartition(topic, 0): record.offset + 1})
                        break
        assert cluster.state.groups.committed(group)[(topic, 0)].offset == 6
        async with Consumer(bs, group_id=group, **settings) as consumer:  # type: ignore[arg-type]
            consumer.subscribe([topic])
            async with asyncio.timeout(20):
                record = await anext(consumer.stream())
        assert record.offset == 6
        async with Admin(bootstrap_servers=bs) as admin:
            offsets = await admin.list_consumer_group_offsets(group)
            assert offsets[TopicPartition(topic, 0)].offset == 6
            groups = await admin.list_consumer_groups()
            assert group in {g.group_id for g in groups}


# -- other clients --------------------------------------------------------------------


async def test_aiokafka_round_trip_and_group() -> None:
    aiokafka = pytest.importorskip("aiokafka")
    async with FakeCluster(brokers=2) as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=2)
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, b"%d" % i, key=b"%d" % (i % 3))
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bs,
            group_id=_name("g"),
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(20):
                while len(got) < 20:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += [m.value for msgs in batch.values() for m in msgs]
            await consumer.commit()
        finally:
            await consumer.stop()
        assert sorted(int(v) for v in got) == list(range(20))


def test_confluent_kafka_round_trip_and_group() -> None:
    confluent = pytest.importorskip("confluent_kafka")
    cluster = FakeCluster(brokers=2)
    cluster.start_blocking()
    try:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name(), partitions=2)
        producer = confluent.Producer(
            {"bootstrap.servers": bs, "enable.idempotence": True, "compression.type": "zstd"}
        )
        for i in range(20):
            producer.produce(topic, b"%d" % i, key=b"%d" % (i % 3))
        assert producer.flush(15) == 0
        consumer = confluent.Consumer(
            {
                "bootstrap.servers": bs,
                "group.id": _name("g"),
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            while len(got) < 20 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert sorted(int(v) for v in got) == list(range(20))
        assert len(cluster.records(topic, 0)) + len(cluster.records(topic, 1)) == 20
    finally:
        cluster.stop_blocking()


# -- garbage on the wire --------------------------------------------------------------


def _metadata_frame() -> bytes:
    return encode_request(MetadataRequest(topics=None), 12, 1, "fuzz")


async def _served(host: str, port: int) -> bool:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(_metadata_frame())
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
        decode_response(3, 12, await reader.readexactly(size))
        return True
    finally:
        writer.close()


async def _closed_by_broker(host: str, port: int, data: bytes) -> bool:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)  # EOF (or reset) when closed
        return rest == b"" or len(rest) > 0
    except ConnectionError:
        return True
    finally:
        writer.close()


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(struct.pack(">i", 2**31 - 1) + b"x" * 16, id="2GiB-length"),
        pytest.param(struct.pack(">i", -5), id="negative-length"),
        pytest.param(struct.pack(">i", 6) + b"\x00\x03\x00\x0c\x00\x00", id="short-header"),
        pytest.param(
            struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\0\0", id="unknown-api"
        ),
        pytest.param(_metadata_frame()[:-3], id="truncated-then-eof"),
    ],
)
async def test_garbage_closes_only_its_connection(garbage: bytes) -> None:
    async with FakeCluster() as cluster:
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        keeper_reader, keeper = await asyncio.open_connection(host, int(port))
        try:
            if garbage == _metadata_frame()[:-3]:
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(garbage)
                writer.write_eof()
                assert await asyncio.wait_for(reader.read(), 5) == b""
                writer.close()
            else:
                assert await _closed_by_broker(host, int(port), garbage)
            # A connection opened before the garbage still works, and new ones do.
            keeper.write(_metadata_frame())
            size = struct.unpack(">i", await asyncio.wait_for(keeper_reader.readexactly(4), 5))[0]
            await keeper_reader.readexactly(size)
            assert await _served(host, int(port))
        finally:
            keeper.close()


async def test_random_frames_never_stop_the_broker() -> None:
    rng = __import__("random").Random(34)
    async with FakeCluster() as cluster:
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        valid = _metadata_frame()
        for i in range(200):
            kind = i % 4
            if kind == 0:
                data = rng.randbytes(rng.randrange(1, 64))
            elif kind == 1:  # a valid header, then noise
                body = valid[4:14] + rng.randbytes(rng.randrange(0, 40))
                data = struct.pack(">i", len(body)) + body
            elif kind == 2:  # a valid frame with flipped bytes
                flipped = bytearray(valid)
                for _ in range(3):
                    flipped[rng.randrange(4, len(flipped))] ^= 1 << rng.randrange(8)
                data = bytes(flipped)
            else:  # a valid frame cut short
                data = valid[: rng.randrange(1, len(valid))]
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(data)
            writer.write_eof()
            try:
                await asyncio.wait_for(reader.read(), 5)
            except ConnectionError:
                pass
            writer.close()
        assert await _served(host, int(port))
        server = cluster.servers[1]
        await eventually(lambda: _now(server.open_connections), lambda n: n == 0, 5)


# -- threads, numbers -----------------------------------------------------------------


def test_start_blocking_serves_from_its_own_thread() -> None:
    cluster = FakeCluster()
    cluster.start_blocking()
    try:
        topic = cluster.create_topic(_name())
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(_metadata_frame())
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            _, response = decode_response(3, 12, sock.recv(size, socket.MSG_WAITALL))
        assert [t.name for t in response.topics] == [topic]  # type: ignore[attr-defined]
        assert [e.api_name for e in cluster.control.requests()] == ["Metadata"]
    finally:
        cluster.stop_blocking()
    with pytest.raises(RuntimeError):
        _ = cluster.bootstrap_servers


async def test_throughput_of_100_byte_records() -> None:
    """Printed, not asserted: records/s of 100 B through the fake, produced and read."""
    count = int(os.environ.get("FAKE_THROUGHPUT_COUNT", "100000"))
    async with FakeCluster() as cluster:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_name())
        value = b"x" * 100
        started = time.perf_counter()
        async with Producer(bs, linger_ms=5) as producer:
            for _ in range(count):
                await producer.enqueue(topic, value, partition=0)
        produced = time.perf_counter() - started
        started = time.perf_counter()
        n = 0
        async with Consumer(bs, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            async with asyncio.timeout(120):
                async for batch in consumer.batches():
                    n += len(batch)
                    if n >= count:
                        break
        consumed = time.perf_counter() - started
    print(
        f"fake throughput, {count} records of 100 B: produce {count / produced:,.0f}/s, "
        f"consume {count / consumed:,.0f}/s"
    )
    assert n == count


# -- KafkaCluster, the fixtures' source, and the CLI ------------------------------------


async def test_kafka_cluster_env_selects_the_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOSTREAM_KAFKA_BROKER", "fake")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # fake wins when asked for
    async with KafkaCluster(brokers=2) as cluster:
        assert cluster.source == "fake"
        assert cluster.startup_seconds is not None and cluster.startup_seconds < 1.0
        topic = _name()
        host, _, port = cluster.bootstrap_servers.split(",")[0].rpartition(":")
        await probe.create_topic(cluster.bootstrap_servers, topic, 2, 1, None)
        assert len(cluster.fake.state.topics[topic].partitions) == 2
        await cluster.stop_broker(2)
        brokers = await probe.metadata_brokers(host, int(port))
        assert [b[0] for b in brokers] == [1]
        await cluster.start_broker(2)
        assert sorted(b[0] for b in await probe.metadata_brokers(host, int(port))) == [1, 2]
    with pytest.raises(ValueError, match="local"):
        KafkaCluster(tls=True)


def test_kafka_cluster_start_blocking_serves_the_fake_from_a_thread() -> None:
    cluster = KafkaCluster(source="fake")
    cluster.start_blocking()
    try:
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(_metadata_frame())
            assert len(sock.recv(4, socket.MSG_WAITALL)) == 4
    finally:
        cluster.close_blocking()
    with pytest.raises(RuntimeError):
        _ = cluster.bootstrap_servers


async def test_cli_dev_broker_fake_serves_until_interrupted() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiostream_kafka.cli",
        "dev-broker",
        "--fake",
        "--brokers",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        host, _, port = line.decode().strip().split(",")[0].rpartition(":")
        apis = await probe.api_versions(host, int(port))
        assert 0 in apis and 1 in apis
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- a crash in the fake fails the test ---------------------------------------------------


async def test_a_handler_crash_is_recorded_and_fails_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in a handler closes the client's connection (the client may retry and pass);
    the crash is recorded and raised when the ``async with`` block ends."""
    import dataclasses

    from aiostream_kafka.testing.fake import HandlerCrashError
    from aiostream_kafka.testing.fake.handlers import REGISTRY

    async def broken(ctx: object, request: object) -> None:
        raise ZeroDivisionError("a bug in the fake")

    spec = REGISTRY[MetadataRequest.API_KEY]
    monkeypatch.setitem(REGISTRY, spec.api_key, dataclasses.replace(spec, handle=broken))
    with pytest.raises(HandlerCrashError, match="Metadata v12: ZeroDivisionError") as raised:
        async with FakeCluster() as cluster:
            host, _, port = cluster.bootstrap_servers.rpartition(":")
            assert await _closed_by_broker(host, int(port), _metadata_frame())
            assert len(cluster.handler_crashes) == 1
    assert "a bug in the fake" in str(raised.value)
    assert raised.value.crashes[0].api_name == "Metadata"


async def _static_group_of_two(
    coordinator: FakeGroupCoordinator,
) -> tuple[str, str]:
    """A Stable classic group with static members "a" (the leader) and "b"; their ids."""

    async def join(instance: str, member_id: str = "") -> FakeJoinResult:
        return await coordinator.join(
            "static",
            member_id,
            instance,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=5_000,
            protocol_type="consumer",
            protocols=[("range", instance.encode())],
            client_id=instance,
            client_host="/127.0.0.1",
            require_known_member_id=True,
        )

    first = await join("a")
    assert first.error_code == 0 and first.leader == first.member_id
    alone = await coordinator.sync(
        "static", first.generation_id, first.member_id, "a", None, None, {}
    )
    assert alone.error_code == 0
    # "b" joins, "a" rejoins with its id (as told by its heartbeat): one rebalance.
    b_joined, a_joined = await asyncio.gather(join("b"), join("a", first.member_id))
    both = [a_joined, b_joined]
    a, b = a_joined.member_id, b_joined.member_id
    assert both[0].leader == a and both[0].generation_id == both[1].generation_id
    generation = both[0].generation_id
    synced = await asyncio.gather(
        coordinator.sync("static", generation, a, "a", None, None, {a: b"A", b: b"B"}),
        coordinator.sync("static", generation, b, "b", None, None, {}),
    )
    assert [s.assignment for s in synced] == [b"A", b"B"]
    return a, b


async def test_a_restarted_static_member_keeps_generation_and_assignment() -> None:
    """KIP-345/KIP-814 in the fake's classic coordinator: a static member that joins again
    with no member id while the group is Stable gets a new id, the same generation and its
    old assignment, without a rebalance; the returning leader is told to skip the
    assignment (JoinGroup v9+) or, before v9, is named a follower; the old ids are fenced."""
    coordinator = FakeGroupCoordinator(
        min_session_timeout_ms=6_000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0
    )
    try:
        a, b = await _static_group_of_two(coordinator)
        group = coordinator.groups["static"]
        generation = group.generation_id

        async def rejoin(instance: str, *, v9: bool) -> FakeJoinResult:
            return await asyncio.wait_for(
                coordinator.join(
                    "static",
                    "",
                    instance,
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=5_000,
                    protocol_type="consumer",
                    protocols=[("range", b"restarted")],
                    client_id=instance,
                    client_host="/127.0.0.1",
                    require_known_member_id=True,
                    supports_skip_assignment=v9,
                ),
                5,
            )

        # A follower: answered at once, same generation, SyncGroup gives its assignment.
        follower = await rejoin("b", v9=True)
        assert follower.error_code == 0 and follower.member_id != b
        assert follower.generation_id == generation and follower.leader == a
        assert not follower.skip_assignment and follower.members == []
        assert group.state == "Stable"
        sync = await coordinator.sync("static", generation, follower.member_id, "b", None, None, {})
        assert sync.error_code == 0 and sync.assignment == b"B"
        assert coordinator.heartbeat("static", generation, b, "b") == 82  # FENCED_INSTANCE_ID

        # The leader before v9: the old leader id is named, so it assigns nothing.
        old_style = await rejoin("a", v9=False)
        assert old_style.generation_id == generation and old_style.member_id != a
        assert old_style.leader == a and old_style.members == []
        assert not old_style.skip_assignment
        # The leader in v9+: it leads, with the members, and skips the assignment.
        leader = await rejoin("a", v9=True)
        assert leader.generation_id == generation
        assert leader.leader == leader.member_id and leader.skip_assignment
        assert {m for m, _, _ in leader.members} == {leader.member_id, follower.member_id}
        sync = await coordinator.sync("static", generation, leader.member_id, "a", None, None, {})
        assert sync.error_code == 0 and sync.assignment == b"A"
        assert group.state == "Stable" and group.generation_id == generation
        assert coordinator.heartbeat("static", generation, follower.member_id, "b") == 0
    finally:
        coordinator.close()


async def test_a_static_rejoin_during_completing_rebalance_starts_another() -> None:
    """While the group waits for the leader's SyncGroup, the leader may already have been
    given the old member id: a static member's replacement then starts a new rebalance."""
    coordinator = FakeGroupCoordinator(
        min_session_timeout_ms=6_000, max_session_timeout_ms=60_000, initial_rebalance_delay_ms=0
    )
    try:
        joined = await coordinator.join(
            "static",
            "",
            "a",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=5_000,
            protocol_type="consumer",
            protocols=[("range", b"")],
            client_id="a",
            client_host="/127.0.0.1",
            require_known_member_id=True,
        )
        group = coordinator.groups["static"]
        assert group.state == "CompletingRebalance"
        again = await asyncio.wait_for(
            coordinator.join(
                "static",
                "",
                "a",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=5_000,
                protocol_type="consumer",
                protocols=[("range", b"")],
                client_id="a",
                client_host="/127.0.0.1",
                require_known_member_id=True,
                supports_skip_assignment=True,
            ),
            5,
        )
        assert again.error_code == 0 and again.member_id != joined.member_id
        assert again.generation_id == joined.generation_id + 1
        assert again.leader == again.member_id and not again.skip_assignment
    finally:
        coordinator.close()
