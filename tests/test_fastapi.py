"""The FastAPI integration (``aiostream_kafka.fastapi``) against a real broker and a real
uvicorn server: the producer dependency, health endpoints, graceful shutdown, and the
delivery guarantee of a 202 under load and across a shutdown in the middle of it."""

import asyncio
import contextlib
import json
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import uvicorn
from fastapi import Depends, FastAPI, HTTPException
from helpers import eventually
from producer_oracle import read_all

from aiostream_kafka import Admin, Consumer, Producer, TopicPartition
from aiostream_kafka.fastapi import KafkaIntegration
from aiostream_kafka.testing import KafkaCluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from fastapi_app import create_app  # the example app, importable for tests

NewTopic = Callable[..., Awaitable[str]]

GROUP_SETTINGS: dict[str, Any] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 300}
REQUESTS = 1_000
CLIENTS = 20


@contextlib.asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[tuple[uvicorn.Server, asyncio.Task[None], str]]:
    """Run ``app`` under a real uvicorn server (lifespan on) on a free port of this loop;
    yield the server, its task and its base URL. Shuts it down on exit if still running."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="on", log_level="warning", access_log=False,
        backlog=4096,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await eventually(lambda: asyncio.sleep(0, server.started or task.done()), bool, 60)
    if task.done():
        task.result()
        raise AssertionError("the server did not start (lifespan startup failed?)")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield server, task, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 120)


def _client(base_url: str, connections: int = 10) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(120.0),
    )


async def _get(client: httpx.AsyncClient, path: str) -> httpx.Response:
    return await client.get(path)


# -- the dependency ----------------------------------------------------------------------


async def test_the_dependency_gives_the_running_producer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    kafka = KafkaIntegration(bootstrap, producer_options={"linger_ms": 1})
    app = FastAPI(lifespan=kafka.lifespan)

    @app.post("/send/{value}")
    async def send(
        value: str, producer: Annotated[Producer, Depends(kafka.producer)]
    ) -> dict[str, Any]:
        meta = await producer.send(topic, value.encode())
        same = producer is kafka.get_producer()
        return {"same": same, "partition": meta.partition, "offset": meta.offset}

    with pytest.raises(HTTPException) as before:
        await kafka.producer()
    assert before.value.status_code == 503

    async with serving(app) as (_server, _task, url), _client(url) as client:
        assert kafka.state == "running"
        response = await client.post("/send/hello")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["same"] is True

    assert kafka.state == "stopped"
    with pytest.raises(HTTPException) as after:
        await kafka.producer()
    assert after.value.status_code == 503
    records = await read_all(bootstrap, topic, 2)
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (body["partition"], body["offset"], b"hello")
    ]


# -- health ------------------------------------------------------------------------------


async def test_the_liveness_probe_catches_a_handler_that_stopped_asking(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Issue 17: a handler stuck in its processing keeps the member alive by heartbeats;
    poll liveness makes it leave its group, and /health/live turns 503 saying why."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    kafka = KafkaIntegration(bootstrap, drain_timeout_s=1, handler_grace_s=1)
    stuck = asyncio.Event()

    @kafka.consumer([topic], group_id=f"stuck-{uuid.uuid4().hex[:8]}",
                    max_poll_interval_ms=3_000, **GROUP_SETTINGS)  # fmt: skip
    async def hangs(consumer: Consumer) -> None:
        async for _record in consumer.stream():
            stuck.set()
            await asyncio.Event().wait()  # a dependency that never answers

    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    async with serving(app) as (_server, _task, url), _client(url) as client:
        await eventually(lambda: _get(client, "/health/live"), lambda r: r.status_code == 200, 30)
        await kafka.get_producer().send(topic, b"the record it never finishes")
        await asyncio.wait_for(stuck.wait(), 30)
        began = time.monotonic()
        dead = await eventually(
            lambda: _get(client, "/health/live"), lambda r: r.status_code == 503, 20
        )
        took_s = time.monotonic() - began
        reasons = " ".join(dead.json()["reasons"])
        assert "max_poll_interval_ms" in reasons and "left the group" in reasons, reasons
    assert took_s < 10, took_s  # 3 s of max_poll_interval_ms plus the heartbeat ticks


async def test_health_is_200_while_consumers_run_and_503_after_one_crashes(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    kafka = KafkaIntegration(bootstrap)
    seen: list[bytes] = []

    @kafka.consumer([topic], group_id=f"health-{uuid.uuid4().hex[:8]}", **GROUP_SETTINGS)
    async def fragile(consumer: Consumer) -> None:
        async for record in consumer.stream():
            if record.value == b"poison":
                raise RuntimeError("cannot digest the poison record")
            seen.append(record.value)

    @kafka.record_consumer([topic], group_id=f"steady-{uuid.uuid4().hex[:8]}", **GROUP_SETTINGS)
    async def steady(record: Any) -> None:
        pass

    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    caplog.set_level(logging.ERROR, logger="aiostream_kafka.fastapi")

    async with serving(app) as (_server, _task, url), _client(url) as client:
        ready = await eventually(
            lambda: _get(client, "/health/ready"), lambda r: r.status_code == 200, 30
        )
        body = ready.json()
        assert body["status"] == "ok" and body["reasons"] == []
        assert {c["name"] for c in body["consumers"]} == {"fragile", "steady"}
        assert (await client.get("/health/live")).status_code == 200
        # Both members get their partition (state stable) and stay healthy.
        await eventually(
            lambda: _get(client, "/health/ready"),
            lambda r: all(c["state"] == "stable" for c in r.json()["consumers"]),
            30,
        )

        producer = kafka.get_producer()
        await producer.send(topic, b"fine")
        await eventually(lambda: asyncio.sleep(0, list(seen)), lambda s: s == [b"fine"])
        assert (await client.get("/health/ready")).status_code == 200

        await producer.send(topic, b"poison")
        not_ready = await eventually(
            lambda: _get(client, "/health/ready"), lambda r: r.status_code == 503, 30
        )
        body = not_ready.json()
        assert body["status"] == "unavailable"
        assert len(body["reasons"]) == 1, body
        assert "'fragile'" in body["reasons"][0] and "poison record" in body["reasons"][0]
        by_name = {c["name"]: c for c in body["consumers"]}
        assert not by_name["fragile"]["running"] and not by_name["fragile"]["healthy"]
        assert by_name["steady"]["healthy"] and by_name["steady"]["running"]
        live = await client.get("/health/live")
        assert live.status_code == 503 and "poison record" in live.json()["reasons"][0]
        # The crashed consumer is closed (it leaves the group); the other one goes on.
        await eventually(
            lambda: asyncio.sleep(0, kafka.get_consumer("fragile").health().state),
            lambda state: state == "closed",
        )
        assert kafka.get_consumer("steady").health().healthy

    crashes = [r for r in caplog.records if r.name == "aiostream_kafka.fastapi"]
    assert len(crashes) == 1, crashes
    assert "fragile" in crashes[0].getMessage()
    assert crashes[0].exc_info is not None and isinstance(crashes[0].exc_info[1], RuntimeError)
    assert "cannot digest the poison record" in caplog.text and "Traceback" in caplog.text


# -- shutdown ----------------------------------------------------------------------------


async def test_shutdown_stops_accepting_then_drains_consumers_then_closes_the_producer(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    source, sink = await new_topic(partitions=1), await new_topic(partitions=1)
    async with Producer(bootstrap) as producer:
        await asyncio.gather(*[await producer.enqueue(source, b"%d" % i) for i in range(500)])
    group = f"drain-{uuid.uuid4().hex[:8]}"
    kafka = KafkaIntegration(bootstrap, drain_timeout_s=30)
    processed: list[int] = []
    reached, gate = asyncio.Event(), asyncio.Event()
    after_drain: list[int] = []

    @kafka.consumer([source], group_id=group, **GROUP_SETTINGS)
    async def copy(consumer: Consumer) -> None:
        producer = kafka.get_producer()
        async for record in consumer.committing(consumer.stream(), every=10_000, within_s=60):
            processed.append(record.offset)
            if len(processed) == 5:
                reached.set()
                await gate.wait()  # hold on while the shutdown begins
        # The stream ended because the drain closed the consumer; the producer is still open.
        meta = await producer.send(sink, b"drained %d" % len(processed))
        after_drain.append(meta.offset)

    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    async with serving(app) as (server, task, _url):
        await asyncio.wait_for(reached.wait(), 60)
        server.should_exit = True
        await eventually(lambda: asyncio.sleep(0, kafka.state), lambda s: s == "stopping", 30)
        # Stopped accepting: no producer for new requests, not ready.
        with pytest.raises(HTTPException):
            await kafka.producer()
        report = kafka.readiness()
        assert not report.ok and "stopping" in report.reasons[0]
        gate.set()
        await asyncio.wait_for(task, 60)

    assert kafka.state == "stopped"
    # The drain handed out what was fetched, the handler ended normally, then the
    # producer (still open) delivered its record before being closed.
    assert len(processed) >= 5 and processed == list(range(len(processed)))
    assert after_drain == [0]
    assert [r.value for r in await read_all(bootstrap, sink, 1)] == [b"drained %d" % len(processed)]
    async with Admin(bootstrap) as admin:
        committed = await admin.list_consumer_group_offsets(group)
        description = (await admin.describe_consumer_groups([group]))[group]
    assert committed[TopicPartition(source, 0)].offset == len(processed)
    assert description.members == []  # it left the group


# -- delivery guarantee of the 202 ---------------------------------------------------------


def _order(order_id: str) -> dict[str, Any]:
    return {"id": order_id, "item": "book", "quantity": 1}


async def _read_orders(bootstrap: str, topic: str, partitions: int) -> dict[str, list[Any]]:
    """Every order id found in ``topic`` (read by librdkafka) -> where each copy is."""
    found: dict[str, list[Any]] = {}
    for r in await read_all(bootstrap, topic, partitions):
        assert r.value is not None
        found.setdefault(json.loads(r.value)["id"], []).append((r.partition, r.offset))
    return found


async def test_under_load_every_accepted_order_is_in_kafka_exactly_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    app = create_app(bootstrap, topic)
    ids = [uuid.uuid4().hex for _ in range(REQUESTS)]

    # All at once, each on its own connection. httpx's pool scans all its connections for
    # every request it places, so the 1,000 connections are spread over 20 clients.
    async with serving(app) as (_server, _task, url), contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(_client(url, REQUESTS // CLIENTS))
            for _ in range(CLIENTS)
        ]
        client = clients[0]

        async def post(n: int, order_id: str) -> httpx.Response:
            return await clients[n % CLIENTS].post("/orders", json=_order(order_id))

        started = time.monotonic()
        responses = await asyncio.gather(
            *(post(n, i) for n, i in enumerate(ids)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
        statuses = Counter(
            r.status_code if isinstance(r, httpx.Response) else type(r).__name__ for r in responses
        )
        accepted = {
            i: r.json() for i, r in zip(ids, responses, strict=True)
            if isinstance(r, httpx.Response) and r.status_code == 202
        }  # fmt: skip
        # The app's own consumer builds its view from the same records.
        await eventually(
            lambda: _get(client, "/orders"), lambda r: r.json()["count"] == len(accepted), 60
        )

    found = await _read_orders(bootstrap, topic, 3)
    duplicates = {i: where for i, where in found.items() if len(where) > 1}
    print(
        f"\nload: {REQUESTS} requests, statuses {dict(statuses)}, {len(accepted)} accepted, "
        f"{sum(len(w) for w in found.values())} records found, {len(duplicates)} duplicated; "
        f"the requests took {elapsed:.1f}s"
    )
    assert statuses == {202: REQUESTS}, statuses
    assert not duplicates
    missing = [i for i in accepted if i not in found]
    assert not missing, f"{len(missing)} accepted orders missing from Kafka"
    for order_id, body in accepted.items():  # at the partition and offset the 202 named
        assert found[order_id] == [(body["partition"], body["offset"])]
        assert body["topic"] == topic
    assert set(found) == set(ids)


async def test_shutting_down_mid_load_loses_no_accepted_order(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    app = create_app(bootstrap, topic)
    ids = iter([uuid.uuid4().hex for _ in range(REQUESTS)])
    accepted: dict[str, Any] = {}
    outcomes: Counter[str] = Counter()
    enough = asyncio.Event()
    workers = 200

    async with serving(app) as (server, task, url), _client(url, workers) as client:

        async def worker() -> None:
            for order_id in ids:  # each takes the next id: a steady stream of requests
                try:
                    r = await client.post("/orders", json=_order(order_id))
                except httpx.HTTPError as exc:  # refused, reset: the server is going away
                    outcomes[type(exc).__name__] += 1
                    continue
                outcomes[str(r.status_code)] += 1
                if r.status_code == 202:
                    accepted[order_id] = r.json()
                    if len(accepted) >= 300:
                        enough.set()

        load = asyncio.gather(*(worker() for _ in range(workers)))
        await asyncio.wait_for(enough.wait(), 120)
        server.should_exit = True  # mid-load: requests keep coming
        await asyncio.wait_for(load, 120)
        await asyncio.wait_for(task, 120)  # the lifespan shut Kafka down

    found = await _read_orders(bootstrap, topic, 3)
    duplicates = {i: where for i, where in found.items() if len(where) > 1}
    unacknowledged_but_written = len(set(found) - set(accepted))
    print(
        f"\nshutdown mid-load: {REQUESTS} requests, outcomes {dict(outcomes)}, "
        f"{len(accepted)} accepted, {sum(len(w) for w in found.values())} records found, "
        f"{len(duplicates)} duplicated, {unacknowledged_but_written} written without a 202"
    )
    assert sum(outcomes.values()) == REQUESTS
    assert len(accepted) < REQUESTS, "the shutdown came after the load; nothing was tested"
    missing = [i for i in accepted if i not in found]
    assert not missing, f"{len(missing)} accepted orders missing from Kafka: {missing[:5]}"
    assert not duplicates
    for order_id, body in accepted.items():
        assert found[order_id] == [(body["partition"], body["offset"])]


async def test_readiness_fails_when_the_producer_stops_on_an_error(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """A producer whose sender task died (a bug, simulated here) is reported: its records
    fail with the error, ``Producer.error`` names it, and readiness answers 503."""
    topic = await new_topic(partitions=1)
    kafka = KafkaIntegration(kafka_cluster.bootstrap_servers)
    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    async with serving(app) as (_server, _task, url), _client(url) as client:
        assert (await client.get("/health/ready")).status_code == 200
        producer = kafka.get_producer()
        assert producer.error is None

        def broken(now: float) -> float | None:
            raise RuntimeError("simulated sender bug")

        producer._sender._run_once = broken  # type: ignore[union-attr,method-assign]
        with pytest.raises(Exception, match="simulated sender bug"):
            await producer.send(topic, b"lost to the bug, and told so")
        assert isinstance(producer.error, RuntimeError)
        ready = await client.get("/health/ready")
        assert ready.status_code == 503
        assert "producer stopped" in ready.json()["reasons"][0]
