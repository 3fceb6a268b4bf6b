"""Small fakes of the layer below the consumer's and the producer's components, for their
unit tests (tests/unit/): no broker, no socket.

Each fake provides only what the component under test reads or calls today:

* :class:`FakeCluster` -- ``snapshot`` (a real :class:`ClusterSnapshot` built by
  :func:`snapshot`), ``config``, ``send``/``refresh``/``connection`` answered by scripted
  handlers, and the bookkeeping calls the sender makes (``touch``,
  ``expire_idle_topics``, ``apply_leader_hint``);
* :class:`FakeConnection` -- a produce connection answering each request with a handler's
  response, optionally held until the test releases it (requests in flight);
* :class:`FakeEngine` -- the attributes of ``FetchEngine`` that ``PollScheduler`` and
  ``OffsetResolver`` use (the components hold the engine as a back-pointer today; when
  they take small Protocols instead, this class is where the edit goes).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from aiostream_kafka.cluster.metadata import (
    BrokerMetadata,
    ClusterSnapshot,
    PartitionMetadata,
    TopicMetadata,
)
from aiostream_kafka.consumer.partition import PartitionState, PendingError
from aiostream_kafka.consumer.prefetch import PrefetchBuffer
from aiostream_kafka.consumer.scheduler import FetchRound
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.structs import TopicPartition

__all__ = [
    "FakeCluster",
    "FakeConnection",
    "FakeEngine",
    "FakeFetcher",
    "Handler",
    "snapshot",
]

#: Answers one request: a response, or raises (a lost connection, a timeout...).
Handler = Callable[[Request], Response]

TOPIC_IDS: dict[str, uuid.UUID] = {}


def topic_id(name: str) -> uuid.UUID:
    """A stable topic id per topic name (for this test process)."""
    return TOPIC_IDS.setdefault(name, uuid.uuid4())


def snapshot(
    leaders: Mapping[TopicPartition, int],
    *,
    brokers: Iterable[int] = (1, 2, 3),
    epochs: Mapping[TopicPartition, int] | None = None,
    fetched_at: float = 0.0,
) -> ClusterSnapshot:
    """A metadata snapshot: ``leaders`` maps each partition to its leader (-1: none),
    ``epochs`` its leader epoch (default 0); every broker of ``brokers`` is up."""
    topics: dict[str, TopicMetadata] = {}
    for tp, leader in leaders.items():
        topic = topics.get(tp.topic)
        if topic is None:
            topic = topics[tp.topic] = TopicMetadata(tp.topic, topic_id(tp.topic), False, {})
        epoch = (epochs or {}).get(tp, 0)
        replicas = (leader,) if leader >= 0 else ()
        topic.partitions[tp.partition] = PartitionMetadata(
            tp.topic, tp.partition, leader, epoch, replicas, replicas
        )
    return ClusterSnapshot(
        brokers={b: BrokerMetadata(b, "127.0.0.1", 9000 + b) for b in brokers},
        topics=topics,
        fetched_at=fetched_at,
    )


class FakeConnection:
    """A broker connection that answers with ``handler``; while ``gate`` is set to an
    unset event, each request waits for it (a request in flight)."""

    def __init__(self, node_id: int, handler: Handler, version: int = 11) -> None:
        self.node_id = node_id
        self.handler = handler
        self.version = version
        self.closed = False
        self.sent: list[Request] = []
        self.gate: asyncio.Event | None = None

    def version_for(self, request_type: type[Request]) -> int:
        return self.version

    async def request(
        self, request: Request, *, version: int | None = None, expect_response: bool = True
    ) -> Response | None:
        self.sent.append(request)
        if self.gate is not None:
            await self.gate.wait()
        response = self.handler(request)
        return response if expect_response else None


class FakeCluster:
    """What the components use of :class:`~aiostream_kafka.cluster.Cluster`.

    ``handlers`` answer :meth:`send` per request type (a missing type fails the test);
    ``sent`` records ``(node, request)``; :meth:`refresh` counts calls and installs
    ``next_snapshot`` when set. ``connection`` returns (and creates on first use) a
    :class:`FakeConnection` per node answering with ``produce``.
    """

    def __init__(
        self,
        snap: ClusterSnapshot,
        handlers: Mapping[type[Request], Handler] | None = None,
        *,
        produce: Handler | None = None,
        **config: Any,
    ) -> None:
        self.snapshot = snap
        self.handlers = dict(handlers or {})
        self.produce = produce
        settings: dict[str, Any] = {
            "retry_backoff_ms": 10,
            "retry_backoff_max_ms": 40,
            "metadata_max_age_ms": 300_000,
            "metadata_max_idle_ms": 300_000,
        }
        settings.update(config)
        self.config = SimpleNamespace(**settings)
        self.sent: list[tuple[int | None, Request]] = []
        self.refreshes = 0
        self.next_snapshot: ClusterSnapshot | None = None
        self.connections: dict[int, FakeConnection] = {}
        self.hints: list[tuple[TopicPartition, int, int]] = []
        self.touched: set[str] = set()

    async def send(
        self, node: int | None, request: Request, timeout_ms: int | None = None
    ) -> Response:
        self.sent.append((node, request))
        handler = self.handlers.get(type(request))
        assert handler is not None, f"unexpected {type(request).__name__} to broker {node}"
        return handler(request)

    async def refresh(self, topics: Iterable[str] | None = None) -> None:
        self.refreshes += 1
        if self.next_snapshot is not None:
            self.snapshot, self.next_snapshot = self.next_snapshot, None

    async def connection(self, node: int, lane: object = None) -> FakeConnection:
        conn = self.connections.get(node)
        if conn is None:
            assert self.produce is not None, "no produce handler"
            conn = self.connections[node] = FakeConnection(node, self.produce)
        return conn

    def touch(self, topic: str, now: float) -> None:
        self.touched.add(topic)

    def expire_idle_topics(self) -> set[str]:
        return set()

    def apply_leader_hint(
        self, tp: TopicPartition, leader: int, epoch: int, broker: BrokerMetadata | None
    ) -> bool:
        self.hints.append((tp, leader, epoch))
        self.snapshot = snapshot(
            {
                TopicPartition(t.name, p): (leader if (t.name, p) == tp else m.leader)
                for t in self.snapshot.topics.values()
                for p, m in t.partitions.items()
            },
            brokers=self.snapshot.brokers,
            fetched_at=self.snapshot.fetched_at,
        )
        return True


class FakeFetcher:
    """A fetcher that records the rounds the scheduler grants it."""

    def __init__(self) -> None:
        self.rounds: list[FetchRound] = []

    def grant(self, round_: FetchRound) -> None:
        self.rounds.append(round_)


class _Waker:
    """Counts wake/request_metadata calls (the resolver and scheduler, seen by the other)."""

    def __init__(self) -> None:
        self.wakes = 0
        self.metadata_requests = 0

    def wake(self) -> None:
        self.wakes += 1

    def request_metadata(self) -> None:
        self.metadata_requests += 1


class FakeEngine:
    """The ``FetchEngine`` attributes ``PollScheduler`` and ``OffsetResolver`` use.

    ``scheduler`` and ``resolver`` are counting stand-ins (a test of one component replaces
    its own with the real one); ``buffer`` is a real :class:`PrefetchBuffer`; the position
    changes (``reposition``, ``request_reset``, ``fail_partition``) do what the engine
    does to a partition's state and are recorded in ``calls``.
    """

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        max_prefetch_bytes: int = 1 << 20,
        partition_fetch_bytes: int = 64 * 1024,
        **config: Any,
    ) -> None:
        self.cluster = cluster
        settings: dict[str, Any] = {
            "max_prefetch_batches": 2,
            "fetch_max_bytes": 50 * 1024 * 1024,
            "poll_interval_ms": 200,
            "fetch_max_wait_ms": 500,
            "missing_topic_timeout_ms": 60_000,
            "isolation": 0,
            "auto_offset_reset": "earliest",
        }
        settings.update(config)
        self.config = SimpleNamespace(**settings)
        self.client = SimpleNamespace(
            retry_backoff_ms=cluster.config.retry_backoff_ms,
            retry_backoff_max_ms=cluster.config.retry_backoff_max_ms,
            metadata_max_age_ms=cluster.config.metadata_max_age_ms,
            request_timeout_ms=1_000,
        )
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.closed = False
        self.fatal: BaseException | None = None
        self.draining = False
        self.partition_fetch_bytes = partition_fetch_bytes
        self.scheduler: Any = _Waker()
        self.resolver: Any = _Waker()
        self.buffer = PrefetchBuffer(
            max_prefetch_bytes, settings["max_prefetch_batches"], lambda: None
        )
        self.fetchers: dict[int, FakeFetcher] = {}
        self.calls: list[tuple[str, TopicPartition, object]] = []

    def add(
        self,
        tp: TopicPartition,
        *,
        position: int | None = 0,
        reset: str | None = None,
        epoch: int = 0,
    ) -> PartitionState:
        """An assigned partition at ``position`` (fetchable unless ``reset`` is given),
        its topic id and leader epoch as the metadata has them."""
        ps = PartitionState(tp, reset)
        ps.fetch_position = position
        ps.topic_id = topic_id(tp.topic)
        ps.leader_epoch = epoch
        self.partitions[tp] = ps
        return ps

    def fetcher(self, node_id: int) -> FakeFetcher:
        fetcher = self.fetchers.get(node_id)
        if fetcher is None:
            fetcher = self.fetchers[node_id] = FakeFetcher()
        return fetcher

    def reposition(self, ps: PartitionState, offset: int, leader_epoch: int | None) -> None:
        self.calls.append(("reposition", ps.tp, offset))
        self.buffer.discard(ps)
        ps.generation += 1
        ps.fetch_position = offset
        ps.fetch_epoch = leader_epoch
        ps.reset_strategy = None
        ps.validating = False
        ps.retry_at = 0.0

    def request_reset(self, ps: PartitionState, strategy: str) -> None:
        self.calls.append(("reset", ps.tp, strategy))
        ps.generation += 1
        ps.fetch_position = None
        ps.reset_strategy = strategy
        ps.validating = False
        ps.retry_at = 0.0

    def fail_partition(self, ps: PartitionState, error: KafkaError) -> None:
        self.calls.append(("fail", ps.tp, error))
        if not ps.failed:
            self.buffer.add_error(ps, PendingError(error, ps.delivered_position(), fatal=True))
