"""``ConnectionPool``: lazily opened connections per broker and lane, with back-off.

A broker serves the requests of one connection one at a time, in order, so a long-poll
Fetch would hold up a Produce or a Heartbeat queued behind it on the same socket. Each
broker therefore gets up to one connection per :class:`Lane`, opened on first use.

A lost connection is replaced on next use. Failed attempts to reach an address back off
exponentially (``reconnect_backoff_ms`` doubling up to ``reconnect_backoff_max_ms``, with
±20% jitter so that many clients do not reconnect in step, as Kafka's Java client does).

Over a long life the pool stays bounded: a connection with nothing in flight that was not
used for ``connections_max_idle_ms`` is closed (Kafka's ``connections.max.idle.ms``, 9
minutes by default, below the broker's 10 so that the client, not the broker, ends it), and
a dead connection is dropped as soon as its reader task has ended. Both checks run on
:meth:`get`, at most once a second, so an idle client needs no task of its own for them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time

from aiostream_kafka.concurrency import gather_settled
from aiostream_kafka.errors import ClientClosedError, KafkaError, NetworkError
from aiostream_kafka.net.connection import BrokerConnection, ConnectionSettings

log = logging.getLogger(__name__)

_SWEEP_INTERVAL_S = 1.0


class Lane(enum.Enum):
    """What a connection carries: fetches, produces, group membership (JoinGroup and
    SyncGroup, which the coordinator holds for up to the rebalance timeout), or everything
    else (metadata, heartbeats, commits, admin)."""

    CONTROL = "control"
    PRODUCE = "produce"
    FETCH = "fetch"
    GROUP = "group"


class _Backoff:
    __slots__ = ("failures", "not_before")

    def __init__(self) -> None:
        self.failures = 0
        self.not_before = 0.0


class ConnectionPool:
    """Owns every :class:`BrokerConnection` of one client; :meth:`close` closes them all."""

    def __init__(
        self,
        settings: ConnectionSettings,
        *,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        connections_max_idle_ms: int = 540_000,
    ) -> None:
        self.settings = settings
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_idle_s = connections_max_idle_ms / 1000
        self._next_sweep = time.monotonic() + _SWEEP_INTERVAL_S
        self._conns: dict[tuple[str, int, Lane], BrokerConnection] = {}
        self._locks: dict[tuple[str, int, Lane], asyncio.Lock] = {}
        self._backoff: dict[tuple[str, int], _Backoff] = {}
        self._dead: list[BrokerConnection] = []
        self._closed = False
        # Connections opened so far (the pushed client metrics' connection.creation.*).
        self.connections_created = 0

    def backoff_remaining(self, host: str, port: int) -> float:
        """Seconds until ``host:port`` may be tried again (0 when it may now)."""
        state = self._backoff.get((host, port))
        if state is None:
            return 0.0
        return max(0.0, state.not_before - time.monotonic())

    def note_failure(self, host: str, port: int) -> None:
        """Back ``host:port`` off as after a failed connection attempt: a broker that
        answered with something unusable goes to the end of :meth:`backoff_remaining`
        orderings (its open connections stay usable)."""
        self._record_failure(host, port)

    def _record_failure(self, host: str, port: int) -> None:
        state = self._backoff.setdefault((host, port), _Backoff())
        delay_ms = min(
            self.reconnect_backoff_max_ms, self.reconnect_backoff_ms * (2**state.failures)
        )
        state.failures = min(state.failures + 1, 30)
        state.not_before = time.monotonic() + delay_ms * random.uniform(0.8, 1.2) / 1000

    async def get(
        self, host: str, port: int, lane: Lane = Lane.CONTROL, node_id: int | None = None
    ) -> BrokerConnection:
        """Return an open connection to ``host:port`` for ``lane``, opening it if needed.

        Concurrent callers for the same broker and lane share one connection attempt. After
        failures, an attempt waits out the address's back-off first.

        Raises:
            NetworkError, KafkaTimeoutError: the broker cannot be reached.
            ClientClosedError: the pool is closed.
        """
        key = (host, port, lane)
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            now = time.monotonic()
            if now < self._next_sweep:
                conn.last_used = now
                return conn
            self._sweep(now)
            if not conn.closed:
                conn.last_used = now
                return conn
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._closed:
                raise ClientClosedError("the client is closed: it opens no more connections")
            conn = self._conns.get(key)
            if conn is not None and not conn.closed:
                return conn
            if conn is not None:
                self._retire(key, conn)
            delay = self.backoff_remaining(host, port)
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                conn = await BrokerConnection.open(host, port, self.settings, node_id)
            except KafkaError:
                self._record_failure(host, port)
                raise
            self._backoff.pop((host, port), None)
            if self._closed:  # closed while we connected
                await conn.close()
                raise ClientClosedError("the client is closed: it opens no more connections")
            self._conns[key] = conn
            self.connections_created += 1
            log.debug("opened %s for the %s lane", conn, lane.value)
            return conn

    def _retire(self, key: tuple[str, int, Lane], conn: BrokerConnection) -> None:
        self._conns.pop(key, None)
        if not conn.finished:
            self._dead.append(conn)
        self._record_failure(key[0], key[1])

    def _sweep(self, now: float) -> None:
        """Close connections idle for longer than ``connections_max_idle_ms``; forget dead
        ones whose reader task has ended (the others wait in ``_dead`` for :meth:`close`)."""
        self._next_sweep = now + _SWEEP_INTERVAL_S
        for key, conn in list(self._conns.items()):
            if conn.closed:
                self._retire(key, conn)
            elif not conn.in_flight and now - conn.last_used > self.max_idle_s:
                log.debug("closing %s: idle for %.0f s", conn, now - conn.last_used)
                conn.abandon(NetworkError(f"{conn.description}: closed after being idle"))
                self._conns.pop(key, None)
                self._dead.append(conn)
        self._dead = [c for c in self._dead if not c.finished]

    def connections(self) -> list[BrokerConnection]:
        """The connections currently held (open or not yet noticed dead)."""
        return list(self._conns.values())

    async def close(self) -> None:
        """Close every connection and await its reader task; open no more. Bounded: each
        connection flushes for at most a second before it is aborted."""
        self._closed = True
        await self.close_connections()

    async def close_connections(self) -> None:
        """Close every connection held now and await its reader task (a start that failed
        or was cancelled); the pool stays usable. Bounded as :meth:`close`."""
        conns = list(self._conns.values()) + self._dead
        self._conns.clear()
        self._dead = []
        if not conns:
            return
        outcomes = await gather_settled(*(c.close() for c in conns))
        for conn, outcome in zip(conns, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error("closing %s failed", conn, exc_info=outcome)
