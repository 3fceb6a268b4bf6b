"""What the Admin client takes and returns."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from aiostream_kafka.structs import TopicPartition

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``partitions``/``replication_factor`` of -1 take the broker's
    defaults (``num.partitions``, ``default.replication.factor``)."""

    name: str
    partitions: int = -1
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a described topic; ``leader`` is -1 when it has none."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic with its id and partitions (sorted by partition number)."""

    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[PartitionInfo]


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    """A broker of the cluster."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    is_fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster id, its active controller and its brokers."""

    cluster_id: str
    controller_id: int
    brokers: list[BrokerDescription]


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Which offset ``list_offsets`` looks up: ``earliest()``, ``latest()``,
    ``max_timestamp()`` or ``for_timestamp(ms)`` (the first offset whose timestamp is >= ms)."""

    timestamp: int

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls(EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls(LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls(MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        if timestamp_ms < 0:
            raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
        return cls(timestamp_ms)


class OffsetAndTimestamp(NamedTuple):
    """An offset found by ListOffsets (``Admin.list_offsets``, ``Consumer.offsets_for_times``
    and the consumer's other offset look-ups), the timestamp of its record, and its leader
    epoch (None when the broker does not say). ``offset`` is -1 when no record has a
    timestamp at or after the one asked for (``offsets_for_times`` gives None instead)."""

    offset: int
    timestamp_ms: int
    leader_epoch: int | None


#: ``Admin.list_offsets``'s name for :class:`OffsetAndTimestamp`: the same class.
ListOffsetsResult = OffsetAndTimestamp


class ConfigResourceType(enum.IntEnum):
    """Kinds of resources with configs (Kafka's ``ConfigResource.Type``)."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A resource whose configs are described or altered: ``ConfigResource(TOPIC, "t")``;
    a broker by its id as a string (``"1"``), or ``""`` for the cluster-wide default."""

    type: ConfigResourceType
    name: str


class ConfigSource(enum.IntEnum):
    """Where a config value comes from."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource; ``value`` is None for sensitive values."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool
    is_default: bool


class AlterConfigOpType(enum.IntEnum):
    """How ``incremental_alter_configs`` changes a config."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change: ``AlterConfigOp("retention.ms", "60000")`` sets; ``op=DELETE`` reverts
    to the default."""

    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


#: The group types a broker reports (ListGroups v5+, Kafka 3.8+): ``"classic"`` (the
#: JoinGroup/SyncGroup protocol, every group before KIP-848), ``"consumer"`` (KIP-848),
#: ``"share"`` (KIP-932) and ``"streams"`` (KIP-1071).
GROUP_TYPES = ("classic", "consumer", "share", "streams")


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    """A group as ``list_consumer_groups`` lists it; ``group_type`` is one of
    :data:`GROUP_TYPES` (``"classic"`` on brokers before ListGroups v5, Kafka 3.8)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member of a consumer group and the partitions assigned to it.

    The fields after ``assignment`` are those of a ``"consumer"`` group (KIP-848,
    ConsumerGroupDescribe) and keep their defaults for a classic group: ``member_epoch``
    (-2 for a static member away for a while), ``rack`` (``client_rack``), the
    subscription (``subscribed_topics`` names, or ``subscribed_topic_regex``, the
    broker-side RE2/J pattern), ``target_assignment`` (what the coordinator means the
    member to own once it has reconciled; ``assignment`` is what it owns now) and
    ``member_type`` (``"consumer"``, or ``"classic"`` for a classic-protocol member of a
    group being migrated online; None when the broker does not say, before Kafka 4.0).
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    member_epoch: int | None = None
    rack: str | None = None
    subscribed_topics: list[str] | None = None
    subscribed_topic_regex: str | None = None
    target_assignment: list[TopicPartition] | None = None
    member_type: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A consumer group: its state, protocol, coordinator, members and type.

    ``type`` is ``"classic"`` or ``"consumer"`` (KIP-848; its ``protocol`` is the server
    assignor, ``uniform`` or ``range``, and ``group_epoch``/``assignment_epoch`` are set;
    None for a classic group); a ``"share"`` or ``"streams"`` group is described only by
    its type, state and protocol type (no members: those groups have their own describe
    calls).
    """

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: list[MemberDescription]
    type: str = "classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (the next record to consume) with its metadata string."""

    offset: int
    metadata: str | None = None
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """A member of a share group (KIP-932) and the partitions it fetches from.

    A share group's assignment is not exclusive: several members may be assigned the same
    partition and take its records cooperatively. ``rack`` is None when the member did not
    give one; ``member_epoch`` is the epoch the coordinator last gave the member.
    """

    member_id: str
    client_id: str
    host: str
    rack: str | None
    member_epoch: int
    subscribed_topics: list[str]
    assignment: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A share group (KIP-932): its state (``"Empty"``, ``"Stable"``, ``"Dead"``), its
    coordinator, its epochs, the server assignor (``assignor``, ``"simple"`` on Kafka 4.x)
    and its members."""

    group_id: str
    state: str
    coordinator: int
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberDescription]


@dataclass(frozen=True, slots=True)
class SharePartitionOffsetInfo:
    """The state of one partition of a share group (KIP-932).

    ``start_offset`` is the share-partition start offset the share coordinator keeps: every
    record before it is done with (accepted, rejected or archived after too many
    deliveries); records from it on are available, acquired by a member, or already
    acknowledged ahead of it (measured on Kafka 4.3.1, it moves only when the share
    coordinator persists the partition's state, so it can stay behind records already
    accepted: 5 with offsets 0-9 done; ``lag`` counts what is not done). ``leader_epoch``
    is None when the broker does not say. ``lag`` is the broker's count of the records
    from the start offset to the high watermark not yet done with
    (DescribeShareGroupOffsets v1, Kafka 4.2+); None when the broker does not give it
    (older brokers; a start offset past the high watermark).
    """

    start_offset: int
    leader_epoch: int | None = None
    lag: int | None = None
