"""aiostream_kafka: a pure-Python, asyncio-native Apache Kafka client."""

from __future__ import annotations

__version__ = "0.1.0.dev0"

from aiostream_kafka.admin import (  # after __version__: the config module imports it
    Admin,
    AlterConfigOp,
    AlterConfigOpType,
    BrokerDescription,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
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
from aiostream_kafka.errors import (
    BrokerUnavailableError,
    ConfigError,
    CorruptRecordError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
    TLSHandshakeError,
    UnsupportedVersionError,
)
from aiostream_kafka.protocol.error_codes import *  # noqa: F403 -- one class per Kafka error code
from aiostream_kafka.protocol.error_codes import __all__ as _error_code_names
from aiostream_kafka.structs import (
    Record,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BrokerDescription",
    "BrokerUnavailableError",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "CorruptRecordError",
    "KafkaError",
    "KafkaTimeoutError",
    "ListOffsetsResult",
    "MemberDescription",
    "NetworkError",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "ProtocolError",
    "Record",
    "RecordMetadata",
    "TLSHandshakeError",
    "TimestampType",
    "TopicDescription",
    "TopicPartition",
    "UnsupportedVersionError",
    "__version__",
    *(n for n in _error_code_names if n.endswith("Error")),
]
