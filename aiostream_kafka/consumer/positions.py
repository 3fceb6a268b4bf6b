"""Where partitions are read from: the offset resolver task and offset look-ups.

The resolver (one task) does the consumer's control-plane work, off the fetch path and on
the CONTROL lane:

* **metadata** -- refreshes when a fetcher or the scheduler asks (a leader moved, a topic
  is unknown), rate-limited by ``retry_backoff_ms`` doubling to ``retry_backoff_max_ms``,
  and every ``metadata_max_age_ms``; after each it checks every assigned partition: a topic
  absent from the cluster for ``missing_topic_timeout_ms`` (never created, or deleted while
  consumed), or re-created under a new topic id, fails the partition with
  :class:`TopicDeletedError`;
* **resets** -- a partition without a position gets one from ListOffsets (earliest or
  latest; with ``read_committed`` "latest" is the last stable offset), or, with
  ``auto_offset_reset="none"``, a :class:`NoOffsetForPartitionError` on its iterators;
* **validation** (KIP-320) -- when a partition's leader epoch grows, the new leader is
  asked (OffsetForLeaderEpoch) where the epoch of the last fetched batch ends. If that is
  below the fetch position the log was truncated (an unclean election): the partition
  seeks to the divergence point, or raises :class:`LogTruncationError` with
  ``auto_offset_reset="none"``. Fetching waits for the answer.

Every result is applied only if the partition is still at the generation it had when the
request left, so a seek made meanwhile wins.

An error from one broker (no answer, a response that does not decode, no common version
of the API, a non-retriable error about the request rather than the partition) is that
broker's: its partitions are tried again after a back-off and a metadata refresh, the
others go on (a WARNING names the broker). Only errors about the application's access
(authorization, authentication: ``fetcher.ends_consumer``) end the consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol

from aiostream_kafka.admin.types import OffsetAndTimestamp
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.concurrency import gather_all, gather_settled
from aiostream_kafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    UnsupportedVersionError,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from aiostream_kafka.requests.offsets import (
    CONSUMER_REPLICA_ID,
    by_leader,
    list_offsets_request,
    list_offsets_results,
)
from aiostream_kafka.structs import TopicPartition

from .errors import LogTruncationError, NoOffsetForPartitionError, TopicDeletedError
from .fetcher import ends_consumer
from .interfaces import EngineParts, Wakeable
from .partition import PartitionState, PendingError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetAndTimestamp",
    "OffsetResolver",
    "ResolverHost",
    "lookup_offsets",
]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
_STRATEGY_TIMESTAMP = {"earliest": EARLIEST, "latest": LATEST}
_UNKNOWN_TOPIC = 3


async def _list_offsets_on(
    cluster: Cluster,
    leader: int,
    specs: Mapping[TopicPartition, int],
    isolation_level: int,
    timeout_ms: int,
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
    """One ListOffsets to ``leader``; per partition a result or the broker's error."""
    request = list_offsets_request(
        cluster.snapshot, specs, isolation_level=isolation_level, timeout_ms=timeout_ms
    )
    response = await cluster.send(leader, request, timeout_ms=timeout_ms)
    assert isinstance(response, ListOffsetsResponse)
    return list_offsets_results(response)


def _epoch_of(cluster: Cluster, tp: TopicPartition) -> int:
    meta = cluster.snapshot.partition(tp)
    return -1 if meta is None else meta.leader_epoch


async def lookup_offsets(
    cluster: Cluster,
    specs: Mapping[TopicPartition, int],
    *,
    isolation_level: int,
    timeout_ms: int,
    request_timeout_ms: int,
    retry_backoff_ms: int,
    retry_backoff_max_ms: int,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """Look up an offset per partition (a timestamp, or -2 earliest / -1 latest),
    retrying retriable errors with back-off and metadata refreshes until ``timeout_ms``.

    Raises:
        KafkaTimeoutError: not every partition answered in time; names the last error.
        UnknownTopicOrPartitionError: a topic or partition does not exist.
        KafkaError: a non-retriable broker error.
    """
    pending = dict(specs)
    found: dict[TopicPartition, OffsetAndTimestamp] = {}
    deadline = time.monotonic() + timeout_ms / 1000
    backoff = retry_backoff_ms
    last: BaseException | None = None
    cluster.track({tp.topic for tp in pending})
    await cluster.ensure_fresh({tp.topic for tp in pending})
    while pending:
        snapshot = cluster.snapshot
        for tp in list(pending):
            topic = snapshot.topics.get(tp.topic)
            if topic is not None and topic.error_code == _UNKNOWN_TOPIC and last is not None:
                raise TopicDeletedError(tp, "the topic does not exist")
            if topic is not None and topic.error_code == 0 and tp.partition not in topic.partitions:
                raise TopicDeletedError(
                    tp, f"the topic has {len(topic.partitions)} partitions, not {tp.partition + 1}"
                )
        groups, leaderless = by_leader(cluster.snapshot, pending)
        if leaderless:
            last = ec.LeaderNotAvailableError(f"no leader known for {leaderless[0]}")
        results = await gather_settled(
            *(
                _list_offsets_on(
                    cluster,
                    leader,
                    {tp: pending[tp] for tp in tps},
                    isolation_level,
                    request_timeout_ms,
                )
                for leader, tps in groups.items()
            )
        )
        for outcome in results:
            if isinstance(outcome, Exception):
                # One broker's failure (even one that does not decode, or shares no
                # version of ListOffsets with us) is retried: the leader may move.
                if not isinstance(outcome, KafkaError) or ends_consumer(outcome):
                    raise outcome
                last = outcome
                continue
            for tp, result in outcome.items():
                if isinstance(result, KafkaError):
                    if not result.retriable:
                        raise result
                    last = result
                else:
                    found[tp] = result
                    pending.pop(tp, None)
        if not pending:
            break
        if time.monotonic() + backoff / 1000 >= deadline:
            raise KafkaTimeoutError(
                f"offset look-up for {len(pending)} partition(s) did not succeed within "
                f"{timeout_ms} ms; last error: {type(last).__name__}: {last}"
            ) from last
        await asyncio.sleep(backoff / 1000)
        backoff = min(backoff * 2, retry_backoff_max_ms)
        try:
            await cluster.refresh({tp.topic for tp in pending})
        except KafkaTimeoutError as exc:
            last = exc
    return found


class ResolverHost(EngineParts, Protocol):
    """What the resolver reads of its owner (``engine.FetchEngine``): the assigned
    partitions, the cluster, the settings, the buffer its errors go to, how a position is
    set, reset or failed, and the scheduler to wake once positions are known."""

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionState]: ...
    @property
    def scheduler(self) -> Wakeable: ...

    def reposition(self, ps: PartitionState, offset: int, leader_epoch: int | None) -> None:
        """Move ``ps`` to ``offset`` (seek, reset result, truncation)."""
        ...

    def request_reset(self, ps: PartitionState, strategy: str) -> None:
        """Forget the position of ``ps`` and look one up per ``strategy``."""
        ...

    def fail_partition(self, ps: PartitionState, error: KafkaError) -> None:
        """Stop fetching ``ps`` for good and queue ``error`` for its iterators."""
        ...


class OffsetResolver:
    """The resolver task (see the module doc)."""

    def __init__(self, engine: ResolverHost) -> None:
        self._engine = engine
        self._wake = asyncio.Event()
        self._metadata_wanted = False
        self._last_refresh = 0.0
        self._refresh_streak = 0
        self._warned: dict[tuple[int, str, type[BaseException]], float] = {}

    def wake(self) -> None:
        """Look at the partitions again soon (metadata changed, partitions assigned...)."""
        self._wake.set()

    def request_metadata(self) -> None:
        """Ask for a metadata refresh (rate-limited)."""
        self._metadata_wanted = True
        self._wake.set()

    def check_topic(self, ps: PartitionState) -> None:
        """A broker does not know ``ps``'s topic (id): refresh and see whether it is gone."""
        self.request_metadata()

    async def run(self) -> None:
        """The resolver task's body; runs until cancelled."""
        wake = self._wake
        while True:
            wake.clear()
            delay = await self._step()
            if delay is None:
                await wake.wait()
            elif delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await wake.wait()
                except TimeoutError:
                    pass

    # -- one pass ----------------------------------------------------------------------------

    def _refresh_interval(self) -> float:
        client = self._engine.client
        backoff = client.retry_backoff_ms * 2.0 ** min(self._refresh_streak, 20)
        return min(client.retry_backoff_max_ms, backoff) / 1000

    async def _step(self) -> float | None:
        engine = self._engine
        now = time.monotonic()
        due: list[float] = []
        if engine.partitions:
            snapshot = engine.cluster.snapshot
            wanted = self._metadata_wanted or any(
                ps.topic_id is None or snapshot.partition(ps.tp) is None
                for ps in engine.partitions.values()
                if not ps.failed
            )
            next_allowed = self._last_refresh + self._refresh_interval()
            last = max(self._last_refresh, snapshot.fetched_at)
            max_age = last + engine.client.metadata_max_age_ms / 1000
            if (wanted and now >= next_allowed) or now >= max_age:
                await self._refresh(wanted)
                now = time.monotonic()
            elif wanted:
                due.append(next_allowed)
            else:
                due.append(max_age)
        else:
            self._refresh_streak = 0
        due.extend(self._check_metadata(now))
        resets = []
        validations = []
        for ps in engine.partitions.values():
            if ps.failed or ps.blocked:
                continue
            if ps.reset_strategy is not None or ps.validating:
                if ps.retry_at > now:
                    due.append(ps.retry_at)
                elif ps.reset_strategy is not None:
                    resets.append(ps)
                else:
                    validations.append(ps)
        if resets or validations:
            await gather_all(self._reset(resets), self._validate(validations))
            engine.scheduler.wake()
            return 0.0  # look again: results may have made more work (or unblocked some)
        if not due:
            return None
        return max(0.0, min(due) - time.monotonic())

    async def _refresh(self, wanted: bool) -> None:
        engine = self._engine
        self._metadata_wanted = False
        self._last_refresh = time.monotonic()
        self._refresh_streak = self._refresh_streak + 1 if wanted else 0
        topics = {tp.topic for tp in engine.partitions}
        try:
            await engine.cluster.refresh(topics)
        except KafkaError as exc:
            if ends_consumer(exc):
                raise
            log.warning("metadata refresh failed: %s", exc)
            self._metadata_wanted = True
        engine.scheduler.wake()

    def _check_metadata(self, now: float) -> list[float]:
        """Compare every assigned partition with the metadata; return timers to honour."""
        engine = self._engine
        snapshot = engine.cluster.snapshot
        timeout = engine.config.missing_topic_timeout_ms / 1000
        due: list[float] = []
        for ps in list(engine.partitions.values()):
            if ps.failed:
                continue
            tp = ps.tp
            topic = snapshot.topics.get(tp.topic)
            if topic is not None and topic.error_code not in (0, _UNKNOWN_TOPIC):
                error = ec.error_from_code(
                    topic.error_code, f"metadata for {tp.topic}[{tp.partition}]"
                )
                if not error.retriable:
                    engine.fail_partition(ps, error)
                continue
            if topic is None:
                continue  # not asked about yet: the next refresh includes it
            meta = None if topic.error_code else topic.partitions.get(tp.partition)
            if meta is None:
                if ps.missing_since is None:
                    ps.missing_since = now
                    self._metadata_wanted = True
                if now - ps.missing_since >= timeout:
                    detail = (
                        "the topic was deleted while the partition was being consumed"
                        if ps.topic_id is not None
                        else (
                            "the topic does not exist"
                            if topic.error_code
                            else f"the topic has only {len(topic.partitions)} partition(s)"
                        )
                    )
                    engine.fail_partition(ps, TopicDeletedError(tp, detail))
                else:
                    due.append(ps.missing_since + timeout)
                    self._metadata_wanted = True
                continue
            ps.missing_since = None
            if ps.topic_id is None:
                ps.topic_id = topic.topic_id
            elif ps.topic_id != topic.topic_id:
                engine.fail_partition(
                    ps,
                    TopicDeletedError(
                        tp, "the topic was deleted and re-created (new topic id) while consumed"
                    ),
                )
                continue
            if meta.leader_epoch > ps.leader_epoch:
                if (
                    ps.leader_epoch >= 0
                    and ps.fetch_epoch is not None
                    and ps.reset_strategy is None
                    and ps.fetch_position is not None
                ):
                    ps.validating = True
                    ps.retry_at = 0.0
                ps.leader_epoch = meta.leader_epoch
                ps.read_replica = None  # a new leader: ask it where to fetch from (KIP-392)
                engine.scheduler.wake()
        return due

    async def _reset(self, partitions: list[PartitionState]) -> None:
        engine = self._engine
        if not partitions:
            return
        todo: dict[TopicPartition, PartitionState] = {}
        for ps in partitions:
            if ps.reset_strategy == "none":
                engine.buffer.add_error(ps, PendingError(NoOffsetForPartitionError(ps.tp), None))
            elif ps.reset_strategy is not None:
                todo[ps.tp] = ps
        if not todo:
            return
        # Anything not answered below (a lost request, a partition missing from the
        # response) is tried again after a back-off, not at once.
        self._later(todo.values())
        generations = {tp: ps.generation for tp, ps in todo.items()}
        groups, leaderless = by_leader(engine.cluster.snapshot, todo)
        self._later(todo[tp] for tp in leaderless)
        if leaderless:
            self.request_metadata()
        client = engine.client

        async def on(leader: int, tps: list[TopicPartition]) -> None:
            specs = {tp: _STRATEGY_TIMESTAMP[todo[tp].reset_strategy or "earliest"] for tp in tps}
            try:
                results = await _list_offsets_on(
                    engine.cluster,
                    leader,
                    specs,
                    engine.config.isolation,
                    client.request_timeout_ms,
                )
            except (NetworkError, KafkaTimeoutError) as exc:
                log.info("offset reset via broker %d failed: %s", leader, exc)
                self._later(todo[tp] for tp in tps)
                self.request_metadata()
                return
            except KafkaError as exc:
                if exc.retriable:
                    log.info("offset reset via broker %d failed: %s", leader, exc)
                elif ends_consumer(exc):
                    raise
                else:
                    self._broker_failed(leader, "ListOffsets", exc)
                self._later(todo[tp] for tp in tps)
                self.request_metadata()
                return
            for tp, result in results.items():
                ps = todo.get(tp)
                if ps is None or not ps.assigned or ps.generation != generations[tp]:
                    continue
                if isinstance(result, KafkaError):
                    if result.retriable:
                        self._later([ps])
                        self.request_metadata()
                    else:
                        engine.buffer.add_error(ps, PendingError(result, None, retry=True))
                    continue
                log.debug(
                    "%s[%d]: position reset to %s offset %d",
                    tp.topic,
                    tp.partition,
                    ps.reset_strategy,
                    result.offset,
                )
                engine.buffer.metrics.position_resets += 1
                engine.reposition(ps, result.offset, result.leader_epoch)

        await gather_all(*(on(leader, tps) for leader, tps in groups.items()))

    async def _validate(self, partitions: list[PartitionState]) -> None:
        engine = self._engine
        if not partitions:
            return
        todo = {ps.tp: ps for ps in partitions}
        self._later(partitions)
        asked = {tp: (ps.generation, ps.fetch_position, ps.fetch_epoch) for tp, ps in todo.items()}
        groups, leaderless = by_leader(engine.cluster.snapshot, todo)
        self._later(todo[tp] for tp in leaderless)
        if leaderless:
            self.request_metadata()

        async def on(leader: int, tps: list[TopicPartition]) -> None:
            by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append(tp)
            request = OffsetForLeaderEpochRequest(
                replica_id=CONSUMER_REPLICA_ID,
                topics=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                        topic=topic,
                        partitions=[
                            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                                partition=tp.partition,
                                current_leader_epoch=_epoch_of(engine.cluster, tp),
                                leader_epoch=asked[tp][2] or 0,
                            )
                            for tp in parts
                        ],
                    )
                    for topic, parts in by_topic.items()
                ],
            )
            try:
                response = await engine.cluster.send(leader, request)
            except UnsupportedVersionError:
                for tp in tps:  # nothing to validate against: trust the position
                    todo[tp].validating = False
                return
            except (NetworkError, KafkaTimeoutError) as exc:
                log.info("position validation via broker %d failed: %s", leader, exc)
                self._later(todo[tp] for tp in tps)
                self.request_metadata()
                return
            except KafkaError as exc:
                if exc.retriable:
                    log.info("position validation via broker %d failed: %s", leader, exc)
                elif ends_consumer(exc):
                    raise
                else:
                    self._broker_failed(leader, "OffsetForLeaderEpoch", exc)
                self._later(todo[tp] for tp in tps)
                self.request_metadata()
                return
            assert isinstance(response, OffsetForLeaderEpochResponse)
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.topic, p.partition)
                    ps = todo.get(tp)
                    if ps is None or not ps.assigned or not ps.validating:
                        continue
                    generation, position, _epoch = asked[tp]
                    if ps.generation != generation or position is None:
                        continue
                    self._validated(ps, position, p)

        await gather_all(*(on(leader, tps) for leader, tps in groups.items()))

    def _validated(
        self,
        ps: PartitionState,
        position: int,
        answer: OffsetForLeaderEpochResponse.EpochEndOffset,
    ) -> None:
        engine = self._engine
        tp = ps.tp
        engine.buffer.metrics.position_validations += 1
        if answer.error_code:
            error = ec.error_from_code(answer.error_code, f"OffsetForLeaderEpoch for {tp}")
            if error.retriable:
                self._later([ps])
                self.request_metadata()
            else:
                engine.buffer.add_error(ps, PendingError(error, position, retry=True))
                ps.validating = False
            return
        policy = engine.config.auto_offset_reset
        if answer.end_offset < 0 or answer.leader_epoch < 0:
            # The leader knows nothing of the epoch we fetched under (its epoch cache was
            # truncated): the position cannot be checked; start over as configured.
            log.warning(
                "%s[%d]: the leader cannot validate fetch position %d; resetting (%s)",
                tp.topic,
                tp.partition,
                position,
                policy,
            )
            engine.request_reset(ps, policy)
            return
        if answer.end_offset < position:
            engine.buffer.metrics.log_truncations += 1
            if policy == "none":
                ps.validating = False
                engine.buffer.add_error(
                    ps,
                    PendingError(LogTruncationError(tp, position, answer.end_offset), position),
                )
                return
            log.warning(
                "%s[%d]: log truncation detected (KIP-320): fetch position %d, the new leader's "
                "log diverges at %d; continuing from there",
                tp.topic,
                tp.partition,
                position,
                answer.end_offset,
            )
            engine.reposition(ps, answer.end_offset, answer.leader_epoch)
            return
        ps.validating = False
        engine.scheduler.wake()

    def _broker_failed(self, node_id: int, api: str, exc: KafkaError) -> None:
        """``node_id`` failed a request in a way that concerns the broker, not the
        partitions: WARNING (at most once a minute per broker and kind); the caller
        retries later. The CONTROL connection is kept: others share it, and the frame
        that did not decode was read whole, so the stream is still in step."""
        now = time.monotonic()
        key = (node_id, api, type(exc))
        if self._warned.get(key, 0.0) <= now:
            self._warned[key] = now + 60.0
            log.warning(
                "%s to broker %d failed: %s: %s; retrying after a back-off",
                api,
                node_id,
                type(exc).__name__,
                exc,
            )
        else:
            log.info("%s to broker %d failed: %s", api, node_id, exc)

    def _later(self, partitions: Iterable[PartitionState]) -> None:
        client = self._engine.client
        at = time.monotonic() + client.retry_backoff_ms / 1000
        for ps in partitions:
            ps.retry_at = at
