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

The ``broker`` marker (the test tiers): a test that needs a real Kafka broker is marked
``broker`` -- automatically when it requests one of the broker fixtures
(:data:`BROKER_FIXTURES`, directly or through another fixture) or a fixture of its module
listed in the module's ``broker_fixtures`` (a cluster of its own), explicitly
(``pytest.mark.broker``) when the test body starts a
:class:`~aiostream_kafka.testing.KafkaCluster` itself. ``make test-fast`` runs
``-m "not broker"`` (the unit tier: no Java, no broker jars). In such a run (``-m``
holding ``not broker``, or ``AIOSTREAM_KAFKA_NO_BROKER=1`` in the environment) starting a
broker raises :class:`BrokerDeselectedError` naming the test: a unit test that needs a
broker without saying so fails loudly rather than starting Java or being skipped.

Cost: a few loop iterations per test, a collection of the young generations after each
async or broker test and a full ``gc.collect()`` every 25th test; the time spent
collecting is printed in the terminal summary.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from aiostream_kafka.testing import KafkaCluster


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
#: Fixtures that start (or stand for) a real broker: a test requesting any of them, directly
#: or through another fixture, is marked ``broker``. ``spark`` (tests/spark/conftest.py)
#: starts no broker but a JVM (the SparkSession), which the unit tier does without too.
BROKER_FIXTURES = frozenset(
    {"kafka_cluster", "new_topic", "kafka_sasl_cluster", "three_brokers", "spark"}
)
_GC_EVERY = 25
logging.getLogger("asyncio").addHandler(_ERRORS)

#: Set in the environment (``make test-fast`` does) to refuse every broker start.
NO_BROKER_ENV = "AIOSTREAM_KAFKA_NO_BROKER"
_NOT_BROKER = re.compile(r"\bnot\s+broker\b")


class BrokerDeselectedError(RuntimeError):
    """A test started a Kafka broker in a run that deselected the broker tests."""


def brokers_deselected(config: pytest.Config) -> bool:
    """Whether this run refuses brokers: ``-m`` holds ``not broker``, or
    ``AIOSTREAM_KAFKA_NO_BROKER`` is set (to anything but ``""``/``0``)."""
    if os.environ.get(NO_BROKER_ENV, "") not in ("", "0"):
        return True
    return bool(_NOT_BROKER.search(config.getoption("markexpr", "") or ""))


_current_test = ""
_original_start = KafkaCluster.start


async def _refused_start(self: KafkaCluster) -> None:
    if self.source == "fake":  # in-process, no JVM: allowed in the unit tier
        await _original_start(self)
        return
    raise BrokerDeselectedError(
        f"{_current_test or 'a test'} started a Kafka broker, but this run deselected the "
        f'broker tests (-m "not broker" or {NO_BROKER_ENV}=1, as make test-fast does). A '
        "test that needs a broker must be marked: request a broker fixture "
        f"({', '.join(sorted(BROKER_FIXTURES))}) or add @pytest.mark.broker"
    )


#: The fidelity run (issue 34): ``AIOSTREAM_KAFKA_BROKER=fake`` serves ``kafka_cluster``
#: with the in-process fake; tests marked ``real_broker`` are skipped, and a test that
#: would start a JVM anyway (a cluster forcing ``source="local"``/``"docker"``) fails
#: instead of starting one.
FAKE_RUN = os.environ.get("AIOSTREAM_KAFKA_BROKER", "").strip().lower() == "fake"


class JvmInFakeRunError(RuntimeError):
    """A test forced a JVM broker in the fake run: mark it ``real_broker``."""


async def _fake_only_start(self: KafkaCluster) -> None:
    if self.source != "fake":
        raise JvmInFakeRunError(
            f"{_current_test or 'a test'} starts a {self.source!r} broker (a JVM) in a run "
            "with AIOSTREAM_KAFKA_BROKER=fake; mark it @pytest.mark.real_broker(reason=...)"
        )
    await _original_start(self)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_asyncio_errors: the test provokes asyncio exception-handler reports on purpose",
    )
    if brokers_deselected(config):
        # Every broker start goes through KafkaCluster.start (the plugin's fixtures,
        # start_blocking, ``async with``): refuse it for the session.
        KafkaCluster.start = _refused_start  # type: ignore[method-assign]
    elif FAKE_RUN:
        KafkaCluster.start = _fake_only_start  # type: ignore[method-assign]


def pytest_unconfigure(config: pytest.Config) -> None:
    KafkaCluster.start = _original_start  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``broker`` every test that requests a broker fixture (before ``-m`` selects):
    one of :data:`BROKER_FIXTURES`, or one its module names in ``broker_fixtures`` (a
    module-scoped cluster of its own)."""
    broker = pytest.mark.broker
    for item in items:
        names = getattr(item, "fixturenames", ())
        module = getattr(item, "module", None)
        own = getattr(module, "broker_fixtures", ())
        if BROKER_FIXTURES.intersection(names) or set(own).intersection(names):
            item.add_marker(broker)
        real = item.get_closest_marker("real_broker")
        if FAKE_RUN and real is not None:
            reason = real.kwargs.get("reason") or (real.args[0] if real.args else "")
            item.add_marker(pytest.mark.skip(reason=f"real broker only: {reason}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    global _current_test
    _current_test = item.nodeid
    try:
        return (yield)
    finally:
        _current_test = ""


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
    if full or inspect.iscoroutinefunction(function) or request.node.get_closest_marker("broker"):
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


@pytest.fixture(scope="module")
def three_brokers_options() -> dict[str, Any]:
    """Keyword arguments of :class:`KafkaCluster` for ``three_brokers`` (none: the default
    source and broker settings). A module overrides this fixture to configure its
    cluster (it may be parametrized: one cluster per parameter)."""
    return {}


@pytest.fixture(scope="module")
def three_brokers(three_brokers_options: dict[str, Any]) -> Iterator[KafkaCluster]:
    """A 3-broker :class:`KafkaCluster` per test module (tests kill and restart its brokers,
    so modules do not share one), configured by ``three_brokers_options``. A broker that
    cannot be started is an error, never a skip."""
    cluster = KafkaCluster(brokers=3, **three_brokers_options)
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


def pytest_collection_finish(session: pytest.Session) -> None:
    # What exists once the tests are collected (modules, hypothesis strategies, the codec's
    # tables) lives for the session: moved out of the collector's sight, so that the full
    # collections above look at what the tests allocate (0.2 s each before, late in a run).
    gc.collect()
    gc.freeze()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ERRORS.gc_runs:
        terminalreporter.write_line(
            f"conftest: gc.collect() at {_ERRORS.gc_runs} teardowns took "
            f"{_ERRORS.gc_seconds:.1f} s in total"
        )
