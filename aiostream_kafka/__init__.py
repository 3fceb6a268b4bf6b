"""aiostream_kafka: a pure-Python, asyncio-native Apache Kafka client."""

from __future__ import annotations

from aiostream_kafka.errors import (
    BrokerUnavailableError,
    ConfigError,
    CorruptRecordError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
    UnsupportedVersionError,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "BrokerUnavailableError",
    "ConfigError",
    "CorruptRecordError",
    "KafkaError",
    "KafkaTimeoutError",
    "NetworkError",
    "ProtocolError",
    "UnsupportedVersionError",
    "__version__",
]
