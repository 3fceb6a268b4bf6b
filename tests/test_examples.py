"""Every example in ``examples/`` runs against the session broker, as a user would run it
(a subprocess with ``--bootstrap-servers``), and does what it says.

``spark_pipeline.py`` runs in tests/spark/test_spark_example.py; ``demo.py`` runs with a small
``--records``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from helpers import eventually
from producer_oracle import read_all

from aiostream_kafka import Admin, Producer, TopicPartition
from aiostream_kafka.serde import json_serializer
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT_S = 180


async def run_example(script: str, *args: str, timeout_s: float = TIMEOUT_S) -> str:
    """Run ``examples/<script> args...``; return its stdout, asserting exit status 0."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / script), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(
            f"{script} did not finish in {timeout_s}s\n{out.decode()}\n{err.decode()}"
        ) from None
    stdout, stderr = out.decode(), err.decode()
    assert process.returncode == 0, f"{script} exited {process.returncode}\n{stdout}\n{stderr}"
    return stdout


async def _committed_total(bootstrap: str, group: str) -> int:
    async with Admin(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    return sum(meta.offset for meta in offsets.values())


def test_every_example_is_covered() -> None:
    tested = {
        "quickstart_producer.py", "quickstart_consumer.py", "partitioned_processing.py",
        "batched_commits.py", "fastapi_app.py", "demo.py", "share_worker.py", "otel_tracing.py",
        "testing_with_fake.py",
    }  # fmt: skip
    # Helpers start with "_"; the Spark examples have their own tests.
    examples = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith(("_", "spark"))}
    assert examples == tested


async def test_testing_with_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    """The testing page's example: an application tested against ``FakeCluster`` (no
    broker fixture: the example starts its own fake)."""
    root = str(EXAMPLES.parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    out = await run_example("testing_with_fake.py", timeout_s=120)
    assert "forwarding: 3 orders confirmed" in out
    assert "fault injection: offset 0 written after 2 refusals" in out
    assert "deterministic time: the transaction was aborted at 60 s" in out
    assert out.rstrip().endswith("all checks passed")


async def test_quickstart_producer(kafka_cluster: KafkaCluster, new_topic: NewTopic) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    out = await run_example(
        "quickstart_producer.py", "--bootstrap-servers", bootstrap, "--topic", topic,
        "--count", "5", "--burst", "300",
    )  # fmt: skip
    assert len(re.findall(r"^sent n=\d+ to .+\[\d\] at offset \d+$", out, re.M)) == 5, out
    assert f"produced 305 records to {topic}" in out
    numbers = sorted(json.loads(r.value or b"")["n"] for r in await read_all(bootstrap, topic, 3))
    assert numbers == list(range(305))


async def test_quickstart_consumer(kafka_cluster: KafkaCluster, new_topic: NewTopic) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    async with Producer(bootstrap, value_serializer=json_serializer()) as producer:
        for n in range(20):
            await producer.send(topic, {"n": n}, key=b"%d" % n)
    group = f"quickstart-{uuid.uuid4().hex[:8]}"
    out = await run_example(
        "quickstart_consumer.py", "--bootstrap-servers", bootstrap, "--topic", topic,
        "--group", group, "--count", "20",
    )  # fmt: skip
    received = re.findall(r"^received \{'n': (\d+)\}", out, re.M)
    assert sorted(int(n) for n in received) == list(range(20)), out
    assert f"consumed 20 records from {topic} as group {group}" in out
    assert await _committed_total(bootstrap, group) == 20  # everything processed is committed


async def test_partitioned_processing(kafka_cluster: KafkaCluster) -> None:
    out = await run_example(
        "partitioned_processing.py", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
        "--count", "300", "--partitions", "4", "--accounts", "12",
    )  # fmt: skip
    assert "wrote 300 events for 12 accounts" in out
    assert re.search(r"processed 300 events over 4 partitions in .*out of order: 0$", out, re.M), (
        out
    )


async def test_batched_commits(kafka_cluster: KafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    group = f"batched-{uuid.uuid4().hex[:8]}"
    out = await run_example(
        "batched_commits.py", "--bootstrap-servers", bootstrap, "--count", "2000",
        "--group", group,
    )  # fmt: skip
    assert "wrote 2000 payments" in out
    # 2000 payments, amounts n % 100: 20 rounds of 0..99.
    assert re.search(r"^stored 2000 payments \(sum 99000\) in \d+ batches$", out, re.M), out
    assert "(total 2000)" in out
    assert await _committed_total(bootstrap, group) == 2000


async def test_demo_with_few_records(kafka_cluster: KafkaCluster) -> None:
    out = await run_example(
        "demo.py", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
        "--records", "3000", "--partitions", "3",
    )  # fmt: skip
    assert "produced 3,000 records" in out and "consumed 3,000 records" in out
    assert "duplicates: 0, out of order within a partition: 0, missing: 0" in out


async def test_share_worker(kafka_cluster: KafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    out = await run_example(
        "share_worker.py", "--bootstrap-servers", bootstrap, "--jobs", "100",
        "--workers", "2", "--concurrency", "4",
    )  # fmt: skip
    queued = re.search(r"^queued 100 jobs on (\S+)$", out, re.M)
    assert queued, out
    # Jobs 0, 10, ..., 90 fail once and are done when they come again; job 13 never works.
    assert re.search(r"^done 99 jobs: worker-1 \d+, worker-2 \d+$", out, re.M), out
    assert "retried and done: 10 jobs" in out, out
    assert "rejected: [13] after 3 deliveries" in out, out
    group = f"{queued.group(1)}-workers"
    async with Admin(bootstrap) as admin:

        async def lag() -> dict[TopicPartition, int]:
            return await admin.share_group_lag(group)

        # Every job is accepted or rejected: nothing left for the group.
        await eventually(lag, lambda lags: len(lags) == 2 and set(lags.values()) == {0}, 30)


async def test_otel_tracing_one_trace_from_request_to_invoice(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is a dev dependency")
    export = tmp_path / "run.json"
    out = await run_example(
        "otel_tracing.py", "--bootstrap-servers", kafka_cluster.bootstrap_servers,
        "--orders", "12", "--export", str(export),
    )  # fmt: skip
    assert "took 12 orders, sent 12 invoices" in out, out
    assert re.search(r"^  POST /orders +SERVER +orders ", out, re.M), out  # a tree printed
    data = json.loads(export.read_text())
    orders, invoices = data["topics"]["orders"], data["topics"]["invoices"]
    spans = data["spans"]
    requests = [s for s in spans if s["name"] == "POST /orders"]
    assert len(requests) == 12
    sends = set()
    for request in requests:
        # One trace id from the request in "orders" to the invoice sent by "billing".
        trace = {s["name"]: s for s in spans if s["trace_id"] == request["trace_id"]}
        shape = {name: (s["service"], s["kind"]) for name, s in trace.items()}
        assert shape == {
            "POST /orders": ("orders", "SERVER"),
            "validate order": ("orders", "INTERNAL"),
            f"send {orders}": ("orders", "PRODUCER"),
            f"process {orders}": ("billing", "CONSUMER"),
            "charge card": ("billing", "INTERNAL"),
            f"send {invoices}": ("billing", "PRODUCER"),
        }, shape
        assert len([s for s in spans if s["trace_id"] == request["trace_id"]]) == 6
        send, process = trace[f"send {orders}"], trace[f"process {orders}"]
        assert send["parent_id"] == request["span_id"]
        assert process["parent_id"] == send["span_id"]  # across the broker: traceparent
        assert trace["charge card"]["parent_id"] == process["span_id"]
        assert trace[f"send {invoices}"]["parent_id"] == process["span_id"]
        for name in ("messaging.destination.partition.id", "messaging.kafka.offset"):
            assert process["attributes"][name] == send["attributes"][name]
        assert send["end_ns"] <= process["start_ns"]  # the send span ended at the ack
        sends.add(send["span_id"])
    # The receive spans (traces of their own) link to every order's send span.
    receives = [s for s in spans if s["name"] == f"receive {orders}"]
    assert receives and all(s["parent_id"] is None for s in receives)
    assert {link["span_id"] for s in receives for link in s["links"]} == sends
    last = max(m["t_s"] for m in data["metrics"])

    def total(service: str, name: str, topic: str) -> float:
        return sum(
            m["value"] for m in data["metrics"]
            if m["t_s"] == last and m["service"] == service and m["name"] == name
            and m["attributes"]["messaging.destination.name"] == topic
        )  # fmt: skip

    assert total("orders", "messaging.client.sent.messages", orders) == 12
    assert total("billing", "messaging.client.consumed.messages", orders) == 12
    assert total("billing", "messaging.client.sent.messages", invoices) == 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_fastapi_app_serves_orders_and_stops_on_ctrl_c(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "fastapi_app.py"), "--bootstrap-servers", bootstrap,
        "--topic", topic, "--port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    output = asyncio.create_task(process.communicate())
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            async def ready() -> int:
                assert not output.done(), (await output)[0].decode()
                try:
                    return (await client.get("/health/ready")).status_code
                except httpx.TransportError:
                    return 0

            await eventually(ready, lambda status: status == 200, 60)
            accepted = []
            for n in range(5):
                order = {"id": f"order-{n}", "item": "book", "quantity": n + 1}
                response = await client.post("/orders", json=order)
                assert response.status_code == 202, response.text
                accepted.append(response.json())
            assert all(a["topic"] == topic and a["offset"] >= 0 for a in accepted)
            bad = await client.post("/orders", json={"id": "x", "item": "y", "quantity": 0})
            assert bad.status_code == 422
            view = await eventually(
                lambda: client.get("/orders/order-4"), lambda r: r.status_code == 200, 30
            )
            assert view.json() == {"id": "order-4", "item": "book", "quantity": 5}
            assert (await client.get("/orders")).json() == {"count": 5}
            assert (await client.get("/orders/nope")).status_code == 404
        process.send_signal(signal.SIGINT)
        out = (await asyncio.wait_for(output, 60))[0].decode()
        assert process.returncode == 0, out
        assert "server stopped" in out and "Kafka integration stopped" in out, out
    finally:
        if process.returncode is None:
            process.kill()
            await output
    records = await read_all(bootstrap, topic, 3)
    assert sorted(json.loads(r.value or b"")["id"] for r in records) == [
        f"order-{n}" for n in range(5)
    ]


def test_the_testing_page_shows_the_example_as_it_runs() -> None:
    """The fake's code blocks of docs/testing.md are pieces of examples/testing_with_fake.py
    (which test_testing_with_fake runs), so the page never shows code that does not run."""
    import textwrap

    page = (EXAMPLES.parent / "docs" / "testing.md").read_text()
    example = (EXAMPLES / "testing_with_fake.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    shown = [b for b in blocks if "def check_" in b]
    assert len(shown) == 4
    for block in shown:
        assert textwrap.dedent(block) in example, block
