"""BrokerConnection and ConnectionPool against the real broker, and against small fake
servers on loopback for the failures a healthy broker never produces."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from helpers import eventually

from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.errors import (
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
    TLSHandshakeError,
)
from aiostream_kafka.net import BrokerConnection, ConnectionPool, ConnectionSettings, Lane
from aiostream_kafka.protocol.headers import encode_response
from aiostream_kafka.protocol.messages.api_versions import ApiVersionsResponse
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiostream_kafka.testing import KafkaCluster


def _address(cluster: KafkaCluster) -> tuple[str, int]:
    host, _, port = cluster.bootstrap_servers.split(",")[0].rpartition(":")
    return host, int(port)


async def test_version_negotiation_picks_the_highest_common_version(
    kafka_cluster: KafkaCluster,
) -> None:
    conn = await BrokerConnection.open(*_address(kafka_cluster), ConnectionSettings())
    try:
        assert conn.api_versions is not None
        # Kafka 4.3.1 and this client both go up to Metadata v13 and Fetch v18.
        assert conn.version_for(MetadataRequest) == 13
        assert conn.version_for(FetchRequest) == 18
    finally:
        await conn.close()


async def test_one_thousand_pipelined_requests_get_their_own_responses(
    kafka_cluster: KafkaCluster,
) -> None:
    conn = await BrokerConnection.open(*_address(kafka_cluster), ConnectionSettings())
    try:
        names = [f"no-such-topic-{i}" for i in range(1000)]

        async def ask(name: str) -> str:
            response = await conn.request(
                MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)])
            )
            assert isinstance(response, MetadataResponse)
            assert response.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
            answered = response.topics[0].name
            assert answered is not None
            return answered

        answers = await asyncio.gather(*(ask(n) for n in names))
        assert answers == names
        assert conn.in_flight == 0 and not conn.closed
    finally:
        await conn.close()


async def _empty_topic_fetch(
    cluster: KafkaCluster, new_topic: Callable[..., Awaitable[str]], max_wait_ms: int
) -> tuple[FetchRequest, str]:
    name = await new_topic()
    async with Admin(cluster.bootstrap_servers) as admin:
        topic_id = (await admin.describe_topics([name]))[name].topic_id
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            FetchRequest.FetchTopic(
                topic=name,
                topic_id=topic_id,
                partitions=[FetchRequest.FetchPartition(partition=0, partition_max_bytes=1 << 20)],
            )
        ],
    )
    # The broker may answer NOT_LEADER_OR_FOLLOWER for a moment after creating the topic.
    probe = FetchRequest(replica_id=-1, max_wait_ms=0, max_bytes=1024, topics=request.topics)
    host, _, port = cluster.bootstrap_servers.split(",")[0].rpartition(":")
    conn = await BrokerConnection.open(host, int(port), ConnectionSettings())
    try:
        for _ in range(200):
            answer = await conn.request(probe)
            assert isinstance(answer, FetchResponse)
            if answer.responses[0].partitions[0].error_code == 0:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the new topic's leader never served it")
    finally:
        await conn.close()
    return request, name


async def test_cancelling_half_the_requests_leaves_the_others_and_the_connection(
    kafka_cluster: KafkaCluster, new_topic: Callable[..., Awaitable[str]]
) -> None:
    # Long-poll fetches on an empty topic: the broker holds each one 30 ms, one at a time,
    # so all 100 are in flight together for about three seconds.
    request, _ = await _empty_topic_fetch(kafka_cluster, new_topic, max_wait_ms=30)
    conn = await BrokerConnection.open(*_address(kafka_cluster), ConnectionSettings())
    try:
        tasks = [asyncio.create_task(conn.request(request)) for _ in range(100)]
        await asyncio.sleep(0.1)
        assert conn.in_flight >= 90  # written and waiting, the broker is working through them
        waiting = [t for t in tasks if not t.done()]
        to_cancel = set(waiting[::2])
        assert len(to_cancel) >= 45
        for task in to_cancel:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if task in to_cancel:
                assert isinstance(result, asyncio.CancelledError)
            else:
                assert isinstance(result, FetchResponse), result
                assert result.responses[0].partitions[0].error_code == 0
        # The cancelled requests' responses are still read (and dropped): once the broker
        # has answered them all, nothing is owed and the connection is intact.
        await eventually(lambda: asyncio.sleep(0, conn.in_flight), lambda n: n == 0, 10)
        assert not conn.closed
        again = await conn.request(MetadataRequest(topics=[]))
        assert isinstance(again, MetadataResponse) and again.brokers
    finally:
        await conn.close()


async def test_pool_keeps_one_connection_per_lane(kafka_cluster: KafkaCluster) -> None:
    pool = ConnectionPool(ConnectionSettings())
    host, port = _address(kafka_cluster)
    try:
        control = await pool.get(host, port, Lane.CONTROL)
        fetch = await pool.get(host, port, Lane.FETCH)
        produce = await pool.get(host, port, Lane.PRODUCE)
        assert len({id(control), id(fetch), id(produce)}) == 3
        assert await pool.get(host, port, Lane.FETCH) is fetch
        # Concurrent first uses of a lane share one attempt.
        other = await asyncio.gather(*(pool.get(host, port, Lane.FETCH) for _ in range(10)))
        assert all(c is fetch for c in other)
    finally:
        await pool.close()
    assert control.closed and fetch.closed and produce.closed


async def test_a_long_poll_on_the_fetch_lane_does_not_block_control_traffic(
    kafka_cluster: KafkaCluster, new_topic: Callable[..., Awaitable[str]]
) -> None:
    request, _ = await _empty_topic_fetch(kafka_cluster, new_topic, max_wait_ms=3000)
    pool = ConnectionPool(ConnectionSettings())
    host, port = _address(kafka_cluster)
    try:
        fetch_conn = await pool.get(host, port, Lane.FETCH)
        control = await pool.get(host, port, Lane.CONTROL)
        poll = asyncio.create_task(fetch_conn.request(request))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await control.request(MetadataRequest(topics=[]))
        control_took = loop.time() - started
        assert not poll.done()  # the fetch is still parked at the broker ...
        assert control_took < 2.5  # ... and did not hold up the control lane
        await poll
    finally:
        await pool.close()


# -- fake servers: what a healthy broker never does ---------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[int, int, int]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    api_key, version, correlation_id = struct.unpack_from(">hhi", body, 0)
    return api_key, version, correlation_id


async def _answer_api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    api_key, version, correlation_id = await _read_request(reader)
    assert api_key == 18
    response = ApiVersionsResponse(
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4),
            ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=13),
        ]
    )
    writer.write(encode_response(response, version, correlation_id))
    await writer.drain()


@pytest.fixture
async def fake_server() -> AsyncIterator[Callable[[Handler], Awaitable[tuple[str, int]]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> tuple[str, int]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return "127.0.0.1", server.sockets[0].getsockname()[1]

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_a_request_timeout_fails_it_and_closes_the_connection(fake_server) -> None:  # type: ignore[no-untyped-def]
    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        await reader.read()  # swallow everything, answer nothing

    host, port = await fake_server(never_answers)
    conn = await BrokerConnection.open(host, port, ConnectionSettings())
    try:
        first = asyncio.create_task(conn.request(MetadataRequest(topics=[]), timeout_ms=300))
        second = asyncio.create_task(conn.request(MetadataRequest(topics=[]), timeout_ms=5000))
        with pytest.raises(KafkaTimeoutError, match="no response within 300 ms"):
            await first
        with pytest.raises(NetworkError):
            await second  # behind the timed-out one on the same connection
        assert conn.closed
        with pytest.raises(NetworkError, match="closed"):
            await conn.request(MetadataRequest(topics=[]))
    finally:
        await conn.close()


async def test_waiting_for_an_in_flight_slot_is_bounded_by_the_request_timeout(fake_server) -> None:  # type: ignore[no-untyped-def]
    """The wait for a free slot used to have no bound (it ran before the request's
    deadline started): a request queued behind a slow one waited as long as that one."""

    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        await reader.read()

    host, port = await fake_server(never_answers)
    conn = await BrokerConnection.open(host, port, ConnectionSettings(max_in_flight=1))
    try:
        slow = asyncio.create_task(conn.request(MetadataRequest(topics=[]), timeout_ms=10_000))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="waited 300 ms for a free in-flight slot"):
            await conn.request(MetadataRequest(topics=[]), timeout_ms=300)
        assert time.monotonic() - started < 2
        assert not conn.closed and not slow.done()  # the wait said nothing of the connection
        slow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slow
    finally:
        await conn.close()


async def test_a_response_out_of_step_fails_the_connection_with_a_protocol_error(
    fake_server,  # type: ignore[no-untyped-def]
) -> None:
    async def wrong_id(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        _, version, correlation_id = await _read_request(reader)
        writer.write(encode_response(MetadataResponse(), version, correlation_id + 7))
        await writer.drain()
        await reader.read()

    host, port = await fake_server(wrong_id)
    conn = await BrokerConnection.open(host, port, ConnectionSettings())
    try:
        with pytest.raises(NetworkError) as info:
            await conn.request(MetadataRequest(topics=[]))
        assert isinstance(info.value.__cause__, ProtocolError)
        assert "correlation id" in str(info.value)
        assert conn.closed
    finally:
        await conn.close()


async def test_an_oversized_frame_is_refused_without_buffering_it(fake_server) -> None:  # type: ignore[no-untyped-def]
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        await _read_request(reader)
        writer.write(struct.pack(">i", 2_000_000_000))  # claims 2 GB
        await writer.drain()
        await reader.read()

    host, port = await fake_server(huge)
    conn = await BrokerConnection.open(host, port, ConnectionSettings(max_frame_bytes=1 << 20))
    try:
        with pytest.raises(NetworkError) as info:
            await conn.request(MetadataRequest(topics=[]))
        assert isinstance(info.value.__cause__, ProtocolError)
    finally:
        await conn.close()


async def test_a_connection_dropped_by_the_server_fails_in_flight_requests(fake_server) -> None:  # type: ignore[no-untyped-def]
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        await _read_request(reader)
        writer.close()

    host, port = await fake_server(hang_up)
    conn = await BrokerConnection.open(host, port, ConnectionSettings())
    try:
        with pytest.raises(NetworkError) as info:
            await conn.request(MetadataRequest(topics=[]))
        assert info.value.retriable
    finally:
        await conn.close()


async def test_pool_backs_off_after_failures_and_reconnects() -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    pool = ConnectionPool(
        ConnectionSettings(), reconnect_backoff_ms=200, reconnect_backoff_max_ms=400
    )
    try:
        with pytest.raises(NetworkError, match="cannot connect"):
            await pool.get("127.0.0.1", port)
        remaining = pool.backoff_remaining("127.0.0.1", port)
        assert 0.1 < remaining <= 0.25  # 200 ms ± 20% jitter
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(NetworkError):
            await pool.get("127.0.0.1", port)
        assert loop.time() - started >= 0.1  # the second attempt waited out the back-off
        assert pool.backoff_remaining("127.0.0.1", port) > 0.25  # and the next doubles
    finally:
        await pool.close()


async def test_unknown_topic_ids_are_used_for_fetch(kafka_cluster: KafkaCluster) -> None:
    """Fetch v13+ names topics by id; an unknown id is answered per topic, not a failure."""
    conn = await BrokerConnection.open(*_address(kafka_cluster), ConnectionSettings())
    try:
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            topics=[
                FetchRequest.FetchTopic(
                    topic_id=uuid.uuid4(),
                    partitions=[FetchRequest.FetchPartition(partition=0, partition_max_bytes=1024)],
                )
            ],
        )
        response = await conn.request(request)
        assert isinstance(response, FetchResponse)
        assert response.responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID
    finally:
        await conn.close()


async def test_admin_created_topic_is_fetchable(kafka_cluster: KafkaCluster) -> None:
    name = f"fetchable-{uuid.uuid4().hex[:8]}"
    async with Admin(kafka_cluster.bootstrap_servers) as admin:
        created = await admin.create_topics([NewTopic(name, partitions=2, replication_factor=1)])
        description = created[name]
        assert description is not None and len(description.partitions) == 2
        await admin.delete_topics([name])


# -- TLS -------------------------------------------------------------------------------------


async def test_tls_through_an_ssl_context(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from aiostream_kafka.testing.tls import make_tls_material

    material = make_tls_material(tmp_path)

    async def answer_metadata(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer_api_versions(reader, writer)
        _, version, correlation_id = await _read_request(reader)
        response = MetadataResponse(
            brokers=[MetadataResponse.MetadataResponseBroker(node_id=7, host="h", port=1)]
        )
        writer.write(encode_response(response, version, correlation_id))
        await writer.drain()
        await reader.read()

    server = await asyncio.start_server(
        answer_metadata, "127.0.0.1", 0, ssl=material.server_context()
    )
    port = server.sockets[0].getsockname()[1]
    try:
        settings = ConnectionSettings(ssl_context=material.client_context())
        conn = await BrokerConnection.open("127.0.0.1", port, settings)
        try:
            response = await conn.request(MetadataRequest(topics=[]))
            assert isinstance(response, MetadataResponse)
            assert response.brokers[0].node_id == 7
        finally:
            await conn.close()
        # A client that does not trust the test CA refuses the server.
        with pytest.raises(TLSHandshakeError, match="TLS handshake") as info:
            await BrokerConnection.open(
                "127.0.0.1", port, ConnectionSettings(ssl_context=ssl.create_default_context())
            )
        assert not info.value.retriable
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.real_broker(
    reason="a TLS listener (the fake serves PLAINTEXT and SASL_PLAINTEXT only)"
)
@pytest.mark.broker
async def test_tls_to_a_real_broker() -> None:
    """Admin, Producer and Consumer over the broker's TLS listener (test CA)."""
    from aiostream_kafka import Consumer, Producer
    from aiostream_kafka.admin import NewTopic
    from aiostream_kafka.structs import TopicPartition
    from aiostream_kafka.testing import KafkaCluster

    async with KafkaCluster(brokers=1, source="local", tls=True) as cluster:
        bootstrap = cluster.tls_bootstrap_servers
        assert bootstrap != cluster.bootstrap_servers
        context = cluster.tls_client_context()
        tls = {"security_protocol": "SSL", "ssl_context": context}
        async with Admin(bootstrap, **tls) as admin:
            await admin.create_topics([NewTopic("secure", partitions=1, replication_factor=1)])
            # Metadata over TLS advertises the TLS listener, not the plaintext one.
            ports = {b.port for b in admin.cluster.snapshot.brokers.values()}
            assert ports == {int(bootstrap.rpartition(":")[2])}
        async with Producer(bootstrap_servers=bootstrap, **tls) as producer:
            meta = await producer.send("secure", value=b"over tls", key=b"k")
        async with Consumer(bootstrap, **tls) as consumer:
            consumer.assign([TopicPartition("secure", 0)])
            record = await asyncio.wait_for(anext(aiter(consumer.stream())), 30)
        assert (record.offset, record.value) == (meta.offset, b"over tls")
        # The plaintext port does not speak TLS: the broker drops the connection, and the
        # error says what is likely wrong.
        with pytest.raises(NetworkError, match="TLS listener"):
            await BrokerConnection.open(
                *_address(cluster), ConnectionSettings(ssl_context=context, connect_timeout_ms=5000)
            )
