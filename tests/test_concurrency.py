"""The structured-concurrency helpers: cleanup that outlives a cancelled caller, owned
tasks stopped and retrieved, stored errors raised again without growing tracebacks."""

from __future__ import annotations

import asyncio
import logging
import traceback

import pytest

from aiostream_kafka.concurrency import shielded, stop_tasks
from aiostream_kafka.errors import KafkaError, reraisable


async def _cleanup(log: list[str], duration: float = 0.2) -> str:
    await asyncio.sleep(duration)
    log.append("cleanup done")
    return "result"


async def test_shielded_returns_the_result() -> None:
    log: list[str] = []
    assert await shielded(_cleanup(log, 0), timeout=1, what="x") == "result"
    assert log == ["cleanup done"]


async def test_shielded_cleanup_survives_task_cancel_then_reraises() -> None:
    log: list[str] = []

    async def body() -> None:
        await shielded(_cleanup(log), timeout=5, what="cleanup")
        log.append("after")  # never: the cancellation is re-raised

    task = asyncio.create_task(body())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()  # an impatient second cancel is absorbed too
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["cleanup done"]


async def test_shielded_cleanup_survives_an_expired_asyncio_timeout() -> None:
    # The pattern of issue 15: cleanup in __aexit__ of a block inside asyncio.timeout.
    log: list[str] = []

    class Client:
        async def __aenter__(self) -> Client:
            return self

        async def __aexit__(self, *exc: object) -> None:
            await shielded(_cleanup(log), timeout=5, what="close")

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05), Client():
            await asyncio.sleep(10)
    assert log == ["cleanup done"]


async def test_shielded_cleanup_survives_a_failing_taskgroup_sibling() -> None:
    log: list[str] = []

    async def worker() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await shielded(_cleanup(log), timeout=5, what="close")

    async def failing() -> None:
        await asyncio.sleep(0.05)
        raise ValueError("sibling failed")

    with pytest.raises(ExceptionGroup) as info:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker())
            tg.create_task(failing())
    assert info.group_contains(ValueError)
    assert log == ["cleanup done"]


async def test_shielded_gives_up_after_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    with caplog.at_level(logging.WARNING, logger="aiostream_kafka.concurrency"):
        assert await shielded(_cleanup(log, 10), timeout=0.1, what="slow cleanup") is None
    assert loop.time() - started < 1
    assert log == []
    assert "slow cleanup did not finish" in caplog.text


async def test_shielded_raises_the_cleanup_error_when_not_cancelled() -> None:
    async def broken() -> None:
        raise KafkaError("cleanup failed")

    with pytest.raises(KafkaError, match="cleanup failed"):
        await shielded(broken(), timeout=1, what="broken")


async def test_stop_tasks_waits_and_retrieves(caplog: pytest.LogCaptureFixture) -> None:
    stopped: list[str] = []

    async def owned(name: str) -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.05)  # cleanup of its own after the cancel
            stopped.append(name)

    async def crashed() -> None:
        raise RuntimeError("a bug")

    tasks = [asyncio.create_task(owned("a")), asyncio.create_task(owned("b"))]
    bug = asyncio.create_task(crashed(), name="crasher")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="aiostream_kafka.concurrency"):
        await stop_tasks([*tasks, bug, None])
    assert sorted(stopped) == ["a", "b"]
    assert all(t.done() for t in tasks)
    assert "crasher failed" in caplog.text  # logged, not "never retrieved"


async def test_stop_tasks_finishes_then_reraises_the_callers_cancel() -> None:
    stopped: list[str] = []

    async def owned() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.1)
            stopped.append("owned")

    child = asyncio.create_task(owned())
    await asyncio.sleep(0)

    async def owner() -> None:
        await stop_tasks([child])

    task = asyncio.create_task(owner())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stopped == ["owned"]


def test_reraisable_keeps_the_traceback_from_growing() -> None:
    def fail() -> None:
        raise KafkaError("stored")

    try:
        fail()
    except KafkaError as exc:
        stored = exc

    def depth() -> int:
        try:
            raise reraisable(stored)
        except KafkaError as exc:
            return len(traceback.extract_tb(exc.__traceback__))

    first = depth()
    for _ in range(50):
        last = depth()
    assert last == first
