"""pyrallel-consumer in the process scenario (issue 30), run inside a ``benchmarks.worker``
subprocess of its side venv's Python 3.12 (``benchmarks/side_venv.py``): this module and
what it imports never import ``aiostream_kafka``.

``PyrallelConsumer(config, worker, topic)`` with the asyncio engine (``ExecutionMode.ASYNC``:
an ``asyncio.Task`` per record under a semaphore of ``execution.max_in_flight``) and
``OrderingMode.KEY_HASH`` (one queue per (partition, message key): a key's records one
after another, in offset order). ``max_in_flight`` is the concurrency: the engine's
semaphore and the work manager's in-flight bound are both that number. The worker awaits
the same handler as ours (:class:`benchmarks.process.Tally`, the same seeded sleeps), with
the same clock.

Besides the throughput, the run records what pyrallel did: handlers started twice for one
record, a key's records started out of offset order or while one of that key still ran,
the commits it made (``BrokerPoller._commit_offsets`` counted, calls only; the calls and
what they commit are pyrallel's own) and what the group had committed after ``stop()``.
"""

from __future__ import annotations

import asyncio
import resource
import time
import uuid
from typing import Any

from benchmarks import settings
from benchmarks.clients.common import Unsupported

NAME = "pyrallel-consumer"
VERSION_PIN = "pyrallel-consumer==1.0.0"


def config_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """What is set on pyrallel's ``KafkaConfig`` (the rest: its defaults)."""
    return {
        "BOOTSTRAP_SERVERS": "(the broker)",
        "CONSUMER_GROUP": "(fresh per run)",
        "AUTO_OFFSET_RESET": "earliest",
        "ENABLE_AUTO_COMMIT": False,
        "dlq_enabled": False,
        "metrics.enabled": False,
        "parallel_consumer.ordering_mode": "key_hash",
        "parallel_consumer.execution.mode": "async",
        "parallel_consumer.execution.max_in_flight": spec.get("concurrency"),
    }


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["scenario"] != "process":
        return {}
    try:
        from importlib.metadata import version

        versions = f"pyrallel-consumer {version('pyrallel-consumer')}, confluent-kafka " + (
            version("confluent-kafka")
        )
    except Exception:
        versions = "?"
    import platform

    return {
        "api": "consumer = PyrallelConsumer(config, worker, topic); await consumer.start(); "
        "worker: async def worker(item: WorkItem): await handler(item) (asyncio engine: a task "
        f"per record, at most max_in_flight={spec.get('concurrency')} at once; key_hash "
        "ordering: one queue per partition and message key); await consumer.stop()",
        "consumer": config_fields(spec)
        | {
            "(other settings)": "defaults: poll_batch_size=1000, queue_max_messages=5000, "
            "rebalance_state_strategy=contiguous_only (no completed offsets in the commit "
            "metadata), session.timeout.ms=60000; its confluent-kafka Consumer gets only "
            "bootstrap.servers, group.id, auto.offset.reset, enable.auto.commit and "
            "session.timeout.ms: the fetch settings are librdkafka's defaults (fetch.min."
            "bytes=1, fetch.wait.max.ms=500, fetch.max.bytes=52428800, max.partition.fetch."
            "bytes=1048576: the suite's common ones)"
        },
        "build": f"Python {platform.python_version()} side venv: {versions}",
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["scenario"] != "process" or spec.get("floor") or spec.get("concurrency", 1) < 2:
        raise Unsupported(spec["scenario"])
    return asyncio.run(_process(spec))


class _View:
    """What :class:`benchmarks.process.Tally` reads of a record."""

    __slots__ = ("offset", "partition")

    def __init__(self, partition: int, offset: int) -> None:
        self.partition = partition
        self.offset = offset


def order_outcome(events: list[tuple[bool, int, int, Any]]) -> dict[str, int]:
    """From the handler events in order (``(started, partition, offset, key)``, False for
    an end): the records started more than once, the starts of a key's record while another
    record of that key was running, and the starts of a key's record at an offset not above
    the last one started of that key (the first start of each record only)."""
    seen: set[tuple[int, int]] = set()
    running: dict[tuple[int, Any], int] = {}
    last: dict[tuple[int, Any], int] = {}
    duplicates = overlaps = out_of_order = 0
    for started, partition, offset, key in events:
        lane = (partition, key)
        if not started:
            running[lane] = running.get(lane, 1) - 1
            continue
        if running.get(lane, 0) > 0:
            overlaps += 1
        running[lane] = running.get(lane, 0) + 1
        if (partition, offset) in seen:
            duplicates += 1
            continue
        seen.add((partition, offset))
        if lane in last and offset <= last[lane]:
            out_of_order += 1
        last[lane] = offset
    return {"duplicates": duplicates, "key_overlaps": overlaps, "key_out_of_order": out_of_order}


async def _process(spec: dict[str, Any]) -> dict[str, Any]:
    from pyrallel_consumer.config import (
        ExecutionConfig,
        KafkaConfig,
        MetricsConfig,
        ParallelConsumerConfig,
    )
    from pyrallel_consumer.consumer import PyrallelConsumer
    from pyrallel_consumer.control_plane.broker_poller import BrokerPoller
    from pyrallel_consumer.dto import ExecutionMode, OrderingMode

    from benchmarks.process import Tally, delay_of

    concurrency = spec["concurrency"]
    tally = Tally(spec["records"], delay_of(spec["handler"], spec["seed"]))
    group = f"bench-process-pyrallel-{uuid.uuid4().hex[:10]}"
    config = KafkaConfig(
        BOOTSTRAP_SERVERS=spec["bootstrap"],
        CONSUMER_GROUP=group,
        AUTO_OFFSET_RESET="earliest",
        ENABLE_AUTO_COMMIT=False,
        dlq_enabled=False,
        metrics=MetricsConfig(enabled=False),
        parallel_consumer=ParallelConsumerConfig(
            ordering_mode=OrderingMode.KEY_HASH,
            execution=ExecutionConfig(mode=ExecutionMode.ASYNC, max_in_flight=concurrency),
        ),
    )
    events: list[tuple[bool, int, int, Any]] = []
    append = events.append

    async def worker(item: Any) -> None:
        partition = item.tp.partition
        append((True, partition, item.offset, item.key))
        try:
            await tally.handle(_View(partition, item.offset))
        finally:
            append((False, partition, item.offset, item.key))

    commits: list[tuple[float, int]] = []  # (perf_counter, partitions in the call)
    original = BrokerPoller._commit_offsets

    async def counted(self: Any, commits_to_make: Any) -> None:
        commits.append((time.perf_counter(), len(commits_to_make)))
        await original(self, commits_to_make)

    BrokerPoller._commit_offsets = counted  # type: ignore[method-assign]
    consumer = PyrallelConsumer(config=config, worker=worker, topic=spec["topic"])
    await asyncio.wait_for(consumer.start(), 60)
    closed = asyncio.ensure_future(consumer.wait_closed())
    cpu_start = cpu_end = 0.0
    try:
        while tally.started is None and not tally.done.is_set() and not closed.done():
            await asyncio.sleep(0.001)
            cpu_start = _cpu()
        await tally.wait(closed, settings.PROCESS_LIMIT_S)
        cpu_end = _cpu()
    finally:
        stopping = time.perf_counter()
        await asyncio.wait_for(consumer.stop(), 60)
        stopped = time.perf_counter()
        if not closed.done():
            closed.cancel()
        await asyncio.wait([closed], timeout=10)
        BrokerPoller._commit_offsets = original  # type: ignore[method-assign]
    out = tally.result(concurrency)
    assert tally.started is not None and tally.ended is not None
    in_clock = [c for c in commits if tally.started <= c[0] <= tally.ended]
    out.update(order_outcome(events))
    out.update(
        {
            "handled_by_stop": sum(1 for e in events if not e[0]),
            "commit_calls": len(commits),
            "commit_calls_in_clock": len(in_clock),
            "commits_per_s": len(in_clock) / (tally.ended - tally.started),
            "cpu_s_in_clock": cpu_end - cpu_start,
            "stop_s": stopped - stopping,
            "committed_records": _committed(spec, group),
        }
    )
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
    return usage.ru_utime + usage.ru_stime


def _committed(spec: dict[str, Any], group: str) -> int:
    """The records below the group's committed offsets after ``stop()`` (-1: unknown)."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": group})
    try:
        meta = reader.list_topics(spec["topic"], timeout=10)
        parts = [TopicPartition(spec["topic"], p) for p in meta.topics[spec["topic"]].partitions]
        found = reader.committed(parts, timeout=10)
        return sum(max(0, tp.offset) for tp in found)
    except Exception:
        return -1
    finally:
        reader.close()
