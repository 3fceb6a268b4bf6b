"""The consumer: fetchers per broker, prefetch queues, poll scheduler and async iterators.

| module | responsibility |
|---|---|
| ``consumer.py`` | the public :class:`Consumer` |
| ``config.py`` | :class:`ConsumerConfig`, checked before any I/O |
| ``engine.py`` | wires the parts, owns the tasks, assignment and positions API |
| ``scheduler.py`` | the poll scheduler task: demand, budget, pacing, back-off |
| ``fetcher.py`` | one fetcher task per broker: Fetch rounds, filing responses |
| ``fetch_session.py`` | KIP-227 incremental fetch sessions (sans-IO) |
| ``prefetch.py`` | prefetch queues' byte budget, gauges, chunk decoding |
| ``partition.py`` | per-partition state: positions, queue, head |
| ``positions.py`` | the resolver task: metadata, offset resets, KIP-320 validation |
| ``iterators.py`` | ``stream()``, ``batches()``, ``partitioned_stream()`` |
| ``errors.py`` | the consumer's own error types |
"""

from aiostream_kafka.consumer.config import ConsumerConfig
from aiostream_kafka.consumer.consumer import Consumer
from aiostream_kafka.consumer.errors import (
    ConsumerStateError,
    CorruptPartitionDataError,
    LogTruncationError,
    NoOffsetForPartitionError,
    PartitionError,
    RebalanceCallbackError,
    RecordDeserializationError,
    TopicDeletedError,
)
from aiostream_kafka.consumer.group import ConsumerHealth
from aiostream_kafka.consumer.iterators import (
    BatchStream,
    PartitionBatches,
    PartitionedStream,
    PartitionRecords,
    RecordStream,
)
from aiostream_kafka.consumer.positions import OffsetAndTimestamp
from aiostream_kafka.consumer.prefetch import FetchMetrics

__all__ = [
    "BatchStream",
    "Consumer",
    "ConsumerConfig",
    "ConsumerHealth",
    "ConsumerStateError",
    "CorruptPartitionDataError",
    "FetchMetrics",
    "LogTruncationError",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PartitionBatches",
    "PartitionError",
    "PartitionRecords",
    "PartitionedStream",
    "RebalanceCallbackError",
    "RecordDeserializationError",
    "RecordStream",
    "TopicDeletedError",
]
