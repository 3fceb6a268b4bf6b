"""The Admin client's offset calls: offsets by spec (ListOffsets) and record deletion
(DeleteRecords), each sent to the partitions' leaders, one request per leader at once.
Which leader gets what, the ListOffsets request and its answer are
:mod:`aiostream_kafka.requests.offsets`' (shared with the consumer)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from aiostream_kafka.admin.plumbing import AdminCore, Retry, broker_error
from aiostream_kafka.admin.types import ListOffsetsResult, OffsetAndTimestamp, OffsetSpec
from aiostream_kafka.cluster.metadata import ClusterSnapshot
from aiostream_kafka.concurrency import gather_all
from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsResponse
from aiostream_kafka.requests.offsets import (
    ISOLATION_LEVELS,
    by_leader,
    list_offsets_request,
    list_offsets_results,
)
from aiostream_kafka.structs import TopicPartition

__all__ = ["OffsetCalls"]


class OffsetCalls(AdminCore):
    """Offsets and records (``Admin``'s calls of that area)."""

    async def leaders(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[int, list[TopicPartition]]:
        """Group ``partitions`` by their leader in fresh metadata; returns leader node id ->
        its partitions.

        Raises (for the first partition in trouble, in the order given): the topic's
        metadata error (``UnknownTopicOrPartitionError`` final: the metadata is fresh);
        ``UnknownTopicOrPartitionError``, not retriable, for a partition the topic does not
        have; :class:`Retry` for an unknown topic or a partition without a reachable leader.
        """
        parts = list(partitions)
        snapshot = await self.cluster.ensure_fresh({tp.topic for tp in parts})
        grouped, leaderless = by_leader(snapshot, parts)
        lacking = set(leaderless)
        for tp in parts:
            topic = snapshot.topics.get(tp.topic)
            if topic is not None and topic.error_code != 0:
                self.raise_first(
                    {tp.topic: broker_error(topic.error_code, f"topic {tp.topic!r}")},
                    final=(ec.UnknownTopicOrPartitionError,),
                )
            if tp in lacking:
                _raise_leaderless(snapshot, tp)
        return grouped

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Does :meth:`Admin.list_offsets` (documented there)."""
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', "
                f"got {isolation_level!r}"
            )
        level = ISOLATION_LEVELS[isolation_level]
        pending = dict(specs)
        results: dict[TopicPartition, ListOffsetsResult] = {}

        async def attempt() -> dict[TopicPartition, ListOffsetsResult]:
            grouped = await self.leaders(pending)
            answers = await gather_all(
                *(
                    self._list_offsets_on(leader, {tp: pending[tp].timestamp for tp in tps}, level)
                    for leader, tps in grouped.items()
                )
            )
            errors: dict[str, KafkaError] = {}
            for answer in answers:
                for tp, result in answer.items():
                    if isinstance(result, KafkaError):
                        errors[str(tp)] = result
                    else:
                        results[tp] = result
                        pending.pop(tp, None)
            self.raise_first(errors)
            return results

        topics = {tp.topic for tp in specs}
        try:
            return await self.with_retries("list_offsets", attempt, timeout_ms, topics=topics)
        finally:
            self.cluster.untrack(topics)

    async def _list_offsets_on(
        self, leader: int, timestamps: Mapping[TopicPartition, int], isolation_level: int
    ) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
        request = list_offsets_request(
            self.cluster.snapshot,
            timestamps,
            isolation_level=isolation_level,
            timeout_ms=self.config.request_timeout_ms,
        )
        response = await self.cluster.send(leader, request)
        assert isinstance(response, ListOffsetsResponse)
        return list_offsets_results(response)

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Does :meth:`Admin.delete_records` (documented there)."""
        pending = dict(offsets)
        results: dict[TopicPartition, int] = {}

        async def attempt() -> dict[TopicPartition, int]:
            grouped = await self.leaders(pending)

            async def on(leader: int, tps: list[TopicPartition]) -> dict[str, KafkaError]:
                by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
                for tp in tps:
                    by_topic[tp.topic].append(tp)
                request = DeleteRecordsRequest(
                    topics=[
                        DeleteRecordsRequest.DeleteRecordsTopic(
                            name=topic,
                            partitions=[
                                DeleteRecordsRequest.DeleteRecordsPartition(
                                    partition_index=tp.partition, offset=pending[tp]
                                )
                                for tp in parts
                            ],
                        )
                        for topic, parts in by_topic.items()
                    ],
                    timeout_ms=self.config.request_timeout_ms,
                )
                response = await self.cluster.send(leader, request)
                assert isinstance(response, DeleteRecordsResponse)
                errors: dict[str, KafkaError] = {}
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if p.error_code:
                            errors[str(tp)] = broker_error(
                                p.error_code, f"delete_records {tp.topic}[{tp.partition}]"
                            )
                        else:
                            results[tp] = p.low_watermark
                            pending.pop(tp, None)
                return errors

            all_errors: dict[str, KafkaError] = {}
            for errors in await gather_all(*(on(n, t) for n, t in grouped.items())):
                all_errors.update(errors)
            self.raise_first(all_errors)
            return results

        try:
            return await self.with_retries(
                "delete_records", attempt, timeout_ms, topics={tp.topic for tp in offsets}
            )
        finally:
            self.cluster.untrack({tp.topic for tp in offsets})


def _raise_leaderless(snapshot: ClusterSnapshot, tp: TopicPartition) -> None:
    """Raise why ``tp`` has no leader to ask (see :meth:`OffsetCalls.leaders`)."""
    topic = snapshot.topics.get(tp.topic)
    meta = snapshot.partition(tp)
    if meta is None:
        if topic is not None:
            missing = ec.UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist "
                f"(it has {len(topic.partitions)} partitions)"
            )
            missing.retriable = False  # the metadata is fresh: waiting will not help
            raise missing
        raise Retry(ec.UnknownTopicOrPartitionError(f"topic {tp.topic!r} is unknown"))
    if meta.leader < 0:
        raise Retry(ec.LeaderNotAvailableError(f"{tp} has no leader"))
    raise Retry(
        ec.LeaderNotAvailableError(
            f"{tp}: its leader, broker {meta.leader}, is not in the metadata"
        )
    )
