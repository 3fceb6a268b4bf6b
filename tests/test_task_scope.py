"""TaskScope, gather_all, gather_settled: every task owned, its crash policy applied,
nothing left running after the owner's aclose or a failing sibling."""

from __future__ import annotations

import asyncio
import logging

import pytest

from aiostream_kafka import concurrency
from aiostream_kafka.concurrency import (
    Crash,
    ScopeClosedError,
    TaskScope,
    gather_all,
    gather_settled,
)


async def _forever() -> None:
    await asyncio.sleep(3600)


async def _boom() -> None:
    await asyncio.sleep(0)
    raise RuntimeError("a bug")


async def test_fail_owner_calls_on_fail_once_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    failures: list[Exception] = []
    scope = TaskScope("the owner", on_fail=failures.append)
    scope.spawn(_boom, name="worker", crash=Crash.FAIL_OWNER)
    other = scope.spawn(_forever, name="sibling", crash=Crash.FAIL_OWNER)
    with caplog.at_level(logging.ERROR, logger="aiostream_kafka.concurrency"):
        for _ in range(5):
            await asyncio.sleep(0)
    assert [str(e) for e in failures] == ["a bug"]
    assert "the owner: worker failed; the owner stops" in caplog.text
    assert not other.done()  # the owner decides what stops: the scope only reports
    await scope.aclose()
    assert other.cancelled() and len(scope) == 0


async def test_fail_owner_awaits_an_async_on_fail() -> None:
    seen: list[str] = []

    async def on_fail(exc: Exception) -> None:
        await asyncio.sleep(0.01)
        seen.append(repr(exc))

    scope = TaskScope("owner", on_fail=on_fail)
    task = scope.spawn(_boom, name="worker", crash=Crash.FAIL_OWNER)
    await asyncio.wait_for(task, 1)
    assert seen == ["RuntimeError('a bug')"]
    assert task.result() is None


async def test_fail_owner_of_a_coroutine_calls_on_fail_sync_or_async() -> None:
    """A coroutine spawned as is (no wrapping frame: the produce request's path) gets
    the same policy, applied when it ends."""
    seen: list[str] = []

    async def on_fail_async(exc: Exception) -> None:
        await asyncio.sleep(0)
        seen.append(f"async {exc}")

    sync_scope = TaskScope("sync owner", on_fail=lambda exc: seen.append(f"sync {exc}"))
    async_scope = TaskScope("async owner", on_fail=on_fail_async)
    ok = sync_scope.spawn(asyncio.sleep(0, "fine"), name="ok", crash=Crash.FAIL_OWNER)
    for scope in (sync_scope, async_scope):
        task = scope.spawn(_boom(), name="request", crash=Crash.FAIL_OWNER)
        await asyncio.wait([task])
    await asyncio.sleep(0.01)
    assert sorted(seen) == ["async a bug", "sync a bug"]
    assert await ok == "fine"
    await sync_scope.aclose()
    await async_scope.aclose()
    assert len(sync_scope) == 0 and len(async_scope) == 0


async def test_restart_runs_again_after_a_backoff(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(concurrency, "RESTART_MIN_S", 0.01)
    runs: list[int] = []
    third = asyncio.Event()

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise RuntimeError(f"run {len(runs)}")
        third.set()
        await _forever()

    failures: list[Exception] = []
    scope = TaskScope("owner", on_fail=failures.append)
    with caplog.at_level(logging.ERROR, logger="aiostream_kafka.concurrency"):
        scope.spawn(flaky, name="committer", crash=Crash.RESTART)
        await asyncio.wait_for(third.wait(), 2)
    assert runs == [0, 1, 2]
    assert failures == []  # restarted, the owner was not failed
    assert caplog.text.count("committer failed; restarting it in") == 2
    await scope.aclose()
    assert len(scope) == 0


async def test_restart_needs_a_function() -> None:
    scope = TaskScope("owner")
    with pytest.raises(TypeError, match="function"):
        scope.spawn(_forever(), name="x", crash=Crash.RESTART)


async def test_awaited_error_goes_to_the_awaiter_and_is_retrieved() -> None:
    scope = TaskScope("owner", on_fail=lambda exc: pytest.fail("not the owner's"))
    task = scope.spawn(_boom(), name="request", crash=Crash.AWAITED)
    with pytest.raises(RuntimeError, match="a bug"):
        await task
    ok = scope.spawn(asyncio.sleep(0, "answer"), name="request", crash=Crash.AWAITED)
    assert await ok == "answer"


async def test_awaited_error_nobody_awaits_is_logged_not_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scope = TaskScope("owner")
    task = scope.spawn(_boom(), name="request", crash=Crash.AWAITED)
    with caplog.at_level(logging.ERROR, logger="aiostream_kafka.concurrency"):
        await asyncio.wait([task])
        await asyncio.sleep(0)
    assert "a bug" in caplog.text  # the suite also fails on "never retrieved"


async def test_log_policy_logs_and_the_owner_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    scope = TaskScope("proxy", on_fail=lambda exc: pytest.fail("LOG does not fail the owner"))
    with caplog.at_level(logging.ERROR, logger="aiostream_kafka.concurrency"):
        task = scope.spawn(_boom(), name="link", crash=Crash.LOG)
        await asyncio.wait([task])
        restarted = scope.spawn(_boom, name="link 2", crash=Crash.LOG)  # the wrapped form
        await asyncio.wait([restarted])
    assert restarted.result() is None
    assert "proxy: link failed" in caplog.text and "proxy: link 2 failed" in caplog.text


async def test_aclose_cancels_everything_and_refuses_new_tasks() -> None:
    scope = TaskScope("owner")
    tasks = [scope.spawn(_forever, name=f"t{i}", crash=Crash.FAIL_OWNER) for i in range(3)]
    await scope.aclose()
    assert all(t.cancelled() for t in tasks)
    assert scope.closed and len(scope) == 0
    coro = _forever()
    with pytest.raises(ScopeClosedError, match="owner is closed"):
        scope.spawn(coro, name="late", crash=Crash.AWAITED)
    assert coro.cr_frame is None  # closed: no "never awaited" warning
    await scope.aclose()  # idempotent


async def test_aclose_finishes_then_reraises_the_callers_cancel() -> None:
    scope = TaskScope("owner")
    stopped: list[str] = []

    async def slow_to_stop() -> None:
        try:
            await _forever()
        finally:
            await asyncio.sleep(0.1)
            stopped.append("stopped")

    scope.spawn(slow_to_stop, name="slow", crash=Crash.FAIL_OWNER)
    await asyncio.sleep(0)
    closer = asyncio.create_task(scope.aclose())
    await asyncio.sleep(0.02)
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert stopped == ["stopped"]  # the close ran to its end first


async def test_scope_as_a_block_leaves_nothing_running() -> None:
    async with TaskScope("block") as scope:
        task = scope.spawn(_forever, name="t", crash=Crash.AWAITED)
    assert task.cancelled()


async def test_gather_all_returns_results_in_order() -> None:
    async def value(v: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return v

    assert await gather_all(value(1, 0.03), value(2, 0.0), value(3, 0.01)) == [1, 2, 3]
    assert await gather_all() == []


async def test_gather_all_first_failure_cancels_the_siblings() -> None:
    """asyncio.gather leaves the siblings running (they kept writing into the next retry's
    state, issue 27); gather_all cancels them and waits for them before raising."""
    finished: list[str] = []

    async def sibling() -> None:
        try:
            await _forever()
        finally:
            finished.append("sibling stopped")

    with pytest.raises(RuntimeError, match="a bug"):  # the plain error, not a group
        await gather_all(sibling(), _boom(), sibling())
    assert finished == ["sibling stopped", "sibling stopped"]


async def test_gather_all_cancelled_caller_cancels_the_children() -> None:
    finished: list[str] = []

    async def child() -> None:
        try:
            await _forever()
        finally:
            finished.append("child")

    task = asyncio.create_task(gather_all(child(), child()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["child", "child"]


async def test_gather_settled_returns_errors_in_place() -> None:
    async def value() -> str:
        return "ok"

    outcomes = await gather_settled(value(), _boom(), value())
    assert outcomes[0] == "ok" and outcomes[2] == "ok"
    assert isinstance(outcomes[1], RuntimeError)
