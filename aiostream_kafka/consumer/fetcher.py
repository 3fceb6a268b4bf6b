"""One fetcher per broker: sends the Fetch rounds the scheduler grants and files the data.

A round carries every partition the broker leads that has demand (seed 004, kafka-d: one
fetcher per broker bundles the fetches of every queue with room), through the broker's
incremental fetch session (``fetch_session.py``). The fetcher owns its session; it has at
most one Fetch in flight, on the broker's FETCH-lane connection, so a long poll never
holds up metadata or offset requests.

Filing a response, partition by partition:

* the partition must still be assigned, at the generation and offset the request asked
  for -- else the data is stale (a seek or revocation happened meanwhile) and dropped;
* record batches are CRC-checked, control batches skipped and, with ``read_committed``,
  batches of aborted transactions dropped (KIP-98: the response lists the aborted
  transactions overlapping the data; a producer's batches are aborted from the
  transaction's first offset until its ABORT marker);
* compressed batches are inflated and each batch is admitted against the prefetch budget
  (batches large enough for their codec -- ``compression.worth_offloading`` -- are inflated
  beforehand in a worker thread, those of one response in one job the fetcher awaits;
  filing then takes the results in order, and no partition state is read or changed
  while the thread works);
* the admitted batches become one chunk in the partition's queue and the fetch position
  moves past them (and past skipped batches);
* a corrupt batch ends the partition's data: what came before it is queued, then the error.

Partition errors: a leader change (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) applies
the KIP-951 hint the response carries (new leader and epoch, with its endpoint since
Fetch v16) or asks for a metadata refresh; the partition is then fetched from the new
leader, from the same fetch position, so nothing is skipped or repeated.
OFFSET_OUT_OF_RANGE resets per ``auto_offset_reset``; an unknown topic or topic id makes
the resolver check whether the topic was deleted.

Follower fetching (KIP-392): a leader that answers with a ``preferred_read_replica`` (a
consumer with ``client_rack``, a cluster with a rack-aware ``replica.selector.class``)
sends the partition to that replica's fetcher for ``metadata_max_age_ms``, then the leader
is asked again. Any error for the partition from the replica -- a partition error,
OFFSET_OUT_OF_RANGE included (the replica may lag: never a reset before the leader says
so), or the whole round failing -- sends it back to its leader at once. A leader that
names a replica reads no records, so when the replica is unreachable (or failed the
partition twice in a row) the leader is asked without ``client_rack`` for
``metadata_max_age_ms`` and serves the partition itself. A request to a replica carries
the leader epoch as any other.

Round failures: a lost connection or a timeout fails the round and backs off the broker.
So does an error of the broker rather than of its partitions -- a response that does not
decode, no common version of Fetch, a non-retriable top-level error -- which also drops
the connection and the session (WARNING, naming the broker); the other brokers go on.
Only errors about the application's access (authorization, authentication) end the
consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from aiostream_kafka.cluster.metadata import BrokerMetadata
from aiostream_kafka.concurrency import run_in_worker
from aiostream_kafka.errors import (
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
)
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.compression import OFFLOAD_MIN_BYTES, worth_offloading
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.protocol.records import RecordBatch, iter_batches
from aiostream_kafka.protocol.transactions import ReadCommittedFilter
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.telemetry.stats import keyed_window

from .errors import CorruptPartitionDataError
from .fetch_session import (
    SESSION_ERRORS,
    TOPIC_ID_MIN_VERSION,
    FetchPlan,
    FetchSession,
    SessionPartition,
)
from .interfaces import EngineParts, ResolverRequests
from .partition import Chunk, PartitionState, PendingError
from .prefetch import inflate
from .scheduler import FetchRound, RoundOutcome

__all__ = ["FetchHost", "Fetcher", "RoundSink"]

log = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1
_CORRUPT_MESSAGE = 2
_LEADER_ERRORS = ec.LEADER_MOVED_CODES
_TOPIC_ERRORS = ec.TOPIC_GONE_CODES
# Broker errors of the same kind are logged at WARNING at most this often per broker.
_WARN_INTERVAL_S = 60.0
# Partition data smaller than this holds no batch worth inflating in a worker thread.
_OFFLOAD_MIN = min(OFFLOAD_MIN_BYTES.values())

# Batches inflated in a worker thread, by (partition, base offset): the inflated batch, or
# the error inflating raised (raised where filing meets the batch).
_Inflated = dict[tuple[TopicPartition, int], RecordBatch | Exception]


def ends_consumer(exc: KafkaError) -> bool:
    """Whether ``exc``, met by a background task, ends the consumer: it concerns the
    application's access (authorization, authentication), which no other broker and no
    retry can fix, or the client was closed. Anything else from one broker is that
    broker's problem: retried, and the other brokers go on."""
    return isinstance(exc, ClientClosedError) or exc.error_code in ec.ACCESS_DENIED_CODES


def _inflate_all(batches: list[RecordBatch]) -> list[RecordBatch | Exception]:
    """Inflate ``batches`` (run in a worker thread: it only reads the response's bytes)."""
    out: list[RecordBatch | Exception] = []
    for batch in batches:
        try:
            out.append(inflate(batch))
        except Exception as exc:
            out.append(exc)
    return out


class _Budget:
    """What a response may admit: the round's reservation plus whatever is free."""

    __slots__ = ("admitted", "allowance", "alone")

    def __init__(self, allowance: int, alone: bool) -> None:
        self.allowance = allowance
        self.admitted = 0
        self.alone = alone  # nothing else is held or reserved: one oversized batch may pass


class RoundSink(Protocol):
    """The scheduler, as a fetcher sees it: told when a granted round ended."""

    def round_done(self, node: int, outcome: RoundOutcome) -> None:
        """Broker ``node``'s round ended with ``outcome`` (paces the next one)."""


class FetchHost(EngineParts, Protocol):
    """What a fetcher reads of its owner (``engine.FetchEngine``): the prefetch buffer it
    fills, the cluster, the settings, the other brokers' fetchers (read replicas), where an
    out-of-range offset goes, and who to tell about a round or ask for metadata."""

    @property
    def fetchers(self) -> Mapping[int, Fetcher]: ...
    @property
    def partition_fetch_bytes(self) -> int: ...
    @property
    def resolver(self) -> ResolverRequests: ...
    @property
    def scheduler(self) -> RoundSink: ...

    def out_of_range(
        self, ps: PartitionState, offset: int, log_start: int, high_watermark: int
    ) -> None:
        """The broker said ``offset`` is outside ``ps``'s log: reset, or queue the error."""
        ...


class Fetcher:
    """The fetcher task of broker ``node_id`` (see the module doc)."""

    #: Highest Fetch version to use even if the broker offers more (None: no cap). For
    #: tests of the older request shapes (topic names before v13, no sessions before v7).
    version_cap: int | None = None

    def __init__(self, engine: FetchHost, node_id: int) -> None:
        self._engine = engine
        self.node_id = node_id
        self.session = FetchSession(node_id)
        self._go = asyncio.Event()
        self._round: FetchRound | None = None
        self._conn: BrokerConnection | None = None
        self._warned: tuple[type[BaseException], float] | None = None
        # Diagnostics (tests, health checks): Fetch requests sent to this broker; records
        # fetched from it, and those of partitions it serves as a follower (KIP-392);
        # partitions it sent to a preferred read replica (as their leader) or back to their
        # leader (as that replica); rounds failed by an error of the broker itself, and the
        # last such error (cleared by a round that succeeds).
        self.requests = 0
        self.records = 0
        self.follower_records = 0
        self.replica_moves = 0
        self.replica_fallbacks = 0
        self.broker_errors = 0
        self.broker_error: KafkaError | None = None
        # Until then (monotonic) requests carry no client_rack: a preferred read replica
        # of partitions this broker leads failed (see _back_to_leader).
        self.rackless_until = 0.0

    def grant(self, fetch_round: FetchRound) -> None:
        """Start ``fetch_round`` (the scheduler grants one at a time per broker)."""
        self._round = fetch_round
        self._go.set()

    async def run(self) -> None:
        """The fetcher task's body; runs until cancelled."""
        engine = self._engine
        while True:
            await self._go.wait()
            self._go.clear()
            fetch_round, self._round = self._round, None
            if fetch_round is None:
                continue
            outcome = RoundOutcome()
            try:
                await self._fetch(fetch_round, outcome)
                if outcome.error is None:
                    self.broker_error = None
            except (NetworkError, KafkaTimeoutError) as exc:
                self._failed(fetch_round, outcome, exc)
            except KafkaError as exc:
                if exc.retriable:
                    self._failed(fetch_round, outcome, exc)
                elif ends_consumer(exc):
                    raise
                else:
                    self._broker_failed(fetch_round, outcome, exc)
            finally:
                for ps in fetch_round.partitions:
                    if ps.in_flight == self.node_id:
                        ps.in_flight = None
                engine.buffer.unreserve(fetch_round.reservation)
                engine.scheduler.round_done(self.node_id, outcome)

    def _failed(self, fetch_round: FetchRound, outcome: RoundOutcome, exc: KafkaError) -> None:
        log.info("fetch from broker %d failed: %s", self.node_id, exc)
        outcome.error = exc
        self.session.on_failure()
        self._engine.buffer.metrics.fetch_errors += 1
        for ps in fetch_round.partitions:
            if ps.read_replica == self.node_id:
                self._back_to_leader(ps, f"the round failed: {exc}", unreachable=True)
        self._engine.resolver.request_metadata()

    def _broker_failed(
        self, fetch_round: FetchRound, outcome: RoundOutcome, exc: KafkaError
    ) -> None:
        """An error of this broker, not of the partitions (see the module doc): fail the
        round as a lost connection does, and drop the connection (the session goes with
        the round). The scheduler backs the broker off; the other brokers go on."""
        self.broker_errors += 1
        self.broker_error = exc
        now = time.monotonic()
        kind = type(exc)
        if self._warned is None or self._warned[0] is not kind or now >= self._warned[1]:
            self._warned = (kind, now + _WARN_INTERVAL_S)
            log.warning(
                "fetch from broker %d failed: %s: %s; retrying that broker after a back-off "
                "(the other brokers are not affected)",
                self.node_id,
                kind.__name__,
                exc,
            )
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.abandon(NetworkError(f"dropped after an error of broker {self.node_id}: {exc}"))
        self._failed(fetch_round, outcome, exc)

    def _back_to_leader(self, ps: PartitionState, why: str, *, unreachable: bool = False) -> None:
        """Stop fetching ``ps`` from its preferred read replica (this broker): the next
        round, at once, asks its leader.

        A leader that still counts the replica in sync names it again, and answers
        nothing else (a leader that names a preferred replica reads no records). So when
        the replica is ``unreachable`` (the round failed: no answer, a lost connection,
        an error of the broker) or failed the partition twice in a row, the leader is
        asked without ``client_rack`` for ``metadata_max_age_ms``: it serves its
        partitions itself, across racks, rather than not at all."""
        engine = self._engine
        ps.read_replica = None
        ps.read_replica_failures += 1
        ps.retry_at = 0.0
        self.replica_fallbacks += 1
        log.info(
            "%s[%d]: back to the leader after fetching from replica %d (%s)",
            ps.tp.topic,
            ps.tp.partition,
            self.node_id,
            why,
        )
        if not unreachable and ps.read_replica_failures < 2:
            return
        meta = engine.cluster.snapshot.partition(ps.tp)
        # The leader's fetcher exists once it named the replica (a leader that moved since
        # names it, if at all, in a round of its own first: the next failure finds it).
        leader = None if meta is None else engine.fetchers.get(meta.leader)
        if leader is None or leader is self:
            return
        now = time.monotonic()
        if leader.rackless_until <= now:
            log.warning(
                "replica %d failed to serve %s[%d] (%s); fetching the partitions of broker "
                "%d from it directly, without client_rack, for %d s",
                self.node_id,
                ps.tp.topic,
                ps.tp.partition,
                why,
                leader.node_id,
                engine.client.metadata_max_age_ms // 1000,
            )
        leader.rackless_until = now + engine.client.metadata_max_age_ms / 1000

    async def close_session(self, timeout_ms: int) -> None:
        """Tell the broker to drop our fetch session (best effort, within ``timeout_ms``).

        Sent on the CONTROL lane: a session belongs to the broker, not to a connection, and
        the FETCH connection may still hold a long poll that would delay the request.
        """
        if self.session.session_id == 0:
            return
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                conn = await self._engine.cluster.connection(self.node_id, Lane.CONTROL)
                version = conn.version_for(FetchRequest)
                if self.version_cap is not None:
                    version = max(FetchRequest.MIN_VERSION, min(version, self.version_cap))
                request = self.session.close_request(version)
                if request is not None:
                    await conn.request(request, version=version, timeout_ms=timeout_ms)
        except (KafkaError, TimeoutError) as exc:
            log.debug("closing the fetch session with broker %d: %s", self.node_id, exc)

    # -- one round ---------------------------------------------------------------------------

    async def _fetch(self, fetch_round: FetchRound, outcome: RoundOutcome) -> None:
        engine = self._engine
        config = engine.config
        self._conn = None
        conn = self._conn = await engine.cluster.connection(self.node_id, Lane.FETCH)
        version = conn.version_for(FetchRequest)
        if self.version_cap is not None:
            version = max(FetchRequest.MIN_VERSION, min(version, self.version_cap))
        snapshot = engine.cluster.snapshot
        max_batches = config.max_prefetch_batches
        now = time.monotonic()
        wanted: list[SessionPartition] = []
        asked: dict[TopicPartition, tuple[PartitionState, int]] = {}
        followed: set[TopicPartition] = set()
        for ps in fetch_round.partitions:
            meta = snapshot.partition(ps.tp)
            if (
                ps.in_flight != self.node_id
                or meta is None
                or ps.fetch_node(meta, snapshot.brokers, now) != self.node_id
                or meta.leader_epoch != ps.leader_epoch
                or ps.paused
                or ps.blocked
                or ps.validating
                or ps.reset_strategy is not None
                or ps.fetch_position is None
                or ps.topic_id is None
                or len(ps.queue) >= max_batches
                or not ps.assigned
            ):
                if ps.in_flight == self.node_id:
                    ps.in_flight = None
                continue
            wanted.append(
                SessionPartition(
                    ps.tp,
                    ps.topic_id,
                    ps.fetch_position,
                    meta.leader_epoch,
                    engine.partition_fetch_bytes,
                )
            )
            asked[ps.tp] = (ps, ps.generation)
            if meta.leader != self.node_id:
                followed.add(ps.tp)
        if not wanted:
            return
        session = self.session
        plan = session.plan(wanted, version)
        request = session.request(
            plan,
            version,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=fetch_round.max_bytes,
            isolation_level=config.isolation,
            rack_id="" if now < self.rackless_until else (config.client_rack or ""),
        )
        metrics = engine.buffer.metrics
        metrics.fetch_requests += 1
        self.requests += 1
        if plan.full:
            metrics.full_fetches += 1
        else:
            metrics.incremental_fetches += 1
        metrics.partitions_sent += len(plan.send)
        metrics.partitions_forgotten += len(plan.forget)
        outcome.sent = True
        sent_at = time.monotonic()
        response = await conn.request(
            request,
            version=version,
            timeout_ms=engine.client.request_timeout_ms + config.fetch_max_wait_ms,
        )
        assert isinstance(response, FetchResponse)
        keyed_window(engine.buffer.fetch_latency, self.node_id).record(
            (time.monotonic() - sent_at) * 1000
        )
        metrics.fetch_responses += 1
        metrics.last_fetch_at = time.time()
        resets_before = session.resets
        session.on_response(plan, response.error_code, response.session_id)
        metrics.session_resets += session.resets - resets_before
        outcome.throttle_ms = max(0, response.throttle_time_ms)
        if outcome.throttle_ms:
            metrics.throttled_responses += 1
            metrics.throttle_time_ms += outcome.throttle_ms
        if response.error_code:
            error = ec.error_from_code(
                response.error_code, f"Fetch from broker {self.node_id}: top-level error"
            )
            if response.error_code in SESSION_ERRORS:
                log.debug("broker %d reset the fetch session: %s", self.node_id, error)
                outcome.error = error
                outcome.session_error = True
                return
            if not error.retriable:
                raise error  # run() tells the broker's errors from the consumer's
            outcome.error = error
            for tp in followed:
                self._back_to_leader(asked[tp][0], f"top-level error: {error}")
            engine.resolver.request_metadata()
            return
        inflated = await self._inflate_large(response, plan, asked, version)
        outcome.records = self._file(
            response, plan, asked, followed, version, fetch_round, inflated
        )

    async def _inflate_large(
        self,
        response: FetchResponse,
        plan: FetchPlan,
        asked: dict[TopicPartition, tuple[PartitionState, int]],
        version: int,
    ) -> _Inflated:
        """Inflate in a worker thread the batches of ``response`` that filing will inflate
        and that are large enough for it; return them for :meth:`_file`.

        Picks them as :meth:`_absorb` will meet them (past the fetch offset, not control
        batches, not aborted with ``read_committed``); CRCs and corrupt data are left to
        filing, which reports them where they are. Cancelled, the fetcher stops waiting
        and the thread's result is dropped when it comes.
        """
        if not any(
            pd.records is not None and len(pd.records) >= _OFFLOAD_MIN
            for topic in response.responses
            for pd in topic.partitions
        ):
            return {}
        uses_ids = version >= TOPIC_ID_MIN_VERSION
        read_committed = self._engine.config.isolation == 1
        keys: list[tuple[TopicPartition, int]] = []
        batches: list[RecordBatch] = []
        for topic in response.responses:
            name = plan.topic_names.get(topic.topic_id) if uses_ids else topic.topic
            if name is None:
                continue
            for pd in topic.partitions:
                data = pd.records
                if pd.error_code or data is None or len(data) < _OFFLOAD_MIN:
                    continue
                tp = TopicPartition(name, pd.partition_index)
                sent = plan.wanted.get(tp)
                if sent is None or tp not in asked:
                    continue
                if not isinstance(data, bytes):
                    # iter_batches copies a view once; share that copy with filing.
                    data = pd.records = bytes(data)
                committed = ReadCommittedFilter(pd.aborted_transactions) if read_committed else None
                try:
                    for batch in iter_batches(data, verify_crc=False):
                        if batch.next_offset <= sent.fetch_offset:
                            continue
                        if committed.skip(batch) if committed is not None else batch.is_control:
                            continue
                        if worth_offloading(batch.compression, batch.size_in_bytes):
                            keys.append((tp, batch.base_offset))
                            batches.append(batch)
                except ProtocolError:
                    pass  # filing raises it at the same batch
        if not batches:
            return {}
        results = await run_in_worker(_inflate_all, batches)
        return dict(zip(keys, results, strict=True))

    def _file(
        self,
        response: FetchResponse,
        plan: FetchPlan,
        asked: dict[TopicPartition, tuple[PartitionState, int]],
        followed: set[TopicPartition],
        version: int,
        fetch_round: FetchRound,
        inflated: _Inflated,
    ) -> bool:
        """File every partition of ``response``; return whether any had records.
        ``followed``: partitions asked of this broker as their preferred read replica;
        ``inflated``: batches inflated beforehand (:meth:`_inflate_large`)."""
        engine = self._engine
        buffer = engine.buffer
        budget = _Budget(
            fetch_round.reservation + max(0, buffer.free()),
            buffer.used == 0 and buffer.reserved == fetch_round.reservation,
        )
        endpoints = {
            n.node_id: BrokerMetadata(n.node_id, n.host, n.port, n.rack)
            for n in response.node_endpoints
        }
        uses_ids = version >= TOPIC_ID_MIN_VERSION
        records = False
        wire_admitted = 0
        size_admitted = 0
        for topic in response.responses:
            name = plan.topic_names.get(topic.topic_id) if uses_ids else topic.topic
            if name is None:
                log.debug(
                    "broker %d answered for unknown topic id %s", self.node_id, topic.topic_id
                )
                continue
            for pd in topic.partitions:
                tp = TopicPartition(name, pd.partition_index)
                entry = asked.get(tp)
                sent = plan.wanted.get(tp)
                if entry is None or sent is None:
                    continue
                ps, generation = entry
                if (
                    not ps.assigned
                    or ps.generation != generation
                    or ps.fetch_position != sent.fetch_offset
                ):
                    continue  # sought, reset or revoked while the fetch was out
                follower = tp in followed
                if pd.error_code:
                    if follower:
                        self._replica_error(ps, pd, endpoints)
                    else:
                        self._partition_error(ps, sent, pd, endpoints)
                    continue
                if follower:
                    ps.read_replica_failures = 0
                elif pd.preferred_read_replica >= 0 and pd.preferred_read_replica != self.node_id:
                    self._prefer(ps, pd.preferred_read_replica)
                ps.high_watermark = pd.high_watermark
                ps.last_stable_offset = pd.last_stable_offset
                ps.log_start_offset = pd.log_start_offset
                data = pd.records
                if data is None or len(data) == 0:
                    if sent.fetch_offset >= pd.high_watermark:
                        buffer.metrics.last_progress_at = time.time()  # caught up
                    continue
                buffer.metrics.last_progress_at = time.time()
                records = True
                fetched = engine.buffer.metrics.fetched_records
                chunk = self._absorb(ps, sent.fetch_offset, data, pd, budget, inflated)
                fetched = engine.buffer.metrics.fetched_records - fetched
                self.records += fetched
                if follower:
                    self.follower_records += fetched
                if chunk is not None:
                    wire_admitted += chunk.wire
                    size_admitted += chunk.size
        buffer.observe_expansion(wire_admitted, size_admitted)
        return records

    def _absorb(
        self,
        ps: PartitionState,
        fetch_offset: int,
        data: bytes | memoryview,
        pd: FetchResponse.PartitionData,
        budget: _Budget,
        inflated: _Inflated,
    ) -> Chunk | None:
        """Turn one partition's record bytes into a queued chunk; return it (if any)."""
        engine = self._engine
        buffer = engine.buffer
        metrics = buffer.metrics
        metrics.fetched_wire_bytes += len(data)
        committed = (
            ReadCommittedFilter(pd.aborted_transactions) if engine.config.isolation == 1 else None
        )
        kept: list[RecordBatch] = []
        size = 0
        wire = 0
        next_offset = fetch_offset
        epoch: int | None = None
        corrupt: KafkaError | None = None
        trimmed = False
        try:
            for batch in iter_batches(data, verify_crc=engine.config.check_crcs):
                if batch.next_offset <= fetch_offset:
                    continue  # wholly before the offset asked for
                batch_wire = batch.size_in_bytes
                metrics.fetched_batch_wire_bytes += batch_wire
                if batch.base_offset < ps.fetched_through:
                    metrics.refetched_bytes += batch_wire
                if committed.skip(batch) if committed is not None else batch.is_control:
                    next_offset = batch.next_offset
                    continue
                done = inflated.pop((ps.tp, batch.base_offset), None) if inflated else None
                if done is None:
                    full = inflate(batch)
                elif isinstance(done, RecordBatch):
                    full = done
                else:
                    raise done
                full_size = full.size_in_bytes
                if budget.admitted + full_size > budget.allowance and not (
                    budget.alone and budget.admitted == 0
                ):
                    metrics.dropped_bytes += batch_wire
                    trimmed = True
                    break
                budget.admitted += full_size
                kept.append(full)
                size += full_size
                wire += batch_wire
                metrics.fetched_records += batch.record_count
                next_offset = batch.next_offset
                if batch.partition_leader_epoch >= 0:
                    epoch = batch.partition_leader_epoch
        except ProtocolError as exc:
            corrupt = CorruptPartitionDataError(ps.tp, next_offset, str(exc))
        metrics.fetched_bytes += size
        if next_offset > ps.fetched_through:
            ps.fetched_through = next_offset
        chunk: Chunk | None = None
        if kept:
            chunk = Chunk(kept, fetch_offset, next_offset, size, wire)
            buffer.add_chunk(ps, chunk)
        ps.fetch_position = next_offset
        if epoch is not None:
            ps.fetch_epoch = epoch
        if corrupt is not None:
            log.warning("%s", corrupt)
            buffer.add_error(ps, PendingError(corrupt, next_offset, retry=True))
        elif trimmed:
            log.debug(
                "%s[%d]: prefetch budget full; the rest of the response is fetched again later",
                ps.tp.topic,
                ps.tp.partition,
            )
        return chunk

    def _prefer(self, ps: PartitionState, replica: int) -> None:
        """This broker, the leader of ``ps``, named ``replica`` as the one to fetch from
        (KIP-392): fetch from it for ``metadata_max_age_ms``, as Java's consumer does."""
        engine = self._engine
        until = time.monotonic() + engine.client.metadata_max_age_ms / 1000
        if ps.prefer_replica(replica, until):
            self.replica_moves += 1
            log.debug(
                "%s[%d]: leader %d prefers replica %d (KIP-392)",
                ps.tp.topic,
                ps.tp.partition,
                self.node_id,
                replica,
            )
            if replica not in engine.cluster.snapshot.brokers:
                engine.resolver.request_metadata()

    def _replica_error(
        self,
        ps: PartitionState,
        pd: FetchResponse.PartitionData,
        endpoints: dict[int, BrokerMetadata],
    ) -> None:
        """An error for ``ps`` from this broker as its preferred read replica: back to the
        leader, which decides (an out-of-range offset here is no reason to reset: the
        replica may be behind; OFFSET_NOT_AVAILABLE, FENCED_LEADER_EPOCH... alike)."""
        code = pd.error_code
        info = ec.ERRORS_BY_CODE.get(code)
        self._back_to_leader(ps, info.name if info is not None else f"error {code}")
        if code in _LEADER_ERRORS or code in _TOPIC_ERRORS:
            if not self._apply_hint(ps, pd, endpoints):
                self._engine.resolver.request_metadata()

    def _apply_hint(
        self,
        ps: PartitionState,
        pd: FetchResponse.PartitionData,
        endpoints: dict[int, BrokerMetadata],
    ) -> bool:
        """Apply the KIP-951 leader hint of ``pd`` if it is news; return whether it was."""
        engine = self._engine
        leader = pd.current_leader
        if leader.leader_id < 0 or leader.leader_epoch < 0:
            return False
        changed = engine.cluster.apply_leader_hint(
            ps.tp, leader.leader_id, leader.leader_epoch, endpoints.get(leader.leader_id)
        )
        if changed:
            engine.buffer.metrics.leader_hints += 1
            engine.resolver.wake()
        return changed

    def _partition_error(
        self,
        ps: PartitionState,
        sent: SessionPartition,
        pd: FetchResponse.PartitionData,
        endpoints: dict[int, BrokerMetadata],
    ) -> None:
        engine = self._engine
        code = pd.error_code
        client = engine.client
        if code == _OFFSET_OUT_OF_RANGE:
            engine.out_of_range(ps, sent.fetch_offset, pd.log_start_offset, pd.high_watermark)
            return
        if code == _CORRUPT_MESSAGE:
            error: KafkaError = CorruptPartitionDataError(
                ps.tp, sent.fetch_offset, "the broker reported CORRUPT_MESSAGE"
            )
            engine.buffer.add_error(ps, PendingError(error, sent.fetch_offset, retry=True))
            return
        ps.retry_at = time.monotonic() + client.retry_backoff_ms / 1000
        if code in _LEADER_ERRORS:
            if self._apply_hint(ps, pd, endpoints):
                ps.retry_at = 0.0
                return
            log.debug("%s[%d] on broker %d: %s", ps.tp.topic, ps.tp.partition, self.node_id, code)
            engine.resolver.request_metadata()
            return
        if code in _TOPIC_ERRORS:
            engine.resolver.check_topic(ps)
            return
        error = ec.error_from_code(
            code, f"fetching {ps.tp.topic}[{ps.tp.partition}] from broker {self.node_id}"
        )
        if error.retriable:
            engine.resolver.request_metadata()
            return
        engine.buffer.add_error(ps, PendingError(error, sent.fetch_offset, retry=True))
