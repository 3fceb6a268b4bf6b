"""Issue 17, "no zombie consumers": a group member that is alive consumes, or says why not
(real broker).

* heartbeats go on through the rebalance callbacks: an ``on_assigned`` slower than
  ``session_timeout_ms`` costs no generation and no re-delivery;
* poll liveness: a member whose application stops asking for records leaves the group
  after ``max_poll_interval_ms`` (its partitions go to the other member), ``health()`` says
  why, and it joins again when the application asks again;
* a committed-offset lookup failing during an assignment is retried while retriable
  (``health()`` shows it) and otherwise raised to the iterator; a raising callback fails
  the consumer with ``RebalanceCallbackError``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiostream_kafka import Consumer, Producer, RebalanceCallbackError, TopicPartition
from aiostream_kafka.errors import KafkaTimeoutError
from aiostream_kafka.protocol.error_codes import GroupAuthorizationFailedError
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

FAST = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 300, "metadata_max_age_ms": 1_000}


def _group() -> str:
    return f"live-{uuid.uuid4().hex[:10]}"


async def _produce(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap, linger_ms=5) as producer:
        futures = [
            await producer.enqueue(topic, value=b"%d" % i, key=b"%d" % i) for i in range(count)
        ]
        await producer.flush()
        assert all(f.exception() is None for f in futures)


async def _until(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Wait until ``check()``; return the seconds it took."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.1)
    return time.monotonic() - began


async def test_an_on_assigned_slower_than_the_session_costs_no_generation(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Seen: 6 generations in 60 s and 1,449 records delivered 8,015 times, because no
    heartbeat went out until the callbacks finished."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await _produce(bootstrap, topic, 300)
    calls = 0
    setup_done = asyncio.Event()

    async def slow_setup(partitions: frozenset[TopicPartition]) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(9)  # session_timeout_ms is 6 s
        setup_done.set()

    got: list[tuple[int, int]] = []
    async with Consumer(bootstrap, group_id=_group(), max_poll_interval_ms=30_000,
                        **FAST) as consumer:  # type: ignore[arg-type]  # fmt: skip
        consumer.subscribe([topic], on_assigned=slow_setup)
        stream = aiter(consumer.stream())
        async with asyncio.timeout(40):
            while len(got) < 300:
                record = await anext(stream)
                got.append((record.partition, record.offset))
            await setup_done.wait()
            await asyncio.sleep(2)  # an expired session would show up as a new generation
            await _produce(bootstrap, topic, 100)
            while len(got) < 400:
                record = await anext(stream)
                got.append((record.partition, record.offset))
        assert consumer._group is not None
        generations = consumer._group.coordinator.rebalances
        assert consumer.health().healthy, consumer.health()
    assert len(got) == len(set(got)) == 400  # nothing delivered twice
    assert generations == 1 and calls == 1, (generations, calls)


async def test_a_member_that_stops_asking_leaves_and_comes_back(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Seen: the waiting member owned 2 of 4 partitions for 40 s and read 200 of 400
    (aiokafka: all 4 after 12 s)."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    await _produce(bootstrap, topic, 400)
    group = _group()
    settings: dict[str, Any] = {**FAST, "max_poll_interval_ms": 6_000}
    stuck = asyncio.Event()
    release = asyncio.Event()
    hung_first: list[int] = []

    async with (
        Consumer(bootstrap, group_id=group, **settings) as hung,
        Consumer(bootstrap, group_id=group, **settings) as healthy,
    ):
        hung.subscribe([topic])

        async def hang() -> None:
            async for record in hung.stream():
                hung_first.append(record.offset)
                stuck.set()
                await release.wait()  # processing hangs: no more asking
                break
            async for _record in hung.stream():  # asks again after the release
                pass

        hang_task = asyncio.create_task(hang())
        await asyncio.wait_for(stuck.wait(), 20)
        healthy.subscribe([topic])
        seen: set[tuple[int, int]] = set()

        async def read() -> None:
            async for record in healthy.stream():
                seen.add((record.partition, record.offset))

        reader = asyncio.create_task(read())
        began = time.monotonic()
        try:
            await _until(lambda: len(healthy.health().assignment) == 4, 30,
                         "the healthy member owns all 4 partitions")  # fmt: skip
            took_over_s = time.monotonic() - began
            await _until(lambda: len(seen) == 400, 20, "the healthy member read all 400")
            health = hung.health()
            assert not health.healthy and health.reason is not None
            assert "max_poll_interval_ms" in health.reason, health.reason
            assert health.assignment == frozenset()
            assert hung._group is not None and hung._group.coordinator.poll_timeouts == 1
            # The application asks again: the member rejoins and gets partitions back.
            release.set()
            await _until(
                lambda: hung.health().reason is None and len(hung.health().assignment) > 0,
                30,
                "the released member rejoined with partitions",
            )
            assert hung.health().healthy
        finally:
            release.set()
            reader.cancel()
            hang_task.cancel()
            await asyncio.gather(reader, hang_task, return_exceptions=True)
    assert took_over_s < 20, took_over_s  # max_poll_interval_ms (6 s) + a rebalance


async def test_a_failing_committed_offset_lookup_is_retried_then_consumed(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen: 0 of 400 consumed with ``health()`` healthy and stable, no error."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await _produce(bootstrap, topic, 400)
    async with Consumer(bootstrap, group_id=_group(), **FAST) as consumer:  # type: ignore[arg-type]
        assert consumer._group is not None
        offsets = consumer._group.coordinator.offsets
        real = offsets.committed
        failures = 0
        problems: list[str | None] = []

        async def flaky(partitions: Any) -> Any:
            nonlocal failures
            if failures:  # what health() says while the lookup keeps failing
                problems.append(consumer.health().reason)
            if failures < 3:
                failures += 1
                raise KafkaTimeoutError("injected: committed offsets timed out")
            return await real(partitions)

        monkeypatch.setattr(offsets, "committed", flaky)
        consumer.subscribe([topic])
        got = 0
        async with asyncio.timeout(30):
            async for _record in consumer.stream():
                got += 1
                if got == 400:
                    break
        assert failures == 3 and len(problems) == 3
        assert all(p is not None and "committed offsets not available" in p for p in problems)
        assert consumer.health().healthy and consumer.health().reason is None


async def test_a_non_retriable_committed_offset_error_reaches_the_iterator(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await _produce(bootstrap, topic, 10)
    async with Consumer(bootstrap, group_id=_group(), **FAST) as consumer:  # type: ignore[arg-type]
        assert consumer._group is not None

        async def denied(partitions: Any) -> Any:
            raise GroupAuthorizationFailedError("injected: not authorized to describe the group")

        monkeypatch.setattr(consumer._group.coordinator.offsets, "committed", denied)
        consumer.subscribe([topic])
        began = time.monotonic()
        with pytest.raises(GroupAuthorizationFailedError):
            async with asyncio.timeout(20):
                async for _record in consumer.stream():
                    pass
        assert time.monotonic() - began < 15
        health = consumer.health()
        assert not health.healthy and isinstance(health.error, GroupAuthorizationFailedError)


async def test_a_raising_on_assigned_fails_the_consumer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await _produce(bootstrap, topic, 10)

    async def broken(partitions: frozenset[TopicPartition]) -> None:
        raise RuntimeError("cannot open the database")

    async with Consumer(bootstrap, group_id=_group(), **FAST) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic], on_assigned=broken)
        with pytest.raises(RebalanceCallbackError, match=r"on_assigned.*cannot open the database"):
            async with asyncio.timeout(20):
                async for _record in consumer.stream():
                    pass
        health = consumer.health()
        assert not health.healthy and isinstance(health.error, RebalanceCallbackError)
        assert isinstance(health.error.__cause__, RuntimeError)
