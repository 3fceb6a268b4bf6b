"""Plain data types shared by the producer, the consumer and the admin client."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Final, NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic: ``TopicPartition("orders", 3)``."""

    topic: str
    partition: int


class TimestampType(IntEnum):
    """Which clock a record's timestamp comes from (record batch attribute bit 3).

    ``NO_TIMESTAMP_TYPE``: the record has no timestamp at all (``timestamp_ms`` -1), as the
    legacy message format magic 0 (Kafka before 0.10) wrote them; Java's
    ``TimestampType.NO_TIMESTAMP_TYPE``.
    """

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


Header = tuple[str, bytes | None]


_RECORD_FIELDS: Final = (
    "topic",
    "partition",
    "offset",
    "timestamp_ms",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "leader_epoch",
)


class Record:
    """One record as delivered to a consumer.

    ``key`` and ``value`` are ``bytes`` (or ``None``) unless a deserializer turned them into
    something else; ``headers`` is a list of ``(name, value)`` pairs in wire order.

    Compares by value (every field) and is not hashable, as a mutable dataclass. Written
    out rather than with ``@dataclass``, whose generated ``__init__`` stays interpreted
    in the compiled build (it cost a third of a compiled decode).
    """

    __slots__ = _RECORD_FIELDS
    __match_args__: ClassVar[tuple[str, ...]] = _RECORD_FIELDS

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: TimestampType
    key: Any
    value: Any
    headers: list[Header]
    leader_epoch: int | None

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        timestamp_type: TimestampType,
        key: Any,
        value: Any,
        headers: list[Header],
        leader_epoch: int | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp_ms,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
            self.leader_epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() == other._fields()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._fields() != other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value

    @property
    def timestamp(self) -> int:
        """``timestamp_ms`` under aiokafka's name (``ConsumerRecord.timestamp``): the
        record's timestamp in ms since the epoch, -1 when it has none. Read-only."""
        return self.timestamp_ms

    def __repr__(self) -> str:
        return (
            "Record("
            + ", ".join(
                f"{name}={value!r}"
                for name, value in zip(_RECORD_FIELDS, self._fields(), strict=True)
            )
            + ")"
        )


class ShareRecord(Record):
    """One record as a :class:`~aiostream_kafka.ShareConsumer` delivers it: the
    :class:`Record` fields plus ``delivery_count``, how many times the share group has
    handed this record out (1 the first time; more after a release, a lock expiry or a
    member leaving with it acquired). KIP-932 archives it past the group's delivery limit.

    ``lock_deadline``: when this member's acquisition lock on the record ends, on the
    event loop's clock (``asyncio.get_running_loop().time()``, so
    ``asyncio.timeout_at(record.lock_deadline)`` works); 0.0 when unknown. A consumer that
    renews locks moves it later. Not part of equality.

    Defined here, beside :class:`Record`, because the compiled build compiles this module:
    a subclass of a compiled class must be compiled with it.
    """

    __slots__ = ("delivery_count", "lock_deadline")

    delivery_count: int
    lock_deadline: float

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        timestamp_type: TimestampType,
        key: Any,
        value: Any,
        headers: list[Header],
        leader_epoch: int | None,
        delivery_count: int,
        lock_deadline: float = 0.0,
    ) -> None:
        super().__init__(
            topic, partition, offset, timestamp_ms, timestamp_type, key, value, headers,
            leader_epoch,
        )  # fmt: skip
        self.delivery_count = delivery_count
        self.lock_deadline = lock_deadline

    def _fields(self) -> tuple[Any, ...]:
        return (*super()._fields(), self.delivery_count)

    def __repr__(self) -> str:
        names = (*_RECORD_FIELDS, "delivery_count")
        return (
            "ShareRecord("
            + ", ".join(
                f"{name}={value!r}" for name, value in zip(names, self._fields(), strict=True)
            )
            + ")"
        )


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written.

    ``offset`` is -1 when the producer ran with ``acks=0``. ``timestamp_ms`` is the broker's
    log-append time when the topic uses LogAppendTime, else the record's create time.
    Immutable; a named tuple, so ``topic, partition, offset, ts = meta`` works too (and
    one is cheap to build: the producer makes one per acknowledged record).
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Who a consumer is in its group, for
    :meth:`~aiostream_kafka.Producer.send_offsets_to_transaction` (KIP-447).

    The group coordinator accepts the transaction's offsets only from the group's current
    generation and member: a consumer that lost its partitions in a rebalance cannot
    commit them through a transaction (its producer gets ``CommitFailedError``, an
    abortable error), so no other instance's progress is overwritten. Take it from
    :meth:`~aiostream_kafka.Consumer.group_metadata` just before sending the offsets.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


__all__ = [
    "ConsumerGroupMetadata",
    "Header",
    "Record",
    "RecordMetadata",
    "ShareRecord",
    "TimestampType",
    "TopicPartition",
]
