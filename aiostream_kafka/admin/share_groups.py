"""The Admin client's share group calls (KIP-932, Kafka 4.2+): describe share groups
(ShareGroupDescribe), their share-partition start offsets and lag
(DescribeShareGroupOffsets), and alter or delete those offsets (AlterShareGroupOffsets,
DeleteShareGroupOffsets). Each group's calls go to its coordinator. A share group's
configs (``share.auto.offset.reset``, ``share.record.lock.duration.ms``, ...) are set with
``incremental_alter_configs`` on a ``GROUP`` resource (``configs``)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Mapping

from aiostream_kafka import _args
from aiostream_kafka.admin.offsets import OffsetCalls
from aiostream_kafka.admin.plumbing import broker_error
from aiostream_kafka.admin.types import (
    OffsetSpec,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsetInfo,
)
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from aiostream_kafka.structs import TopicPartition

__all__ = ["ShareGroupCalls"]

_DescribeTopic = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestTopic
_DescribeGroup = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
_AlterTopic = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
_AlterPartition = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition
_DeleteTopic = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic

# The coordinator's word on a topic of the request: a topic it does not know is not retried
# until the deadline (the Admin's other calls retry it while the metadata catches up).
_FINAL = (ec.UnknownTopicOrPartitionError,)


class ShareGroupCalls(OffsetCalls):
    """Share groups (``Admin``'s calls of that area; the lag needs the offsets')."""

    async def describe_share_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ShareGroupDescription]:
        """Does :meth:`Admin.describe_share_groups` (documented there)."""
        _args.names(group_ids, "describe_share_groups", "group ids")
        results: dict[str, ShareGroupDescription] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> ShareGroupDescription:
                node = await self.find_coordinator(group_id)
                response = await self.cluster.send(
                    node, ShareGroupDescribeRequest(group_ids=[group_id])
                )
                assert isinstance(response, ShareGroupDescribeResponse)
                g = response.groups[0]
                if g.error_code:
                    raise broker_error(g.error_code, f"share group {group_id!r}", g.error_message)
                names = await self._share_topic_names(g)
                members = [
                    ShareMemberDescription(
                        member_id=m.member_id,
                        client_id=m.client_id,
                        host=m.client_host,
                        rack=m.rack_id or None,
                        member_epoch=m.member_epoch,
                        subscribed_topics=sorted(m.subscribed_topic_names),
                        assignment=sorted(
                            TopicPartition(names[t.topic_id], p)
                            for t in m.assignment.topic_partitions
                            if t.topic_id in names
                            for p in t.partitions
                        ),
                    )
                    for m in g.members
                ]
                return ShareGroupDescription(
                    group_id=g.group_id,
                    state=g.group_state,
                    coordinator=node,
                    group_epoch=g.group_epoch,
                    assignment_epoch=g.assignment_epoch,
                    assignor=g.assignor_name,
                    members=sorted(members, key=lambda m: m.member_id),
                )

            results[group_id] = await self.with_retries(
                f"describe share group {group_id!r}", attempt
            )
        return results

    async def _share_topic_names(
        self, group: ShareGroupDescribeResponse.DescribedGroup
    ) -> dict[uuid.UUID, str]:
        """The names of the topics assigned in ``group``, by topic id: as the broker sent
        them, else from the cluster metadata (refreshed once when an id is not in it; a
        topic deleted since is left out)."""
        return await self.topic_names(
            (t.topic_id, t.topic_name) for m in group.members for t in m.assignment.topic_partitions
        )

    async def list_share_group_offsets(
        self, group_id: str, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionOffsetInfo]:
        """Does :meth:`Admin.list_share_group_offsets` (documented there)."""
        topics: list[_DescribeTopic] | None = None
        if partitions is not None:
            _args.collection(
                partitions,
                "list_share_group_offsets",
                TopicPartition,
                "list_share_group_offsets(group_id, [TopicPartition(topic, partition)])",
            )
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in partitions:
                by_topic[tp.topic].append(tp.partition)
            topics = [
                _DescribeTopic(topic_name=t, partitions=sorted(ps))
                for t, ps in sorted(by_topic.items())
            ]
            if not topics:
                return {}

        async def attempt() -> dict[TopicPartition, SharePartitionOffsetInfo]:
            node = await self.find_coordinator(group_id)
            request = DescribeShareGroupOffsetsRequest(
                groups=[_DescribeGroup(group_id=group_id, topics=topics)]
            )
            response = await self.cluster.send(node, request)
            assert isinstance(response, DescribeShareGroupOffsetsResponse)
            g = response.groups[0]
            if g.error_code:
                raise broker_error(g.error_code, f"share group {group_id!r}", g.error_message)
            found: dict[TopicPartition, SharePartitionOffsetInfo] = {}
            errors: dict[str, KafkaError] = {}
            for t in g.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.topic_name, p.partition_index)
                    if p.error_code:
                        errors[str(tp)] = broker_error(
                            p.error_code, f"share group {group_id!r} {tp}", p.error_message
                        )
                    elif p.start_offset >= 0:  # -1: the group has no state for it yet
                        found[tp] = SharePartitionOffsetInfo(
                            start_offset=p.start_offset,
                            leader_epoch=p.leader_epoch if p.leader_epoch >= 0 else None,
                            lag=p.lag if p.lag >= 0 else None,
                        )
            self.raise_first(errors, final=_FINAL)
            return dict(sorted(found.items()))

        return await self.with_retries(f"share offsets of group {group_id!r}", attempt)

    async def share_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Does :meth:`Admin.share_group_lag` (documented there)."""
        starts = await self.list_share_group_offsets(group_id)
        lags = {tp: info.lag for tp, info in starts.items() if info.lag is not None}
        # The broker gives no lag before Kafka 4.2 (DescribeShareGroupOffsets v0), nor for
        # a start offset past the high watermark: the high watermark tells there.
        rest = [tp for tp in starts if tp not in lags]
        if rest:
            ends = await self.list_offsets({tp: OffsetSpec.latest() for tp in rest})
            for tp in rest:
                lags[tp] = max(0, ends[tp].offset - starts[tp].start_offset)
        return dict(sorted(lags.items()))

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Does :meth:`Admin.alter_share_group_offsets` (documented there)."""
        if not isinstance(offsets, Mapping):
            raise TypeError(
                "alter_share_group_offsets(group_id, offsets) takes a mapping "
                "{TopicPartition(topic, partition): start_offset}, not "
                f"{type(offsets).__name__}"
            )
        by_topic: dict[str, list[_AlterPartition]] = defaultdict(list)
        for tp, offset in offsets.items():
            if not isinstance(tp, TopicPartition):
                raise TypeError(
                    f"alter_share_group_offsets: the keys are TopicPartition, got {tp!r}"
                )
            by_topic[tp.topic].append(
                _AlterPartition(partition_index=tp.partition, start_offset=int(offset))
            )
        if not by_topic:
            return
        request = AlterShareGroupOffsetsRequest(
            group_id=group_id,
            topics=[
                _AlterTopic(topic_name=t, partitions=sorted(ps, key=lambda p: p.partition_index))
                for t, ps in sorted(by_topic.items())
            ],
        )

        async def attempt() -> None:
            node = await self.find_coordinator(group_id)
            response = await self.cluster.send(node, request)
            assert isinstance(response, AlterShareGroupOffsetsResponse)
            if response.error_code:
                raise broker_error(
                    response.error_code, f"share group {group_id!r}", response.error_message
                )
            errors: dict[str, KafkaError] = {}
            for t in response.responses:
                for p in t.partitions:
                    if p.error_code:
                        tp = TopicPartition(t.topic_name, p.partition_index)
                        errors[str(tp)] = broker_error(
                            p.error_code, f"share group {group_id!r} {tp}", p.error_message
                        )
            self.raise_first(errors, final=_FINAL)

        await self.with_retries(f"alter share offsets of group {group_id!r}", attempt)

    async def delete_share_group_offsets(self, group_id: str, topics: Collection[str]) -> None:
        """Does :meth:`Admin.delete_share_group_offsets` (documented there)."""
        _args.names(topics, "delete_share_group_offsets")
        if not topics:
            return
        request = DeleteShareGroupOffsetsRequest(
            group_id=group_id, topics=[_DeleteTopic(topic_name=t) for t in sorted(set(topics))]
        )

        async def attempt() -> None:
            node = await self.find_coordinator(group_id)
            response = await self.cluster.send(node, request)
            assert isinstance(response, DeleteShareGroupOffsetsResponse)
            if response.error_code:
                raise broker_error(
                    response.error_code, f"share group {group_id!r}", response.error_message
                )
            self.raise_first(
                {
                    t.topic_name: broker_error(
                        t.error_code,
                        f"share group {group_id!r} topic {t.topic_name!r}",
                        t.error_message,
                    )
                    for t in response.responses
                    if t.error_code
                },
                final=_FINAL,
            )

        await self.with_retries(f"delete share offsets of group {group_id!r}", attempt)
