"""aiostream_kafka: a pure-Python, asyncio-native Apache Kafka client."""

from __future__ import annotations

# The version lives in _version.py (pyproject.toml reads it there); re-exported here.
from aiostream_kafka._version import __version__  # isort: skip

# First: importing _native decides between the compiled and the source hot modules.
from aiostream_kafka import _native  # noqa: F401  # isort: skip

from importlib import import_module
from typing import TYPE_CHECKING, Any

from aiostream_kafka.errors import (
    BootstrapError,
    BrokerUnavailableError,
    BufferFullError,
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
    RecordsNotDeliveredError,
    TLSHandshakeError,
    UnsupportedVersionError,
)
from aiostream_kafka.protocol.error_codes import *  # noqa: F403 -- one class per Kafka error code
from aiostream_kafka.protocol.error_codes import __all__ as _error_code_names
from aiostream_kafka.structs import (
    ConsumerGroupMetadata,
    Record,
    RecordMetadata,
    ShareRecord,
    TimestampType,
    TopicPartition,
)

if TYPE_CHECKING:  # the lazily imported names, for type checkers
    from aiostream_kafka.admin import (
        Admin,
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
    from aiostream_kafka.consumer import (
        BatchStream,
        Consumer,
        ConsumerHealth,
        ConsumerStateError,
        CorruptPartitionDataError,
        FetchMetrics,
        LogTruncationError,
        NoOffsetForPartitionError,
        OffsetAndTimestamp,
        PartitionBatches,
        PartitionedStream,
        PartitionRecords,
        RebalanceCallbackError,
        RecordDeserializationError,
        RecordStream,
        TopicDeletedError,
    )
    from aiostream_kafka.exactly_once import (
        process_exactly_once,
    )
    from aiostream_kafka.producer import (
        BatchDeliveryError,
        BatchFailure,
        BatchMetadata,
        BatchRun,
        Producer,
        ProducerClosedError,
        ProducerRecord,
        TransactionAbortedError,
        TransactionScope,
        TransactionState,
        TransactionStateError,
    )
    from aiostream_kafka.share import (
        AcknowledgeType,
        ShareAcknowledgeError,
        ShareConsumer,
    )

# The clients (and what they define) are imported on first use: see __getattr__.
_LAZY: dict[str, str] = {
    "Admin": "aiostream_kafka.admin",
    "AlterConfigOp": "aiostream_kafka.admin",
    "AlterConfigOpType": "aiostream_kafka.admin",
    "BrokerDescription": "aiostream_kafka.admin",
    "ClusterDescription": "aiostream_kafka.admin",
    "ConfigEntry": "aiostream_kafka.admin",
    "ConfigResource": "aiostream_kafka.admin",
    "ConfigResourceType": "aiostream_kafka.admin",
    "ConfigSource": "aiostream_kafka.admin",
    "ConsumerGroupDescription": "aiostream_kafka.admin",
    "ShareGroupDescription": "aiostream_kafka.admin",
    "ShareMemberDescription": "aiostream_kafka.admin",
    "SharePartitionOffsetInfo": "aiostream_kafka.admin",
    "ConsumerGroupListing": "aiostream_kafka.admin",
    "ListOffsetsResult": "aiostream_kafka.admin",
    "MemberDescription": "aiostream_kafka.admin",
    "NewTopic": "aiostream_kafka.admin",
    "OffsetAndMetadata": "aiostream_kafka.admin",
    "OffsetSpec": "aiostream_kafka.admin",
    "PartitionInfo": "aiostream_kafka.admin",
    "TopicDescription": "aiostream_kafka.admin",
    "BatchStream": "aiostream_kafka.consumer",
    "Consumer": "aiostream_kafka.consumer",
    "ConsumerHealth": "aiostream_kafka.consumer",
    "ConsumerStateError": "aiostream_kafka.consumer",
    "CorruptPartitionDataError": "aiostream_kafka.consumer",
    "FetchMetrics": "aiostream_kafka.consumer",
    "LogTruncationError": "aiostream_kafka.consumer",
    "NoOffsetForPartitionError": "aiostream_kafka.consumer",
    "OffsetAndTimestamp": "aiostream_kafka.consumer",
    "PartitionBatches": "aiostream_kafka.consumer",
    "PartitionRecords": "aiostream_kafka.consumer",
    "PartitionedStream": "aiostream_kafka.consumer",
    "RebalanceCallbackError": "aiostream_kafka.consumer",
    "RecordDeserializationError": "aiostream_kafka.consumer",
    "RecordStream": "aiostream_kafka.consumer",
    "TopicDeletedError": "aiostream_kafka.consumer",
    "process_exactly_once": "aiostream_kafka.exactly_once",
    "BatchDeliveryError": "aiostream_kafka.producer",
    "BatchFailure": "aiostream_kafka.producer",
    "BatchMetadata": "aiostream_kafka.producer",
    "BatchRun": "aiostream_kafka.producer",
    "Producer": "aiostream_kafka.producer",
    "ProducerClosedError": "aiostream_kafka.producer",
    "ProducerRecord": "aiostream_kafka.producer",
    "TransactionAbortedError": "aiostream_kafka.producer",
    "TransactionScope": "aiostream_kafka.producer",
    "TransactionState": "aiostream_kafka.producer",
    "TransactionStateError": "aiostream_kafka.producer",
    "AcknowledgeType": "aiostream_kafka.share",
    "ShareAcknowledgeError": "aiostream_kafka.share",
    "ShareConsumer": "aiostream_kafka.share",
}

# The name the wave-2 API uses for Kafka's SASL_AUTHENTICATION_FAILED (error 58).
SaslAuthenticationError = SaslAuthenticationFailedError  # noqa: F405

_OWN_ERRORS = {"CorruptRecordError", "KafkaTimeoutError", "NetworkError", "UnsupportedVersionError"}

__all__ = [
    "AcknowledgeType",
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "BatchDeliveryError",
    "BatchFailure",
    "BatchMetadata",
    "BatchRun",
    "BatchStream",
    "BootstrapError",
    "ClientClosedError",
    "BrokerDescription",
    "BufferFullError",
    "BrokerUnavailableError",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigEntry",
    "ConfigError",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupMetadata",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "ConsumerGroupListing",
    "ConsumerHealth",
    "ConsumerStateError",
    "NothingToConsumeError",
    "CorruptPartitionDataError",
    "CorruptRecordError",
    "FencedMemberError",
    "FetchMetrics",
    "KafkaError",
    "KafkaTimeoutError",
    "ListOffsetsResult",
    "LogTruncationError",
    "MemberDescription",
    "NetworkError",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetSpec",
    "PartitionInfo",
    "PartitionBatches",
    "PartitionRecords",
    "PartitionedStream",
    "Producer",
    "ProducerClosedError",
    "ProducerRecord",
    "ProtocolError",
    "Record",
    "RebalanceCallbackError",
    "RecordDeserializationError",
    "RecordMetadata",
    "RecordStream",
    "RecordsNotDeliveredError",
    "SaslAuthenticationError",
    "ShareAcknowledgeError",
    "ShareConsumer",
    "ShareRecord",
    "TLSHandshakeError",
    "TimestampType",
    "TopicDeletedError",
    "TopicDescription",
    "TopicPartition",
    "TransactionAbortedError",
    "TransactionScope",
    "TransactionState",
    "TransactionStateError",
    "UnsupportedVersionError",
    "__version__",
    "process_exactly_once",
    *(n for n in _error_code_names if n.endswith("Error") and n not in _OWN_ERRORS),
]

#: The submodules ``import aiostream_kafka`` loaded when it imported the clients eagerly.
_SUBMODULES = frozenset(
    {"admin", "cluster", "concurrency", "config", "consumer", "exactly_once", "group"}
    | {"habits", "net", "options", "producer", "protocol", "security", "serde"}
)


def __getattr__(name: str) -> Any:
    """Import the clients on first use (PEP 562): ``import aiostream_kafka`` or of one of
    its modules (``aiostream_kafka.admin`` for the Spark planner) does not load the
    consumer, the producer and the Admin client until one of them is named. The
    submodules importing the package used to load are imported on first use as well
    (``aiostream_kafka.consumer`` after ``import aiostream_kafka``)."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(import_module(module), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
