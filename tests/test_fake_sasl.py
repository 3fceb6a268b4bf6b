"""FakeCluster SASL (issue 34, part two): a SASL_PLAINTEXT listener per broker serving
PLAIN and SCRAM-SHA-256/512 with the users the fake is given; wrong credentials are
SASL_AUTHENTICATION_FAILED; nothing but ApiVersions and SASL is served before. Our client
and confluent-kafka. No JVM."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from aiostream_kafka import Producer
from aiostream_kafka.admin import Admin
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.headers import decode_response, encode_request
from aiostream_kafka.protocol.messages.metadata import MetadataRequest
from aiostream_kafka.testing import FakeCluster

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def _name() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_our_client_authenticates_and_round_trips(mechanism: str) -> None:
    async with FakeCluster(brokers=2, sasl_users=USERS) as cluster:
        topic = cluster.create_topic(_name(), partitions=2)
        sasl = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret",
        }
        async with Producer(cluster.sasl_bootstrap_servers, **sasl) as producer:  # type: ignore[arg-type]
            for i in range(4):
                await producer.send(topic, b"%d" % i, partition=i % 2)
        assert len(cluster.records(topic, 0)) + len(cluster.records(topic, 1)) == 4
        # Metadata on the SASL listener names the SASL ports: both brokers were reached.
        sasl_ports = {b.sasl_port for b in cluster.state.brokers.values()}
        produced_on = {e.node_id for e in cluster.control.requests("Produce")}
        assert produced_on == {1, 2} and len(sasl_ports) == 2
        assert cluster.servers[1].connections_accepted == 0  # never the plain listener


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_credentials_fail_authentication(mechanism: str) -> None:
    async with FakeCluster(sasl_users=USERS) as cluster:
        admin = Admin(
            cluster.sasl_bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
            request_timeout_ms=5_000,
        )
        with pytest.raises(ec.SaslAuthenticationFailedError):
            async with admin:
                await admin.list_topics()


async def test_requests_before_authentication_close_the_connection() -> None:
    async with FakeCluster(sasl_users=USERS) as cluster:
        host, _, port = cluster.sasl_bootstrap_servers.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(encode_request(MetadataRequest(topics=None), 12, 1, "x"))
            assert await asyncio.wait_for(reader.read(), 5) == b""
        finally:
            writer.close()
        # The plain listener serves the same request.
        host, _, port = cluster.bootstrap_servers.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(encode_request(MetadataRequest(topics=None), 12, 1, "x"))
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
            decode_response(3, 12, await reader.readexactly(size))
        finally:
            writer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_confluent_kafka_authenticates_and_is_refused_with_a_wrong_password(
    mechanism: str,
) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    cluster = FakeCluster(sasl_users=USERS)
    cluster.start_blocking()
    try:
        topic = cluster.create_topic(_name())
        base = {
            "bootstrap.servers": cluster.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": "bob",
        }
        producer = confluent.Producer({**base, "sasl.password": "bob-secret"})
        producer.produce(topic, b"hello")
        assert producer.flush(15) == 0
        assert [r.value for r in cluster.records(topic)] == [b"hello"]
        errors: list[object] = []
        refused = confluent.Producer({**base, "sasl.password": "nope", "error_cb": errors.append})
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:
            refused.poll(0.2)
        assert any("Authentication failed" in str(e) for e in errors), errors
        assert errors[0].code() == confluent.KafkaError._AUTHENTICATION  # type: ignore[attr-defined]
    finally:
        cluster.stop_blocking()
