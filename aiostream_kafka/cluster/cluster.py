"""``Cluster``: the metadata cache and the way to send a request to a given broker.

Metadata is held as an immutable :class:`ClusterSnapshot` replaced as a whole on every
refresh, so readers never see a half-applied update. It is refreshed:

* on demand, after an error meaning it is stale (``NOT_LEADER_OR_FOLLOWER``,
  ``UNKNOWN_TOPIC_OR_PARTITION``, a lost connection...): callers use :meth:`refresh`;
* when older than ``metadata_max_age_ms``: :meth:`ensure_fresh`;
* point-wise from KIP-951 leader hints that Produce and Fetch responses carry
  (:meth:`apply_leader_hint`), which saves a round trip after a leader moves.

Concurrent refreshes collapse into one request. The topics asked for are every topic any
caller asked about (the *tracked* topics), so one refresh serves them all.

When no known broker answers, the refresh falls back to the bootstrap addresses
(re-bootstrap), then keeps trying within ``default_api_timeout_ms`` before raising
:class:`KafkaTimeoutError` naming every address tried and why it failed. A broker whose
answer does not decode, or that shares no version of Metadata with us, is skipped the
same way (with a WARNING naming it, and tried last next time); only a failed TLS
handshake or authentication, which no other broker would fix, is raised at once.

The very first refresh (bootstrap) has a short deadline of its own,
``bootstrap_timeout_ms``, and logs a warning at each failed attempt: a wrong address or
port is the most common first mistake, and it deserves a fast, loud
:class:`BootstrapError`, not a silent minute.

A producer's cluster forgets topics it has not sent to for ``metadata_max_idle_ms``
(KIP-526): tracked topics would otherwise only grow over a long life.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Collection, Iterable

from aiostream_kafka.cluster.metadata import BrokerMetadata, ClusterSnapshot
from aiostream_kafka.concurrency import Crash, TaskScope, shielded, stop_tasks
from aiostream_kafka.config import Address, ClientConfig
from aiostream_kafka.errors import (
    BootstrapError,
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
)
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.net.pool import ConnectionPool, Lane
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.error_codes import ACCESS_DENIED_CODES, error_from_code
from aiostream_kafka.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from aiostream_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)

_ALL = None  # a refresh of every topic in the cluster


class _Refresh:
    __slots__ = ("task", "topics")

    def __init__(self, topics: frozenset[str] | None, task: asyncio.Task[ClusterSnapshot]) -> None:
        self.topics = topics  # None: all topics
        self.task = task

    def covers(self, topics: frozenset[str] | None) -> bool:
        if self.topics is None:
            return True
        return topics is not None and topics <= self.topics


class Cluster:
    """Metadata cache and connection pool of one client. Owned by the client, which calls
    :meth:`close`."""

    def __init__(self, config: ClientConfig, *, expire_idle_topics: bool = False) -> None:
        self.config = config
        self.pool = ConnectionPool(
            config.connection_settings(),
            reconnect_backoff_ms=config.reconnect_backoff_ms,
            reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            connections_max_idle_ms=config.connections_max_idle_ms,
        )
        self.snapshot = ClusterSnapshot()
        self._tracked: set[str] = set()
        # topic -> monotonic time of its last use, for clusters whose topics expire (KIP-526)
        self._last_used: dict[str, float] | None = {} if expire_idle_topics else None
        self._refresh: _Refresh | None = None
        # Owns the metadata refresh task (one at a time, shared by its callers).
        self._scope = TaskScope("cluster metadata")
        self._closed = False
        # Diagnostics: KIP-951 hints that moved a leader without a metadata request.
        self.leader_hints_applied = 0

    # -- metadata --------------------------------------------------------------------------

    async def bootstrap(self) -> ClusterSnapshot:
        """Fetch the first metadata (brokers, and any tracked topics).

        Failed or cancelled, it leaves nothing running: the refresh is stopped and the
        connections it opened are closed (the cluster can bootstrap again), so a client
        whose ``start()`` failed may simply be dropped.

        Raises:
            BootstrapError: no bootstrap address answered within ``bootstrap_timeout_ms``;
                the message names each address tried and its error.
        """
        try:
            return await self.refresh()
        except BaseException:
            await shielded(self._stop_all(), timeout=None, what="cleaning up a failed bootstrap")
            raise

    async def _stop_all(self) -> None:
        current, self._refresh = self._refresh, None
        try:
            if current is not None:
                await stop_tasks([current.task])
        finally:
            await self.pool.close_connections()

    def track(self, topics: Iterable[str]) -> None:
        """Add ``topics`` to those every refresh asks about."""
        self._tracked.update(topics)

    def untrack(self, topics: Iterable[str]) -> None:
        """Stop asking about ``topics`` (deleted, or no longer used)."""
        self._tracked.difference_update(topics)

    def touch(self, topic: str, now: float) -> None:
        """Note that ``topic`` is in use at monotonic time ``now`` (clusters whose idle
        topics expire; a no-op otherwise)."""
        if self._last_used is not None:
            self._last_used[topic] = now

    def expire_idle_topics(self) -> set[str]:
        """Untrack and return the topics not used for ``metadata_max_idle_ms``. Their owner
        (the producer's sender) calls this, so that it learns which state to drop."""
        if self._last_used is None:
            return set()
        horizon = time.monotonic() - self.config.metadata_max_idle_ms / 1000
        idle = {t for t, used in self._last_used.items() if used < horizon}
        for topic in idle:
            del self._last_used[topic]
        if idle:
            self._tracked.difference_update(idle)
            log.debug("topics idle for metadata_max_idle_ms, no longer tracked: %s", sorted(idle))
        return idle

    async def refresh(
        self, topics: Collection[str] | None = None, *, all_topics: bool = False
    ) -> ClusterSnapshot:
        """Refresh the metadata now and return the new snapshot.

        ``topics`` are added to the tracked topics first. Concurrent calls share one
        request when it covers what they need.
        """
        if topics:
            self._tracked.update(topics)
            if self._last_used is not None:
                now = time.monotonic()
                for topic in topics:
                    self._last_used[topic] = now
        wanted: frozenset[str] | None = _ALL if all_topics else frozenset(self._tracked)
        while True:
            current = self._refresh
            if current is None:
                if self._scope.closed:
                    raise ClientClosedError("the client is closed: it refreshes no more metadata")
                task = self._scope.spawn(
                    self._fetch_metadata(wanted),
                    name="aiostream-kafka metadata refresh",
                    crash=Crash.AWAITED,  # by every caller of refresh() meanwhile
                )
                current = self._refresh = _Refresh(wanted, task)
                task.add_done_callback(self._refresh_done)
                return await asyncio.shield(task)
            covered = current.covers(wanted)
            try:
                snapshot = await asyncio.shield(current.task)
            except KafkaError:
                if covered:
                    raise
                continue
            if covered:
                return snapshot

    def _refresh_done(self, task: asyncio.Task[ClusterSnapshot]) -> None:
        if self._refresh is not None and self._refresh.task is task:
            self._refresh = None
        # Its outcome is retrieved by the scope (Crash.AWAITED): no waiter-less failure is
        # logged as lost.

    async def ensure_fresh(self, topics: Collection[str] = ()) -> ClusterSnapshot:
        """Return the snapshot, refreshing first if it is older than
        ``metadata_max_age_ms`` or lacks one of ``topics`` (or knows it only as an error)."""
        age_ms = (time.monotonic() - self.snapshot.fetched_at) * 1000
        known = self.snapshot.topics
        missing = [t for t in topics if t not in known or known[t].error_code != 0]
        if age_ms > self.config.metadata_max_age_ms or missing or not self.snapshot.brokers:
            return await self.refresh(topics)
        return self.snapshot

    def _candidates(self, tried_known: bool) -> list[tuple[str, int, int | None]]:
        known: list[tuple[str, int, int | None]] = [
            (b.host, b.port, b.node_id) for b in self.snapshot.brokers.values()
        ]
        random.shuffle(known)
        known.sort(key=lambda c: self.pool.backoff_remaining(c[0], c[1]))
        bootstrap: list[tuple[str, int, int | None]] = [
            (h, p, None) for h, p in self.config.addresses
        ]
        if not known or tried_known:
            return bootstrap + [c for c in known if (c[0], c[1]) not in self.config.addresses]
        return known

    async def _fetch_metadata(self, topics: frozenset[str] | None) -> ClusterSnapshot:
        bootstrapping = not self.snapshot.brokers
        config = self.config
        timeout_ms = config.default_api_timeout_ms
        if bootstrapping:
            timeout_ms = min(timeout_ms, config.bootstrap_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        failures: dict[Address, str] = {}
        rounds = 0
        request = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in sorted(topics)],
            allow_auto_topic_creation=False,
        )
        while True:
            for host, port, node_id in self._candidates(tried_known=rounds > 0):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        conn = await self.pool.get(host, port, Lane.CONTROL, node_id)
                        response = await conn.request(
                            request,
                            timeout_ms=min(self.config.request_timeout_ms, remaining * 1000),
                        )
                except (NetworkError, KafkaTimeoutError, TimeoutError) as exc:
                    if isinstance(exc, KafkaError) and not exc.retriable:
                        raise  # e.g. a TLS handshake refused: trying again cannot help
                    why = str(exc) or type(exc).__name__
                    failures[(host, port)] = why
                    if bootstrapping:
                        log.warning("bootstrap server %s:%d did not answer: %s", host, port, why)
                    continue
                except KafkaError as exc:
                    # An authentication failure is ours to fix, not the broker's. Anything
                    # else (an answer that does not decode, no common version) is this
                    # broker's: try the next one, and this one last next time.
                    if isinstance(exc, ClientClosedError) or exc.error_code in ACCESS_DENIED_CODES:
                        raise
                    why = f"{type(exc).__name__}: {exc}"
                    failures[(host, port)] = why
                    self.pool.note_failure(host, port)
                    log.warning(
                        "metadata from %s failed, trying another broker: %s",
                        f"broker {node_id} ({host}:{port})"
                        if node_id is not None
                        else f"{host}:{port}",
                        why,
                    )
                    continue
                assert isinstance(response, MetadataResponse)
                self.snapshot = self.snapshot.merged(
                    response,
                    replace_topics=topics is None,
                    keep=None if topics is None else self._tracked | topics,
                )
                return self.snapshot
            rounds += 1
            if time.monotonic() >= deadline:
                tried = "; ".join(f"{h}:{p}: {why}" for (h, p), why in failures.items())
                if bootstrapping:
                    raise BootstrapError(
                        f"no bootstrap server answered within {timeout_ms} ms "
                        f"(bootstrap_timeout_ms) (tried {tried or 'nothing'}). Check "
                        "bootstrap_servers (host and port of the listener for this "
                        "security_protocol) and that "
                        "the brokers are up and reachable from here.",
                        {f"{h}:{p}": why for (h, p), why in failures.items()},
                    )
                raise KafkaTimeoutError(
                    f"no broker answered a metadata request within default_api_timeout_ms="
                    f"{timeout_ms} (tried {tried or 'nothing'}). "
                    "Check bootstrap_servers and that the brokers are up and reachable."
                )
            if not bootstrapping and rounds == 1:
                tried = "; ".join(f"{h}:{p}: {why}" for (h, p), why in failures.items())
                log.warning("no broker answered a metadata request; retrying: %s", tried)
            backoff = min(
                self.config.retry_backoff_max_ms, self.config.retry_backoff_ms * 2**rounds
            )
            await asyncio.sleep(min(backoff / 1000, max(0.0, deadline - time.monotonic())))

    def apply_leader_hint(
        self,
        tp: TopicPartition,
        leader: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> bool:
        """Take a KIP-951 new-leader hint from a Produce or Fetch response.

        Applied only when ``leader_epoch`` is newer than the known one. Returns whether the
        snapshot changed.
        """
        if leader < 0 or leader_epoch < 0:
            return False
        updated = self.snapshot.with_leader(tp, leader, leader_epoch, broker)
        changed = updated is not self.snapshot
        self.snapshot = updated
        if changed:
            self.leader_hints_applied += 1
            log.debug("%s: leader %d (epoch %d) from a KIP-951 hint", tp, leader, leader_epoch)
        return changed

    # -- connections and requests -----------------------------------------------------------

    async def connection(self, node_id: int, lane: Lane = Lane.CONTROL) -> BrokerConnection:
        """Return a connection to broker ``node_id`` for ``lane``.

        Raises:
            NetworkError: the broker is not in the metadata (even after a refresh), or it
                cannot be reached.
        """
        broker = self.snapshot.brokers.get(node_id)
        if broker is None:
            await self.refresh()
            broker = self.snapshot.brokers.get(node_id)
            if broker is None:
                raise NetworkError(f"broker {node_id} is not in the cluster metadata")
        return await self.pool.get(broker.host, broker.port, lane, node_id)

    async def any_connection(self, lane: Lane = Lane.CONTROL) -> BrokerConnection:
        """Return a connection to some live broker, preferring one already open."""
        for conn in self.pool.connections():
            if not conn.closed and conn.node_id is not None:
                return conn
        if not self.snapshot.brokers:
            await self.refresh()
        errors = []
        for _ in range(2):
            brokers = list(self.snapshot.brokers.values())
            random.shuffle(brokers)
            brokers.sort(key=lambda b: self.pool.backoff_remaining(b.host, b.port))
            for broker in brokers:
                try:
                    return await self.pool.get(broker.host, broker.port, lane, broker.node_id)
                except (NetworkError, KafkaTimeoutError) as exc:
                    errors.append(f"broker {broker.node_id}: {exc}")
            await self.refresh()
        raise NetworkError("no broker reachable: " + "; ".join(errors))

    async def send(
        self,
        node_id: int | None,
        request: Request,
        *,
        lane: Lane = Lane.CONTROL,
        timeout_ms: float | None = None,
    ) -> Response:
        """Send ``request`` to broker ``node_id`` (None: any broker) and return the response.

        Raises what :meth:`BrokerConnection.request` raises.
        """
        conn = (
            await self.any_connection(lane)
            if node_id is None
            else await self.connection(node_id, lane)
        )
        return await conn.request(request, timeout_ms=timeout_ms)

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        """Return the node id of the coordinator of group ``key`` (``key_type`` 0) or of
        transactional id ``key`` (``key_type`` 1), asking any broker once.

        Raises:
            CoordinatorNotAvailableError, ...: the broker's error for the key (typed; the
                coordinator errors are retriable).
            NetworkError, KafkaTimeoutError: no broker answered.
        """
        conn = await self.any_connection()
        version = conn.version_for(FindCoordinatorRequest)
        # KIP-699 (v4) batches keys; earlier versions take one key.
        request = (
            FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
            if version >= 4
            else FindCoordinatorRequest(key=key, key_type=key_type)
        )
        response = await conn.request(request, version=version)
        assert isinstance(response, FindCoordinatorResponse)
        if response.coordinators:
            c = response.coordinators[0]
            code, message, node = c.error_code, c.error_message, c.node_id
        else:  # versions before 4 answer for one key at the top level
            code, message, node = response.error_code, response.error_message, response.node_id
        if code:
            raise error_from_code(code, f"FindCoordinator for {key!r}: {message or code}")
        return node

    async def close(self) -> None:
        """Stop any refresh and close every connection (bounded: see
        :meth:`ConnectionPool.close`). Cancelling it still closes everything, then
        re-raises."""
        self._closed = True
        self._refresh = None
        try:
            await self._scope.aclose()
        finally:
            await self.pool.close()
