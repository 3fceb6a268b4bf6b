"""The cluster layer: what the cluster looks like (metadata) and how to reach it."""

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import (
    BrokerMetadata,
    ClusterSnapshot,
    PartitionMetadata,
    TopicMetadata,
)

__all__ = ["BrokerMetadata", "Cluster", "ClusterSnapshot", "PartitionMetadata", "TopicMetadata"]
