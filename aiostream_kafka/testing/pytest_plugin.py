"""pytest plugin: fixtures ``kafka_cluster``, ``new_topic`` and ``kafka_sasl_cluster``.

Registered through the ``pytest11`` entry point, so installing aiostream-kafka is enough.

* ``kafka_cluster`` (session scope): one 1-broker :class:`KafkaCluster` shared by the
  session. A broker that cannot be started is an error, never a skip.
* ``new_topic``: an async factory ``await new_topic(partitions=1, replication_factor=1,
  config=None) -> str`` creating a fresh, uniquely named topic on ``kafka_cluster`` and
  waiting until every partition has a leader.
* with ``AIOSTREAM_KAFKA_BROKER=fake``, a request handler of the fake that crashes
  while a test using ``kafka_cluster`` runs fails that test
  (:class:`~aiostream_kafka.testing.fake.HandlerCrashError`).
* ``kafka_sasl_cluster`` (session scope): a 1-broker cluster with SASL and TLS listeners
  (``KafkaCluster(sasl=True, tls=True)``, always from the local jars), started the first
  time a test asks for it, so only sessions that run SASL tests pay for it.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping

import pytest

from aiostream_kafka.testing import probe
from aiostream_kafka.testing.cluster import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """A 1-broker Kafka cluster for the whole test session."""
    cluster = KafkaCluster(brokers=1)
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


@pytest.fixture(scope="session")
def kafka_sasl_cluster() -> Iterator[KafkaCluster]:
    """A 1-broker cluster with SASL_PLAINTEXT and SASL_SSL listeners for the session.

    Mechanisms PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (unsigned JWS tokens),
    users ``cluster.sasl_users`` (``admin`` super user, ``alice`` without ACLs), the
    ``StandardAuthorizer``; its PLAINTEXT listener (``bootstrap_servers``) is unrestricted
    and serves the ``new_topic``-style helpers. SASL needs brokers the harness configures,
    so this cluster always runs from the local jars, even when ``KAFKA_BOOTSTRAP_SERVERS``
    or Docker would be used for ``kafka_cluster``. SCRAM-SHA-512 sessions on the SASL_SSL
    listener last 3 s (``connections.max.reauth.ms``): clients re-authenticate (KIP-368).
    """
    cluster = KafkaCluster(
        brokers=1,
        sasl=True,
        tls=True,
        source="local",
        # KIP-368 re-authentication every few seconds for one listener and mechanism, so
        # that the client's re-authentication is exercised without slowing the others.
        server_properties={
            "listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms": "3000"
        },
    )
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


@pytest.fixture(autouse=True)
def _fake_handler_crashes(request: pytest.FixtureRequest) -> Iterator[None]:
    """With the fake broker behind ``kafka_cluster``: a request handler that crashed while
    a test ran fails that test (its client may only have seen a closed connection and
    retried)."""
    if "kafka_cluster" not in request.fixturenames:
        yield
        return
    cluster = request.getfixturevalue("kafka_cluster")
    if cluster.source != "fake":
        yield
        return
    fake = cluster.fake
    fake.check()  # (crashes of earlier tests were reported there)
    yield
    fake.check()


@pytest.fixture
def new_topic(kafka_cluster: KafkaCluster, request: pytest.FixtureRequest) -> NewTopic:
    """Return a factory that creates a fresh topic and returns its name."""
    test_name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]

    async def create(
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
    ) -> str:
        topic = name or f"t-{test_name}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        await probe.create_topic(
            kafka_cluster.bootstrap_servers, topic, partitions, replication_factor, config
        )
        return topic

    return create
