"""PollScheduler against a fake engine (tests/fakes.py): who gets a fetch round, with how
many bytes, and when the next one may start (poll interval, throttling, back-off)."""

from __future__ import annotations

import asyncio
import time

import pytest
from fakes import FakeCluster, FakeEngine, snapshot

from aiostream_kafka.consumer.scheduler import PollScheduler, RoundOutcome
from aiostream_kafka.errors import NetworkError
from aiostream_kafka.structs import TopicPartition

A0, A1, A2 = (TopicPartition("a", p) for p in range(3))


def engine_with(
    leaders: dict[TopicPartition, int], **options: object
) -> tuple[FakeEngine, PollScheduler]:
    engine = FakeEngine(FakeCluster(snapshot(leaders)), **options)  # type: ignore[arg-type]
    for tp in leaders:
        engine.add(tp)
    scheduler = PollScheduler(engine)  # type: ignore[arg-type]
    engine.scheduler = scheduler
    return engine, scheduler


def granted(engine: FakeEngine) -> dict[int, list[list[TopicPartition]]]:
    return {
        node: [[ps.tp for ps in r.partitions] for r in f.rounds]
        for node, f in engine.fetchers.items()
    }


def held_back(scheduler: PollScheduler, node: int) -> float:
    """Seconds until broker ``node`` may have its next round."""
    return scheduler._pacing[node].not_before - time.monotonic()


def test_one_round_per_leader_with_the_partitions_it_leads() -> None:
    engine, scheduler = engine_with({A0: 1, A1: 2, A2: 1}, max_prefetch_bytes=1 << 20)
    assert scheduler._plan() is None  # nothing timed: sleep until woken
    assert granted(engine) == {1: [[A0, A2]], 2: [[A1]]}
    assert {ps.tp: ps.in_flight for ps in engine.partitions.values()} == {A0: 1, A1: 2, A2: 1}
    # Each round reserved its bytes: min(fetch_max_bytes, per-partition bytes x partitions).
    (round1,) = engine.fetchers[1].rounds
    assert round1.reservation == 2 * engine.partition_fetch_bytes == round1.max_bytes
    assert engine.buffer.reserved == 3 * engine.partition_fetch_bytes


def test_partitions_that_may_not_be_fetched_get_no_round() -> None:
    engine, scheduler = engine_with({A0: 1, A1: 1, A2: 2})
    engine.partitions[A0].paused = True
    engine.partitions[A1].fetch_position = None  # no position yet
    engine.partitions[A2].queue.extend([object(), object()])  # type: ignore[list-item]
    scheduler._plan()
    assert granted(engine) == {}  # a broker with no fetchable partition gets no round
    engine.partitions[A0].paused = False
    scheduler._plan()
    assert granted(engine) == {1: [[A0]]}


def test_a_broker_with_a_round_in_flight_waits_for_it_to_end() -> None:
    engine, scheduler = engine_with({A0: 1})
    scheduler._plan()
    engine.partitions[A0].in_flight = None  # the fetcher handed the partition back
    scheduler._plan()
    assert granted(engine) == {1: [[A0]]}  # still one round: the broker's is in flight
    scheduler.round_done(1, RoundOutcome(sent=True, records=True))
    scheduler._plan()
    assert granted(engine) == {1: [[A0], [A0]]}  # records came: the next round at once


def test_an_empty_round_delays_the_next_by_the_poll_interval() -> None:
    engine, scheduler = engine_with({A0: 1}, poll_interval_ms=300, fetch_max_wait_ms=500)
    scheduler._plan()
    engine.partitions[A0].in_flight = None
    scheduler.round_done(1, RoundOutcome(sent=True, records=False))
    delay = scheduler._plan()
    assert delay is not None and 0.2 < delay <= 0.3
    assert len(engine.fetchers[1].rounds) == 1
    # The interval never exceeds fetch_max_wait_ms (no long poll asked: next round soon).
    engine, scheduler = engine_with({A0: 1}, poll_interval_ms=5_000, fetch_max_wait_ms=50)
    scheduler._plan()
    engine.partitions[A0].in_flight = None
    scheduler.round_done(1, RoundOutcome(sent=True, records=False))
    delay = scheduler._plan()
    assert delay is not None and delay <= 0.05


def test_a_throttled_response_holds_the_broker_back_that_long() -> None:
    engine, scheduler = engine_with({A0: 1, A1: 2})
    scheduler._plan()
    for ps in engine.partitions.values():
        ps.in_flight = None
    scheduler.round_done(1, RoundOutcome(sent=True, records=True, throttle_ms=400))
    scheduler.round_done(2, RoundOutcome(sent=True, records=True))
    delay = scheduler._plan()
    assert granted(engine) == {1: [[A0]], 2: [[A1], [A1]]}  # only broker 1 is held back
    assert delay is not None and 0.3 < delay <= 0.4


def test_failed_rounds_back_off_exponentially_up_to_the_maximum() -> None:
    _, scheduler = engine_with({A0: 1})  # retry_backoff_ms 10, max 40
    scheduler._plan()
    delays = []
    for _ in range(4):
        scheduler.round_done(1, RoundOutcome(sent=True, error=NetworkError("lost")))
        delays.append(held_back(scheduler, 1))
    assert [round(d * 1000) for d in delays] == [10, 20, 40, 40]
    scheduler.round_done(1, RoundOutcome(sent=True, records=True))  # success resets
    scheduler.round_done(1, RoundOutcome(sent=True, error=NetworkError("lost")))
    assert round(held_back(scheduler, 1) * 1000) == 10


def test_no_round_when_the_budget_is_spent_and_the_reservation_never_exceeds_it() -> None:
    engine, scheduler = engine_with({A0: 1, A1: 1}, max_prefetch_bytes=100_000)
    engine.buffer.reserve(100_000 - engine.partition_fetch_bytes + 1)
    scheduler._plan()
    assert granted(engine) == {}  # less than one partition's fetch size is free
    engine.buffer.unreserve(1)
    scheduler._plan()
    (round1,) = engine.fetchers[1].rounds
    assert round1.reservation == engine.partition_fetch_bytes  # what was free, not 2 x
    assert engine.buffer.free() == 0


def test_a_missing_leader_asks_for_metadata_and_a_newer_epoch_for_validation() -> None:
    engine, scheduler = engine_with({A0: -1, A1: 1})
    scheduler._plan()
    assert engine.resolver.metadata_requests == 1 and granted(engine) == {1: [[A1]]}
    engine, scheduler = engine_with({A0: 1})
    engine.cluster.snapshot = snapshot({A0: 1}, epochs={A0: 3})
    scheduler._plan()
    assert engine.resolver.wakes == 1 and granted(engine) == {}  # KIP-320 first


def test_a_closed_or_failed_engine_grants_nothing() -> None:
    engine, scheduler = engine_with({A0: 1})
    engine.fatal = RuntimeError("boom")
    assert scheduler._plan() is None and granted(engine) == {}
    engine.fatal, engine.closed = None, True
    assert scheduler._plan() is None and granted(engine) == {}


async def test_the_task_reacts_to_demand_when_woken() -> None:
    engine, scheduler = engine_with({A0: 1})
    engine.partitions[A0].paused = True
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.sleep(0.01)
        assert granted(engine) == {}
        engine.partitions[A0].paused = False
        started = time.monotonic()
        scheduler.wake()  # what resume() does
        await asyncio.sleep(0.01)  # the task's next pass (it was waiting for a wake)
        assert time.monotonic() - started < 0.1
        assert granted(engine) == {1: [[A0]]}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
