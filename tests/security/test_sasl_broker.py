"""The SASL broker harness (``KafkaCluster(sasl=True)``), proved with an independent client
(confluent-kafka / librdkafka), and this package's mechanisms against the real broker
through a bare SaslHandshake/SaslAuthenticate exchange (``sasl_wire``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from sasl_wire import connect

from aiostream_kafka.protocol.error_codes import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from aiostream_kafka.security import (
    OAuthBearerMechanism,
    PlainMechanism,
    SaslMechanism,
    ScramMechanism,
    create_mechanism,
)
from aiostream_kafka.testing import KafkaCluster, probe
from aiostream_kafka.testing.sasl import UnsecuredTokenProvider

pytestmark = pytest.mark.real_broker(
    reason=(
        "the SASL/TLS cluster (kafka_sasl_cluster: SASL_SSL, OAUTHBEARER, ACLs, KIP-368 re-"
        "authentication) runs from the local jars; the fake's SASL is covered in "
        "test_fake_sasl.py"
    )
)

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
TOPIC_AUTHORIZATION_FAILED = 29


def _topic(cluster: KafkaCluster) -> str:
    """A fresh topic, created over the unrestricted PLAINTEXT listener."""
    name = f"sasl-{uuid.uuid4().hex[:10]}"
    asyncio.run(probe.create_topic(cluster.bootstrap_servers, name, 1, 1, None))
    return name


def _librdkafka(
    cluster: KafkaCluster,
    mechanism: str,
    user: str = "admin",
    password: str | None = None,
    *,
    ssl: bool = False,
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "security.protocol": "SASL_SSL" if ssl else "SASL_PLAINTEXT",
        "bootstrap.servers": (
            cluster.sasl_ssl_bootstrap_servers if ssl else cluster.sasl_plaintext_bootstrap_servers
        ),
        "sasl.mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        conf["sasl.oauthbearer.config"] = f"principal={user}"
        conf["enable.sasl.oauthbearer.unsecure.jwt"] = True
    else:
        conf["sasl.username"] = user
        conf["sasl.password"] = cluster.sasl_users[user] if password is None else password
    if ssl:
        conf["ssl.ca.location"] = str(cluster.tls_ca_file)
    return conf


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    return errors


def _consume(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            values.append(value)
        return values
    finally:
        consumer.close()


# -- the harness, checked with librdkafka ----------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_librdkafka_produces_and_consumes_over_sasl_plaintext(
    kafka_sasl_cluster: KafkaCluster, mechanism: str
) -> None:
    topic = _topic(kafka_sasl_cluster)
    conf = _librdkafka(kafka_sasl_cluster, mechanism)
    values = [f"{mechanism}-{i}".encode() for i in range(5)]
    assert _produce(conf, topic, values) == [None] * 5
    assert _consume(conf, topic, 5) == values


def test_librdkafka_over_sasl_ssl(kafka_sasl_cluster: KafkaCluster) -> None:
    topic = _topic(kafka_sasl_cluster)
    conf = _librdkafka(kafka_sasl_cluster, "SCRAM-SHA-512", ssl=True)
    assert _produce(conf, topic, [b"over TLS"]) == [None]
    assert _consume(conf, topic, 1) == [b"over TLS"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_librdkafka_wrong_password_fails_authentication(
    kafka_sasl_cluster: KafkaCluster, mechanism: str
) -> None:
    errors: list[KafkaError] = []
    conf = _librdkafka(kafka_sasl_cluster, mechanism, password="not-the-password")
    producer = Producer({**conf, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in errors[0].str()


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_librdkafka_user_without_acl_is_denied(
    kafka_sasl_cluster: KafkaCluster, mechanism: str
) -> None:
    topic = _topic(kafka_sasl_cluster)
    [error] = _produce(_librdkafka(kafka_sasl_cluster, mechanism, "alice"), topic, [b"x"])
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_harness_exposes_listeners_and_users(kafka_sasl_cluster: KafkaCluster) -> None:
    cluster = kafka_sasl_cluster
    addresses = {
        cluster.bootstrap_servers,
        cluster.tls_bootstrap_servers,
        cluster.sasl_plaintext_bootstrap_servers,
        cluster.sasl_ssl_bootstrap_servers,
    }
    assert len(addresses) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert cluster.tls_ca_file.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert cluster.sasl_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert cluster.sasl_super_user == "admin"
    assert cluster.sasl_mechanisms == tuple(MECHANISMS)
    cluster.sasl_users["mallory"] = "x"  # a copy: the cluster's users are not changed
    assert "mallory" not in cluster.sasl_users


def test_sasl_needs_local_brokers(monkeypatch: pytest.MonkeyPatch) -> None:
    for source in ("docker", "external"):
        with pytest.raises(ValueError, match="sasl=True needs brokers run from local jars"):
            KafkaCluster(sasl=True, source=source)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    with pytest.raises(ValueError, match="unset KAFKA_BOOTSTRAP_SERVERS"):
        KafkaCluster(sasl=True)


def test_sasl_properties_need_sasl() -> None:
    cluster = KafkaCluster(source="local")
    with pytest.raises(RuntimeError):
        _ = cluster.sasl_users
    with pytest.raises(RuntimeError):
        _ = cluster.sasl_plaintext_bootstrap_servers


# -- this package's mechanisms against the broker --------------------------------------------


def _mechanism(name: str, user: str = "admin", password: str = "") -> SaslMechanism:
    if name == "OAUTHBEARER":
        return OAuthBearerMechanism(UnsecuredTokenProvider(user))
    return create_mechanism(name, username=user, password=password or f"{user}-secret")


@pytest.mark.parametrize("name", MECHANISMS)
async def test_our_mechanisms_authenticate(kafka_sasl_cluster: KafkaCluster, name: str) -> None:
    topic = await asyncio.to_thread(_topic, kafka_sasl_cluster)
    for user, expected in (("admin", 0), ("alice", TOPIC_AUTHORIZATION_FAILED)):
        session = await connect(kafka_sasl_cluster.sasl_plaintext_bootstrap_servers)
        try:
            exchange = await session.authenticate(_mechanism(name, user))
            assert exchange.done
            assert session.round_trips == (2 if name.startswith("SCRAM") else 1)
            # the principal is the user: the authorizer lets admin see the topic, not alice
            assert await session.topic_error(topic) == expected
        finally:
            await session.close()


async def test_our_scram_over_sasl_ssl(kafka_sasl_cluster: KafkaCluster) -> None:
    context = kafka_sasl_cluster.tls_client_context()
    session = await connect(kafka_sasl_cluster.sasl_ssl_bootstrap_servers, context)
    try:
        await session.authenticate(ScramMechanism("SCRAM-SHA-512", "admin", "admin-secret"))
        assert await session.topic_error("no-such-topic") == 3  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("mechanism", "match"),
    [
        (PlainMechanism("admin", "wrong"), "Invalid username or password"),
        (PlainMechanism("nobody", "x"), "Invalid username or password"),
        (ScramMechanism("SCRAM-SHA-256", "admin", "wrong"), "invalid credentials"),
        (ScramMechanism("SCRAM-SHA-512", "nobody", "x"), "invalid credentials"),
        (OAuthBearerMechanism(UnsecuredTokenProvider("admin", lifetime_s=-60)), "invalid_token"),
    ],
)
async def test_bad_credentials_are_refused_by_the_broker(
    kafka_sasl_cluster: KafkaCluster, mechanism: SaslMechanism, match: str
) -> None:
    session = await connect(kafka_sasl_cluster.sasl_plaintext_bootstrap_servers)
    try:
        with pytest.raises(SaslAuthenticationFailedError, match=match):
            await session.authenticate(mechanism)
    finally:
        await session.close()


async def test_unknown_mechanism_is_refused_at_handshake(kafka_sasl_cluster: KafkaCluster) -> None:
    class Gssapi(PlainMechanism):
        name = "GSSAPI"

    session = await connect(kafka_sasl_cluster.sasl_plaintext_bootstrap_servers)
    try:
        with pytest.raises(UnsupportedSaslMechanismError, match="OAUTHBEARER"):
            await session.authenticate(Gssapi("admin", "admin-secret"))
    finally:
        await session.close()


async def test_reauthentication_is_refused_when_not_configured(
    kafka_sasl_cluster: KafkaCluster,
) -> None:
    session = await connect(kafka_sasl_cluster.sasl_plaintext_bootstrap_servers)
    try:
        await session.authenticate(_mechanism("SCRAM-SHA-256"))
        assert session.session_lifetime_ms == 0
        with pytest.raises(IllegalSaslStateError):
            await session.authenticate(_mechanism("SCRAM-SHA-256"))
    finally:
        await session.close()


async def test_oauthbearer_session_ends_with_the_token(kafka_sasl_cluster: KafkaCluster) -> None:
    """Without connections.max.reauth.ms the broker still bounds an OAUTHBEARER session by
    the token's lifetime: it tells the client (session_lifetime_ms), accepts a KIP-368
    re-authentication before, and drops the connection on the first request after."""
    provider = UnsecuredTokenProvider("admin", lifetime_s=3)
    session = await connect(kafka_sasl_cluster.sasl_plaintext_bootstrap_servers)
    try:
        await session.authenticate(OAuthBearerMechanism(provider))
        assert 0 < session.session_lifetime_ms <= 3000
        await session.authenticate(OAuthBearerMechanism(provider))  # re-authentication
        assert provider.calls == 2
        await asyncio.sleep(session.session_lifetime_ms / 1000 + 0.5)
        with pytest.raises((ConnectionError, OSError)):
            await session.topic_error("any")
    finally:
        await session.close()


@pytest.mark.slow
@pytest.mark.broker
async def test_reauthentication_settings_per_listener_and_mechanism() -> None:
    """``connections.max.reauth.ms`` through server_properties: per listener and mechanism,
    per listener, or for every listener; the broker then accepts KIP-368
    re-authentication and announces the session lifetime."""
    properties = {
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "5000",
        "listener.name.sasl_ssl.connections.max.reauth.ms": "7000",
    }
    started = time.monotonic()
    async with KafkaCluster(
        sasl=True, tls=True, source="local", server_properties=properties
    ) as cluster:
        print(f"SASL+TLS cluster started in {time.monotonic() - started:.1f}s")
        context = cluster.tls_client_context()
        cases = [
            (cluster.sasl_plaintext_bootstrap_servers, None, "PLAIN", 5000),
            (cluster.sasl_plaintext_bootstrap_servers, None, "SCRAM-SHA-256", 0),
            (cluster.sasl_ssl_bootstrap_servers, context, "SCRAM-SHA-256", 7000),
        ]
        for address, ssl_context, name, lifetime in cases:
            session = await connect(address, ssl_context)
            try:
                await session.authenticate(_mechanism(name))
                assert session.session_lifetime_ms == lifetime, (address, name)
                if lifetime:
                    await session.authenticate(_mechanism(name))
                    assert await session.topic_error("none") == 3
            finally:
                await session.close()
