"""aiostream_kafka: a pure-Python, asyncio-native Apache Kafka client."""

from __future__ import annotations

# The one place the version lives: pyproject.toml reads it from here
# ([tool.setuptools.dynamic]), and so do the wheel, the sdist and the client's ApiVersions.
__version__ = "0.1.0.dev0"

# First: importing _native decides between the compiled and the source hot modules.
from aiostream_kafka import _native  # noqa: F401  # isort: skip

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
from aiostream_kafka.consumer import (
    Consumer,
    ConsumerStateError,
    CorruptPartitionDataError,
    LogTruncationError,
    NoOffsetForPartitionError,
    RebalanceCallbackError,
    RecordDeserializationError,
    TopicDeletedError,
)
from aiostream_kafka.errors import (
    BootstrapError,
    BrokerUnavailableError,
    ClientClosedError,
    CommitFailedError,
    ConfigError,
    CorruptRecordError,
    FencedMemberError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    NothingToConsumeError,
    ProtocolError,
    TLSHandshakeError,
    UnsupportedVersionError,
)
from aiostream_kafka.exactly_once import process_exactly_once
from aiostream_kafka.producer import (
    BatchDeliveryError,
    BatchMetadata,
    Producer,
    ProducerClosedError,
    ProducerRecord,
    TransactionAbortedError,
    TransactionState,
    TransactionStateError,
)
from aiostream_kafka.protocol.error_codes import *  # noqa: F403 -- one class per Kafka error code
from aiostream_kafka.protocol.error_codes import __all__ as _error_code_names
from aiostream_kafka.structs import (
    ConsumerGroupMetadata,
    Record,
    RecordMetadata,
    TimestampType,
    TopicPartition,
)

# The name the wave-2 API uses for Kafka's SASL_AUTHENTICATION_FAILED (error 58).
SaslAuthenticationError = SaslAuthenticationFailedError  # noqa: F405

_OWN_ERRORS = {"CorruptRecordError", "KafkaTimeoutError", "NetworkError", "UnsupportedVersionError"}

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BatchDeliveryError",
    "BatchMetadata",
    "BootstrapError",
    "ClientClosedError",
    "BrokerDescription",
    "BrokerUnavailableError",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupMetadata",
    "ConsumerGroupListing",
    "ConsumerStateError",
    "NothingToConsumeError",
    "CorruptPartitionDataError",
    "CorruptRecordError",
    "FencedMemberError",
    "KafkaError",
    "KafkaTimeoutError",
    "ListOffsetsResult",
    "LogTruncationError",
    "MemberDescription",
    "NetworkError",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "Producer",
    "ProducerClosedError",
    "ProducerRecord",
    "ProtocolError",
    "Record",
    "RebalanceCallbackError",
    "RecordDeserializationError",
    "RecordMetadata",
    "SaslAuthenticationError",
    "TLSHandshakeError",
    "TimestampType",
    "TopicDeletedError",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortedError",
    "TransactionState",
    "TransactionStateError",
    "UnsupportedVersionError",
    "__version__",
    "process_exactly_once",
    *(n for n in _error_code_names if n.endswith("Error") and n not in _OWN_ERRORS),
]
