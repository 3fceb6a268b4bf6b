"""The Admin client's consumer group calls: list, describe and delete groups, their
committed offsets (OffsetFetch, built and read by :mod:`aiostream_kafka.requests.offsets`,
as the group's own consumer does) and their lag. Each group's calls go to its
coordinator."""

from __future__ import annotations

from collections.abc import Collection

from aiostream_kafka import _args
from aiostream_kafka.admin.offsets import OffsetCalls
from aiostream_kafka.admin.plumbing import broker_error
from aiostream_kafka.admin.types import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
    OffsetAndMetadata,
    OffsetSpec,
)
from aiostream_kafka.concurrency import gather_all
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from aiostream_kafka.protocol.messages.delete_groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.requests.offsets import (
    committed_offsets,
    offset_fetch_entries,
    offset_fetch_request,
    offset_fetch_uses_topic_ids,
)
from aiostream_kafka.structs import TopicPartition

__all__ = ["GroupCalls"]

# What ListGroups before v5 (no GroupType) lists: every group was classic before KIP-848.
_CLASSIC = "classic"


class GroupCalls(OffsetCalls):
    """Consumer groups (``Admin``'s calls of that area; the lag needs the offsets')."""

    async def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Does :meth:`Admin.list_consumer_groups` (documented there)."""
        snapshot = await self.cluster.ensure_fresh()

        async def on(node: int) -> list[ConsumerGroupListing]:
            async def attempt() -> list[ConsumerGroupListing]:
                response = await self.cluster.send(node, ListGroupsRequest())
                assert isinstance(response, ListGroupsResponse)
                if response.error_code:
                    raise broker_error(
                        response.error_code, f"list_consumer_groups on broker {node}"
                    )
                return [
                    ConsumerGroupListing(
                        g.group_id, g.protocol_type, g.group_state, g.group_type or _CLASSIC
                    )
                    for g in response.groups
                ]

            return await self.with_retries(f"list_consumer_groups on broker {node}", attempt)

        listings = await gather_all(*(on(n) for n in snapshot.brokers))
        return sorted((g for part in listings for g in part), key=lambda g: g.group_id)

    async def describe_consumer_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """Does :meth:`Admin.describe_consumer_groups` (documented there)."""
        _args.names(group_ids, "describe_consumer_groups", "group ids")
        results: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> ConsumerGroupDescription:
                node = await self.find_coordinator(group_id)
                response = await self.cluster.send(node, DescribeGroupsRequest(groups=[group_id]))
                assert isinstance(response, DescribeGroupsResponse)
                g = response.groups[0]
                if g.error_code:
                    raise broker_error(g.error_code, f"group {group_id!r}", g.error_message)
                members = [
                    MemberDescription(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        host=m.client_host,
                        assignment=_decode_assignment(m.member_assignment),
                    )
                    for m in g.members
                ]
                return ConsumerGroupDescription(
                    group_id=g.group_id,
                    state=g.group_state,
                    protocol_type=g.protocol_type,
                    protocol=g.protocol_data,
                    coordinator=node,
                    members=members,
                )

            results[group_id] = await self.with_retries(f"describe group {group_id!r}", attempt)
        return results

    async def delete_consumer_groups(self, group_ids: Collection[str]) -> None:
        """Does :meth:`Admin.delete_consumer_groups` (documented there)."""
        _args.names(group_ids, "delete_consumer_groups", "group ids")
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> None:
                node = await self.find_coordinator(group_id)
                response = await self.cluster.send(
                    node, DeleteGroupsRequest(groups_names=[group_id])
                )
                assert isinstance(response, DeleteGroupsResponse)
                for r in response.results:
                    if r.error_code:
                        raise broker_error(r.error_code, f"group {r.group_id!r}")

            await self.with_retries(f"delete group {group_id!r}", attempt)
            self.coordinators.pop(group_id, None)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Does :meth:`Admin.list_consumer_group_offsets` (documented there)."""
        if partitions is not None:
            _args.collection(
                partitions,
                "list_consumer_group_offsets",
                TopicPartition,
                "list_consumer_group_offsets(group_id, [TopicPartition(topic, partition)])",
            )

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            node = await self.find_coordinator(group_id)
            conn = await self.cluster.connection(node)
            version = conn.version_for(OffsetFetchRequest)
            snapshot = self.cluster.snapshot
            if partitions is not None and offset_fetch_uses_topic_ids(version):
                snapshot = await self.cluster.ensure_fresh({tp.topic for tp in partitions})
            request = offset_fetch_request(
                group_id, partitions, version=version, snapshot=snapshot, coordinator=node
            )
            response = await conn.request(request, version=version)
            assert isinstance(response, OffsetFetchResponse)
            entries = offset_fetch_entries(response, version=version, group_id=group_id)
            if any(entry.topic is None for entry in entries):
                snapshot = await self.cluster.refresh(all_topics=True)
            found, errors = committed_offsets(entries, snapshot, group_id)
            self.raise_first({str(tp): error for tp, error in errors.items()})
            return found

        return await self.with_retries(f"offsets of group {group_id!r}", attempt)

    async def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Does :meth:`Admin.consumer_group_lag` (documented there)."""
        committed = await self.list_consumer_group_offsets(group_id)
        if not committed:
            return {}
        ends = await self.list_offsets({tp: OffsetSpec.latest() for tp in committed})
        return {tp: max(0, ends[tp].offset - om.offset) for tp, om in sorted(committed.items())}


def _decode_assignment(raw: bytes | memoryview) -> list[TopicPartition]:
    data = bytes(raw)
    if len(data) < 2:
        return []
    version = int.from_bytes(data[:2], "big", signed=True)
    version = min(
        max(version, ConsumerProtocolAssignment.MIN_VERSION), ConsumerProtocolAssignment.MAX_VERSION
    )
    try:
        assignment, _ = ConsumerProtocolAssignment.decode_from(memoryview(data), 2, version)
    except KafkaError:
        return []
    return [
        TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions
    ]
