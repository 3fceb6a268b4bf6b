"""Immutable snapshots of cluster metadata: brokers, topics, partitions and leaders."""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from aiostream_kafka.protocol.messages.metadata import MetadataResponse
from aiostream_kafka.structs import TopicPartition

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker as the cluster advertises it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: its leader (``-1`` when none), leader epoch and replicas."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic; ``error_code`` is non-zero when the broker could not describe it
    (e.g. 3, UNKNOWN_TOPIC_OR_PARTITION)."""

    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: dict[int, PartitionMetadata]
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything known about the cluster at ``fetched_at`` (``time.monotonic()``)."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    fetched_at: float = 0.0

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        """The metadata of ``tp``, or None when the topic or partition is unknown."""
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def leader(self, tp: TopicPartition) -> BrokerMetadata | None:
        """The broker leading ``tp``, or None when it has no known live leader."""
        meta = self.partition(tp)
        if meta is None or meta.leader == NO_LEADER:
            return None
        return self.brokers.get(meta.leader)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id``, if known."""
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic.name
        return None

    def merged(
        self,
        response: MetadataResponse,
        *,
        replace_topics: bool,
        fetched_at: float | None = None,
        keep: Collection[str] | None = None,
    ) -> ClusterSnapshot:
        """A new snapshot with the brokers of ``response`` and its topics merged in (or,
        with ``replace_topics``, instead of the old ones). With ``keep``, old topics not in
        it are dropped (so that the snapshot holds what is still asked about)."""
        brokers = {
            b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in response.brokers
        }
        if replace_topics:
            topics = {}
        elif keep is None:
            topics = dict(self.topics)
        else:
            topics = {name: meta for name, meta in self.topics.items() if name in keep}
        for t in response.topics:
            if t.name is None:
                continue
            partitions = {
                p.partition_index: PartitionMetadata(
                    topic=t.name,
                    partition=p.partition_index,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    offline_replicas=tuple(p.offline_replicas),
                    error_code=p.error_code,
                )
                for p in t.partitions
            }
            topics[t.name] = TopicMetadata(
                t.name, t.topic_id, t.is_internal, partitions, t.error_code
            )
        return ClusterSnapshot(
            brokers=brokers,
            topics=topics,
            controller_id=response.controller_id,
            cluster_id=response.cluster_id,
            fetched_at=time.monotonic() if fetched_at is None else fetched_at,
        )

    def with_leader(
        self,
        tp: TopicPartition,
        leader: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> ClusterSnapshot:
        """A new snapshot where ``tp`` is led by ``leader`` at ``leader_epoch`` (a KIP-951
        hint), unless the snapshot already knows an equal or newer epoch."""
        meta = self.partition(tp)
        if meta is None or leader_epoch <= meta.leader_epoch:
            return self
        topic = self.topics[tp.topic]
        partitions = dict(topic.partitions)
        partitions[tp.partition] = replace(meta, leader=leader, leader_epoch=leader_epoch)
        topics = dict(self.topics)
        topics[tp.topic] = replace(topic, partitions=partitions)
        brokers = self.brokers
        if broker is not None and brokers.get(broker.node_id) != broker:
            brokers = {**brokers, broker.node_id: broker}
        return replace(self, topics=topics, brokers=brokers)
