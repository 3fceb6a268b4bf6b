"""The driver-side Admin of streaming queries (``reader.AdminSession``), against the real
broker: one Admin for many calls, a bounded lifetime, a retry on a new Admin when the
reused one fails, and a clean close. No Spark: the session is what the stream reader's
``initialOffset``/``latestOffset``/``partitions`` call."""

from __future__ import annotations

import pickle
import uuid

import pytest

from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.spark.options import parse_source_options
from aiostream_kafka.spark.reader import AdminSession
from aiostream_kafka.spark.stream_reader import KafkaStreamReader
from aiostream_kafka.testing import KafkaCluster


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _session(cluster: KafkaCluster, **kwargs: float) -> tuple[AdminSession, Clock, str]:
    topic = f"admin-session-{uuid.uuid4().hex[:8]}"
    opts = parse_source_options(
        {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic}
    )
    clock = Clock()
    return AdminSession(opts, clock=clock, **kwargs), clock, topic


async def _partition_count(admin: Admin, topic: str) -> int:
    return len((await admin.describe_topics([topic]))[topic].partitions)


def test_one_admin_serves_many_calls_then_closes(kafka_cluster: KafkaCluster) -> None:
    session, _, topic = _session(kafka_cluster)
    try:
        session.run(lambda admin: admin.create_topics([NewTopic(topic, 3, 1)]))
        counts = [session.run(lambda admin: _partition_count(admin, topic)) for _ in range(5)]
        assert counts == [3] * 5
        assert session.opened == 1
    finally:
        session.close()
    session.close()  # twice is harmless
    # a closed session opens a new Admin on its next call
    try:
        assert session.run(lambda admin: _partition_count(admin, topic)) == 3
        assert session.opened == 2
    finally:
        session.close()


def test_the_admin_is_replaced_when_too_old_or_idle(kafka_cluster: KafkaCluster) -> None:
    session, clock, topic = _session(kafka_cluster, max_age_s=100, max_idle_s=30)
    try:
        session.run(lambda admin: admin.create_topics([NewTopic(topic, 1, 1)]))
        for _ in range(4):  # used every 25 s: never idle for 30 s...
            clock.now += 25
            session.run(lambda admin: _partition_count(admin, topic))
        assert session.opened == 2  # ...but 100 s old after the fourth call
        clock.now += 30  # idle for 30 s
        session.run(lambda admin: _partition_count(admin, topic))
        assert session.opened == 3
    finally:
        session.close()


def test_a_failure_on_a_reused_admin_is_retried_on_a_new_one(kafka_cluster: KafkaCluster) -> None:
    session, _, topic = _session(kafka_cluster)
    try:
        session.run(lambda admin: admin.create_topics([NewTopic(topic, 2, 1)]))

        async def close_connections(admin: Admin) -> None:
            await admin.cluster.close()  # as if the broker had dropped them meanwhile

        session.run(close_connections)
        assert session.run(lambda admin: _partition_count(admin, topic)) == 2
        assert session.opened == 2
    finally:
        session.close()


def test_errors_of_the_lookup_itself_keep_the_admin(kafka_cluster: KafkaCluster) -> None:
    session, _, _ = _session(kafka_cluster)

    async def refuse(admin: Admin) -> None:
        await admin.list_topics()
        raise ConfigError("bad offsets")

    try:
        with pytest.raises(ConfigError):
            session.run(refuse)
        with pytest.raises(ConfigError):
            session.run(refuse)
        assert session.opened == 1
    finally:
        session.close()


def test_the_stream_reader_pickles_without_its_admin(kafka_cluster: KafkaCluster) -> None:
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": kafka_cluster.bootstrap_servers,
            "subscribe": f"absent-{uuid.uuid4().hex[:8]}",
        }
    )
    reader = KafkaStreamReader(opts, None)  # type: ignore[arg-type]
    try:
        assert reader.initialOffset() == {}  # the topic does not exist (yet)
        assert reader._admin.opened == 1
        copy = pickle.loads(pickle.dumps(reader))
        assert copy._admin.opened == 1 and copy._admin._admin is None
    finally:
        reader.stop()
    assert reader._admin._admin is None
