"""Issue 15, "never wedge, never hang silently": liveness of the clients' lifecycle against a
real broker.

* a broker that stops reading (``FaultProxy.stall``): sends fail with a typed error about
  ``request_timeout_ms`` later, and ``close(timeout=...)`` of Producer, Consumer and Admin
  returns within a few seconds;
* a group consumer cancelled by ``asyncio.timeout``, ``task.cancel()``, a failing
  ``TaskGroup`` sibling or ``wait_for`` still commits what it delivered and leaves the group,
  so that the other member takes its partitions over at once, not after
  ``session_timeout_ms``;
* bootstrap servers that refuse, hang, never answer or speak the other protocol (TLS vs
  plaintext) fail with a typed error within ``bootstrap_timeout_ms``, logging warnings;
* a name resolving to a dead and a live address connects through the live one quickly
  (happy eyeballs);
* Producer and Consumer cancelled at every await point of start/use/close leave no task
  running and no unretrieved error behind.

After each scenario, no task it started (directly or through the tasks it started) may be
left running: tasks are attributed to a scenario through a context variable that every
task inherits from the one that created it (see :class:`Tasks`), which is exact where a
plain ``asyncio.all_tasks()`` difference would also count the fault proxy's own tasks (a
stalled proxy keeps its links open by design) and other tests' leftovers.

Timings are asserted loosely: these are liveness tests, not benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import logging
import os
import socket
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest
import pytest_asyncio

from aiostream_kafka import Consumer, Producer, TopicPartition
from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.errors import BootstrapError, KafkaError, KafkaTimeoutError, NetworkError
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.blackhole import HangingListener
from aiostream_kafka.testing.probe import create_topic
from aiostream_kafka.testing.proxy import FaultProxy

NewTopicFactory = Callable[..., Awaitable[str]]

_EXTERNAL = bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))

# -- task ownership ----------------------------------------------------------------------------

_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "lifecycle_owner", default=None
)


class Tasks:
    """Every task created, directly or transitively, by the coroutines run through
    :meth:`spawn` (a task factory reads the context variable each task inherits from its
    creator; callbacks and protocol callbacks keep their creator's context too)."""

    def __init__(self) -> None:
        self.token = object()
        self.tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        context = contextvars.copy_context()
        context.run(_OWNER.set, self.token)
        return asyncio.get_running_loop().create_task(coro, name=name, context=context)

    def running(self) -> list[asyncio.Task[Any]]:
        return [t for t in self.tasks if not t.done()]

    async def assert_all_done(self, grace_s: float = 2.0, what: str = "the scenario") -> None:
        """Poll up to ``grace_s`` until every task is done, else fail naming those left."""
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        left = self.running()
        assert not left, f"{len(left)} task(s) of {what} still running: " + "; ".join(
            f"{t.get_name()}: {t.get_coro()!r}" for t in left
        )


class _Registry:
    def __init__(self) -> None:
        self.trackers: dict[object, Tasks] = {}

    def new(self) -> Tasks:
        tracker = Tasks()
        self.trackers[tracker.token] = tracker
        return tracker


@pytest_asyncio.fixture(loop_scope="session")
async def tasks() -> AsyncIterator[Callable[[], Tasks]]:
    """``tasks()`` returns a new :class:`Tasks`; a task factory on the running loop files
    every task created in a scenario's context under its tracker (for this test only)."""
    loop = asyncio.get_running_loop()
    registry = _Registry()
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> Any:
        task: Any
        if previous is None:
            task = asyncio.Task(coro, loop=loop, context=context)
        elif context is None:
            task = previous(loop, coro)
        else:
            task = previous(loop, coro, context=context)  # type: ignore[call-arg]
        owner = _OWNER.get() if context is None else context.get(_OWNER)
        if owner is not None:
            tracker = registry.trackers.get(owner)
            if tracker is not None:
                tracker.tasks.add(task)
        return task

    loop.set_task_factory(factory)
    try:
        yield registry.new
    finally:
        loop.set_task_factory(previous)


class AsyncioErrors(logging.Handler):
    """ERROR records of the ``asyncio`` logger (never-retrieved exceptions and the like)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        # The young generations hold what the run just dropped; a full collection costs
        # 0.1-0.2 s late in a long session (the suite's teardown check does one per test).
        gc.collect(1)
        out = [r.getMessage().splitlines()[0] + (f" {r.exc_info[1]!r}" if r.exc_info else "")
               for r in self.records]  # fmt: skip
        self.records.clear()
        return out


@pytest.fixture
def asyncio_errors() -> Iterator[AsyncioErrors]:
    handler = AsyncioErrors()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def _finish(
    task: asyncio.Task[Any], within_s: float, what: str, progress: object = None
) -> None:
    """Wait up to ``within_s`` for ``task``; fail (after cancelling it) if it hangs, saying
    how far it got (``progress``)."""
    done, _ = await asyncio.wait({task}, timeout=within_s)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        got = "" if progress is None else f"; got as far as: {progress!r}"
        raise AssertionError(f"{what} did not finish within {within_s} s (hangs){got}")


# -- clusters ----------------------------------------------------------------------------------


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("faulty",)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def faulty() -> AsyncIterator[KafkaCluster]:
    """A broker behind a FaultProxy (everything clients send goes through it; its receive
    buffer is 4 KB so that a stall backs writes up), with a TLS listener as well."""
    if _EXTERNAL and not os.environ.get("CI"):  # in CI the harness must start its own
        pytest.skip("needs a broker this process starts; KAFKA_BOOTSTRAP_SERVERS is set")
    async with KafkaCluster(brokers=1, source="local", proxied=True, tls=True) as cluster:
        cluster.proxy(1).set_receive_buffer(4096)
        yield cluster


@pytest_asyncio.fixture(loop_scope="session")
async def stallable(faulty: KafkaCluster) -> AsyncIterator[KafkaCluster]:
    """``faulty``, its proxy forwarding again after the test and its links reset."""
    proxy = faulty.proxy(1)
    try:
        yield faulty
    finally:
        proxy.restore()
        await proxy.cut()


async def _topic(bootstrap: str, partitions: int = 1) -> str:
    topic = f"lifecycle-{uuid.uuid4().hex[:10]}"
    await create_topic(bootstrap, topic, partitions, 1, None)
    return topic


def _closed_port() -> int:
    """A loopback port nobody listens on (bound then closed: refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _typed(error: object) -> bool:
    return isinstance(error, (KafkaTimeoutError, NetworkError))


# -- a broker that stops reading ---------------------------------------------------------------


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_producer_send_fails_and_close_returns_under_a_stalled_broker(
    stallable: KafkaCluster, tasks: Callable[[], Tasks]
) -> None:
    topic = await _topic(stallable.bootstrap_servers, partitions=4)
    proxy = stallable.proxy(1)
    owned = tasks()
    timings: dict[str, float] = {}
    outcomes: list[object] = []

    async def scenario() -> None:
        producer = Producer(
            stallable.bootstrap_servers,
            request_timeout_ms=2000,
            delivery_timeout_ms=3000,
            linger_ms=0,
        )
        await producer.start()
        await producer.send(topic, b"warm-up", partition=0)  # the PRODUCE lane is open
        proxy.stall()
        # 8 records of 900 KB: more than the loopback kernel buffers absorb (about 3 MB of
        # the client's send buffer; the proxy's 4 KB receive buffer), so the client's
        # transport write buffer fills and drain() waits.
        value = b"v" * 900_000
        started = time.monotonic()
        sends = [
            asyncio.create_task(producer.send(topic, value, partition=i % 4)) for i in range(8)
        ]
        results = await asyncio.gather(*sends, return_exceptions=True)
        timings["send"] = time.monotonic() - started
        outcomes.extend(results)
        started = time.monotonic()
        await producer.close(timeout=2)
        timings["close"] = time.monotonic() - started

    task = owned.spawn(scenario())
    await _finish(task, 30, "send + close(timeout=2) under a stalled broker", timings)
    task.result()
    assert all(_typed(r) for r in outcomes), outcomes
    # delivery_timeout_ms (3 s) bounds each record; the write deadline (2 s) lets it run.
    assert timings["send"] < 10, timings
    assert timings["close"] < 6, timings
    await owned.assert_all_done()


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_consumer_close_returns_under_a_stalled_broker(
    stallable: KafkaCluster, tasks: Callable[[], Tasks]
) -> None:
    topic = await _topic(stallable.bootstrap_servers, partitions=2)
    async with Producer(stallable.bootstrap_servers) as producer:
        for i in range(20):
            await producer.enqueue(topic, b"%d" % i, partition=i % 2)
    proxy = stallable.proxy(1)
    owned = tasks()
    timings: dict[str, float] = {}

    async def scenario() -> None:
        consumer = Consumer(
            stallable.bootstrap_servers,
            group_id=f"stalled-{uuid.uuid4().hex[:8]}",
            enable_auto_commit=True,
            heartbeat_interval_ms=500,
        )
        await consumer.start()
        consumer.subscribe([topic])
        seen = 0
        async for _ in consumer.stream():
            seen += 1
            if seen == 20:
                break
        proxy.stall()  # the final commit and LeaveGroup get no answer
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await consumer.close(timeout=2)
        timings["close"] = time.monotonic() - started

    task = owned.spawn(scenario())
    await _finish(task, 60, "Consumer.close(timeout=2) under a stalled broker", timings)
    task.result()
    assert timings["close"] < 6, timings
    await owned.assert_all_done()


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_admin_call_fails_and_close_returns_under_a_stalled_broker(
    stallable: KafkaCluster, tasks: Callable[[], Tasks]
) -> None:
    proxy = stallable.proxy(1)
    owned = tasks()
    timings: dict[str, float] = {}
    outcomes: dict[str, BaseException | None] = {}
    # A 4 MB request (validate_only: nothing is created if it ever arrives): more than the
    # kernel buffers absorb, so its write backs up. (Kafka strings are at most 32767 bytes.)
    big = NewTopic(
        f"never-{uuid.uuid4().hex[:8]}",
        1,
        1,
        config={f"x.big.{i}": "x" * 30_000 for i in range(140)},
    )

    async def call(admin: Admin) -> None:
        await admin.create_topics([big], validate_only=True)

    async def scenario() -> None:
        admin = Admin(stallable.bootstrap_servers, request_timeout_ms=2000,
                      default_api_timeout_ms=4000)  # fmt: skip
        await admin.start()
        proxy.stall()
        # A call fails, typed, within default_api_timeout_ms (each write within 2 s).
        started = time.monotonic()
        try:
            await call(admin)
        except Exception as exc:
            outcomes["call"] = exc
        else:
            outcomes["call"] = None
        timings["call"] = time.monotonic() - started
        # close(timeout=2) with a call (and its big write) in flight returns at once.
        in_flight = asyncio.create_task(call(admin))
        try:
            await asyncio.sleep(0.5)
            started = time.monotonic()
            await admin.close(timeout=2)
            timings["close"] = time.monotonic() - started
        finally:
            done, _ = await asyncio.wait({in_flight}, timeout=5)
            if done:
                outcomes["in flight at close"] = in_flight.exception()
            else:
                in_flight.cancel()
                outcomes["in flight at close"] = None
            timings["in flight done"] = float(bool(done))

    task = owned.spawn(scenario())
    await _finish(task, 60, "an Admin call + close(timeout=2) under a stalled broker", timings)
    task.result()
    assert _typed(outcomes["call"]), outcomes
    assert timings["call"] < 10, timings
    assert timings["close"] < 6, timings
    assert timings["in flight done"], "the call in flight at close() did not end"
    assert isinstance(outcomes["in flight at close"], KafkaError), outcomes
    await owned.assert_all_done()


# -- cancelling a group member -----------------------------------------------------------------

GROUP_OPTIONS = {"heartbeat_interval_ms": 1000}  # session_timeout_ms stays at 45 s


async def _settled(check: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Wait until ``check()``; return how long it took. Fail after ``timeout_s``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


@pytest.mark.parametrize("how", ["asyncio.timeout", "task.cancel", "TaskGroup sibling", "wait_for"])
async def test_cancelled_group_member_commits_and_leaves(
    how: str,
    kafka_cluster: KafkaCluster,
    new_topic: NewTopicFactory,
    tasks: Callable[[], Tasks],
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    per_partition = 25
    async with Producer(bootstrap, linger_ms=5) as producer:
        for p in range(4):
            for i in range(per_partition):
                await producer.enqueue(topic, b"%d-%d" % (p, i), partition=p)
    everything = {TopicPartition(topic, p) for p in range(4)}
    group = f"cancel-{uuid.uuid4().hex[:8]}"

    # Member B joins first and never iterates (so it commits nothing of its own).
    b = Consumer(bootstrap, group_id=group, enable_auto_commit=False, **GROUP_OPTIONS)  # type: ignore[arg-type]
    await b.start()
    try:
        b.subscribe([topic])
        await _settled(lambda: b.assignment() == everything, 30, "B owns the topic")

        # Member A: auto-commit, but no periodic commit before the cancel (60 s interval),
        # so only its final commit can make the committed offsets equal what it delivered.
        a = Consumer(bootstrap, group_id=group, enable_auto_commit=True,
                     auto_commit_interval_ms=60_000, **GROUP_OPTIONS)  # type: ignore[arg-type]  # fmt: skip
        delivered: dict[TopicPartition, int] = {}
        owned = tasks()
        loop = asyncio.get_running_loop()
        trigger = asyncio.Event()
        timeout_cm: list[asyncio.Timeout] = []

        async def member_a() -> None:
            async with a:
                a.subscribe([topic])
                async for record in a.stream():
                    delivered[TopicPartition(record.topic, record.partition)] = record.offset + 1

        async def fail_on_trigger() -> None:
            await trigger.wait()
            raise RuntimeError("a sibling failed")

        async def run() -> None:
            if how == "asyncio.timeout":
                async with asyncio.timeout(None) as cm:
                    timeout_cm.append(cm)
                    await member_a()
            elif how == "TaskGroup sibling":
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(member_a())
                    tg.create_task(fail_on_trigger())
            elif how == "wait_for":
                await asyncio.wait_for(member_a(), timeout=15)
            else:
                await member_a()

        started = time.monotonic()
        task = owned.spawn(run(), name=f"member A ({how})")

        def a_done_with_its_share() -> bool:
            mine = a.assignment()
            return (
                len(mine) == 2
                and len(b.assignment()) == 2
                and all(delivered.get(tp) == per_partition for tp in mine)
            )

        await _settled(a_done_with_its_share, 14, "A and B share the topic, A delivered its share")
        a_partitions = a.assignment()
        expected = {tp: delivered[tp] for tp in a_partitions}

        # Cancel A.
        if how == "asyncio.timeout":
            timeout_cm[0].reschedule(loop.time())
        elif how == "task.cancel":
            task.cancel()
        elif how == "TaskGroup sibling":
            trigger.set()
        # wait_for: its timeout (15 s after start) fires by itself.
        await _finish(task, 30 if how == "wait_for" else 15, f"member A cancelled by {how}")
        cancelled_at = time.monotonic()
        if how == "wait_for":
            assert cancelled_at - started >= 15
        error = None if task.cancelled() else task.exception()
        if how in ("asyncio.timeout", "wait_for"):
            assert isinstance(error, TimeoutError), repr(error)
        elif how == "task.cancel":
            assert task.cancelled(), repr(error)
        else:
            assert isinstance(error, BaseExceptionGroup), repr(error)
            assert error.subgroup(RuntimeError) is not None, repr(error)

        problems: list[str] = []
        # The final commit ran: the group's offsets are exactly what A delivered.
        async with Admin(bootstrap) as admin:
            committed = await admin.list_consumer_group_offsets(group)
        got = {tp.partition: om.offset for tp, om in committed.items()}
        want = {tp.partition: offset for tp, offset in expected.items()}
        if got != want:
            problems.append(f"committed offsets {got} != delivered positions {want}")
        # A left the group: B takes everything over at its next heartbeat, not after the
        # 45 s session timeout.
        try:
            await _settled(lambda: b.assignment() == everything, 15, "B owns all 4 partitions")
        except AssertionError as exc:
            owned_by_b = sorted(tp.partition for tp in b.assignment())
            problems.append(f"{exc} (B owns {owned_by_b})")
        try:
            await owned.assert_all_done(what="the cancelled member")
        except AssertionError as exc:
            problems.append(str(exc).splitlines()[0])
        assert not problems, "\n".join(problems)
    finally:
        await b.close()


# -- bootstrap servers that never answer --------------------------------------------------------


def _bootstrap_cases() -> list[Any]:
    return [
        pytest.param("refused", "Admin", id="127.0.0.1:1-Admin"),
        pytest.param("refused", "Producer", id="127.0.0.1:1-Producer"),
        pytest.param("refused", "Consumer", id="127.0.0.1:1-Consumer"),
        pytest.param("closed port", "Admin", id="closed-port-Admin"),
        pytest.param("both", "Admin", id="two-refused-Admin"),
        pytest.param("hanging", "Admin", id="hanging-connect-Admin"),
    ]


def _client(kind: str, bootstrap: str, **options: Any) -> Admin | Producer | Consumer:
    if kind == "Admin":
        return Admin(bootstrap, **options)
    if kind == "Producer":
        return Producer(bootstrap, **options)
    return Consumer(bootstrap, **options)


@pytest.mark.parametrize(("where", "kind"), _bootstrap_cases())
async def test_unreachable_bootstrap_fails_within_bootstrap_timeout(
    where: str, kind: str, caplog: pytest.LogCaptureFixture, tasks: Callable[[], Tasks]
) -> None:
    with contextlib.ExitStack() as stack:
        if where == "refused":
            addresses = ["127.0.0.1:1"]
        elif where == "closed port":
            addresses = [f"127.0.0.1:{_closed_port()}"]
        elif where == "both":
            addresses = ["127.0.0.1:1", f"127.0.0.1:{_closed_port()}"]
        else:
            addresses = [stack.enter_context(HangingListener()).address]
        caplog.set_level(logging.WARNING, logger="aiostream_kafka")
        owned = tasks()
        client = _client(kind, ",".join(addresses), bootstrap_timeout_ms=2000)
        outcome: dict[str, Any] = {}

        async def scenario() -> None:
            started = time.monotonic()
            try:
                async with client:
                    raise AssertionError("start() succeeded against nothing")
            except BootstrapError as exc:
                outcome["error"] = exc
            outcome["elapsed"] = time.monotonic() - started

        task = owned.spawn(scenario())
        await _finish(task, 30, f"{kind} start against {addresses}")
        task.result()  # any other error (ConfigError before the fix, a hang...) fails here
        error, elapsed = outcome["error"], outcome["elapsed"]
        assert 1.5 <= elapsed < 2 + 3, elapsed
        for address in addresses:
            assert address in str(error), str(error)
        if where != "hanging":  # a hanging connect only ends at the deadline itself
            warnings = [
                r
                for r in caplog.records
                if r.name.startswith("aiostream_kafka") and r.levelno == logging.WARNING
            ]
            assert warnings, "no WARNING logged for the failed bootstrap attempts"
            assert any(addresses[0] in r.getMessage() for r in warnings), [
                r.getMessage() for r in warnings
            ]
        await owned.assert_all_done()


async def test_broker_that_accepts_and_never_answers(
    kafka_cluster: KafkaCluster, tasks: Callable[[], Tasks]
) -> None:
    """TCP connects, ApiVersions is never answered: ``BootstrapError`` at the bootstrap
    deadline, not after request_timeout_ms (30 s) or default_api_timeout_ms (60 s)."""
    host, _, port = kafka_cluster.bootstrap_servers.split(",")[0].rpartition(":")
    owned = tasks()
    async with FaultProxy(host, int(port)) as proxy:
        proxy.blackhole()
        for kind in ("Admin", "Producer"):
            client = _client(kind, proxy.address, bootstrap_timeout_ms=3000)
            outcome: list[object] = []

            async def scenario(client: Any = client, outcome: list[object] = outcome) -> None:
                started = time.monotonic()
                try:
                    await client.start()
                except KafkaError as exc:
                    outcome.append(exc)
                finally:
                    outcome.append(time.monotonic() - started)
                    await client.close()

            task = owned.spawn(scenario())
            await _finish(task, 30, f"{kind} start against a silent broker")
            task.result()
            assert isinstance(outcome[0], BootstrapError), outcome
            assert proxy.address in str(outcome[0])
            assert 2.5 <= outcome[1] < 3 + 4, outcome  # type: ignore[operator]
            assert proxy.connections >= 1
        await owned.assert_all_done()


@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars); TLS"
    )
)
async def test_tls_and_plaintext_mismatch_fail_fast(
    faulty: KafkaCluster, tasks: Callable[[], Tasks]
) -> None:
    """Plaintext spoken to the TLS listener, and TLS to the plaintext one: a typed error
    within ``bootstrap_timeout_ms`` (here 3 s) naming the address."""
    owned = tasks()
    tls_address = faulty.tls_bootstrap_servers.split(",")[0]
    plain_address = faulty.bootstrap_servers.split(",")[0]
    cases = [
        ("plaintext to the TLS port", tls_address, {}),
        ("TLS to the plaintext port", plain_address,
         {"security_protocol": "SSL", "ssl_context": faulty.tls_client_context()}),
    ]  # fmt: skip
    for what, address, options in cases:
        outcome: list[object] = []

        async def scenario(address: str = address, options: Any = options,
                           outcome: list[object] = outcome) -> None:  # fmt: skip
            started = time.monotonic()
            try:
                async with Admin(address, bootstrap_timeout_ms=3000, **options):
                    pass
            except KafkaError as exc:
                outcome.append(exc)
            outcome.append(time.monotonic() - started)

        task = owned.spawn(scenario())
        await _finish(task, 30, what)
        task.result()
        assert isinstance(outcome[0], KafkaError), (what, outcome)
        assert address in str(outcome[0]), (what, str(outcome[0]))
        assert outcome[1] < 3 + 4, (what, outcome)  # type: ignore[operator]
    await owned.assert_all_done()


# -- happy eyeballs --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Admin", "Producer"])
async def test_a_name_resolving_to_a_dead_then_a_live_address(
    kind: str, kafka_cluster: KafkaCluster, new_topic: NewTopicFactory, tasks: Callable[[], Tasks]
) -> None:
    host, _, port_text = kafka_cluster.bootstrap_servers.split(",")[0].rpartition(":")
    assert host == "127.0.0.1", host
    port = int(port_text)
    name = f"dead-then-live-{uuid.uuid4().hex[:6]}.invalid"
    loop = asyncio.get_running_loop()
    real_getaddrinfo = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == name:
            asked.append(host)
            tcp = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
            return [(*tcp, ("127.0.0.2", int(port))), (*tcp, ("127.0.0.1", int(port)))]
        return await real_getaddrinfo(host, port, *args, **kwargs)

    topic = await new_topic()
    owned = tasks()
    timings: dict[str, float] = {}
    with HangingListener("127.0.0.2", port):
        loop.getaddrinfo = getaddrinfo  # type: ignore[method-assign]
        try:
            client = _client(kind, f"{name}:{port}", socket_connection_setup_timeout_ms=10_000)

            async def scenario() -> None:
                started = time.monotonic()
                try:
                    await client.start()
                    timings["start"] = time.monotonic() - started
                    if isinstance(client, Producer):
                        await client.send(topic, b"through the live address")
                    else:
                        await client.describe_topics([topic])  # type: ignore[union-attr]
                finally:
                    await client.close()

            task = owned.spawn(scenario())
            await _finish(task, 30, f"{kind} start through a dead and a live address")
            task.result()
        finally:
            del loop.getaddrinfo
    assert asked, "the client did not resolve the name through the loop"
    # Well within socket_connection_setup_timeout_ms (10 s): the dead address costs at most
    # the happy-eyeballs delay.
    assert timings["start"] < 3, timings
    await owned.assert_all_done()


# -- cancelled at every await point --------------------------------------------------------------


async def _producer_scenario(bootstrap: str, topic: str) -> None:
    """start, send, close -- written out, with close() in a finally covering start()."""
    producer = Producer(bootstrap, linger_ms=0)
    try:
        await producer.start()
        await producer.send(topic, b"cancel me", partition=0)
    finally:
        await producer.close()


async def _consumer_scenario(bootstrap: str, topic: str) -> None:
    """start, iterate a few records, close -- through ``async with``."""
    async with Consumer(bootstrap, fetch_max_wait_ms=100) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        seen = 0
        async for _ in consumer.stream():
            seen += 1
            if seen == 3:
                break


def _schedule(limit_runs: int) -> Iterator[int]:
    """0, 1, 2, ... 150, then sparser (10% apart), at most ``limit_runs`` values."""
    k, runs = 0, 0
    while runs < limit_runs:
        yield k
        runs += 1
        k = k + 1 if k < 150 else int(k * 1.1)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["Producer", "Consumer"])
async def test_cancelled_at_every_await_point(
    which: str,
    kafka_cluster: KafkaCluster,
    new_topic: NewTopicFactory,
    tasks: Callable[[], Tasks],
    asyncio_errors: AsyncioErrors,
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = await new_topic()
    async with Producer(bootstrap) as producer:
        for i in range(10):
            await producer.send(topic, b"%d" % i, partition=0)
    scenario = _producer_scenario if which == "Producer" else _consumer_scenario
    budget_s = 90.0  # about 8 s alone; the whole suite's heap makes every run slower
    began = time.monotonic()
    failures: list[str] = []
    finished_uncancelled = False
    runs = 0

    async def one(cancel_after: Callable[[asyncio.Task[Any]], Awaitable[bool]], label: str) -> bool:
        """Run the scenario, cancel it as ``cancel_after`` says; return True if it finished
        before being cancelled."""
        owned = tasks()
        task = owned.spawn(scenario(bootstrap, topic), name=f"{which} scenario {label}")
        cancelled = await cancel_after(task)
        done, _ = await asyncio.wait({task}, timeout=10)
        if not done:
            failures.append(f"{label}: did not end within 10 s of the cancel")
            task.cancel()
            await asyncio.wait({task}, timeout=5)
        elif cancelled and not task.cancelled():
            failures.append(f"{label}: cancelled but ended with {task.exception()!r}")
        elif not cancelled and task.exception() is not None:
            failures.append(f"{label}: failed: {task.exception()!r}")
        try:
            await owned.assert_all_done(what=label)
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
        for message in asyncio_errors.take():
            failures.append(f"{label}: asyncio reported: {message}")
        return not cancelled

    def after_steps(k: int) -> Callable[[asyncio.Task[Any]], Awaitable[bool]]:
        async def cancel_after(task: asyncio.Task[Any]) -> bool:
            for _ in range(k):
                if task.done():
                    return False
                await asyncio.sleep(0)
            if task.done():
                return False
            task.cancel()
            return True

        return cancel_after

    def after_ms(ms: float) -> Callable[[asyncio.Task[Any]], Awaitable[bool]]:
        async def cancel_after(task: asyncio.Task[Any]) -> bool:
            await asyncio.wait({task}, timeout=ms / 1000)
            if task.done():
                return False
            task.cancel()
            return True

        return cancel_after

    last_k = 0
    for k in _schedule(limit_runs=400):
        runs += 1
        last_k = k
        if await one(after_steps(k), f"cancel after {k} loop steps"):
            finished_uncancelled = True  # k loop steps were enough for the whole scenario
            break
        if time.monotonic() - began > budget_s:
            failures.append(f"time budget ({budget_s} s) spent at k={k}: not every step tried")
            break
    for ms in (1, 2, 5, 10, 20, 50, 100):
        runs += 1
        await one(after_ms(ms), f"cancel after {ms} ms")

    assert not failures, f"{len(failures)} failure(s) in {runs} runs:\n" + "\n".join(failures[:30])
    assert finished_uncancelled, f"the scenario never finished uncancelled (k up to {last_k})"


@pytest.mark.parametrize("kind", ["Admin", "Producer", "Consumer"])
async def test_a_cancelled_start_leaves_nothing_running(
    kind: str,
    kafka_cluster: KafkaCluster,
    tasks: Callable[[], Tasks],
    asyncio_errors: AsyncioErrors,
) -> None:
    """``start()`` cancelled at any point raises ``CancelledError`` and leaves no task
    running, without the caller having to call ``close()`` (as a ``start()`` that fails
    does): the client object can simply be dropped."""
    failures: list[str] = []
    finished = False
    k = 0
    while not finished and len(failures) < 3 and k < 5000:
        owned = tasks()
        client = _client(kind, kafka_cluster.bootstrap_servers)
        task = owned.spawn(client.start(), name=f"{kind}.start()")
        for _ in range(k):
            if task.done():
                break
            await asyncio.sleep(0)
        if task.done():
            finished = True
            await client.close()
        else:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=10)
            if not done:
                failures.append(f"k={k}: start() did not end within 10 s of the cancel")
            elif not task.cancelled():
                failures.append(f"k={k}: start() ended with {task.exception()!r}, not cancelled")
        del client, task
        try:
            await owned.assert_all_done(what=f"{kind}.start() cancelled after {k} steps")
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
        failures.extend(f"k={k}: asyncio reported: {m}" for m in asyncio_errors.take())
        k = k + 1 if k < 100 else int(k * 1.2)
    assert not failures, "\n".join(failures)
    assert finished
