"""The Admin client: topics, configs, offsets and consumer groups."""

from aiostream_kafka.admin.client import Admin
from aiostream_kafka.admin.types import (
    AlterConfigOp,
    AlterConfigOpType,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListOffsetsResult,
    MemberDescription,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    PartitionInfo,
    TopicDescription,
)

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BrokerDescription",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ListOffsetsResult",
    "MemberDescription",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "TopicDescription",
]
