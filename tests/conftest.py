"""Suite-wide checks (the fixtures ``kafka_cluster`` and ``new_topic`` come from the project's
pytest plugin, ``aiostream_kafka/testing/pytest_plugin.py``).

Every test fails when asyncio reported an error through an event loop's exception handler
while it ran: "Task exception was never retrieved", "Future exception was never
retrieved", "Task was destroyed but it is pending!", "Exception in callback ...", a fatal
transport error... Those are errors nobody handled -- a background task that died
unnoticed, a write error nobody awaited -- and they would otherwise scroll by as log lines
in a passing run.

How: asyncio's default exception handler logs to the ``asyncio`` logger at ERROR. A handler
on that logger collects those records, from every event loop (the session loop the async
tests share, and loops that sync tests run themselves). At each test's teardown the
session loop gets a few iterations (so that what the test left failing surfaces now, not
in a later test) and ``gc.collect()`` finalizes the futures the test dropped; then any new
record fails the test (reported as an error at teardown).

A test that provokes such a report on purpose opts out with
``@pytest.mark.allow_asyncio_errors``. A test that sets its own exception handler on a
loop sees those reports itself and is not checked for that loop.

Cost: a few loop iterations per test, a collection of the young generations after each
async or broker test and a full ``gc.collect()`` every 25th test; the time spent
collecting is printed in the terminal summary.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio


class _AsyncioErrors(logging.Handler):
    """Collects the ERROR records of the ``asyncio`` logger (thread-safe appends)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self.gc_seconds = 0.0
        self.gc_runs = 0
        self.tests = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_ERRORS = _AsyncioErrors()
# Full collections after tests that run an event loop's work (async tests, tests on a
# broker); the pure unit tests (most of the codec's) only every _GC_EVERY tests.
_BROKER_FIXTURES = frozenset({"kafka_cluster", "new_topic", "kafka_sasl_cluster"})
_GC_EVERY = 25
logging.getLogger("asyncio").addHandler(_ERRORS)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_asyncio_errors: the test provokes asyncio exception-handler reports on purpose",
    )


def _describe(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        text += f"\n    {type(exc).__module__}.{type(exc).__qualname__}: {exc}"
    return text


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def _no_unhandled_asyncio_errors(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    start = len(_ERRORS.records)
    yield
    # Let callbacks already scheduled run (a task that fails as the test ends), then
    # finalize what the test dropped: unretrieved futures report on destruction.
    for _ in range(3):
        await asyncio.sleep(0)
    _ERRORS.tests += 1
    function = getattr(request.node, "function", None)
    full = _ERRORS.tests % _GC_EVERY == 0
    if (
        full
        or inspect.iscoroutinefunction(function)
        or _BROKER_FIXTURES.intersection(request.fixturenames)
    ):
        began = time.perf_counter()
        # The young generations hold what the test just dropped; a full collection costs
        # about 0.2 s late in the suite (92 s over 400 tests), so only every _GC_EVERY.
        gc.collect() if full else gc.collect(1)
        _ERRORS.gc_seconds += time.perf_counter() - began
        _ERRORS.gc_runs += 1
    new = _ERRORS.records[start:]
    if not new or request.node.get_closest_marker("allow_asyncio_errors"):
        return
    shown = "\n".join(f"  - {_describe(r)}" for r in new[:5])
    more = f"\n  ... and {len(new) - 5} more" if len(new) > 5 else ""
    pytest.fail(
        f"asyncio reported {len(new)} unhandled error(s) during this test:\n{shown}{more}",
        pytrace=False,
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ERRORS.gc_runs:
        terminalreporter.write_line(
            f"conftest: gc.collect() at {_ERRORS.gc_runs} teardowns took "
            f"{_ERRORS.gc_seconds:.1f} s in total"
        )
