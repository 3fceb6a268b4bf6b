"""Errors the consumer raises on its iterators, beyond those Kafka's error codes define.

Each names the partition (``topic_partition``) and, where one applies, the offset, so a
caller can ``seek`` past the problem.
"""

from __future__ import annotations

from aiostream_kafka.errors import ConsumerStateError, CorruptRecordError, KafkaError
from aiostream_kafka.protocol.error_codes import UnknownTopicOrPartitionError
from aiostream_kafka.structs import TopicPartition

__all__ = [
    "ConsumerStateError",
    "CorruptPartitionDataError",
    "LogTruncationError",
    "NoOffsetForPartitionError",
    "PartitionError",
    "RebalanceCallbackError",
    "RecordDeserializationError",
    "TopicDeletedError",
]


class PartitionError(KafkaError):
    """Mixin data for errors about one partition: ``topic_partition`` and ``offset``."""

    topic_partition: TopicPartition | None = None
    offset: int | None = None


class RebalanceCallbackError(KafkaError):
    """An ``on_assigned``, ``on_revoked`` or ``on_lost`` callback raised (the exception is
    the ``__cause__``). The consumer stops: its iterators raise this error and
    ``health()`` is unhealthy, rather than own partitions it may not be set up to read.
    Close it and start a new one once the callback is fixed."""


class NoOffsetForPartitionError(PartitionError):
    """A partition has no position and ``auto_offset_reset="none"``: ``seek`` it first."""

    def __init__(self, tp: TopicPartition) -> None:
        super().__init__(
            f"{tp.topic}[{tp.partition}] has no position and auto_offset_reset='none'; "
            "call seek(), seek_to_beginning() or seek_to_end() for it"
        )
        self.topic_partition = tp


class LogTruncationError(PartitionError):
    """The new leader's log diverges from what was fetched (KIP-320): records at and past
    ``offset`` were lost in an unclean leader election. Raised with
    ``auto_offset_reset="none"``; otherwise the consumer seeks to ``offset`` and logs it."""

    def __init__(self, tp: TopicPartition, fetch_offset: int, divergent_offset: int) -> None:
        super().__init__(
            f"{tp.topic}[{tp.partition}]: the log was truncated below the fetch position "
            f"{fetch_offset}; the new leader's log ends at {divergent_offset} for the last "
            "fetched leader epoch"
        )
        self.topic_partition = tp
        self.offset = divergent_offset


class CorruptPartitionDataError(CorruptRecordError, PartitionError):
    """A fetched record batch failed its CRC check or does not decode.

    The partition stays at ``offset``: iterating again fetches it again (the corruption
    may have been in transit); ``seek(tp, offset + 1)`` skips past it.
    """

    def __init__(self, tp: TopicPartition, offset: int, detail: str) -> None:
        super().__init__(f"{tp.topic}[{tp.partition}] at offset {offset}: {detail}")
        self.topic_partition = tp
        self.offset = offset


class RecordDeserializationError(PartitionError):
    """A key or value deserializer raised; ``__cause__`` is its exception.

    The partition stays at ``offset``; ``seek(tp, offset + 1)`` skips the record.
    """

    def __init__(self, tp: TopicPartition, offset: int, what: str, cause: BaseException) -> None:
        super().__init__(
            f"{tp.topic}[{tp.partition}] offset {offset}: the {what} deserializer raised "
            f"{type(cause).__name__}: {cause}"
        )
        self.topic_partition = tp
        self.offset = offset


class TopicDeletedError(UnknownTopicOrPartitionError, PartitionError):
    """An assigned topic or partition does not exist: deleted while being consumed (or
    re-created under a new topic id), or never created. Not retriable."""

    retriable = False

    def __init__(self, tp: TopicPartition, detail: str) -> None:
        super().__init__(f"{tp.topic}[{tp.partition}]: {detail}")
        self.topic_partition = tp
