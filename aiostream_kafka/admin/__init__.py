"""The Admin client: topics, configs, offsets and consumer groups.

``Admin`` is imported on first use (PEP 562): the value types of ``admin.types``
(``OffsetAndMetadata`` for the producer and the consumer, ``OffsetSpec`` for the Spark
planner) do not load the Admin client."""

from typing import TYPE_CHECKING, Any

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
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsetInfo,
    TopicDescription,
)

if TYPE_CHECKING:
    from aiostream_kafka.admin.client import Admin

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
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "TopicDescription",
]


def __getattr__(name: str) -> Any:
    """``Admin``, imported from ``admin.client`` on first use."""
    if name == "Admin":
        from aiostream_kafka.admin.client import Admin

        globals()["Admin"] = Admin
        return Admin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Admin"})
