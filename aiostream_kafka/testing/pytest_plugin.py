"""pytest plugin: fixtures ``kafka_cluster`` and ``new_topic``.

Registered through the ``pytest11`` entry point, so installing aiostream-kafka is enough.

* ``kafka_cluster`` (session scope): one 1-broker :class:`KafkaCluster` shared by the
  session. A broker that cannot be started is an error, never a skip.
* ``new_topic``: an async factory ``await new_topic(partitions=1, replication_factor=1,
  config=None) -> str`` creating a fresh, uniquely named topic on ``kafka_cluster`` and
  waiting until every partition has a leader.
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
