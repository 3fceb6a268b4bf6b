"""``FakeCluster``: an in-process Kafka cluster speaking the wire protocol, for tests.

Example::

    async with FakeCluster(brokers=3) as cluster:
        async with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
            ...
        cluster.control.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER")

The brokers are asyncio servers on loopback ports in the event loop that starts the
cluster (ready in milliseconds: nothing is spawned). For synchronous test suites and
clients that run their own threads or loops (confluent-kafka, kafka-python), run it in a
thread of its own::

    cluster = FakeCluster()
    cluster.start_blocking()
    ...
    cluster.stop_blocking()

Requests are decoded and responses encoded with the project's generated codec (the
same classes the client uses), so the fake serves whatever versions the codec has.
What it serves is listed by ApiVersions (see :mod:`.handlers`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from aiostream_kafka.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from aiostream_kafka.structs import Record
from aiostream_kafka.testing.fake.clock import Clock
from aiostream_kafka.testing.fake.context import SASL_PLAINTEXT
from aiostream_kafka.testing.fake.control import Control
from aiostream_kafka.testing.fake.sasl import MECHANISMS, SaslUsers
from aiostream_kafka.testing.fake.server import BrokerServer
from aiostream_kafka.testing.fake.state import (
    ClusterState,
    HandlerCrash,
    HandlerCrashError,
    TopicError,
)

log = logging.getLogger(__name__)

__all__ = ["FakeCluster"]

T = TypeVar("T")
#: Bound on a call made from another thread into the cluster's loop.
CALL_TIMEOUT_S = 30.0
#: Bound on starting or stopping the cluster's thread.
THREAD_TIMEOUT_S = 30.0


class FakeCluster:
    """An in-process Kafka cluster of ``brokers`` brokers (node ids 1..brokers).

    Options: ``auto_create_topics`` (off, as in Kafka 4's tests and most production
    clusters; Metadata then creates unknown topics with ``default_partitions``),
    ``default_replication_factor`` (for ``-1`` in CreateTopics), the group session
    timeout bounds and initial rebalance delay (Kafka's 6 s / 30 min, and 0 ms rather
    than Kafka's 3 s so that tests do not wait), ``max_frame_bytes`` (largest request),
    ``transaction_version`` (the finalized feature of KIP-890: 2, Kafka 4's default, or 1
    for the older transaction protocol), the KIP-848 groups' session timeout (Kafka's
    45 s) and heartbeat interval (1 s rather than Kafka's 5 s, so that rebalances do not
    keep tests waiting).

    ``sasl_users`` (user -> password) adds a SASL_PLAINTEXT listener to every broker
    (:attr:`sasl_bootstrap_servers`) where clients authenticate with one of
    ``sasl_mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) before anything else is
    served; wrong credentials get ``SASL_AUTHENTICATION_FAILED`` and the connection is
    closed. The plain listener stays open beside it, as a broker's PLAINTEXT one.

    ``clock`` is what the fake's timeouts and timestamps read (``clock.py``): by default
    the event loop's timers and the wall clock; a :class:`~.clock.ManualClock` makes them
    move only when the test calls :meth:`advance_time` (a member's session runs out
    exactly when the test says). Long polls and ``control.delay`` stay in real time.
    """

    def __init__(
        self,
        brokers: int = 1,
        *,
        host: str = "127.0.0.1",
        auto_create_topics: bool = False,
        default_partitions: int = 1,
        default_replication_factor: int = 1,
        cluster_id: str | None = None,
        group_min_session_timeout_ms: int = 6000,
        group_max_session_timeout_ms: int = 1_800_000,
        group_initial_rebalance_delay_ms: int = 0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        transaction_version: int = 2,
        group_consumer_session_timeout_ms: int = 45_000,
        group_consumer_heartbeat_interval_ms: int = 1_000,
        sasl_users: Mapping[str, str] | None = None,
        sasl_mechanisms: Sequence[str] = MECHANISMS,
        clock: Clock | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        if transaction_version not in (1, 2):
            raise ValueError(f"transaction_version must be 1 or 2, got {transaction_version}")
        unknown = [m for m in sasl_mechanisms if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"SASL mechanisms {unknown} are not served; choose from {MECHANISMS}")
        users = (
            SaslUsers(dict(sasl_users), tuple(sasl_mechanisms)) if sasl_users is not None else None
        )
        self.brokers = brokers
        self._state = ClusterState(
            brokers,
            host=host,
            cluster_id=cluster_id or f"fake-{uuid.uuid4().hex[:16]}",
            auto_create_topics=auto_create_topics,
            default_partitions=default_partitions,
            default_replication_factor=default_replication_factor,
            group_min_session_timeout_ms=group_min_session_timeout_ms,
            group_max_session_timeout_ms=group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=group_initial_rebalance_delay_ms,
            transaction_version=transaction_version,
            group_consumer_session_timeout_ms=group_consumer_session_timeout_ms,
            group_consumer_heartbeat_interval_ms=group_consumer_heartbeat_interval_ms,
            sasl_users=users,
            clock=clock,
        )
        self._servers = {
            node_id: BrokerServer(self._state, broker, max_frame_bytes=max_frame_bytes)
            for node_id, broker in self._state.brokers.items()
        }
        self._sasl_servers = {
            node_id: BrokerServer(
                self._state, broker, max_frame_bytes=max_frame_bytes, listener=SASL_PLAINTEXT
            )
            for node_id, broker in self._state.brokers.items()
            if users is not None
        }
        self.control = Control(self)
        self.startup_seconds: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_stop: asyncio.Event | None = None

    # -- what tests read ---------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        """The cluster's state (topics, groups...); change it only through the cluster's
        methods or :attr:`control`, which run on the cluster's loop."""
        return self._state

    @property
    def clock(self) -> Clock:
        """The clock of the fake's timeouts and timestamps (``clock=``, else real time)."""
        return self._state.clock

    def advance_time(self, seconds: float) -> int:
        """Move a manual clock ``seconds`` forward and run the timers that fall due, on
        the cluster's loop, from any thread (:meth:`.Control.advance_time`); return how
        many ran.

        Raises ``RuntimeError`` without ``FakeCluster(clock=ManualClock())``,
        ``ValueError`` for a negative amount.
        """
        return self.control.advance_time(seconds)

    @property
    def servers(self) -> dict[int, BrokerServer]:
        """The (plain) listener of each broker, by node id."""
        return self._servers

    @property
    def sasl_servers(self) -> dict[int, BrokerServer]:
        """The SASL_PLAINTEXT listener of each broker, by node id (empty without
        ``sasl_users``)."""
        return self._sasl_servers

    def _all_servers(self) -> list[BrokerServer]:
        return [*self._servers.values(), *self._sasl_servers.values()]

    @property
    def sasl_bootstrap_servers(self) -> str:
        """Every broker's SASL_PLAINTEXT address.

        Raises ``RuntimeError`` before the cluster is started or without ``sasl_users``.
        """
        if self._loop is None or not self._sasl_servers:
            raise RuntimeError("no SASL listener: start a FakeCluster(sasl_users={...})")
        return ",".join(f"{b.host}:{b.sasl_port}" for b in self._state.brokers.values())

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:port[,...]"``, every broker's address.

        Raises ``RuntimeError`` before the cluster is started.
        """
        if self._loop is None:
            raise RuntimeError("the cluster is not started; use `async with FakeCluster()`")
        return ",".join(f"{b.host}:{b.port}" for b in self._state.brokers.values())

    @property
    def handler_crashes(self) -> list[HandlerCrash]:
        """Request handlers that raised since the cluster was created (each closed its
        client's connection), oldest first."""
        return list(self._state.hooks.crashes)

    def check(self) -> None:
        """Raise :class:`HandlerCrashError` if a request handler crashed (and forget the
        crashes, so that the next check reports only new ones)."""

        def take() -> list[HandlerCrash]:
            found = list(self._state.hooks.crashes)
            self._state.hooks.crashes.clear()
            return found

        found = self.call(take)
        if found:
            raise HandlerCrashError(found)

    @property
    def node_ids(self) -> list[int]:
        """The node ids of the brokers (1..brokers)."""
        return sorted(self._state.brokers)

    @property
    def managed(self) -> bool:
        """Always true: this process runs the brokers (for ``KafkaCluster`` parity)."""
        return True

    @property
    def source(self) -> str:
        """``"fake"`` (for ``KafkaCluster`` parity)."""
        return "fake"

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open every broker's listener in the running event loop.

        Raises ``RuntimeError`` if already started, ``OSError`` if a port cannot be bound.
        """
        if self._loop is not None:
            raise RuntimeError("the fake cluster is already started")
        started = time.perf_counter()
        self._loop = asyncio.get_running_loop()
        try:
            for server in self._all_servers():
                await server.start()
        except BaseException:
            for server in self._all_servers():
                server.stop_now()
            self._loop = None
            raise
        self.startup_seconds = time.perf_counter() - started
        log.info(
            "fake Kafka cluster (%d broker(s)) up at %s in %.1f ms",
            self.brokers,
            self.bootstrap_servers,
            self.startup_seconds * 1000,
        )

    async def close(self) -> None:
        """Close every listener and connection. Idempotent."""
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.stop_blocking)
            return
        if self._loop is None:
            return
        try:
            for server in self._all_servers():
                await server.stop()
        finally:
            self._state.close()
            self._loop = None

    def close_now(self) -> None:
        """Close without waiting: the thread's cluster is stopped, an in-loop one has its
        listeners and connections closed at once."""
        if self._thread is not None:
            self.stop_blocking()
            return
        for server in self._all_servers():
            server.stop_now()
        if self._loop is not None and not self._loop.is_closed():
            self._state.close()
        self._loop = None

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Shielded: a cancelled test still has its listeners closed.
        await asyncio.shield(self.close())
        if exc_type is None:
            self.check()  # a handler crash fails the block (never masks its own error)

    # -- a thread of its own -----------------------------------------------------------

    def start_blocking(self) -> None:
        """Start the cluster on an event loop in a daemon thread of its own and return
        once it serves. For synchronous suites and clients with their own threads.

        Raises ``RuntimeError`` if already started or if it did not start in time, and
        what :meth:`start` raises.
        """
        if self._loop is not None or self._thread is not None:
            raise RuntimeError("the fake cluster is already started")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(self._run_in_thread(ready),),
            name="fake-kafka",
            daemon=True,
        )
        self._thread.start()
        try:
            ready.result(timeout=THREAD_TIMEOUT_S)
        except BaseException:
            self._thread.join(THREAD_TIMEOUT_S)
            self._thread = None
            raise

    async def _run_in_thread(self, ready: concurrent.futures.Future[None]) -> None:
        self._thread_stop = asyncio.Event()
        try:
            await self.start()
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            await self._thread_stop.wait()
        finally:
            for server in self._all_servers():
                await server.stop()
            self._state.close()
            self._loop = None

    def stop_blocking(self) -> None:
        """Stop a cluster started with :meth:`start_blocking` and wait for its thread.
        Idempotent."""
        thread, loop, stop = self._thread, self._loop, self._thread_stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        thread.join(THREAD_TIMEOUT_S)
        if thread.is_alive():
            log.error("the fake cluster's thread did not stop within %.0f s", THREAD_TIMEOUT_S)
        self._thread = None
        self._thread_stop = None

    close_blocking = stop_blocking

    # -- running code on the cluster's loop --------------------------------------------

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the cluster's loop and return its result (directly when called
        from that loop or before the cluster started).

        Raises what ``fn`` raises; ``TimeoutError`` if the loop does not run it in
        :data:`CALL_TIMEOUT_S`.
        """
        loop = self._loop
        if loop is None or self._on_own_loop() or (self._thread is None and loop.is_closed()):
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(timeout=CALL_TIMEOUT_S)

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._loop
        if loop is None or self._on_own_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    # -- brokers -----------------------------------------------------------------------

    def _server(self, node_id: int) -> BrokerServer:
        try:
            return self._servers[node_id]
        except KeyError:
            raise ValueError(f"no broker {node_id} (node ids are {self.node_ids})") from None

    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Stop broker ``node_id``: its listener closes, its connections drop and its
        partitions move to another alive replica (or go offline).

        Raises ``ValueError`` for an unknown node id.
        """
        server = self._server(node_id)
        sasl = self._sasl_servers.get(node_id)

        async def stop() -> None:
            self._state.broker_stopped(node_id)
            await server.stop()
            if sasl is not None:
                await sasl.stop()
            self._state.brokers[node_id].fetch_sessions.clear()

        await asyncio.wait_for(self._on_loop(stop()), timeout)

    kill_broker = stop_broker

    async def start_broker(self, node_id: int) -> None:
        """Start a stopped broker again on its port; offline partitions it holds a
        replica of get it as leader.

        Raises ``ValueError`` for an unknown node id, ``OSError`` if its port was taken.
        """
        server = self._server(node_id)
        sasl = self._sasl_servers.get(node_id)

        async def start() -> None:
            await server.start()
            if sasl is not None:
                await sasl.start()
            self._state.broker_started(node_id)

        await self._on_loop(start())

    # -- topics and records ------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 1,
        config: Mapping[str, str] | None = None,
    ) -> str:
        """Create a topic directly (no request); return its name.

        Raises ``ValueError`` (with Kafka's message) when Kafka would refuse it.
        """

        def create() -> str:
            try:
                self._state.create_topic(name, partitions, replication_factor, dict(config or {}))
            except TopicError as exc:
                raise ValueError(exc.message) from None
            return name

        return self.call(create)

    def records(self, topic: str, partition: int = 0) -> list[Record]:
        """The records of a partition (``control.records``).

        Raises ``KeyError`` for an unknown partition.
        """
        return self.control.records(topic, partition)
