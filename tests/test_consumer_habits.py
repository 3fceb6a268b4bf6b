"""aiokafka habits and the end of silent waits, against the real broker (issue 21, items 2
and 3): topics given to the constructor, ``async for record in consumer``, ``stop()``,
``Record.timestamp``; iterating with nothing to read raises, a subscribed topic that does
not exist is named in a WARNING and in ``health()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from aiostream_kafka import (
    Admin,
    Consumer,
    NothingToConsumeError,
    Producer,
    Record,
    TopicPartition,
)
from aiostream_kafka.consumer import engine
from aiostream_kafka.group import coordinator
from aiostream_kafka.protocol.error_codes import UnknownTopicOrPartitionError
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

FAST_GROUP = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 300}


def _group() -> str:
    return f"habits-{uuid.uuid4().hex[:10]}"


async def _produce(bs: str, topic: str, count: int, partitions: int = 1) -> None:
    async with Producer(bootstrap_servers=bs) as producer:
        for i in range(count):
            await producer.enqueue(topic, f"v{i}".encode(), partition=i % partitions)
        await producer.flush()


async def _take(records: AsyncIterator[Record], count: int, timeout_s: float = 30) -> list[Record]:
    out: list[Record] = []
    async with asyncio.timeout(timeout_s):
        async for record in records:
            out.append(record)
            if len(out) == count:
                break
    return out


async def test_topics_given_to_the_constructor_are_subscribed_on_start(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    orders, payments = await new_topic(2), await new_topic(1)
    await _produce(bs, orders, 10, partitions=2)
    await _produce(bs, payments, 5)
    async with Consumer(orders, payments, bootstrap_servers=bs, group_id=_group(),
                        **FAST_GROUP) as consumer:  # fmt: skip
        assert consumer.group is not None and consumer.group.subscribed
        records = await _take(aiter(consumer), 15)
        assert consumer.assignment() == {
            TopicPartition(orders, 0),
            TopicPartition(orders, 1),
            TopicPartition(payments, 0),
        }
    assert sorted((r.topic, r.value) for r in records) == sorted(
        [(orders, f"v{i}".encode()) for i in range(10)]
        + [(payments, f"v{i}".encode()) for i in range(5)]
    )
    for record in records:
        assert record.timestamp == record.timestamp_ms > 0


async def test_subscription_names_the_subscribed_topics_and_a_str_is_refused(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """aiokafka's ``subscription()``: the frozenset of subscribed topic names (the
    constructor's after start, a new ``subscribe``'s, a pattern's matches); a bare str
    raises TypeError and leaves the subscription as it was (issue 27)."""
    bs = kafka_cluster.bootstrap_servers
    orders, payments = await new_topic(1), await new_topic(1)
    consumer = Consumer(orders, bootstrap_servers=bs, group_id=_group(), **FAST_GROUP)
    assert consumer.subscription() == frozenset()  # subscribed by start()
    async with consumer:
        assert consumer.subscription() == frozenset({orders})
        with pytest.raises(TypeError, match=r'subscribe\(\["' + payments + r'"\]\)'):
            consumer.subscribe(payments)  # type: ignore[arg-type]
        assert consumer.subscription() == frozenset({orders})
        consumer.subscribe([orders, payments])
        assert consumer.subscription() == frozenset({orders, payments})
        # a pattern: the existing topics it matches, once the group looked them up
        consumer.subscribe(pattern=payments)
        deadline = time.monotonic() + 20
        while consumer.subscription() != frozenset({payments}):
            assert time.monotonic() < deadline, consumer.subscription()
            await asyncio.sleep(0.05)
    assert "subscription" in dir(consumer) and "unsubscribe" not in dir(consumer)


async def test_topics_without_a_group_assign_every_partition(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(3)
    await _produce(bs, topic, 9, partitions=3)
    async with Consumer(topic, bootstrap_servers=bs) as consumer:
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
        records = []
        async with asyncio.timeout(30):
            async for record in consumer:  # the same as consumer.stream()
                records.append(record)
                if len(records) == 9:
                    break
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(9))


async def test_a_missing_topic_without_a_group_fails_the_start(
    kafka_cluster: KafkaCluster,
) -> None:
    name = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(name, bootstrap_servers=kafka_cluster.bootstrap_servers)
    with pytest.raises(UnknownTopicOrPartitionError) as caught:
        async with consumer:
            pass
    assert str(caught.value) == (
        f"topic {name!r} given to Consumer() does not exist (a consumer without a group_id "
        "assigns every partition of its topics when it starts)"
    )


async def test_stop_is_close(kafka_cluster: KafkaCluster, new_topic: NewTopic) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(1)
    producer = Producer(bs)
    await producer.start()
    await producer.send(topic, b"x")
    await producer.stop()
    assert producer.closed
    consumer = Consumer(topic, bootstrap_servers=bs)
    await consumer.start()
    stream = aiter(consumer)
    assert (await anext(stream)).value == b"x"
    await consumer.stop(timeout=5)
    with pytest.raises(StopAsyncIteration):
        async with asyncio.timeout(5):
            await anext(stream)  # the iterators end when the consumer closes
    admin = Admin(bs)
    await admin.start()
    assert topic in await admin.list_topics()
    await admin.stop()
    assert admin.cluster._closed


NOTHING = (
    "nothing to consume: no partition is assigned and no topic subscribed. Call "
    "consumer.subscribe([topic, ...]) (with a group_id) or "
    "consumer.assign([TopicPartition(topic, partition), ...]) before iterating, or give the "
    'topics to the constructor: Consumer("topic", bootstrap_servers=..., group_id=...)'
)


@pytest.mark.parametrize("group", [True, False], ids=["group", "no-group"])
@pytest.mark.parametrize("how", ["stream", "batches", "partitioned_stream", "async-for"])
async def test_iterating_with_nothing_to_read_raises_at_once(
    kafka_cluster: KafkaCluster, how: str, group: bool
) -> None:
    group_id = _group() if group else None
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers,
                        group_id=group_id) as consumer:  # fmt: skip
        started = time.monotonic()
        with pytest.raises(NothingToConsumeError) as caught:
            async with asyncio.timeout(1):
                if how == "async-for":
                    async for _ in consumer:
                        pass
                else:
                    async for _ in getattr(consumer, how)():
                        pass
        assert time.monotonic() - started < 1
    assert str(caught.value) == NOTHING


async def test_an_iterator_made_before_assign_is_fine_once_assigned(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    # The check is made when iteration begins, not when the iterator is made.
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(1)
    await _produce(bs, topic, 1)
    async with Consumer(bootstrap_servers=bs) as consumer:
        stream = consumer.stream()
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(30):
            assert (await anext(stream)).value == b"v0"


async def test_a_missing_subscribed_topic_is_named_in_a_warning_and_in_health(
    kafka_cluster: KafkaCluster,
    new_topic: NewTopic,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Shorter than the 5 s / 30 s of the library, so that the repeat shows within the test.
    monkeypatch.setattr(coordinator, "MISSING_TOPIC_CHECK_S", 0.3)
    monkeypatch.setattr(coordinator, "MISSING_TOPIC_WARN_S", 1.0)
    bs = kafka_cluster.bootstrap_servers
    existing = await new_topic(1)
    typo = f"ordres-{uuid.uuid4().hex[:8]}"
    await _produce(bs, existing, 1)
    caplog.set_level(logging.WARNING, logger="aiostream_kafka.group.coordinator")
    async with Consumer(existing, typo, bootstrap_servers=bs, group_id=_group(),
                        **FAST_GROUP) as consumer:  # fmt: skip
        stream = aiter(consumer)
        assert (await _take(stream, 1))[0].topic == existing  # the other topic is read
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            warnings = [r for r in caplog.records if typo in r.getMessage()]
            if len(warnings) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(warnings) >= 2, [r.getMessage() for r in caplog.records]
        assert warnings[0].levelno == logging.WARNING
        assert f"subscribed topic(s) {typo} do not exist" in warnings[0].getMessage()
        assert warnings[1].created - warnings[0].created >= 0.9  # repeated, not flooded
        health = consumer.health()
        assert health.missing_topics == frozenset({typo})
        assert health.healthy  # a restart would not help: not a reason to restart it

        # Created later, the topic is consumed without a restart.
        await new_topic(1, name=typo)
        await _produce(bs, typo, 1)
        record = (await _take(stream, 1))[0]
        assert (record.topic, record.value) == (typo, b"v0")
        assert consumer.health().missing_topics == frozenset()


async def test_an_idle_consumer_says_so(
    kafka_cluster: KafkaCluster,
    new_topic: NewTopic,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "IDLE_LOG_S", 0.5)  # 30 s in the library
    topic = await new_topic(1)
    caplog.set_level(logging.DEBUG, logger="aiostream_kafka.consumer.engine")
    async with Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.8):
                async for _ in consumer:
                    pass
        health = consumer.health()
    idle = [r for r in caplog.records if r.getMessage().startswith("consumer idle")]
    assert [r.levelname for r in idle[:3]] == ["INFO", "DEBUG", "DEBUG"]
    assert (
        idle[0]
        .getMessage()
        .startswith("consumer idle: no records for 0.5 s from 1 assigned partition(s): ")
    )
    assert idle[-1].getMessage() == (
        "consumer idle: no records for 0.5 s from 1 assigned partition(s): 1 read to their "
        "end (nothing new in them), 0 paused"
    )
    # health(): fetches go on (the broker's long poll answers empty) and find the end.
    assert health.fetching == frozenset({TopicPartition(topic, 0)})
    assert health.last_fetch_at is not None and time.time() - health.last_fetch_at < 1.5
    assert health.last_progress_at is not None
