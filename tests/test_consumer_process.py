"""``Consumer.process()`` against a real broker: per-key order under concurrency, the
concurrency reached, commits that never skip a record (restart from the commit and its
metadata, a failing handler, cancellation, a rebalance)."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

import pytest
from helpers import eventually

from aiostream_kafka import Consumer, Producer, Record, TopicPartition
from aiostream_kafka.admin import Admin
from aiostream_kafka.admin.types import (
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    OffsetAndMetadata,
)
from aiostream_kafka.consumer.processing import decode_completed
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]
Key = tuple[int, int]  # (partition, offset)

GROUP_SETTINGS = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 300,
    "max_poll_interval_ms": 20_000,
    "metadata_max_age_ms": 1_000,
}


def _group() -> str:
    return f"cp-{uuid.uuid4().hex[:10]}"


async def _settings(bootstrap: str, group: str, protocol: str) -> dict[str, object]:
    """The consumer options for ``protocol``; a KIP-848 group gets the same heartbeat (and
    a session as short) through its group configs."""
    if protocol == "classic":
        return dict(GROUP_SETTINGS)
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp("consumer.heartbeat.interval.ms", "300"),
                    AlterConfigOp("consumer.session.timeout.ms", "6000"),
                ]
            }
        )
    return {
        "group_protocol": "consumer",
        "max_poll_interval_ms": GROUP_SETTINGS["max_poll_interval_ms"],
        "metadata_max_age_ms": GROUP_SETTINGS["metadata_max_age_ms"],
    }


async def _produce(bootstrap: str, topic: str, count: int, keys: int) -> dict[Key, bytes]:
    """Produce ``count`` records over ``keys`` keys; return each one's key by position."""
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        futures = [
            (
                b"k%d" % (i % keys),
                await producer.enqueue(topic, value=b"%d" % i, key=b"k%d" % (i % keys)),
            )
            for i in range(count)
        ]
        await producer.flush()
    out = {}
    for key, future in futures:
        md = future.result()
        out[(md.partition, md.offset)] = key
    return out


def _processing_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("process()") and not t.done()]


async def _committed(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, OffsetAndMetadata | None]:
    """The group's committed offsets (with metadata) of ``topic``'s partitions."""
    async with Consumer(bootstrap, group_id=group, **GROUP_SETTINGS) as probe:  # type: ignore[arg-type]
        tps = frozenset(TopicPartition(topic, p) for p in range(partitions))
        group_ = probe.group
        assert group_ is not None
        found = await group_.coordinator.offsets.committed(tps)
    return {tp.partition: om for tp, om in found.items()}


async def test_key_order_and_concurrency_with_random_handler_times(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=12)
    produced = await _produce(bootstrap, topic, 6_000, keys=1_000)
    concurrency = 32
    running_keys: set[bytes] = set()
    last_offset: dict[bytes, tuple[int, int]] = {}
    handled: list[Key] = []
    running = peak = 0
    violations: list[str] = []
    group = _group()
    consumer = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]

    async def handler(record: Record) -> None:
        nonlocal running, peak
        key = record.key
        assert isinstance(key, bytes)
        if key in running_keys:
            violations.append(f"two records of {key!r} at once")
        prev = last_offset.get(key)
        if prev is not None and prev[0] == record.partition and prev[1] >= record.offset:
            violations.append(f"{key!r}: offset {record.offset} after {prev[1]}")
        running_keys.add(key)
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(random.uniform(0.001, 0.020))
        finally:
            running -= 1
            running_keys.discard(key)
        last_offset[key] = (record.partition, record.offset)
        handled.append((record.partition, record.offset))
        if len(handled) == len(produced):
            asyncio.get_running_loop().call_soon(
                lambda: closing.append(asyncio.ensure_future(consumer.close()))
            )

    closing: list[asyncio.Future[None]] = []
    async with consumer:
        consumer.subscribe([topic])
        async with asyncio.timeout(120):
            await consumer.process(
                handler, concurrency=concurrency, ordering="key", every=500, within_s=0.5
            )
        await closing[0]
    assert violations == []
    assert sorted(handled) == sorted(produced)
    assert peak == concurrency
    assert _processing_tasks() == []
    committed = await _committed(bootstrap, group, topic, 12)
    ends: defaultdict[int, int] = defaultdict(int)
    for p, o in produced:
        ends[p] = max(ends[p], o + 1)
    assert {p: om.offset for p, om in committed.items() if om is not None} == dict(ends)


async def test_assigned_consumer_partition_order_returns_on_close(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    produced = await _produce(bootstrap, topic, 300, keys=50)
    running: set[int] = set()
    seen: dict[int, int] = {}
    bad: list[str] = []
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])

        async def handler(record: Record) -> None:
            if record.partition in running or seen.get(record.partition, -1) >= record.offset:
                bad.append(f"{record.partition}@{record.offset}")
            running.add(record.partition)
            await asyncio.sleep(0.002)
            running.discard(record.partition)
            seen[record.partition] = record.offset
            if sum(v + 1 for v in seen.values()) == len(produced):
                asyncio.get_running_loop().call_soon(
                    lambda: stopper.append(asyncio.ensure_future(consumer.close()))
                )

        stopper: list[asyncio.Future[None]] = []
        async with asyncio.timeout(60):
            await consumer.process(handler, concurrency=8, ordering="partition")
        await stopper[0]
    assert bad == []
    assert _processing_tasks() == []


async def test_restart_from_the_commit_skips_what_completed_and_loses_nothing(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    produced = await _produce(bootstrap, topic, 800, keys=80)
    group = _group()
    slow = {k for k in produced if k[1] % 97 == 5}  # run past the close's wait: not committed
    first_done: set[Key] = set()
    first = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]

    async def slow_or_fast(record: Record) -> None:
        key = (record.partition, record.offset)
        await asyncio.sleep(30 if key in slow else random.uniform(0.001, 0.010))
        first_done.add(key)

    async with asyncio.timeout(90):
        await first.start()
        first.subscribe([topic])
        task = asyncio.ensure_future(first.process(slow_or_fast, concurrency=16, within_s=0.2))
        await eventually(lambda: _len(first_done), lambda n: n >= 300, 30)
        await first.close(timeout=2)  # waits 1 s for running handlers, commits, leaves
        await task
    assert _processing_tasks() == []
    assert not (first_done & slow)
    committed = await _committed(bootstrap, group, topic, 4)
    kept_beyond = 0
    for p, om in committed.items():
        if om is None:  # nothing of it was handled (the first member never got to it)
            assert not any(k[0] == p for k in first_done), (p, sorted(first_done))
            continue
        beyond = decode_completed(om.metadata or "", om.offset)
        kept_beyond += len(beyond)
        # never committed past a record that did not complete
        assert all((p, o) in first_done for o in range(om.offset) if (p, o) in produced)
        assert all((p, o) in first_done for o in beyond)
    assert kept_beyond > 0  # the slow records left completed ones beyond the commit

    second_handled: list[Key] = []
    second = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]

    async def record_it(record: Record) -> None:
        second_handled.append((record.partition, record.offset))
        if set(second_handled) | first_done >= set(produced):
            asyncio.get_running_loop().call_soon(
                lambda: closing.append(asyncio.ensure_future(second.close()))
            )

    closing: list[asyncio.Future[None]] = []
    async with asyncio.timeout(90):
        await second.start()
        second.subscribe([topic])
        await second.process(record_it, concurrency=16)
        await closing[0]
    assert len(second_handled) == len(set(second_handled))
    assert not (set(second_handled) & first_done)  # completed before the close: not again
    assert set(second_handled) | first_done == set(produced)  # nothing lost


async def _len(items: set[Key] | set[int]) -> int:
    return len(items)


async def test_a_failing_handler_stops_process_and_is_not_committed_past(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await _produce(bootstrap, topic, 200, keys=20)
    group = _group()
    done: set[int] = set()

    class Boom(Exception):
        pass

    async def handler(record: Record) -> None:
        await asyncio.sleep(0.002 if record.offset != 50 else 0.05)
        if record.offset == 50:
            raise Boom("offset 50")
        done.add(record.offset)

    async with Consumer(bootstrap, group_id=group, **GROUP_SETTINGS) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])
        with pytest.raises(Boom):
            async with asyncio.timeout(60):
                await consumer.process(handler, concurrency=8, ordering="key")
        assert _processing_tasks() == []
        group_ = consumer.group
        assert group_ is not None
        tp = TopicPartition(topic, 0)
        assert group_.committed_offsets[tp] == 50  # everything below it finished, it did not
        beyond = decode_completed(group_.committed_metadata[tp] or "", 50)
        assert 50 not in beyond and beyond <= done
    committed = await _committed(bootstrap, group, topic, 1)
    assert committed[0] is not None and committed[0].offset == 50


async def test_cancelling_process_cancels_handlers_and_commits_what_finished(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    produced = await _produce(bootstrap, topic, 400, keys=40)
    group = _group()
    done: set[Key] = set()
    cancelled: list[Key] = []

    async def handler(record: Record) -> None:
        key = (record.partition, record.offset)
        try:
            await asyncio.sleep(60 if record.offset % 50 == 20 else 0.002)
        except asyncio.CancelledError:
            cancelled.append(key)
            raise
        done.add(key)

    async with Consumer(bootstrap, group_id=group, **GROUP_SETTINGS) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])
        task = asyncio.ensure_future(consumer.process(handler, concurrency=8))
        await eventually(lambda: _len(done), lambda n: n >= 100, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _processing_tasks() == []
        assert cancelled  # the slow handlers were running, and were cancelled
        group_ = consumer.group
        assert group_ is not None
        for tp, offset in group_.committed_offsets.items():
            below = [o for (p, o) in produced if p == tp.partition and o < offset]
            assert all((tp.partition, o) in done for o in below)
            assert not any((tp.partition, o) in cancelled for o in below)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_member_joining_mid_run_commits_only_finished_records_and_loses_nothing(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, protocol: str
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=6)
    produced = await _produce(bootstrap, topic, 3_000, keys=300)
    group = _group()
    settings = await _settings(bootstrap, group, protocol)
    ended: dict[Key, list[tuple[str, float, float]]] = defaultdict(list)
    commits: list[tuple[float, dict[TopicPartition, OffsetAndMetadata]]] = []
    consumers: list[Consumer] = []

    def member(name: str) -> tuple[Consumer, Callable[[Record], Awaitable[None]]]:
        consumer = Consumer(bootstrap, group_id=group, **settings)  # type: ignore[arg-type]
        consumers.append(consumer)

        async def handler(record: Record) -> None:
            start = time.monotonic()
            await asyncio.sleep(random.uniform(0.001, 0.020))
            ended[(record.partition, record.offset)].append((name, start, time.monotonic()))

        return consumer, handler

    def spy(consumer: Consumer) -> None:
        group_ = consumer.group
        assert group_ is not None
        offsets = group_.coordinator.offsets
        real = offsets.commit

        async def commit(wanted: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
            commits.append((time.monotonic(), dict(wanted)))
            await real(wanted)

        offsets.commit = commit  # type: ignore[method-assign,assignment]

    a, handle_a = member("a")
    b, handle_b = member("b")
    async with asyncio.timeout(120):
        await a.start()
        spy(a)
        a.subscribe([topic])
        task_a = asyncio.ensure_future(a.process(handle_a, concurrency=16, within_s=0.2))
        await eventually(lambda: _len(set(ended)), lambda n: n >= 600, 30)
        await b.start()
        spy(b)
        b.subscribe([topic])
        task_b = asyncio.ensure_future(b.process(handle_b, concurrency=16, within_s=0.2))
        await eventually(lambda: _len(set(ended)), lambda n: n >= len(produced), 60)
        for c in consumers:
            await c.close()
        await task_a
        await task_b
    assert _processing_tasks() == []
    assert set(ended) == set(produced)  # nothing lost
    # never two members on one record at once
    for key, runs in ended.items():
        spans = sorted((s, e) for _, s, e in runs)
        assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), key
    # every record a commit covers (below its offset, or named in its metadata) had ended
    first_end = {key: min(e for _, _, e in runs) for key, runs in ended.items()}
    assert any(c for _, c in commits)
    for at, wanted in commits:
        for tp, om in wanted.items():
            covered = [o for (p, o) in produced if p == tp.partition and o < om.offset]
            covered += decode_completed(om.metadata or "", om.offset)
            for o in covered:
                assert first_end.get((tp.partition, o), float("inf")) <= at, (tp, o, om)


async def test_process_refuses_unsupported_options(
    kafka_cluster: KafkaCluster,
) -> None:
    async with Consumer(kafka_cluster.bootstrap_servers) as consumer:
        for bad in (
            {"on_error": "retry"},
            {"on_error": "dead_letter"},  # no topic, no producer
            {"retries": -1},
            {"ordering": "topic"},
            {"concurrency": 0},
        ):
            with pytest.raises(ConfigError):
                await consumer.process(_noop, **bad)
    async with Consumer(
        kafka_cluster.bootstrap_servers, group_id=_group(), enable_auto_commit=True
    ) as consumer:
        with pytest.raises(ConfigError):
            await consumer.process(_noop)


async def _noop(record: Record) -> None:
    return None


async def _run_until(
    consumer: Consumer,
    handler: Callable[[Record], Awaitable[None]],
    done: Callable[[], bool],
    **options: object,
) -> None:
    """Run ``consumer.process(handler, **options)`` until ``done()``, then close."""
    task = asyncio.create_task(consumer.process(handler, **options))  # type: ignore[arg-type]
    try:
        async with asyncio.timeout(60):
            while not done():
                if task.done():
                    await task  # raise what stopped it
                await asyncio.sleep(0.05)
    finally:
        await consumer.close()
        await asyncio.wait_for(task, 30)


async def test_retries_then_skip_commits_past_the_failed_record(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await _produce(bootstrap, topic, 60, keys=6)
    group = _group()
    attempts: dict[int, int] = defaultdict(int)
    done: set[int] = set()
    order: list[int] = []

    async def handler(record: Record) -> None:
        attempts[record.offset] += 1
        order.append(record.offset)
        if record.offset == 6 and attempts[6] == 1:
            raise RuntimeError("transient")  # the retry succeeds
        if record.offset == 12:
            raise ValueError("always")  # skipped after 1 + 2 attempts
        done.add(record.offset)

    consumer = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]
    await consumer.start()
    consumer.subscribe([topic])
    await _run_until(
        consumer, handler, lambda: len(done) == 59,
        concurrency=4, on_error="skip", retries=2, retry_backoff_s=0.05,
    )  # fmt: skip
    assert attempts[6] == 2 and attempts[12] == 3
    assert done == set(range(60)) - {12}
    # key order held through the retries: offset 18 (same key as 12 and 6: 6 keys) ran
    # only after 12's last attempt
    assert order.index(18) > max(i for i, o in enumerate(order) if o == 12)
    committed = await _committed(bootstrap, group, topic, 1)
    assert committed[0] is not None and committed[0].offset == 60  # past the skipped one


async def test_dead_letter_sends_the_failed_record_with_its_story(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    dlq = await new_topic(partitions=1)
    await _produce(bootstrap, topic, 30, keys=3)
    group = _group()
    done: set[int] = set()

    async def handler(record: Record) -> None:
        if record.offset in (4, 20):
            raise KeyError(f"bad {record.offset}")
        done.add(record.offset)

    async with Producer(bootstrap_servers=bootstrap) as producer:
        consumer = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]
        await consumer.start()
        consumer.subscribe([topic])
        await _run_until(
            consumer, handler, lambda: len(done) == 28, concurrency=4, retries=1,
            retry_backoff_s=0.01, on_error="dead_letter", dead_letter_topic=dlq,
            dead_letter_producer=producer,
        )  # fmt: skip
    committed = await _committed(bootstrap, group, topic, 1)
    assert committed[0] is not None and committed[0].offset == 30
    letters: list[Record] = []
    async with Consumer(bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign([TopicPartition(dlq, 0)])
        async with asyncio.timeout(30):
            async for record in reader.stream():
                letters.append(record)
                if len(letters) == 2:
                    break
    by_offset = {int(dict(r.headers)["dlq.source.offset"] or b"-1"): r for r in letters}
    assert sorted(by_offset) == [4, 20]
    headers = dict(by_offset[20].headers)
    assert headers["dlq.source.topic"] == topic.encode()
    assert headers["dlq.source.partition"] == b"0"
    assert headers["dlq.error.type"] == b"KeyError"
    assert b"bad 20" in (headers["dlq.error.message"] or b"")
    assert headers["dlq.attempts"] == b"2"
    assert by_offset[20].value == b"20" and by_offset[20].key == b"k2"


async def test_a_hot_key_throttles_its_partition_and_the_others_go_on(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Records waiting behind one busy key do not hold up the other partitions: past
    ``4 * concurrency`` waiting with handler slots free, the hot partition's fetching is
    throttled, the rest keeps flowing, and what waits stays bounded."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    count = 300
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(count):
            await producer.enqueue(topic, value=b"%d" % i, key=b"hot", partition=0)
            await producer.enqueue(topic, value=b"%d" % i, key=b"k%d" % i, partition=1)
        await producer.flush()
    hot_done: list[int] = []
    cold_done: list[int] = []
    hot_when_cold_finished: list[int] = []
    samples: list[tuple[int, frozenset[TopicPartition]]] = []
    tp0 = TopicPartition(topic, 0)
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp0, TopicPartition(topic, 1)])

        async def handler(record: Record) -> None:
            if record.partition == 0:
                await asyncio.sleep(0.02)  # one key: one at a time, 6 s in all
                hot_done.append(record.offset)
            else:
                await asyncio.sleep(0.001)
                cold_done.append(record.offset)
                if len(cold_done) == count:
                    hot_when_cold_finished.append(len(hot_done))
            processing = consumer.health().processing
            assert processing is not None
            samples.append((processing.waiting, processing.throttled))
            if len(hot_done) == count and len(cold_done) == count:
                asyncio.get_running_loop().call_soon(
                    lambda: closing.append(asyncio.ensure_future(consumer.close()))
                )

        closing: list[asyncio.Future[None]] = []
        async with asyncio.timeout(60):
            await consumer.process(handler, concurrency=8, ordering="key")
        await closing[0]
    assert sorted(cold_done) == list(range(count)) and hot_done == list(range(count))
    # the cold partition finished while most of the hot key's records still waited
    assert hot_when_cold_finished and hot_when_cold_finished[0] < count // 3
    assert any(tp0 in throttled for _, throttled in samples)
    assert max(waiting for waiting, _ in samples) <= 2 * 4 * 8
    assert _processing_tasks() == []


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_handler_stuck_past_max_poll_interval_makes_the_member_leave_and_rejoin(
    kafka_cluster: KafkaCluster,
    new_topic: NewTopic,
    protocol: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler running past ``max_poll_interval_ms`` is a liveness failure, as a stuck
    ``async for``: health shows it, the member leaves (the handler is cancelled, its record
    not committed), joins again, and the record is handled again; nothing is lost."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    produced = await _produce(bootstrap, topic, 60, keys=20)
    group = _group()
    attempts: dict[int, int] = defaultdict(int)
    done: set[int] = set()
    cancelled: list[int] = []
    settings = {**await _settings(bootstrap, group, protocol), "max_poll_interval_ms": 3_000}
    async with Consumer(bootstrap, group_id=group, **settings) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])

        async def handler(record: Record) -> None:
            attempts[record.offset] += 1
            if record.offset == 10 and attempts[10] == 1:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled.append(record.offset)
                    raise
            await asyncio.sleep(0.002)
            done.add(record.offset)

        task = asyncio.ensure_future(consumer.process(handler, concurrency=8, within_s=0.2))
        try:

            async def oldest() -> float:
                processing = consumer.health().processing
                return 0.0 if processing is None else processing.oldest_handler_s

            await eventually(oldest, lambda s: s > 2.0, 20)  # health shows the stuck one
            await eventually(lambda: _len(done), lambda n: n == len(produced), 40)
            assert cancelled == [10]
            assert attempts[10] == 2
            left = [r.getMessage() for r in caplog.records if "leaves the group" in r.getMessage()]
            assert left and "a process() handler has run" in left[0], left
            await eventually(lambda: _health_reason(consumer), lambda r: r is None, 20)
        finally:
            await consumer.close()
            await task
    committed = await _committed(bootstrap, group, topic, 1)
    assert committed[0] is not None and committed[0].offset == len(produced)


async def _health_reason(consumer: Consumer) -> str | None:
    return consumer.health().reason


_KILLED_PROCESS = r"""
import asyncio, random, sys
from aiostream_kafka import Consumer

bootstrap, group, topic = sys.argv[1:4]
out = sys.stdout

async def main():
    async with Consumer(bootstrap, group_id=group, session_timeout_ms=6000,
                        heartbeat_interval_ms=300, metadata_max_age_ms=1000) as consumer:
        consumer.subscribe([topic])

        async def handler(record):
            out.write(f"s {record.partition} {record.offset}\n")
            out.flush()
            await asyncio.sleep(random.uniform(0.005, 0.015))
            out.write(f"d {record.partition} {record.offset}\n")
            out.flush()

        await consumer.process(handler, concurrency=32, every=50, within_s=0.1)

asyncio.run(main())
"""


async def test_a_sigkilled_process_redoes_only_what_its_last_commit_did_not_cover(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """``process()`` in a child process is SIGKILLed mid-run; a new member of the group
    handles the rest. Nothing is lost; what the commit (offset and metadata) covered is
    not handled again; what is redone is what was running at the kill and what finished
    after the last commit (bounded by ``every`` and the concurrency)."""
    import signal
    import sys

    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    produced = await _produce(bootstrap, topic, 4_000, keys=400)
    group = _group()
    started: set[Key] = set()
    finished: set[Key] = set()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_PROCESS, bootstrap, group, topic,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(60):
            while len(finished) < 1_500:
                line = await process.stdout.readline()
                assert line, "the worker ended early"
                kind, p, o = line.split()
                (started if kind == b"s" else finished).add((int(p), int(o)))
        process.send_signal(signal.SIGKILL)
        rest = await process.stdout.read()  # what it wrote before it died
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    for text in rest.decode().splitlines():
        kind_, p_, o_ = text.split()
        (started if kind_ == "s" else finished).add((int(p_), int(o_)))
    running_at_kill = started - finished
    committed = await _committed(bootstrap, group, topic, 4)
    covered: set[Key] = set()
    for part, om in committed.items():
        if om is not None:
            covered |= {(part, o) for o in range(om.offset)}
            covered |= {(part, o) for o in decode_completed(om.metadata or "", om.offset)}
    covered &= set(produced)
    assert covered <= finished  # never committed past a record that did not finish
    assert covered, "nothing was committed before the kill"

    second: set[Key] = set()
    handled_twice: list[Key] = []
    closing: list[asyncio.Future[None]] = []
    consumer = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]

    async def handler(record: Record) -> None:
        key = (record.partition, record.offset)
        if key in second:
            handled_twice.append(key)
        second.add(key)
        if (second | finished) >= set(produced) and not closing:
            closing.append(asyncio.ensure_future(consumer.close()))

    async with asyncio.timeout(90):
        await consumer.start()
        consumer.subscribe([topic])
        await consumer.process(handler, concurrency=32)
        await closing[0]
    redone = second & finished
    assert handled_twice == []
    assert second | finished >= set(produced)  # nothing lost
    assert not (second & covered)  # what the commit covered is not handled again
    assert running_at_kill <= second  # what was running is handled again
    assert redone == finished - covered  # redone: exactly what finished after the commit
    # the commits kept up: at most `every` (50) finished records, and those finishing
    # while a commit was on its way, were not covered
    print(f"running at kill {len(running_at_kill)}, redone after finishing {len(redone)}")
    assert len(redone) <= 50 + 2 * 32, (len(redone), len(running_at_kill))


async def test_drain_during_process_lets_handlers_finish_and_commits_all_they_finished(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """``drain()`` while ``process()`` runs: fetching stops, the records taken are
    handled, everything that finished is committed (a restart redoes nothing), and
    ``process()`` returns."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    produced = await _produce(bootstrap, topic, 3_000, keys=300)
    group = _group()
    done: set[Key] = set()
    cancelled: list[Key] = []
    consumer = Consumer(bootstrap, group_id=group, **GROUP_SETTINGS)  # type: ignore[arg-type]

    async def handler(record: Record) -> None:
        try:
            await asyncio.sleep(random.uniform(0.002, 0.02))
        except asyncio.CancelledError:
            cancelled.append((record.partition, record.offset))
            raise
        done.add((record.partition, record.offset))

    async with asyncio.timeout(90):
        await consumer.start()
        consumer.subscribe([topic])
        task = asyncio.ensure_future(consumer.process(handler, concurrency=16))
        await eventually(lambda: _len(done), lambda n: n >= 300, 30)
        await consumer.drain(timeout=30)
        await task  # returns: the consumer closed
    assert cancelled == []
    assert _processing_tasks() == []
    committed = await _committed(bootstrap, group, topic, 3)
    covered: set[Key] = set()
    for p, om in committed.items():
        if om is not None:
            covered |= {(p, o) for o in range(om.offset)}
            covered |= {(p, o) for o in decode_completed(om.metadata or "", om.offset)}
    covered &= set(produced)
    assert covered == done  # all that finished, nothing that did not


async def test_cancelled_at_any_point_process_leaves_nothing_and_commits_only_finished(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """``process()`` cancelled at many points (before its first record, while handlers
    run, during a retry's back-off, a commit): each time it re-raises, leaves no task, never
    commits past an unfinished record, and a later ``process()`` on the same consumer goes
    on from there; in the end every record was handled."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    produced = await _produce(bootstrap, topic, 1_500, keys=150)
    group = _group()
    done: set[Key] = set()
    failed_once: set[Key] = set()

    async def handler(record: Record) -> None:
        key = (record.partition, record.offset)
        await asyncio.sleep(random.uniform(0.0, 0.004))
        if record.offset % 7 == 3 and key not in failed_once:
            failed_once.add(key)
            raise RuntimeError("first attempt fails")
        done.add(key)

    rng = random.Random(30)
    async with Consumer(bootstrap, group_id=group, **GROUP_SETTINGS) as consumer:  # type: ignore[arg-type]
        consumer.subscribe([topic])
        group_ = consumer.group
        assert group_ is not None
        for _ in range(12):
            task = asyncio.ensure_future(
                consumer.process(
                    handler,
                    concurrency=16,
                    retries=1,
                    retry_backoff_s=0.02,
                    every=20,
                    within_s=0.05,
                )
            )
            await asyncio.sleep(rng.choice([0.0, 0.001, 0.01, 0.05, 0.2, 0.5]))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert _processing_tasks() == []
            for tp, offset in group_.committed_offsets.items():
                below = [o for (p, o) in produced if p == tp.partition and o < offset]
                assert all((tp.partition, o) in done for o in below), tp
        closing: list[asyncio.Future[None]] = []

        async def last(record: Record) -> None:
            await handler(record)
            if done >= set(produced) and not closing:
                closing.append(asyncio.ensure_future(consumer.close()))

        if not done >= set(produced):
            async with asyncio.timeout(60):
                await consumer.process(last, concurrency=16, retries=1, retry_backoff_s=0.02)
            await closing[0]
    assert done >= set(produced)
    assert _processing_tasks() == []
