"""Producer, Consumer and Admin over SASL against the real broker (``kafka_sasl_cluster``):
every mechanism over SASL_PLAINTEXT and SASL_SSL, wrong credentials, missing ACLs,
OAUTHBEARER token refresh and KIP-368 re-authentication while producing."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest

from aiostream_kafka import (
    Admin,
    Consumer,
    NewTopic,
    Producer,
    SaslAuthenticationError,
    TopicPartition,
)
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
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


def _options(
    cluster: KafkaCluster,
    mechanism: str,
    *,
    tls: bool = False,
    user: str = "admin",
    password: str | None = None,
    token_lifetime_s: float = 3600.0,
) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": (
            cluster.sasl_ssl_bootstrap_servers if tls else cluster.sasl_plaintext_bootstrap_servers
        ),
        "security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
    }
    if tls:
        options["ssl_cafile"] = str(cluster.tls_ca_file)
    if mechanism == "OAUTHBEARER":
        options["sasl_oauth_token_provider"] = UnsecuredTokenProvider(
            user, lifetime_s=token_lifetime_s
        )
    else:
        options["sasl_plain_username"] = user
        options["sasl_plain_password"] = (
            password if password is not None else cluster.sasl_users[user]
        )
    return options


async def _topic(cluster: KafkaCluster, partitions: int = 1) -> str:
    name = f"sasl-client-{uuid.uuid4().hex[:10]}"
    await probe.create_topic(cluster.bootstrap_servers, name, partitions, 1, None)
    return name


@pytest.mark.parametrize("tls", [False, True], ids=["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_produce_consume_and_admin(
    kafka_sasl_cluster: KafkaCluster, mechanism: str, tls: bool
) -> None:
    cluster = kafka_sasl_cluster
    options = _options(cluster, mechanism, tls=tls)
    topic = f"sasl-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    async with Admin(**options) as admin:
        await admin.create_topics([NewTopic(topic, partitions=2, replication_factor=1)])
        assert topic in await admin.list_topics()
    async with Producer(**options) as producer:
        sent = [await producer.send(topic, value=b"v%d" % i, key=b"k%d" % i) for i in range(6)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    got = []
    async with Consumer(group_id=group, auto_offset_reset="earliest", **options) as consumer:
        consumer.subscribe([topic])
        async with asyncio.timeout(30):
            async for record in consumer.stream():
                got.append((record.partition, record.offset, record.value))
                if len(got) == len(sent):
                    break
        await consumer.commit()
    assert sorted(got) == sorted((m.partition, m.offset, b"v%d" % i) for i, m in enumerate(sent))
    async with Admin(**options) as admin:
        committed = await admin.list_consumer_group_offsets(group)
    assert {tp: om.offset for tp, om in committed.items()} == {
        TopicPartition(topic, p): 1 + max(m.offset for m in sent if m.partition == p)
        for p in {m.partition for m in sent}
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_wrong_password_fails_fast_and_typed(
    kafka_sasl_cluster: KafkaCluster, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "not-the-password-" + uuid.uuid4().hex
    options = _options(kafka_sasl_cluster, mechanism, password=secret)
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="aiostream_kafka"):
        with pytest.raises(SaslAuthenticationError) as info:
            async with Producer(**options):
                pass
    assert time.monotonic() - started < 5  # not retried until a timeout
    assert mechanism in str(info.value)
    assert not info.value.retriable
    for text in (str(info.value), repr(info.value), caplog.text):
        assert secret not in text


async def test_unknown_user_fails(kafka_sasl_cluster: KafkaCluster) -> None:
    options = _options(kafka_sasl_cluster, "SCRAM-SHA-256", user="admin", password="x")
    options["sasl_plain_username"] = "nobody-" + uuid.uuid4().hex[:6]
    with pytest.raises(SaslAuthenticationError, match="SCRAM-SHA-256"):
        async with Admin(**options):
            pass


async def test_expired_oauth_token_is_refused(kafka_sasl_cluster: KafkaCluster) -> None:
    options = _options(kafka_sasl_cluster, "OAUTHBEARER", token_lifetime_s=-60)
    started = time.monotonic()
    with pytest.raises(SaslAuthenticationError, match="OAUTHBEARER"):
        async with Admin(**options):
            pass
    assert time.monotonic() - started < 5


async def test_missing_acls_raise_authorization_errors(kafka_sasl_cluster: KafkaCluster) -> None:
    cluster = kafka_sasl_cluster
    topic = await _topic(cluster)
    alice = _options(cluster, "SCRAM-SHA-512", user="alice")
    started = time.monotonic()
    async with Producer(max_block_ms=20_000, **alice) as producer:
        with pytest.raises(TopicAuthorizationFailedError, match=topic):
            await producer.send(topic, value=b"denied")
    assert time.monotonic() - started < 10
    started = time.monotonic()
    async with Admin(**alice) as admin:
        with pytest.raises(TopicAuthorizationFailedError):
            await admin.create_topics([NewTopic(f"x-{uuid.uuid4().hex[:6]}", 1, 1)])
    assert time.monotonic() - started < 10
    started = time.monotonic()
    async with Consumer(group_id=f"g-{uuid.uuid4().hex[:6]}", **alice) as consumer:
        consumer.subscribe([topic])
        with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
            async with asyncio.timeout(20):
                async for _ in consumer.stream():
                    pass
    assert time.monotonic() - started < 20


async def test_a_transactional_id_without_acl_is_refused_fast(
    kafka_sasl_cluster: KafkaCluster,
) -> None:
    """A principal without WRITE on its transactional id: starting the transactional
    producer raises TransactionalIdAuthorizationFailedError within seconds (fatal, not
    retried), naming the id."""
    alice = _options(kafka_sasl_cluster, "SCRAM-SHA-512", user="alice")
    tid = f"tid-denied-{uuid.uuid4().hex[:6]}"
    producer = Producer(transactional_id=tid, max_block_ms=20_000, **alice)
    started = time.monotonic()
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            await producer.start()
    finally:
        await producer.close()
    assert time.monotonic() - started < 10


def test_security_config_is_checked_and_secrets_masked() -> None:
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        Producer("127.0.0.1:1", security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ConfigError, match="GSSAPI"):
        Producer("127.0.0.1:1", security_protocol="SASL_SSL", sasl_mechanism="GSSAPI")
    with pytest.raises(ConfigError, match="sasl_plain_password"):
        Producer("127.0.0.1:1", security_protocol="SASL_SSL", sasl_mechanism="PLAIN",
                 sasl_plain_username="u")  # fmt: skip
    with pytest.raises(ConfigError, match="security_protocol"):
        Producer("127.0.0.1:1", sasl_mechanism="PLAIN")
    with pytest.raises(ConfigError, match="security_protocol"):
        Producer("127.0.0.1:1", security_protocol="SASL_SCRAM")
    secret = "s3cr3t-" + uuid.uuid4().hex
    producer = Producer(
        "127.0.0.1:1",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="u",
        sasl_plain_password=secret,
    )
    assert secret not in repr(producer.client_config)
    assert secret not in repr(producer.client_config.connection_settings())


async def test_oauth_token_refresh_while_producing(kafka_sasl_cluster: KafkaCluster) -> None:
    """Tokens live 4 s; the broker ends each session with its token, so the client must
    re-authenticate (with a fresh token) on the same connection, with nothing failing."""
    cluster = kafka_sasl_cluster
    topic = await _topic(cluster)
    options = _options(cluster, "OAUTHBEARER", token_lifetime_s=4)
    provider: UnsecuredTokenProvider = options["sasl_oauth_token_provider"]
    sent = 0
    async with Producer(linger_ms=0, **options) as producer:
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            await producer.send(topic, value=b"%d" % sent)  # raises if any request fails
            sent += 1
            await asyncio.sleep(0.02)
        conns = producer.cluster.pool.connections()
        reauths = sum(c.reauthentications for c in conns)
    assert sent > 100
    assert reauths >= 2, reauths
    assert provider.calls >= 3  # first authentication + fresh tokens for re-authentication
    offsets = await probe_end_offset(cluster, topic)
    assert offsets == sent


async def test_reauthentication_keeps_requests_flowing(kafka_sasl_cluster: KafkaCluster) -> None:
    """The session cluster sets ``connections.max.reauth.ms`` to 3 s for SCRAM-SHA-512 on
    its SASL_SSL listener: pipelined produce requests keep flowing across re-authentications."""
    cluster = kafka_sasl_cluster
    topic = await _topic(cluster, partitions=3)
    options = _options(cluster, "SCRAM-SHA-512", tls=True)
    async with Producer(**options) as producer:
        deadline = time.monotonic() + 10
        futures = []
        while time.monotonic() < deadline:
            for i in range(50):
                futures.append(await producer.enqueue(topic, value=b"x%d" % i))
            await asyncio.sleep(0.01)
        results = await asyncio.gather(*futures)  # raises if any record failed
        reauths = sum(c.reauthentications for c in producer.cluster.pool.connections())
    assert len(results) > 1000
    assert reauths >= 2, reauths


async def probe_end_offset(cluster: KafkaCluster, topic: str) -> int:
    async with Admin(cluster.bootstrap_servers) as admin:
        from aiostream_kafka import OffsetSpec

        ends = await admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})
    return next(iter(ends.values())).offset


async def test_fastapi_integration_over_sasl_ssl(kafka_sasl_cluster: KafkaCluster) -> None:
    """``client_options`` carry the security settings to the producer and every consumer."""
    from fastapi import FastAPI

    from aiostream_kafka.fastapi import KafkaIntegration

    cluster = kafka_sasl_cluster
    topic = await _topic(cluster, partitions=2)
    options = _options(cluster, "SCRAM-SHA-512", tls=True)
    bootstrap = options.pop("bootstrap_servers")
    kafka = KafkaIntegration(bootstrap, client_options=options, drain_timeout_s=5)
    seen: list[bytes] = []
    everything = asyncio.Event()

    @kafka.consumer([topic], group_id=f"sasl-fastapi-{uuid.uuid4().hex[:8]}",
                    auto_offset_reset="earliest")  # fmt: skip
    async def collect(consumer: Consumer) -> None:
        async for record in consumer.stream():
            seen.append(record.value or b"")
            if len(seen) == 20:
                everything.set()

    app = FastAPI(lifespan=kafka.lifespan)
    async with kafka.lifespan(app):
        producer = kafka.get_producer()
        for n in range(20):
            await producer.send(topic, value=b"%d" % n)
        await asyncio.wait_for(everything.wait(), 30)
    assert sorted(seen) == sorted(b"%d" % n for n in range(20))


async def test_oidc_client_credentials_provider_against_the_broker(
    kafka_sasl_cluster: KafkaCluster,
) -> None:
    """KIP-768's flow end to end: a local identity provider issues (unsigned) JWTs for the
    client id it is given; the broker's unsecured validator accepts them."""
    import json
    import threading
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from aiostream_kafka.security import OAuthClientCredentialsProvider
    from aiostream_kafka.testing.sasl import unsecured_jwt

    requests: list[dict[str, str]] = []

    class Issuer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            form = dict(urllib.parse.parse_qsl(body))
            requests.append(form)
            token = unsecured_jwt("admin", lifetime_s=3600)
            payload = json.dumps(
                {"access_token": token, "token_type": "Bearer", "expires_in": 3600}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Issuer)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        cluster = kafka_sasl_cluster
        topic = await _topic(cluster)
        provider = OAuthClientCredentialsProvider(
            f"http://127.0.0.1:{server.server_address[1]}/token",
            "svc-client", "svc-secret", scope="kafka",
        )  # fmt: skip
        async with Producer(
            cluster.sasl_plaintext_bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=provider,
        ) as producer:
            for n in range(10):
                await producer.send(topic, value=b"%d" % n)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert await probe_end_offset(cluster, topic) == 10
    assert requests, "the provider never asked the identity provider"
    assert requests[0].get("grant_type") == "client_credentials"
    assert requests[0].get("scope") == "kafka"
