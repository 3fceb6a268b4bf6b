"""``@kafka.share_consumer(...)`` handlers of the FastAPI integration against the real 4.3.1
broker and a real uvicorn server: each record handled once and accepted; a handler that
raises releases its record, which comes again; shutdown with a handler in the middle of a
record releases that record (and lets a handler that finishes in time accept its own); the
health endpoints list the share consumer, and report it when it fails.

Each share group gets ``share.auto.offset.reset=earliest`` and a short heartbeat interval
(``_group`` of tests/test_share_consumer.py) before its first member joins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import pytest
from fastapi import FastAPI
from helpers import eventually
from test_fastapi import _client, _get, serving
from test_share_consumer import NewTopic, _group, _nothing_within, _produce

from aiostream_kafka import Consumer, ShareConsumer, ShareRecord
from aiostream_kafka.fastapi import KafkaIntegration
from aiostream_kafka.testing import KafkaCluster


def _app(kafka: KafkaIntegration) -> FastAPI:
    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    return app


async def _wait(event: asyncio.Event, seconds: float = 30) -> None:
    async with asyncio.timeout(seconds):
        await event.wait()


async def _left_over(bootstrap: str, group: str, topic: str, seconds: float) -> list[ShareRecord]:
    """What a fresh member of ``group`` is handed within ``seconds`` (each accepted)."""
    async with ShareConsumer(bootstrap_servers=bootstrap, group_id=group) as fresh:
        fresh.subscribe([topic])
        return await _nothing_within(fresh, seconds)


async def test_each_record_is_handled_once_and_accepted(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    group = await _group(bs)
    total = 60
    await _produce(bs, topic, total)
    kafka = KafkaIntegration(bs)
    handled: list[ShareRecord] = []
    all_handled = asyncio.Event()

    @kafka.share_consumer([topic], group_id=group, concurrency=4)
    async def work(record: ShareRecord) -> None:
        await asyncio.sleep(0.01)
        handled.append(record)
        if len(handled) >= total:
            all_handled.set()

    async with serving(_app(kafka)) as (_server, _task, url), _client(url) as client:
        ready = await eventually(
            lambda: _get(client, "/health/ready"), lambda r: r.status_code == 200, 30
        )
        [status] = ready.json()["consumers"]
        assert status["name"] == "work" and status["kind"] == "share consumer", status
        assert status["state"] == "running" and status["running"] and status["healthy"]
        assert kafka.get_share_consumer("work").subscription == {topic}
        with pytest.raises(KeyError):
            kafka.get_consumer("work")  # a share consumer is not a Consumer
        await _wait(all_handled)
        await asyncio.sleep(0.5)  # anything handed out twice would show up meanwhile
        busy = await eventually(
            lambda: _get(client, "/health/live"),
            lambda r: r.json()["consumers"][0]["partitions"] == 2,
        )
        assert busy.status_code == 200
    counts = Counter(int(r.value or b"") for r in handled)
    assert counts == Counter(range(total)), counts
    assert {r.delivery_count for r in handled} == {1}
    assert kafka.get_share_consumer("work").records_delivered == total
    # Accepted: a fresh member of the group gets none of them.
    assert await _left_over(bs, group, topic, 3.0) == []


async def test_a_handler_that_raises_releases_its_record_and_it_comes_again(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    group = await _group(bs)
    total = 10
    await _produce(bs, topic, total)
    kafka = KafkaIntegration(bs)
    attempts: list[tuple[int, int]] = []  # (value, delivery_count)
    done = asyncio.Event()

    @kafka.share_consumer([topic], group_id=group, concurrency=2)
    async def flaky(record: ShareRecord) -> None:
        value = int(record.value or b"")
        attempts.append((value, record.delivery_count))
        if value == 3 and record.delivery_count == 1:
            raise RuntimeError("a transient failure on record 3")
        if len({v for v, _ in attempts}) == total and (3, 2) in attempts:
            done.set()

    async with serving(_app(kafka)) as (_server, _task, url), _client(url) as client:
        await _wait(done)
        # A failing record is the handler's business, not the service's health.
        live = await client.get("/health/live")
        assert live.status_code == 200, live.json()
        assert kafka.get_share_consumer("flaky").handler_failures == 1
    assert sorted(attempts) == sorted([(v, 1) for v in range(total)] + [(3, 2)]), attempts
    assert await _left_over(bs, group, topic, 3.0) == []


async def test_shutdown_releases_the_record_a_handler_is_stuck_on(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Two handlers are running at shutdown: the one that finishes within
    ``handler_grace_s`` accepts its record; the stuck one is cancelled and its record is
    released at once (a fresh member gets it well before the 30 s lock would end)."""
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    group = await _group(bs, **{"share.record.lock.duration.ms": "30000"})
    await _produce(bs, topic, 2)
    grace_s = 2.0
    kafka = KafkaIntegration(bs, handler_grace_s=grace_s)
    started: dict[int, asyncio.Event] = {0: asyncio.Event(), 1: asyncio.Event()}
    finished: list[int] = []
    cancelled: list[int] = []

    @kafka.share_consumer([topic], group_id=group, concurrency=2)
    async def slow(record: ShareRecord) -> None:
        value = int(record.value or b"")
        started[value].set()
        try:
            if value == 0:
                await asyncio.sleep(1.0)  # finishes within the grace
            else:
                await asyncio.Event().wait()  # a dependency that never answers
        except asyncio.CancelledError:
            cancelled.append(value)
            raise
        finished.append(value)

    async with serving(_app(kafka)) as (server, task, _url):
        await _wait(started[0])
        await _wait(started[1])
        began = time.monotonic()
        server.should_exit = True
        await asyncio.wait_for(task, 60)
    took_s = time.monotonic() - began
    assert finished == [0] and cancelled == [1], (finished, cancelled)
    assert took_s < grace_s + 10, took_s
    assert kafka.state == "stopped"
    back = await _left_over(bs, group, topic, 10.0)
    assert [(int(r.value or b""), r.delivery_count >= 2) for r in back] == [(1, True)], back


async def test_health_reports_a_share_consumer_that_failed(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    """A share group id already taken by a consumer group: the broker refuses the share
    member, its ShareConsumer fails, and the health endpoints answer 503 naming it while
    the other consumers go on."""
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await _produce(bs, topic, 1)
    taken = f"classic-{time.monotonic_ns()}"
    async with Consumer(bs, group_id=taken, auto_offset_reset="earliest") as classic:
        classic.subscribe([topic])
        async with asyncio.timeout(30):
            async for _record in classic.stream():
                break
        await classic.commit()
    kafka = KafkaIntegration(bs)

    @kafka.share_consumer([topic], group_id=taken)
    async def misnamed(record: ShareRecord) -> None:
        pass

    other_group = await _group(bs)
    seen: list[Any] = []

    @kafka.share_consumer([topic], group_id=other_group)
    async def fine(record: ShareRecord) -> None:
        seen.append(record)

    caplog.set_level(logging.ERROR, logger="aiostream_kafka.fastapi")
    async with serving(_app(kafka)) as (_server, _task, url), _client(url) as client:
        dead = await eventually(
            lambda: _get(client, "/health/live"), lambda r: r.status_code == 503, 30
        )
        body = dead.json()
        assert len(body["reasons"]) == 1, body
        assert body["reasons"][0].startswith("share consumer 'misnamed': handler crashed"), body
        by_name = {c["name"]: c for c in body["consumers"]}
        assert by_name["misnamed"]["state"] == "closed" and not by_name["misnamed"]["running"]
        assert by_name["fine"]["healthy"] and by_name["fine"]["running"]
        assert (await client.get("/health/ready")).status_code == 503
        await eventually(lambda: asyncio.sleep(0, len(seen)), lambda n: n == 1, 30)
    crashes = [r for r in caplog.records if "handler crashed" in r.getMessage()]
    assert len(crashes) == 1 and "misnamed" in crashes[0].getMessage(), crashes
