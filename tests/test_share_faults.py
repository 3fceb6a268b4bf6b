"""ShareConsumer under faults (issue 29, "Tests"), against the real 4.3.1 broker.

* a member SIGKILLed with records acquired: its connection drops, the broker releases
  them at once and another member gets them (delivery_count 2) long before the lock
  would have expired;
* a member hung (SIGSTOP) with its connection open: its records come back to another
  member only when their lock expires;
* the delivery limit: a record RELEASEd every time is delivered ``limit`` times, then
  archived (never again, the share-partition start offset moves past it) while the other
  records keep flowing;
* an exception in the loop body (implicit mode): that record comes again with
  delivery_count 2, the records before it were accepted;
* cancellation at the awaits of start, iteration and close: no task of the consumer is
  left, nothing unhandled is logged, and no record the loop body had not finished is
  accepted (a fresh member gets those again).

The members that get SIGKILLed or SIGSTOPped run in a child process (:data:`_HOLDER`).
Each group gets ``share.auto.offset.reset=earliest``, a 200 ms heartbeat and the lock
duration or delivery limit of its test as group configs before its first member joins
(the test broker lowers the lock minimum to 1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from helpers import eventually
from test_share_consumer import _group

import aiostream_kafka
from aiostream_kafka import AcknowledgeType, Producer, ShareConsumer, ShareRecord
from aiostream_kafka.admin import Admin
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

log = logging.getLogger(__name__)

HEARTBEAT_MS = 200
# Names of the tasks a ShareConsumer runs (its scope, its membership's, its close).
_TASK_PREFIXES = ("share consumer", "share group", "closing the share consumer")
_UNHANDLED = ("never retrieved", "was destroyed but it is pending")


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for value in values:
            await producer.enqueue(topic, value=value, partition=0)
        await producer.flush()


async def _joined(sc: ShareConsumer, timeout_s: float = 15.0) -> None:
    """Until ``sc`` has an assignment and has sent a ShareFetch."""

    async def probe() -> tuple[int, int]:
        return len(sc.assignment), sc.fetches

    await eventually(probe, lambda s: s[0] > 0 and s[1] > 0, timeout_s)


async def _take(
    sc: ShareConsumer, count: int, timeout_s: float, *, accept: bool = True
) -> list[ShareRecord]:
    """The next ``count`` records ``sc`` hands out (each accepted unless not ``accept``:
    then the consumer must be in explicit mode and they stay acquired)."""
    got: list[ShareRecord] = []
    async with asyncio.timeout(timeout_s):
        async for record in sc:
            got.append(record)
            if accept:
                sc.acknowledge(record)
            if len(got) == count:
                break
    return got


async def _none_within(sc: ShareConsumer, seconds: float) -> list[ShareRecord]:
    """What ``sc`` hands out within ``seconds`` (each accepted): [] is expected."""
    got: list[ShareRecord] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            async for record in sc:
                got.append(record)
                sc.acknowledge(record)
    return got


def _offsets(records: list[ShareRecord]) -> list[tuple[int, int]]:
    """(offset, delivery_count) of each record, sorted."""
    return sorted((r.offset, r.delivery_count) for r in records)


# -- a member in a child process ----------------------------------------------------------

# A share member (explicit mode) that takes ``count`` records without acknowledging them,
# prints "HOLDING" and their offsets and delivery counts, then waits to be killed or
# stopped (its connections stay open, its fetch loop keeps polling for more).
_HOLDER = """
import asyncio, sys

from aiostream_kafka import ShareConsumer


async def main(bs, group, topic, count):
    async with ShareConsumer(bootstrap_servers=bs, group_id=group,
                             acknowledgement_mode="explicit",
                             max_prefetch_records=count) as sc:
        sc.subscribe([topic])
        held = []
        async for record in sc:
            held.append(f"{record.offset}:{record.delivery_count}")
            if len(held) == count:
                break
        print("HOLDING", *held, flush=True)
        await asyncio.sleep(3600)  # SIGKILLed or SIGSTOPped here


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


@contextlib.asynccontextmanager
async def _holder(
    tmp_path: Path, *args: object
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[tuple[int, int]]]]:
    """The holder running as a child process of this checkout, once it holds its records:
    (the process, the (offset, delivery_count) it holds). Continued if stopped, killed and
    reaped on the way out whatever happened."""
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    env = dict(os.environ)
    root = str(Path(aiostream_kafka.__file__).resolve().parents[1])  # this checkout
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    err = tmp_path / f"holder.{uuid.uuid4().hex[:6]}.err"
    with open(err, "wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *map(str, args),
            stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                line = (await proc.stdout.readline()).decode().split()
            assert line and line[0] == "HOLDING", (line, err.read_text()[-2000:])
            held = sorted((int(o), int(d)) for o, d in (x.split(":") for x in line[1:]))
            yield proc, held
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
            await proc.wait()


async def test_a_member_sigkilled_with_records_acquired_gives_them_back_at_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The holder takes 5 records and is SIGKILLed: its connection drops, the broker
    releases them, and the member here gets the same offsets with delivery_count 2
    within a few seconds -- the 30 s lock cannot explain it."""
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs, **{"share.record.lock.duration.ms": "30000"})
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    loop = asyncio.get_running_loop()
    async with _holder(tmp_path, bs, group, topic, 5) as (proc, held):
        assert held == [(i, 1) for i in range(5)]
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as other:
            other.subscribe([topic])
            await _joined(other)
            assert await _none_within(other, 1.0) == []  # the holder has them all
            proc.send_signal(signal.SIGKILL)
            killed_at = loop.time()
            assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
            got = await _take(other, 5, timeout_s=20)
            came_after = loop.time() - killed_at
            await other.commit()
    log.info("SIGKILLed holder: its records came back after %.2f s", came_after)
    assert _offsets(got) == [(i, 2) for i in range(5)]
    assert came_after < 5.0, f"came back {came_after:.1f} s after the kill (lock: 30 s)"


async def test_a_member_hung_with_its_connection_open_keeps_records_until_the_lock_expires(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    """The holder takes 5 records and is SIGSTOPped (its connections stay open): the
    member here gets them only once their 3 s lock expired, with delivery_count 2."""
    bs = kafka_cluster.bootstrap_servers
    lock_s = 3.0
    topic = await new_topic()
    group = await _group(bs, **{"share.record.lock.duration.ms": str(int(lock_s * 1000))})
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    loop = asyncio.get_running_loop()
    async with _holder(tmp_path, bs, group, topic, 5) as (proc, held):
        proc.send_signal(signal.SIGSTOP)
        stopped_at = loop.time()
        try:
            assert held == [(i, 1) for i in range(5)]
            async with ShareConsumer(bootstrap_servers=bs, group_id=group) as other:
                other.subscribe([topic])
                got = await _take(other, 5, timeout_s=lock_s + 15)
                came_after = loop.time() - stopped_at
                await other.commit()
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
    log.info("SIGSTOPped holder: its records came back after %.2f s", came_after)
    assert _offsets(got) == [(i, 2) for i in range(5)]
    # The lock ran from the acquisition, a little before the stop: 1 s of slack.
    assert lock_s - 1.0 <= came_after <= lock_s + 10, came_after


# -- the delivery limit ---------------------------------------------------------------------


async def test_the_delivery_limit_archives_a_poison_record(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """``share.delivery.count.limit`` 2 (the broker's minimum): a record RELEASEd every
    time is delivered twice, then never again, while the records after it (and records
    produced later) are delivered and accepted; the share-partition start offset moves
    past it."""
    bs = kafka_cluster.bootstrap_servers
    limit = 2
    topic = await new_topic()
    group = await _group(bs, **{"share.delivery.count.limit": str(limit)})
    await _produce(bs, topic, [b"poison", *(b"%d" % i for i in range(1, 5))])
    poison: list[int] = []  # its delivery counts
    accepted: list[int] = []
    async with ShareConsumer(
        bootstrap_servers=bs, group_id=group, acknowledgement_mode="explicit"
    ) as sc:
        sc.subscribe([topic])

        async def run(until: Callable[[], bool], timeout_s: float) -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    async for record in sc:
                        if record.value == b"poison":
                            poison.append(record.delivery_count)
                            sc.acknowledge(record, AcknowledgeType.RELEASE)
                        else:
                            accepted.append(record.offset)
                            sc.acknowledge(record)
                        if until():
                            break

        await run(lambda: len(poison) == limit and len(accepted) == 4, 30)
        assert poison == [1, 2]
        await sc.commit()
        # More records flow; the poison never comes again.
        await _produce(bs, topic, [b"%d" % i for i in range(5, 10)])
        await run(lambda: len(accepted) == 9, 30)
        await run(lambda: False, 3.0)  # anything else that comes
        await sc.commit()
    assert poison == [1, 2]
    assert sorted(accepted) == list(range(1, 10))
    tp = TopicPartition(topic, 0)
    async with Admin(bootstrap_servers=bs) as admin:

        async def start_offset() -> int:
            offsets = await admin.list_share_group_offsets(group, [tp])
            return offsets[tp].start_offset if tp in offsets else -1

        async def lag() -> dict[TopicPartition, int]:
            return await admin.share_group_lag(group)

        start = await eventually(start_offset, lambda s: s > 0, timeout_s=15)
        log.info("delivery limit: share-partition start offset %d", start)
        await eventually(lag, lambda lags: lags == {tp: 0}, timeout_s=15)


# -- an exception in the loop body --------------------------------------------------------


async def test_an_exception_in_the_loop_body_releases_that_record_and_accepts_the_earlier(
    kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Implicit mode: the body raises on offset 2. The next iteration gets offset 2 again
    with delivery_count 2 (and 3, 4 once), never 0 or 1 (accepted when the loop moved
    past them); a fresh member of the group afterwards gets nothing."""
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, [b"%d" % i for i in range(5)])

    class Boom(Exception):
        pass

    first: list[tuple[int, int]] = []
    again: list[tuple[int, int]] = []
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
        sc.subscribe([topic])
        with pytest.raises(Boom):
            async with asyncio.timeout(30):
                async for record in sc:
                    first.append((record.offset, record.delivery_count))
                    if record.offset == 2:
                        raise Boom
        async with asyncio.timeout(20):  # the lock (30 s) cannot bring offset 2 back
            async for record in sc:
                again.append((record.offset, record.delivery_count))
                if {o for o, _ in again} >= {2, 3, 4}:
                    sc.acknowledge(record)
                    break
        assert await _none_within(sc, 2.0) == []
        await sc.commit()
    assert first == [(0, 1), (1, 1), (2, 1)]
    assert sorted(again) == [(2, 2), (3, 1), (4, 1)]
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as fresh:
        fresh.subscribe([topic])
        await _joined(fresh)
        assert await _none_within(fresh, 2.0) == []


# -- cancellation -------------------------------------------------------------------------


def _consumer_tasks() -> list[asyncio.Task[object]]:
    return [
        t for t in asyncio.all_tasks() if t.get_name().startswith(_TASK_PREFIXES) and not t.done()
    ]


async def _nothing_left(caplog: pytest.LogCaptureFixture) -> None:
    """No task of a share consumer runs; nothing unhandled was logged."""
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()  # unretrieved task exceptions are reported when the task is collected
    assert _consumer_tasks() == []
    unhandled = [
        r.getMessage() for r in caplog.records if any(u in r.getMessage() for u in _UNHANDLED)
    ]
    assert unhandled == []


async def _redelivered(
    bs: str, group: str, topic: str, expected: set[int], quiet_s: float = 1.0
) -> list[tuple[int, int]]:
    """What a fresh member of ``group`` gets: until it has the offsets ``expected``, then
    whatever else comes within ``quiet_s``; (offset, delivery_count) sorted."""
    got: list[ShareRecord] = []
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as fresh:
        fresh.subscribe([topic])
        async with asyncio.timeout(20):  # below the 30 s lock
            async for record in fresh:
                got.append(record)
                fresh.acknowledge(record)
                if {r.offset for r in got} >= expected:
                    break
        got += await _none_within(fresh, quiet_s)
        await fresh.commit()
    return _offsets(got)


async def test_cancelling_start_leaves_nothing_running_and_nothing_acquired(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    """The task in ``async with ShareConsumer(...)`` is cancelled at its first await and
    then after growing delays, while start() waits for the broker: each cancellation
    propagates, leaves no task of the consumer running and nothing unhandled; no record
    was acquired (a fresh member gets every record with delivery_count 1)."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    cut_in_start = 0
    for delay in (None, 0.0, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05):
        entered = asyncio.Event()
        began = asyncio.Event()

        async def member(began: asyncio.Event, entered: asyncio.Event) -> None:
            began.set()
            async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
                entered.set()
                sc.subscribe([topic])
                await asyncio.sleep(3600)

        task = asyncio.create_task(member(began, entered))
        if delay is not None:  # None: cancelled before it ran at all
            await began.wait()
            await asyncio.sleep(delay)
        if entered.is_set():
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            break  # start() is done before this delay: later ones cut nothing of it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        cut_in_start += delay is not None
        await _nothing_left(caplog)
    log.info("cancelled start: %d cancellations landed inside start()", cut_in_start)
    assert cut_in_start >= 2, "no cancellation landed inside start()"
    await _nothing_left(caplog)
    assert await _redelivered(bs, group, topic, set(range(5))) == [(i, 1) for i in range(5)]


async def test_cancelling_the_loop_while_it_waits_for_records_accepts_what_it_finished(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    """Implicit mode: the loop finished all 5 records and waits for more when its task is
    cancelled: no task left, nothing unhandled, the 5 accepted (a fresh member gets only
    the records produced later)."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs)
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    finished: list[int] = []
    waiting = asyncio.Event()

    async def run() -> None:
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
            sc.subscribe([topic])
            async for record in sc:
                finished.append(record.offset)
                if len(finished) == 5:
                    waiting.set()  # the loop asks for the next one: it waits

    task = asyncio.create_task(run())
    async with asyncio.timeout(30):
        await waiting.wait()
    await asyncio.sleep(0.3)  # a few fetch rounds while the loop waits
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    await _nothing_left(caplog)
    assert finished == list(range(5))
    await _produce(bs, topic, [b"%d" % i for i in range(5, 8)])
    assert await _redelivered(bs, group, topic, {5, 6, 7}) == [(i, 1) for i in range(5, 8)]


async def test_cancelling_the_loop_while_it_holds_a_record_releases_it(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    """Implicit mode: the body finished offsets 0 and 1 and is inside its work on offset 2
    when its task is cancelled: no task left, nothing unhandled; 0 and 1 accepted, 2
    (unfinished) and 3, 4 (buffered) delivered again to a fresh member at once."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs, **{"share.record.lock.duration.ms": "30000"})
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    finished: list[int] = []
    holding = asyncio.Event()

    async def run() -> None:
        async with ShareConsumer(bootstrap_servers=bs, group_id=group) as sc:
            sc.subscribe([topic])
            async for record in sc:
                if record.offset == 2:
                    holding.set()
                    await asyncio.sleep(3600)  # the work, cancelled
                finished.append(record.offset)

    task = asyncio.create_task(run())
    async with asyncio.timeout(30):
        await holding.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    await _nothing_left(caplog)
    assert finished == [0, 1]
    got = await _redelivered(bs, group, topic, {2, 3, 4})
    assert [o for o, _ in got] == [2, 3, 4]
    assert dict(got)[2] == 2


def _mark_call(obj: object, name: str, called: asyncio.Event) -> None:
    """Wrap method ``name`` of ``obj`` (this instance only) so that calling it sets
    ``called`` first."""
    original = getattr(obj, name)
    if asyncio.iscoroutinefunction(original):

        async def wrapped_async(*args: object, **kwargs: object) -> object:
            called.set()
            return await original(*args, **kwargs)

        setattr(obj, name, wrapped_async)
    else:

        def wrapped(*args: object, **kwargs: object) -> object:
            called.set()
            return original(*args, **kwargs)

        setattr(obj, name, wrapped)


# Where close() is when its caller is cancelled: at its first await (the fetch loop's
# last round), once the fetch loop is done (the final ShareAcknowledge in flight), and
# while leaving the group (ShareGroupHeartbeat epoch -1).
_CLOSE_STAGES = ("first await", "acknowledging", "leaving")


@pytest.mark.parametrize("stage", _CLOSE_STAGES)
async def test_cancelling_close_still_closes_and_accepts_only_what_was_finished(
    kafka_cluster: KafkaCluster,
    new_topic: NewTopic,
    caplog: pytest.LogCaptureFixture,
    stage: str,
) -> None:
    """Implicit mode: the loop finished offsets 0 and 1 and left (break) on offset 2; the
    task is cancelled while it awaits close() (at ``stage``): the cancellation propagates
    once the close is over, no task is left, nothing unhandled; 0 and 1 accepted, 2, 3, 4
    delivered again to a fresh member at once (the lock is 30 s)."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    group = await _group(bs, **{"share.record.lock.duration.ms": "30000"})
    await _produce(bs, topic, [b"%d" % i for i in range(5)])
    finished: list[int] = []
    reached = asyncio.Event()
    sc = ShareConsumer(bootstrap_servers=bs, group_id=group)
    if stage == "acknowledging":  # called once the fetch loop is done
        _mark_call(sc, "_release_everything", reached)
    elif stage == "leaving":
        _mark_call(sc._membership, "close", reached)

    async def run() -> None:
        await sc.start()
        sc.subscribe([topic])
        async with asyncio.timeout(30):
            async for record in sc:
                if record.offset == 2:
                    break  # not finished
                finished.append(record.offset)
        if stage == "first await":
            reached.set()
        await sc.close()

    task = asyncio.create_task(run())
    async with asyncio.timeout(30):
        await reached.wait()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    await _nothing_left(caplog)
    assert sc._close_task is not None and sc._close_task.done()
    assert finished == [0, 1]
    got = await _redelivered(bs, group, topic, {2, 3, 4})
    assert [o for o, _ in got] == [2, 3, 4]
    assert dict(got)[2] == 2
