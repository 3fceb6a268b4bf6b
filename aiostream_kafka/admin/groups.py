"""The Admin client's consumer group calls: list, describe and delete groups, their
committed offsets (OffsetFetch, built and read by :mod:`aiostream_kafka.requests.offsets`,
as the group's own consumer does) and their lag. Each group's calls go to its
coordinator."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping

from aiostream_kafka import _args
from aiostream_kafka.admin.offsets import OffsetCalls
from aiostream_kafka.admin.plumbing import Retry, broker_error
from aiostream_kafka.admin.types import (
    GROUP_TYPES,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberDescription,
    OffsetAndMetadata,
    OffsetSpec,
)
from aiostream_kafka.concurrency import gather_all
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
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
from aiostream_kafka.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.requests.offsets import (
    committed_offsets,
    offset_commit_topics,
    offset_fetch_entries,
    offset_fetch_request,
    offset_fetch_uses_topic_ids,
)
from aiostream_kafka.structs import TopicPartition

__all__ = ["GroupCalls"]

# What ListGroups before v5 (no GroupType) lists: every group was classic before KIP-848.
_CLASSIC = "classic"
_CONSUMER = "consumer"

# ListGroups v5 (Kafka 3.8) added the group type and its filter.
_LIST_GROUPS_TYPES_VERSION = 5

# ConsumerGroupDescribe v1's MemberType.
_MEMBER_TYPES = {0: _CLASSIC, 1: _CONSUMER}


class GroupCalls(OffsetCalls):
    """Consumer groups (``Admin``'s calls of that area; the lag needs the offsets')."""

    async def list_consumer_groups(
        self, *, types: Collection[str] | None = None
    ) -> list[ConsumerGroupListing]:
        """Does :meth:`Admin.list_consumer_groups` (documented there)."""
        wanted = _group_types(types)
        snapshot = await self.cluster.ensure_fresh()

        async def on(node: int) -> list[ConsumerGroupListing]:
            async def attempt() -> list[ConsumerGroupListing]:
                conn = await self.cluster.connection(node)
                version = conn.version_for(ListGroupsRequest)
                # The broker filters from v5; an older one lists classic groups only, and
                # the filter below applies to every answer (the same rule both ways).
                request = ListGroupsRequest(
                    types_filter=sorted(wanted)
                    if wanted and version >= _LIST_GROUPS_TYPES_VERSION
                    else []
                )
                response = await conn.request(request, version=version)
                assert isinstance(response, ListGroupsResponse)
                if response.error_code:
                    raise broker_error(
                        response.error_code, f"list_consumer_groups on broker {node}"
                    )
                listings = [
                    ConsumerGroupListing(
                        g.group_id, g.protocol_type, g.group_state, g.group_type or _CLASSIC
                    )
                    for g in response.groups
                ]
                if wanted:
                    listings = [g for g in listings if g.group_type.lower() in wanted]
                return listings

            return await self.with_retries(f"list_consumer_groups on broker {node}", attempt)

        listings = await gather_all(*(on(n) for n in snapshot.brokers))
        return sorted((g for part in listings for g in part), key=lambda g: g.group_id)

    async def describe_consumer_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """Does :meth:`Admin.describe_consumer_groups` (documented there).

        Measured on a 4.3.1 broker: ConsumerGroupDescribe answers a classic group with
        GROUP_ID_NOT_FOUND ("... is not a consumer group"), DescribeGroups answers a
        consumer group with GROUP_ID_NOT_FOUND ("... is not a classic group", state
        "Dead"), and both answer so for a group that does not exist. So a coordinator with
        ConsumerGroupDescribe (key 69, Kafka 3.7+) is asked that first, then DescribeGroups;
        an older one only DescribeGroups (every group there is classic).
        """
        _args.names(group_ids, "describe_consumer_groups", "group ids")
        results: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> ConsumerGroupDescription:
                node = await self.find_coordinator(group_id)
                conn = await self.cluster.connection(node)
                new_protocol = conn.api_versions is not None and conn.api_versions.supports(
                    ConsumerGroupDescribeRequest.API_KEY
                )
                if new_protocol:
                    described = await self._describe_consumer_group(conn, node, group_id)
                    if described is not None:
                        return described
                return await self._describe_classic_group(conn, node, group_id, new_protocol)

            results[group_id] = await self.with_retries(f"describe group {group_id!r}", attempt)
        return results

    async def _describe_consumer_group(
        self, conn: BrokerConnection, node: int, group_id: str
    ) -> ConsumerGroupDescription | None:
        """The description of ``group_id`` as a ``"consumer"`` group (ConsumerGroupDescribe),
        or None when the coordinator says it is no such group (a classic one, another
        type, or none)."""
        response = await conn.request(ConsumerGroupDescribeRequest(group_ids=[group_id]))
        assert isinstance(response, ConsumerGroupDescribeResponse)
        g = response.groups[0]
        if g.error_code in (
            ec.GroupIdNotFoundError.error_code,
            ec.UnsupportedVersionError.error_code,
        ):
            return None
        if g.error_code:
            raise broker_error(g.error_code, f"group {group_id!r}", g.error_message)
        names = await self._topic_names(g)
        members = [
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                host=m.client_host,
                assignment=_partitions(m.assignment, names),
                member_epoch=m.member_epoch,
                rack=m.rack_id,
                subscribed_topics=list(m.subscribed_topic_names),
                # A 4.3.1 broker sends "" (not null) when the member subscribed by names.
                subscribed_topic_regex=m.subscribed_topic_regex or None,
                target_assignment=_partitions(m.target_assignment, names),
                member_type=_MEMBER_TYPES.get(m.member_type),
            )
            for m in g.members
        ]
        return ConsumerGroupDescription(
            group_id=g.group_id,
            state=g.group_state,
            protocol_type=_CONSUMER,
            protocol=g.assignor_name,
            coordinator=node,
            members=members,
            type=_CONSUMER,
            group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch,
        )

    async def _topic_names(
        self, group: ConsumerGroupDescribeResponse.DescribedGroup
    ) -> dict[uuid.UUID, str]:
        """The names of the topics the members of ``group`` are assigned, by topic id: as
        the broker sent them, else from the cluster metadata (refreshed once when an id is
        not in it)."""
        return await self.topic_names(
            (t.topic_id, t.topic_name)
            for m in group.members
            for a in (m.assignment, m.target_assignment)
            for t in a.topic_partitions
        )

    async def _describe_classic_group(
        self, conn: BrokerConnection, node: int, group_id: str, new_protocol: bool
    ) -> ConsumerGroupDescription:
        """The description of ``group_id`` as a classic group (DescribeGroups).

        ``new_protocol``: the coordinator knows other group types, and answered
        ConsumerGroupDescribe that this is no consumer group. When DescribeGroups says it
        is no classic group either, the coordinator's listing tells: a share or streams
        group (described by its listing), a group that changed type between the two
        requests (an online migration: asked again), or none (GroupIdNotFoundError).
        """
        response = await conn.request(DescribeGroupsRequest(groups=[group_id]))
        assert isinstance(response, DescribeGroupsResponse)
        g = response.groups[0]
        if g.error_code:
            error = broker_error(g.error_code, f"group {group_id!r}", g.error_message)
            if new_protocol and isinstance(error, ec.GroupIdNotFoundError):
                listed = await self._listing(conn, node, group_id)
                if listed is not None and listed.group_type in (_CLASSIC, _CONSUMER):
                    raise Retry(_retriable(error))
                if listed is not None:
                    return ConsumerGroupDescription(
                        group_id=group_id,
                        state=listed.state,
                        protocol_type=listed.protocol_type,
                        protocol="",
                        coordinator=node,
                        members=[],
                        type=listed.group_type,
                    )
            raise error
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
            type=_CLASSIC,
        )

    async def _listing(
        self, conn: BrokerConnection, node: int, group_id: str
    ) -> ConsumerGroupListing | None:
        """``group_id`` as its coordinator lists it (ListGroups), or None when it does not."""
        response = await conn.request(ListGroupsRequest())
        assert isinstance(response, ListGroupsResponse)
        if response.error_code:
            raise broker_error(response.error_code, f"list_consumer_groups on broker {node}")
        for g in response.groups:
            if g.group_id == group_id:
                return ConsumerGroupListing(
                    g.group_id, g.protocol_type, g.group_state, g.group_type or _CLASSIC
                )
        return None

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

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Does :meth:`Admin.alter_consumer_group_offsets` (documented there)."""
        if not isinstance(offsets, Mapping) or not all(
            isinstance(tp, TopicPartition) for tp in offsets
        ):
            raise TypeError(
                "alter_consumer_group_offsets() takes a mapping of TopicPartition to offset: "
                "write alter_consumer_group_offsets(group_id, {TopicPartition(topic, p): offset})"
            )
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            if om.offset < 0:
                raise ValueError(f"cannot commit a negative offset for {tp}: {om.offset}")
            wanted[tp] = om
        if not wanted:
            return
        by_topic = sorted({tp.topic for tp in wanted})

        async def attempt() -> None:
            node = await self.find_coordinator(group_id)
            conn = await self.cluster.connection(node)
            version = conn.version_for(OffsetCommitRequest)
            snapshot = self.cluster.snapshot
            if version >= 10:  # topics by id (KIP-848's OffsetCommit v10)
                snapshot = await self.cluster.ensure_fresh(set(by_topic))
            if version >= 10:
                for topic in by_topic:
                    if topic not in snapshot.topics:
                        raise ec.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            topics = offset_commit_topics(dict(sorted(wanted.items())), version, snapshot)
            # Generation -1 and no member id: a commit from outside the group, which the
            # coordinator takes only while the group has no members.
            request = OffsetCommitRequest(
                group_id=group_id, generation_id_or_member_epoch=-1, member_id="", topics=topics
            )
            response = await conn.request(request, version=version)
            assert isinstance(response, OffsetCommitResponse)
            errors: dict[str, KafkaError] = {}
            for answered in response.topics:
                name = getattr(answered, "name", None) or snapshot.topic_name(answered.topic_id)
                for p in answered.partitions:
                    if p.error_code:
                        where = f"{name or '?'}[{p.partition_index}]"
                        errors[where] = _commit_error(p.error_code, group_id, where)
            self.raise_first(errors)

        await self.with_retries(
            f"commit offsets of group {group_id!r}", attempt, topics=list(by_topic)
        )

    async def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Does :meth:`Admin.consumer_group_lag` (documented there)."""
        committed = await self.list_consumer_group_offsets(group_id)
        if not committed:
            return {}
        ends = await self.list_offsets({tp: OffsetSpec.latest() for tp in committed})
        return {tp: max(0, ends[tp].offset - om.offset) for tp, om in sorted(committed.items())}


def _commit_error(code: int, group_id: str, where: str) -> KafkaError:
    """The error of a commit from outside the group that the coordinator refused."""
    context = f"group {group_id!r}: commit of {where}"
    if code in (ec.UnknownMemberIdError.error_code, ec.IllegalGenerationError.error_code):
        error = broker_error(
            code,
            context,
            "the group has active members; offsets can be altered from outside a group only "
            "while it has none",
        )
        error.retriable = False
        return error
    return broker_error(code, context)


def _group_types(types: Collection[str] | None) -> frozenset[str]:
    """The group types ``list_consumer_groups`` keeps (lower case; empty: every type).

    Raises:
        TypeError: ``types`` is a ``str``.
        ValueError: a name that is no group type.
    """
    if types is None:
        return frozenset()
    if isinstance(types, str | bytes | bytearray):
        raise TypeError(
            f"list_consumer_groups(types=...) takes a collection of group types, not a "
            f"single {type(types).__name__}: write list_consumer_groups(types=[{types!r}])"
        )
    wanted = frozenset(t.lower() for t in types)
    unknown = sorted(wanted.difference(GROUP_TYPES))
    if unknown:
        raise ValueError(
            f"list_consumer_groups(types=...): unknown group type(s) {unknown}; "
            f"the group types are {list(GROUP_TYPES)}"
        )
    return wanted


def _retriable(error: KafkaError) -> KafkaError:
    """``error``, marked retriable (the group changed type while it was being described)."""
    error.retriable = True
    return error


def _partitions(
    assignment: ConsumerGroupDescribeResponse.Assignment, names: dict[uuid.UUID, str]
) -> list[TopicPartition]:
    """The partitions of a ConsumerGroupDescribe assignment, sorted, by topic name (a topic
    whose id is unknown to the cluster, deleted since, is left out)."""
    return sorted(
        TopicPartition(names[t.topic_id], p)
        for t in assignment.topic_partitions
        if t.topic_id in names
        for p in t.partitions
    )


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
