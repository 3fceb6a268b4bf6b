"""The process scenario (issue 30): the handlers, the tally every client's run keeps, the
SIGKILL case's driver and member, and its analysis.

Throughput (``ours``/``aiokafka`` workers, scenario ``process``): a fresh group reads the
shared topic from the earliest offset and each record is given to the handler, either
``await asyncio.sleep(0.010)`` ("fixed") or a sleep of 1-20 ms ("random": the time of a
record is a seeded function of its partition and offset, so every client of a round sleeps
the same time for the same record). :class:`Tally` keeps the clock: from the first
handler's start to the ``records``-th handler's end; the mean sleep of those records is
the handler time of the ideal rate (``concurrency / mean``).

The asyncio floor (``ours`` worker, scenario ``process`` with ``floor`` in the spec,
:func:`run_floor`): the same handler, records, clock and worker process, without Kafka and
without ``process()``: a plain asyncio program, an ``asyncio.Queue(maxsize=4 * C)`` fed by
one task and ``C`` worker tasks each ``await queue.get()`` then the handler. What asyncio
itself reaches with ``C`` handlers at once bounds what ``process()`` can reach.

SIGKILL (``ours`` worker, scenario ``process_kill``, :func:`drive_kill`): a member process
(scenario ``process_member``) runs ``Consumer.process()`` at concurrency 64 with the commit
defaults and appends ``S partition offset`` when a handler starts and ``D partition offset``
when it ends, each line one unbuffered ``write`` (a SIGKILL loses none). Once half the
records are done the driver SIGKILLs it, reads what the group has committed (offsets and
the completed offsets in the commit metadata), then starts a second member of the same
group and stops it once every record was done by one of the two. :func:`kill_outcome`
(pure) counts the records run again (their handler had started in the killed member),
those of them that had finished there already, the handlers running at the kill and the
records lost.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks import settings

ROOT = Path(__file__).resolve().parent.parent
MARKER = "BENCH-RESULT "  # benchmarks.worker's (not imported: it imports the adapters)
FIXED_S = 0.010
RANDOM_MIN_S, RANDOM_MAX_S = 0.001, 0.020
_TABLE = 8191  # a prime: (partition, offset) spread over the table


def delay_of(kind: str, seed: int) -> Callable[[int, int], float]:
    """The handler's sleep (seconds) for the record at ``(partition, offset)``: 10 ms
    ("fixed"), or uniform in 1-20 ms ("random"), the same for a given ``seed`` in every
    process."""
    if kind == "fixed":
        return lambda _partition, _offset: FIXED_S
    if kind != "random":
        raise ValueError(f"unknown handler {kind!r}")
    rng = random.Random(seed)
    table = [rng.uniform(RANDOM_MIN_S, RANDOM_MAX_S) for _ in range(_TABLE)]
    return lambda partition, offset: table[(partition * 7919 + offset) % _TABLE]


class _Record(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


class Tally:
    """The handler of a throughput run and its clock: ``await tally.handle(record)`` sleeps
    the record's time; ``done`` is set when ``n`` handlers have ended."""

    def __init__(self, n: int, delay: Callable[[int, int], float]) -> None:
        self.n = n
        self.delay = delay
        self.started: float | None = None  # perf_counter() at the first handler's start
        self.ended: float | None = None  # at the n-th handler's end
        self.finished = 0
        self.running = 0
        self.peak_running = 0
        self.delay_sum = 0.0  # of the first n records finished
        self.done = asyncio.Event()

    async def handle(self, record: _Record) -> None:
        seconds = self.delay(record.partition, record.offset)
        if self.started is None:
            self.started = time.perf_counter()
        self.running += 1
        if self.running > self.peak_running:
            self.peak_running = self.running
        try:
            await asyncio.sleep(seconds)
        finally:
            self.running -= 1
        self.finished += 1
        if self.finished <= self.n:
            self.delay_sum += seconds
            if self.finished == self.n:
                self.ended = time.perf_counter()
                self.done.set()

    async def wait(self, running: asyncio.Future[Any] | None, limit_s: float) -> None:
        """Until ``n`` handlers ended. Raises TimeoutError after ``limit_s``, or what the
        ``running`` task (the consuming loop) raised if it ended first."""
        waiter = asyncio.ensure_future(self.done.wait())
        watched: set[asyncio.Future[Any]] = {waiter} | ({running} if running else set())
        try:
            await asyncio.wait(watched, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if self.done.is_set():
            return
        if running is not None and running.done():
            running.result()  # raises what it raised
            raise RuntimeError(f"the consuming loop ended after {self.finished} records")
        raise TimeoutError(f"{self.finished} of {self.n} records handled in {limit_s:.0f}s")

    def result(self, concurrency: int) -> dict[str, Any]:
        assert self.started is not None and self.ended is not None
        return {
            "records": self.n,
            "seconds": self.ended - self.started,
            "concurrency": concurrency,
            "handler_mean_ms": self.delay_sum / self.n * 1000,
            "peak_running": self.peak_running,
        }


def ideal_rate(concurrency: int, handler_mean_ms: float) -> float:
    """Records/s of ``concurrency`` handlers always busy, capped by what one core can do
    (``settings.PROCESS_CORE_CAP``)."""
    return min(concurrency / (handler_mean_ms / 1000), float(settings.PROCESS_CORE_CAP))


# -- the asyncio floor -----------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticRecord:
    """A record of the floor's run: only what the handler reads."""

    partition: int
    offset: int


async def run_floor(spec: dict[str, Any]) -> dict[str, Any]:
    """The asyncio floor of a ``process()`` case (see the module's docstring): the records
    the keyed fill wrote (``spec['available']`` of them, ``spec['keys']`` keys over
    ``spec['partitions']``; no broker), given in that order to ``spec['concurrency']``
    worker tasks through an ``asyncio.Queue(maxsize=4 * concurrency)`` fed by one task,
    each worker awaiting the :class:`Tally` handler (``spec['handler']``, ``spec['seed']``).

    Returns :meth:`Tally.result` of the first ``spec['records']`` handlers; raises
    TimeoutError when they did not end within ``settings.PROCESS_LIMIT_S``."""
    concurrency = spec["concurrency"]
    n = spec["records"]
    tally = Tally(n, delay_of(spec["handler"], spec["seed"]))
    records = [
        SyntheticRecord(p, o)
        for p, o in expected_records(max(n, spec["available"]), spec["keys"], spec["partitions"])
    ]
    queue: asyncio.Queue[SyntheticRecord] = asyncio.Queue(maxsize=4 * concurrency)

    async def feed() -> None:
        for record in records:
            await queue.put(record)

    async def work() -> None:
        while True:
            record = await queue.get()
            await tally.handle(record)

    tasks = [asyncio.ensure_future(work()) for _ in range(concurrency)]
    tasks.append(asyncio.ensure_future(feed()))
    try:
        await tally.wait(None, settings.PROCESS_LIMIT_S)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=10)
    return tally.result(concurrency)


# -- the SIGKILL case -------------------------------------------------------------------------


def _append(fd: int, line: str) -> None:
    os.write(fd, line.encode())


async def run_member(spec: dict[str, Any]) -> dict[str, Any]:
    """One member of the SIGKILL case (in its own process): ``process()`` at
    ``spec['concurrency']`` with the commit defaults; ``S p o`` / ``D p o`` per handler to
    ``spec['log']``; closes the consumer on ``stop`` (stdin)."""
    from aiostream_kafka import Consumer
    from benchmarks.clients.common import stop_on_stdin

    stop = stop_on_stdin()
    fd = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    delay = delay_of("fixed", 0)
    handled = 0

    async def handler(record: Any) -> None:
        nonlocal handled
        _append(fd, f"S {record.partition} {record.offset}\n")
        await asyncio.sleep(delay(record.partition, record.offset))
        _append(fd, f"D {record.partition} {record.offset}\n")
        handled += 1

    try:
        consumer = Consumer(
            spec["bootstrap"],
            group_id=spec["group"],
            auto_offset_reset="earliest",
            session_timeout_ms=settings.PROCESS_SESSION_TIMEOUT_MS,
            **settings.CONSUMER,
        )
        async with consumer:
            consumer.subscribe([spec["topic"]])
            task = asyncio.ensure_future(
                consumer.process(handler, concurrency=spec["concurrency"], ordering="key")
            )
            deadline = time.monotonic() + settings.PROCESS_LIMIT_S
            while not stop.is_set() and not task.done() and time.monotonic() < deadline:
                await asyncio.wait([task], timeout=0.05)
            await consumer.close()
            await asyncio.wait_for(task, 60)
    finally:
        os.close(fd)
    return {"records": handled}


def read_log(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(started, done): the ``(partition, offset)`` of every ``S`` and ``D`` line, in order
    (a torn last line is skipped)."""
    started: list[tuple[int, int]] = []
    done: list[tuple[int, int]] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return started, done
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] not in ("S", "D"):
            continue
        (started if parts[0] == "S" else done).append((int(parts[1]), int(parts[2])))
    return started, done


@dataclass
class KillOutcome:
    records: int
    done_before_kill: int  # distinct records the killed member finished
    running_at_kill: int  # started by the killed member, not finished
    committed_covers: int  # finished records the group's commit covered at the kill
    finished_uncommitted: int  # finished by the killed member, not covered by the commit
    committed_not_done: int  # covered by the commit but never finished before it: skipped
    redone: int  # started by the killed member (finished or not) and run again by the second
    done_twice: int  # of those, finished by the killed member already
    done_twice_in_one: int  # finished twice by one member
    lost: int  # never finished by either

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def kill_outcome(
    all_records: Iterable[tuple[int, int]],
    first: tuple[list[tuple[int, int]], list[tuple[int, int]]],
    second_done: list[tuple[int, int]],
    covered: set[tuple[int, int]],
) -> KillOutcome:
    """The SIGKILL case's counts from both members' logs (``first``: the killed member's
    started and done; ``second_done``: the second member's done) and ``covered``: the
    records the group's commit marked done at the kill (below the committed offset, or
    named in its metadata)."""
    records = set(all_records)
    started1, done1_list = first
    done1 = set(done1_list)
    done2 = set(second_done)
    twice = (len(done1_list) - len(done1)) + (len(second_done) - len(done2))
    covered = covered & records
    return KillOutcome(
        records=len(records),
        done_before_kill=len(done1),
        running_at_kill=len(set(started1) - done1),
        committed_covers=len(covered & done1),
        finished_uncommitted=len(done1 - covered),
        committed_not_done=len(covered - done1),
        redone=len(set(started1) & done2),
        done_twice=len(done1 & done2),
        done_twice_in_one=twice,
        lost=len(records - done1 - done2),
    )


def expected_records(records: int, keys: int, partitions: int) -> list[tuple[int, int]]:
    """Every ``(partition, offset)`` the keyed fill wrote (``clients.confluent._fill``)."""
    next_offset = [0] * partitions
    out = []
    for i in range(records):
        p = i % keys % partitions
        out.append((p, next_offset[p]))
        next_offset[p] += 1
    return out


def _spawn(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.worker", "ours", json.dumps(spec)],
        cwd=str(ROOT),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            out: dict[str, Any] = json.loads(line[len(MARKER) :])
            if "error" in out:
                raise RuntimeError(f"member failed: {out['error']}\n{out.get('traceback', '')}")
            return out
    raise RuntimeError(f"member exited {proc.returncode} without a result: {stderr[-2000:]}")


async def _covered(bootstrap: str, group: str, topic: str) -> set[tuple[int, int]]:
    """The records the group's commits mark done: below each committed offset, and the
    completed offsets of its metadata."""
    from aiostream_kafka import Admin
    from aiostream_kafka.consumer.processing.offsets import decode_completed

    async with Admin(bootstrap) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    covered: set[tuple[int, int]] = set()
    for tp, meta in offsets.items():
        if tp.topic != topic or meta is None or meta.offset < 0:
            continue
        covered.update((tp.partition, o) for o in range(meta.offset))
        done = decode_completed(meta.metadata or "", meta.offset)
        covered.update((tp.partition, o) for o in done)
    return covered


def drive_kill(spec: dict[str, Any]) -> dict[str, Any]:
    """The SIGKILL case (see the module's docstring); runs in the ``ours`` worker."""
    import uuid

    group = f"bench-process-kill-{uuid.uuid4().hex[:10]}"
    total = spec["records"]
    everything = expected_records(total, spec["keys"], spec["partitions"])
    member = {
        "scenario": "process_member",
        "bootstrap": spec["bootstrap"],
        "topic": spec["topic"],
        "group": group,
        "concurrency": spec["concurrency"],
    }
    deadline = time.monotonic() + settings.PROCESS_LIMIT_S
    with tempfile.TemporaryDirectory(prefix="bench-process-") as tmp:
        log1, log2 = Path(tmp) / "first.log", Path(tmp) / "second.log"
        first = _spawn({**member, "log": str(log1)})
        try:
            while len(set(read_log(log1)[1])) < total // 2:
                if first.poll() is not None:
                    raise RuntimeError(f"the first member exited early: {_finish(first, 5)}")
                if time.monotonic() > deadline:
                    raise TimeoutError("the first member did not reach half the records")
                time.sleep(0.005)
            os.kill(first.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            first.wait(30)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(30)
        first_log = read_log(log1)
        covered = asyncio.run(_covered(spec["bootstrap"], group, spec["topic"]))
        second = _spawn({**member, "log": str(log2)})
        resumed_at = None
        try:
            done1 = set(first_log[1])
            while True:
                done2 = read_log(log2)[1]
                if done2 and resumed_at is None:
                    resumed_at = time.monotonic()
                if len(done1 | set(done2)) >= total:
                    break
                if second.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if second.stdin is not None:
                second.stdin.write("stop\n")
                second.stdin.flush()
            _finish(second, 90)
        finally:
            if second.poll() is None:
                second.kill()
                second.wait(30)
        outcome = kill_outcome(everything, first_log, read_log(log2)[1], covered)
    return {
        **outcome.as_dict(),
        "concurrency": spec["concurrency"],
        "resume_s": (resumed_at - killed_at) if resumed_at is not None else None,
        "session_timeout_ms": settings.PROCESS_SESSION_TIMEOUT_MS,
    }
