"""The Admin client's topic calls: create, delete, add partitions, list, describe; and
the cluster's description. KRaft brokers forward topic changes to the controller, so
any broker takes them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping, Sequence

from aiostream_kafka import _args
from aiostream_kafka.admin.plumbing import AdminCore, broker_error
from aiostream_kafka.admin.types import (
    BrokerDescription,
    ClusterDescription,
    NewTopic,
    PartitionInfo,
    TopicDescription,
)
from aiostream_kafka.cluster.metadata import ClusterSnapshot, TopicMetadata
from aiostream_kafka.errors import ConfigError, KafkaError, KafkaTimeoutError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
)
from aiostream_kafka.protocol.messages.create_topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aiostream_kafka.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiostream_kafka.protocol.messages.describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)

__all__ = ["TopicCalls"]


class TopicCalls(AdminCore):
    """Topics and the cluster (``Admin``'s calls of that area)."""

    async def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        wait_for_leaders: bool = True,
    ) -> dict[str, TopicDescription | None]:
        """Does :meth:`Admin.create_topics` (documented there)."""
        _args.collection(new_topics, "create_topics", NewTopic, "create_topics([NewTopic(...)])")
        if not new_topics:
            return {}
        names = [t.name for t in new_topics]
        if len(set(names)) != len(names):
            raise ConfigError(f"create_topics got the same topic name twice: {names}")
        pending = {t.name: t for t in new_topics}
        timeout = self.timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = CreateTopicsRequest(
                topics=[_creatable(t) for t in pending.values()],
                timeout_ms=min(timeout, self.config.request_timeout_ms),
                validate_only=validate_only,
            )
            response = await self.cluster.send(None, request)
            assert isinstance(response, CreateTopicsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.topics:
                if result.error_code == 0:
                    pending.pop(result.name, None)
                else:
                    errors[result.name] = broker_error(
                        result.error_code, f"topic {result.name!r}", result.error_message
                    )
            self.raise_first(errors)

        await self.with_retries("create_topics", attempt, timeout_ms)
        if validate_only:
            return dict.fromkeys(names)
        if wait_for_leaders:
            # Describe from the metadata that showed the leaders: another refresh may be
            # answered by a broker that has not caught up yet.
            snapshot = await self.wait_for_leaders(names, timeout)
        else:
            snapshot = await self.cluster.refresh(names)
        self.cluster.untrack(names)
        return {n: _describe(snapshot.topics[n]) if n in snapshot.topics else None for n in names}

    async def wait_for_leaders(
        self, names: Collection[str], timeout_ms: int, counts: Mapping[str, int] | None = None
    ) -> ClusterSnapshot:
        """Wait until the metadata shows every partition of ``names`` with a leader (and,
        with ``counts``, that many partitions); return that metadata."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            snapshot = await self.cluster.refresh(names)
            ready = all(
                n in snapshot.topics
                and snapshot.topics[n].error_code == 0
                and snapshot.topics[n].partitions
                and (counts is None or len(snapshot.topics[n].partitions) >= counts[n])
                and all(p.leader >= 0 for p in snapshot.topics[n].partitions.values())
                for n in names
            )
            if ready:
                return snapshot
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topics {sorted(names)} were created but not every partition had a leader "
                    f"within {timeout_ms} ms"
                )
            await asyncio.sleep(0.05)

    async def delete_topics(
        self, topics: Collection[str], *, timeout_ms: int | None = None
    ) -> None:
        """Does :meth:`Admin.delete_topics` (documented there)."""
        pending = set(_args.names(topics, "delete_topics"))
        if not pending:
            return
        timeout = self.timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in sorted(pending)],
                topic_names=sorted(pending),
                timeout_ms=min(timeout, self.config.request_timeout_ms),
            )
            response = await self.cluster.send(None, request)
            assert isinstance(response, DeleteTopicsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.responses:
                name = result.name or str(result.topic_id)
                if result.error_code == 0:
                    pending.discard(name)
                else:
                    errors[name] = broker_error(
                        result.error_code, f"topic {name!r}", result.error_message
                    )
            self.raise_first(errors, final=(ec.UnknownTopicOrPartitionError,))

        await self.with_retries("delete_topics", attempt, timeout_ms)
        # Like create_topics: return once the metadata no longer lists them, so that a
        # list_topics or a re-creation right after sees the deletion.
        names = set(topics)
        deadline = time.monotonic() + timeout / 1000
        while True:
            snapshot = await self.cluster.refresh(all_topics=True)
            if not names & {n for n, t in snapshot.topics.items() if t.error_code == 0}:
                break
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topics {sorted(names)} were deleted but still listed after {timeout} ms"
                )
            await asyncio.sleep(0.05)
        self.cluster.untrack(topics)

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Does :meth:`Admin.create_partitions` (documented there)."""
        pending = dict(new_counts)
        if not pending:
            return
        timeout = self.timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = CreatePartitionsRequest(
                topics=[
                    CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=c, assignments=None)
                    for n, c in pending.items()
                ],
                timeout_ms=min(timeout, self.config.request_timeout_ms),
                validate_only=validate_only,
            )
            response = await self.cluster.send(None, request)
            assert isinstance(response, CreatePartitionsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.results:
                if result.error_code == 0:
                    pending.pop(result.name, None)
                else:
                    errors[result.name] = broker_error(
                        result.error_code, f"topic {result.name!r}", result.error_message
                    )
            self.raise_first(errors)

        await self.with_retries("create_partitions", attempt, timeout_ms)
        if not validate_only:
            await self.wait_for_leaders(list(new_counts), timeout, counts=new_counts)
            self.cluster.untrack(new_counts)

    async def list_topics(self, *, include_internal: bool = False) -> dict[str, TopicDescription]:
        """Does :meth:`Admin.list_topics` (documented there)."""
        snapshot = await self.with_retries(
            "list_topics", lambda: self.cluster.refresh(all_topics=True)
        )
        return {
            name: _describe(topic)
            for name, topic in sorted(snapshot.topics.items())
            if topic.error_code == 0 and (include_internal or not topic.is_internal)
        }

    async def describe_topics(self, topics: Collection[str]) -> dict[str, TopicDescription]:
        """Does :meth:`Admin.describe_topics` (documented there)."""
        names = sorted(set(_args.names(topics, "describe_topics")))

        async def attempt() -> dict[str, TopicDescription]:
            snapshot = await self.cluster.refresh(names)
            errors = {
                n: broker_error(snapshot.topics[n].error_code, f"topic {n!r}")
                for n in names
                if n in snapshot.topics and snapshot.topics[n].error_code != 0
            }
            self.raise_first(errors, final=(ec.UnknownTopicOrPartitionError,))
            return {n: _describe(snapshot.topics[n]) for n in names}

        try:
            return await self.with_retries("describe_topics", attempt)
        finally:
            self.cluster.untrack(names)

    # -- cluster ---------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """Does :meth:`Admin.describe_cluster` (documented there)."""

        async def attempt() -> ClusterDescription:
            response = await self.cluster.send(None, DescribeClusterRequest())
            assert isinstance(response, DescribeClusterResponse)
            if response.error_code:
                raise broker_error(response.error_code, "describe_cluster", response.error_message)
            return ClusterDescription(
                cluster_id=response.cluster_id,
                controller_id=response.controller_id,
                brokers=sorted(
                    (
                        BrokerDescription(b.broker_id, b.host, b.port, b.rack, b.is_fenced)
                        for b in response.brokers
                    ),
                    key=lambda b: b.node_id,
                ),
            )

        return await self.with_retries("describe_cluster", attempt)


def _creatable(topic: NewTopic) -> CreateTopicsRequest.CreatableTopic:
    assignments = []
    if topic.replica_assignment:
        assignments = [
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
            for p, b in sorted(topic.replica_assignment.items())
        ]
    return CreateTopicsRequest.CreatableTopic(
        name=topic.name,
        num_partitions=-1 if assignments else topic.partitions,
        replication_factor=-1 if assignments else topic.replication_factor,
        assignments=assignments,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in sorted(topic.config.items())
        ],
    )


def _describe(topic: TopicMetadata) -> TopicDescription:
    return TopicDescription(
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=[
            PartitionInfo(
                p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas
            )
            for _, p in sorted(topic.partitions.items())
        ],
    )
