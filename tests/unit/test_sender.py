"""The sender against a fake cluster whose connections answer Produce (tests/fakes.py):
when batches go (linger, full, flush), how they are drained per leader into requests, the
in-flight limit per connection, and what each answer does to the records (offsets,
retries with back-off or to the hinted leader, typed failures, the delivery timeout)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from fakes import FakeCluster, snapshot

from aiostream_kafka.errors import KafkaTimeoutError
from aiostream_kafka.producer.accumulator import Accumulator
from aiostream_kafka.producer.buffer_pool import BufferPool
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.producer.sender import Sender
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.base import Request
from aiostream_kafka.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiostream_kafka.structs import RecordMetadata, TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
LEADERS = {A0: 1, A1: 1, B0: 2}

# (topic, partition) -> error code for the next answer (then 0), or a hint.
Script = dict[tuple[str, int], list[int]]


class Broker:
    """Answers Produce: offsets counted per partition; ``errors`` scripts error codes per
    partition (popped one per answer), ``hint`` the KIP-951 leader named with them."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, int], int] = {}
        self.errors: Script = {}
        self.hint: tuple[int, int] | None = None
        self.throttle_ms = 0
        self.requests: list[list[tuple[str, int]]] = []

    def __call__(self, request: Request) -> ProduceResponse:
        assert isinstance(request, ProduceRequest)
        topics = []
        asked = []
        for topic in request.topic_data:
            parts = []
            for data in topic.partition_data:
                key = (topic.name, data.index)
                asked.append(key)
                scripted = self.errors.get(key)
                code = scripted.pop(0) if scripted else 0
                leader = ProduceResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
                if code and self.hint is not None:
                    leader = ProduceResponse.LeaderIdAndEpoch(
                        leader_id=self.hint[0], leader_epoch=self.hint[1]
                    )
                offset = self.offsets.get(key, 0)
                if code == 0:
                    self.offsets[key] = offset + 1
                parts.append(
                    ProduceResponse.PartitionProduceResponse(
                        index=data.index,
                        error_code=code,
                        base_offset=offset if code == 0 else -1,
                        current_leader=leader,
                    )
                )
            topics.append(
                ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=parts)
            )
        self.requests.append(asked)
        return ProduceResponse(responses=topics, throttle_time_ms=self.throttle_ms)


class Rig:
    def __init__(self, broker: Broker, **options: Any) -> None:
        self.broker = broker
        self.cluster = FakeCluster(
            snapshot(LEADERS, fetched_at=time.monotonic()),
            produce=broker,
            retry_backoff_ms=20,
            retry_backoff_max_ms=80,
        )
        self.config = ProducerConfig(**{"linger_ms": 0, **options})
        self.acc = Accumulator(
            self.config.batch_size,
            self.config.delivery_timeout_ms,
            BufferPool(self.config.buffer_memory),
            asyncio.get_running_loop(),
        )
        self.sender = Sender(self.cluster, self.acc, self.config, None)  # type: ignore[arg-type]

    async def send(self, tp: TopicPartition, value: bytes = b"v") -> asyncio.Future[RecordMetadata]:
        future = self.acc.try_append(tp, None, value, None, 1)
        if future is None:
            future, _ = await self.acc.append_new(tp, None, value, None, 1, 1.0)
        return future

    def sent_to(self, node: int) -> int:
        conn = self.cluster.connections.get(node)
        return 0 if conn is None else len(conn.sent)


@pytest_asyncio.fixture(loop_scope="session")
async def rig() -> AsyncIterator[Callable[..., Rig]]:
    rigs: list[tuple[Rig, asyncio.Task[None]]] = []

    def start(broker: Broker | None = None, **options: Any) -> Rig:
        made = Rig(broker or Broker(), **options)
        rigs.append((made, asyncio.create_task(made.sender.run())))
        return made

    yield start
    for made, task in rigs:
        await made.sender.stop()
        made.acc.wakeup.set()
        async with asyncio.timeout(2):
            await task


async def wait_for(future: asyncio.Future[Any], within_s: float = 2.0) -> Any:
    async with asyncio.timeout(within_s):
        return await future


async def test_a_record_waits_for_linger_then_gets_its_offset(rig: Callable[..., Rig]) -> None:
    r = rig(linger_ms=100)
    started = time.monotonic()
    first = await r.send(A0)
    await asyncio.sleep(0.03)
    assert r.sent_to(1) == 0  # lingering: more records may join the batch
    second = await r.send(A0)
    meta = await wait_for(first)
    assert time.monotonic() - started >= 0.1
    assert (meta.topic, meta.partition, meta.offset) == ("a", 0, 0)
    assert (await wait_for(second)).offset == 1  # same batch, next offset
    assert r.broker.requests == [[("a", 0)]]


async def test_a_full_batch_or_a_flush_goes_at_once(rig: Callable[..., Rig]) -> None:
    r = rig(linger_ms=60_000, batch_size=1_000)
    futures = [await r.send(A0, b"x" * 300) for _ in range(4)]  # the fourth opens batch 2
    await wait_for(futures[0], 1.0)  # full: not held for linger_ms
    assert not futures[3].done()
    r.sender.flushing += 1
    r.acc.wakeup.set()
    await wait_for(futures[3], 1.0)


async def test_ready_batches_are_drained_one_request_per_leader(
    rig: Callable[..., Rig],
) -> None:
    r = rig(linger_ms=50)
    futures = [await r.send(tp) for tp in (A0, A1, B0)]
    for future in futures:
        await wait_for(future)
    assert r.sent_to(1) == 1 and r.sent_to(2) == 1
    assert sorted(map(sorted, r.broker.requests)) == [[("a", 0), ("a", 1)], [("b", 0)]]


async def test_requests_in_flight_per_connection_are_limited(rig: Callable[..., Rig]) -> None:
    r = rig(max_in_flight_requests_per_connection=2, batch_size=200, linger_ms=0)
    conn = await r.cluster.connection(1)
    conn.gate = asyncio.Event()  # the broker does not answer yet
    futures = [await r.send(A0, b"x" * 150) for _ in range(5)]  # five batches, one each
    await asyncio.sleep(0.05)
    assert len(conn.sent) == 2 and r.sender.in_flight == 2
    conn.gate.set()
    for future in futures:
        await wait_for(future)
    assert [f.result().offset for f in futures] == [0, 1, 2, 3, 4]  # in order
    assert len(conn.sent) == 5


async def test_a_retriable_error_is_retried_after_a_back_off_and_a_refresh(
    rig: Callable[..., Rig],
) -> None:
    broker = Broker()
    broker.errors[("a", 0)] = [6]  # NOT_LEADER_OR_FOLLOWER, no leader named
    r = rig(broker)
    started = time.monotonic()
    meta = await wait_for(await r.send(A0))
    assert meta.offset == 0 and len(broker.requests) == 2
    assert time.monotonic() - started >= 0.015  # retry_backoff_ms 20 (jitter 0.8-1.2)
    assert r.cluster.refreshes >= 1  # stale metadata without a hint: look again


async def test_a_leader_hint_sends_the_retry_to_the_new_leader_at_once(
    rig: Callable[..., Rig],
) -> None:
    broker = Broker()
    broker.errors[("a", 0)] = [6]  # NOT_LEADER_OR_FOLLOWER, naming broker 2 (KIP-951)
    broker.hint = (2, 7)
    r = rig(broker)
    r.sender.retry_backoff_s = 5.0  # a back-off would make this test time out
    meta = await wait_for(await r.send(A0), 1.0)
    assert meta.offset == 0
    assert r.cluster.hints == [(A0, 2, 7)]
    assert r.sent_to(1) == 1 and r.sent_to(2) == 1


async def test_a_non_retriable_error_fails_the_records_with_its_type(
    rig: Callable[..., Rig],
) -> None:
    broker = Broker()
    broker.errors[("a", 0)] = [10]  # MESSAGE_TOO_LARGE for a single record: cannot split
    r = rig(broker)
    future = await r.send(A0)
    with pytest.raises(ec.RecordTooLargeError, match="producing to a-0"):
        await wait_for(future)
    assert len(broker.requests) == 1 and not r.acc.incomplete
    assert r.acc.pool.available == r.config.buffer_memory


async def test_records_without_a_leader_fail_at_the_delivery_timeout(
    rig: Callable[..., Rig],
) -> None:
    r = rig()
    r.cluster.snapshot = snapshot({A0: -1}, fetched_at=time.monotonic())
    r.acc.delivery_timeout_s = 0.1
    future = await r.send(A0)
    with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms"):
        await wait_for(future)
    assert r.cluster.refreshes >= 1  # it looked for the leader meanwhile


async def test_a_throttled_broker_gets_no_request_until_the_throttle_ends(
    rig: Callable[..., Rig],
) -> None:
    broker = Broker()
    broker.throttle_ms = 200
    r = rig(broker)
    await wait_for(await r.send(A0))
    broker.throttle_ms = 0
    started = time.monotonic()
    await wait_for(await r.send(A0))
    assert time.monotonic() - started >= 0.15
