"""The poll scheduler: one task that decides when each broker's next fetch round starts.

fs2-kafka (seed 000) runs a "poll scheduler" beside its consumer loop; here it is the one
place that paces fetching:

* **demand** -- a round to a broker carries exactly the partitions it leads that are
  fetchable now (assigned, positioned, not paused, queue not full, not in another round),
  and those it serves as their preferred read replica (KIP-392, ``client_rack``; see
  ``PartitionState.fetch_node``); a broker with none gets no round;
* **budget** -- a round reserves prefetch bytes before it is granted; when the budget is
  spent nobody fetches until an iterator frees some;
* **poll interval** -- rounds to a broker that return no records start at most every
  ``poll_interval_ms`` (the broker's long poll of up to ``fetch_max_wait_ms`` counts
  towards it; the interval never exceeds ``fetch_max_wait_ms``);
* **throttling** -- a response's ``throttle_time_ms`` (a quota; since Fetch v8 brokers
  answer first and expect the client to hold back, KIP-219) delays that broker's next round;
* **errors** -- a failed round backs off exponentially, ``retry_backoff_ms`` doubling up to
  ``retry_backoff_max_ms``; a partition-level error backs off that partition only.

The scheduler sleeps until something changes (``wake``: a queue freed a slot, a round
ended, a partition was resumed, sought or assigned) or a timer is due. Each wake costs one
pass over the assigned partitions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiostream_kafka.structs import TopicPartition

from .interfaces import EngineParts, MetadataRequests
from .partition import PartitionState

__all__ = ["FetchRound", "PollScheduler", "RoundOutcome", "RoundTaker", "SchedulerHost"]


@dataclass(slots=True)
class FetchRound:
    """What the scheduler grants a fetcher: partitions, reserved bytes, the request cap."""

    partitions: list[PartitionState]
    reservation: int
    max_bytes: int


@dataclass(slots=True)
class RoundOutcome:
    """How a round ended, for pacing the next one."""

    sent: bool = False
    records: bool = False
    throttle_ms: int = 0
    error: BaseException | None = None
    session_error: bool = False


@dataclass(slots=True)
class _Pacing:
    in_flight: bool = False
    not_before: float = 0.0
    failures: int = 0
    rounds: int = field(default=0)
    started: float = 0.0


class RoundTaker(Protocol):
    """A broker's fetcher, as the scheduler sees it: it takes the rounds granted."""

    def grant(self, fetch_round: FetchRound) -> None:
        """Run ``fetch_round`` (one Fetch request) as soon as it can."""


class SchedulerHost(EngineParts, Protocol):
    """What the scheduler reads of its owner (``engine.FetchEngine``): the assigned
    partitions, the prefetch budget, the metadata, the settings, whether it stopped, and
    who to ask for a round, a metadata refresh or a position."""

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionState]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def draining(self) -> bool: ...
    @property
    def fatal(self) -> BaseException | None: ...
    @property
    def partition_fetch_bytes(self) -> int: ...
    @property
    def resolver(self) -> MetadataRequests: ...

    def fetcher(self, node_id: int) -> RoundTaker:
        """The fetcher of broker ``node_id`` (started on first use)."""
        ...


class PollScheduler:
    """Grants fetch rounds to the per-broker fetchers (see the module doc)."""

    def __init__(self, engine: SchedulerHost) -> None:
        self._engine = engine
        self._wake = asyncio.Event()
        self._pacing: dict[int, _Pacing] = {}

    def wake(self) -> None:
        """Re-plan soon: demand, budget or pacing may have changed."""
        self._wake.set()

    async def run(self) -> None:
        """The scheduler task's body; runs until cancelled."""
        wake = self._wake
        while True:
            wake.clear()
            delay = self._plan()
            if delay is None:
                await wake.wait()
            elif delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await wake.wait()
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)

    def _plan(self) -> float | None:
        """Grant every round that may start now; return seconds until the next timer."""
        engine = self._engine
        if engine.closed or engine.fatal is not None:
            return None
        now = time.monotonic()
        due: float | None = None
        snapshot = engine.cluster.snapshot
        max_batches = engine.config.max_prefetch_batches
        groups: dict[int, list[PartitionState]] = {}
        need_metadata = False
        need_resolver = False
        for ps in engine.partitions.values():
            if engine.draining or not ps.fetchable(max_batches):
                continue
            if ps.retry_at > now:
                due = ps.retry_at if due is None else min(due, ps.retry_at)
                continue
            meta = snapshot.partition(ps.tp)
            if meta is None or meta.leader < 0 or meta.leader not in snapshot.brokers:
                need_metadata = True
                continue
            if meta.leader_epoch != ps.leader_epoch:
                # Newer: the resolver validates the position first (KIP-320). Older: the
                # metadata we hold is behind what we already saw.
                if meta.leader_epoch > ps.leader_epoch:
                    need_resolver = True
                else:
                    need_metadata = True
                continue
            replica = ps.read_replica
            node = ps.fetch_node(meta, snapshot.brokers, now)
            if replica is not None and node != replica and now < ps.read_replica_until:
                need_metadata = True  # the replica left the metadata: see what changed
            groups.setdefault(node, []).append(ps)
        if need_metadata:
            engine.resolver.request_metadata()
        elif need_resolver:
            engine.resolver.wake()
        buffer = engine.buffer
        per_partition = engine.partition_fetch_bytes
        for node, parts in groups.items():
            pacing = self._pacing.get(node)
            if pacing is None:
                pacing = self._pacing[node] = _Pacing()
            if pacing.in_flight:
                continue
            if pacing.not_before > now:
                due = pacing.not_before if due is None else min(due, pacing.not_before)
                continue
            free = buffer.free()
            if free < per_partition:
                break  # budget spent: an iterator releasing bytes wakes us
            expansion = buffer.expansion
            cap = min(engine.config.fetch_max_bytes, per_partition * len(parts))
            reservation = min(free, int(cap * expansion))
            max_bytes = max(1, int(reservation / expansion))
            buffer.reserve(reservation)
            for ps in parts:
                ps.in_flight = node
            pacing.in_flight = True
            pacing.started = now
            pacing.rounds += 1
            engine.fetcher(node).grant(FetchRound(parts, reservation, max_bytes))
        if due is None:
            return None
        return max(0.0, due - now)

    def round_done(self, node: int, outcome: RoundOutcome) -> None:
        """A fetcher finished a round: set when the broker may have the next one."""
        pacing = self._pacing.get(node)
        if pacing is None:
            return
        pacing.in_flight = False
        client = self._engine.client
        delay_ms = 0.0
        if outcome.error is not None and not outcome.session_error:
            delay_ms = min(
                client.retry_backoff_max_ms, client.retry_backoff_ms * 2.0**pacing.failures
            )
            pacing.failures = min(pacing.failures + 1, 30)
        else:
            pacing.failures = 0
        if outcome.sent and not outcome.records and outcome.error is None:
            # Rounds that find nothing start at most every poll_interval_ms, the broker's
            # long poll counting towards it; never more than fetch_max_wait_ms apart (a
            # consumer asking for no long poll wants the next records at once).
            config = self._engine.config
            interval = min(config.poll_interval_ms, config.fetch_max_wait_ms)
            elapsed_ms = (time.monotonic() - pacing.started) * 1000
            delay_ms = max(delay_ms, interval - elapsed_ms)
        delay_ms = max(delay_ms, outcome.throttle_ms)
        pacing.not_before = time.monotonic() + delay_ms / 1000
        self.wake()
