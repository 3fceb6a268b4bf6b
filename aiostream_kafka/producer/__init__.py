"""The producer: ``Producer`` and what it is made of (see ``ARCHITECTURE.md``)."""

from __future__ import annotations

from aiostream_kafka.producer.batch import (
    BatchDeliveryError,
    BatchFailure,
    BatchMetadata,
    BatchRun,
)
from aiostream_kafka.producer.config import ProducerConfig
from aiostream_kafka.producer.partitioner import murmur2, partition_for_key
from aiostream_kafka.producer.producer import (
    Producer,
    ProducerClosedError,
    ProducerRecord,
    TransactionScope,
)
from aiostream_kafka.producer.transactions import (
    TransactionAbortedError,
    TransactionState,
    TransactionStateError,
)

__all__ = [
    "BatchDeliveryError",
    "BatchFailure",
    "BatchMetadata",
    "BatchRun",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerRecord",
    "TransactionAbortedError",
    "TransactionScope",
    "TransactionState",
    "TransactionStateError",
    "murmur2",
    "partition_for_key",
]
