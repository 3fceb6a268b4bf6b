"""``Admin``: topics, configs, offsets and consumer groups of a Kafka cluster.

Every call sends its requests to the broker that can answer them (any broker for topic and
config changes, which KRaft brokers forward to the controller; partition leaders for
offsets and record deletion; the group coordinator for group calls), retries retriable
errors with back-off until ``default_api_timeout_ms``, and raises a non-retriable broker
error as its typed exception, naming the topic, partition or group it concerns.

This module is the public face (the constructor, the lifecycle, each call's signature and
documentation); the calls are written one module per area: ``topics``, ``offsets``,
``configs``, ``groups``, ``share_groups``, over the shared ``plumbing`` (retries,
coordinator look-up).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType

from aiostream_kafka import habits
from aiostream_kafka.admin._generated import AdminConstructor
from aiostream_kafka.admin.configs import ConfigCalls
from aiostream_kafka.admin.groups import GroupCalls
from aiostream_kafka.admin.share_groups import ShareGroupCalls
from aiostream_kafka.admin.topics import TopicCalls
from aiostream_kafka.admin.types import (
    AlterConfigOp,
    ClusterDescription,
    ConfigEntry,
    ConfigResource,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListOffsetsResult,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    ShareGroupDescription,
    SharePartitionOffsetInfo,
    TopicDescription,
)
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import DEFAULT_CLOSE_TIMEOUT_S, shielded
from aiostream_kafka.requests.errors import broker_error as broker_error  # its old home
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)


class Admin(AdminConstructor):
    """Administrative client of a Kafka cluster.

    Use as ``async with Admin(bootstrap_servers="host:9092") as admin: ...``. Every
    option is a keyword parameter of the constructor, whose docstring says what each does
    (the options of :class:`~aiostream_kafka.config.ClientConfig`).

    Raises:
        ConfigError: an invalid option, before any network I/O.
    """

    def _setup(self) -> None:
        """The rest of ``__init__`` (generated: :class:`AdminConstructor`), run last."""
        self._cluster = Cluster(self.config)
        self._coordinators: dict[str, int] = {}
        self._started = False

    async def start(self) -> None:
        """Connect to the cluster (fetch its metadata).

        Raises:
            KafkaTimeoutError: no bootstrap address answered within ``default_api_timeout_ms``.
        """
        await self._cluster.bootstrap()
        self._started = True

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- Kafka's close(timeout)
        """Close every connection, flushing each for at most a second, then aborting it
        (so close is bounded even when a broker stopped reading; ``timeout`` caps the
        whole; ``None``: the default, 30 s, as the Producer's and the Consumer's close).
        Cancelling it still closes everything, then re-raises."""
        limit = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
        await shielded(self._cluster.close(), timeout=max(limit, 1.0), what="closing the admin")

    async def stop(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- as close()
        """:meth:`close` under aiokafka's name: the same call, same ``timeout``; returns
        once the admin client is closed."""
        await self.close(timeout)

    async def __aenter__(self) -> Admin:
        try:
            await self.start()
        except BaseException:
            await self.close(timeout=0)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def cluster(self) -> Cluster:
        """The metadata cache and connection pool (for diagnostics)."""
        return self._cluster

    @functools.cached_property
    def _calls(self) -> AdminCalls:
        """The calls of every area, over this client's cluster, settings and coordinators
        (made on first use, so that the constructor stays the generated one)."""
        return AdminCalls(self._cluster, self.config, self._coordinators)

    # -- topics ----------------------------------------------------------------------

    async def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        wait_for_leaders: bool = True,
    ) -> dict[str, TopicDescription | None]:
        """Create topics and return their descriptions (None with ``validate_only``).

        With ``wait_for_leaders`` (the default) it returns once every partition of every
        new topic has a leader in the metadata, so that producing right away works.

        Raises:
            KafkaError: the broker's error for the first topic that failed, as its typed
                subclass (``TopicAlreadyExistsError``, ``InvalidReplicationFactorError``,
                ``InvalidPartitionsError``, ``InvalidConfigError``, ...); the message names
                every topic that failed.
            KafkaTimeoutError: retriable errors persisted past the timeout.
            TypeError: one ``NewTopic`` or a ``str`` instead of a collection of them.
        """
        return await self._calls.create_topics(
            new_topics,
            timeout_ms=timeout_ms,
            validate_only=validate_only,
            wait_for_leaders=wait_for_leaders,
        )

    async def delete_topics(
        self, topics: Collection[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete topics by name; return once the metadata no longer lists them.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist (named in the message).
            KafkaTimeoutError: retriable errors persisted past the timeout.
            TypeError: ``topics`` is a ``str`` (write ``delete_topics(["t"])``).
        """
        return await self._calls.delete_topics(topics, timeout_ms=timeout_ms)

    async def create_partitions(
        self,
        new_counts: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Raise the partition count of each topic to the given total; return once the
        new partitions have leaders.

        Raises:
            InvalidPartitionsError: a count is not larger than the current one.
            UnknownTopicOrPartitionError: a topic does not exist.
        """
        return await self._calls.create_partitions(
            new_counts, timeout_ms=timeout_ms, validate_only=validate_only
        )

    async def list_topics(self, *, include_internal: bool = False) -> dict[str, TopicDescription]:
        """Return every topic of the cluster (internal ones only with ``include_internal``)."""
        return await self._calls.list_topics(include_internal=include_internal)

    async def describe_topics(self, topics: Collection[str]) -> dict[str, TopicDescription]:
        """Return the descriptions of the given topics.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist.
            TypeError: ``topics`` is a ``str`` (write ``describe_topics(["t"])``).
        """
        return await self._calls.describe_topics(topics)

    # -- cluster ---------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """Return the cluster id, the active controller and the brokers."""
        return await self._calls.describe_cluster()

    # -- offsets and records ---------------------------------------------------------

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec],
        *,
        isolation_level: str = "read_uncommitted",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Look up offsets by spec: earliest, latest, max timestamp, or for a timestamp.

        ``isolation_level="read_committed"`` makes ``latest`` the last stable offset.

        Raises:
            UnknownTopicOrPartitionError: a topic or partition does not exist.
            ConfigError: an unknown ``isolation_level``.
        """
        return await self._calls.list_offsets(
            specs, isolation_level=isolation_level, timeout_ms=timeout_ms
        )

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete every record before the given offset of each partition (-1: up to the
        high watermark). Returns the new low watermark of each partition.

        Raises:
            OffsetOutOfRangeError: an offset is beyond the high watermark.
            UnknownTopicOrPartitionError: a topic or partition does not exist.
        """
        return await self._calls.delete_records(offsets, timeout_ms=timeout_ms)

    # -- configs ---------------------------------------------------------------------

    async def describe_configs(
        self, resources: Collection[ConfigResource], *, keys: Collection[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Return the configs of each resource (only ``keys`` when given).

        Raises:
            UnknownTopicOrPartitionError: a topic resource does not exist.
            TypeError: one ``ConfigResource`` instead of a collection, or ``keys`` a ``str``.
        """
        return await self._calls.describe_configs(resources, keys=keys)

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Apply config changes (set, delete, append, subtract) to each resource.

        Raises:
            KafkaError: the broker's error for the first resource that failed, as its typed
                subclass (``InvalidConfigError``, ``InvalidRequestError``, ...).
        """
        return await self._calls.incremental_alter_configs(changes, validate_only=validate_only)

    # -- consumer groups -------------------------------------------------------------

    async def find_coordinator(self, group_id: str) -> int:
        """Return the node id of the coordinator of ``group_id``."""
        return await self._calls.find_coordinator(group_id)

    async def list_consumer_groups(
        self, *, types: Collection[str] | None = None
    ) -> list[ConsumerGroupListing]:
        """Return the groups known to any broker (each broker lists the groups it
        coordinates), sorted by group id; with ``types``, only the groups of those types
        (``"consumer"``, the KIP-848 protocol; ``"classic"``; ``"share"``; ``"streams"``;
        case-insensitive; None or empty: every type).

        ``group_type`` is ``"classic"`` for the groups of brokers older than ListGroups v5
        (Kafka 3.8), which do not tell it: before KIP-848 every group was a classic one.
        Brokers with ListGroups v5 filter by type themselves; the older ones are filtered
        here (there, ``types=["consumer"]`` lists nothing).

        Raises:
            TypeError: ``types`` is a ``str`` (write ``types=["consumer"]``).
            ValueError: a name in ``types`` that is no group type.
        """
        return await self._calls.list_consumer_groups(types=types)

    async def describe_consumer_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """Describe consumer groups of either protocol: type, state, assignor, coordinator,
        members and their assignments. Returns a description per group id.

        ``type`` tells the protocol. A ``"consumer"`` group (KIP-848, Kafka 4.0+) is
        described with ConsumerGroupDescribe: ``protocol`` is the server assignor
        (``uniform``, ``range``), ``group_epoch``/``assignment_epoch`` are set, and each
        member has its ``member_epoch``, ``rack``, subscription (topic names or the
        broker-side regex), ``assignment`` and ``target_assignment``. A ``"classic"``
        group (DescribeGroups; every group of a broker before Kafka 3.7) has ``protocol``
        the client-side assignor and those fields None. A ``"share"`` or ``"streams"``
        group comes with its type, state and protocol type only, no members.

        Raises:
            GroupIdNotFoundError: a group does not exist (Kafka 4 brokers, KIP-1043).
            GroupAuthorizationFailedError: describing a group is not allowed.
            TypeError: ``group_ids`` is a ``str`` (write ``describe_consumer_groups(["g"])``).
        """
        return await self._calls.describe_consumer_groups(group_ids)

    async def delete_consumer_groups(self, group_ids: Collection[str]) -> None:
        """Delete consumer groups (they must have no active members).

        Raises:
            GroupIdNotFoundError: a group does not exist.
            NonEmptyGroupError: a group still has members.
            TypeError: ``group_ids`` is a ``str`` (write ``delete_consumer_groups(["g"])``).
        """
        return await self._calls.delete_consumer_groups(group_ids)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Return the committed offsets of ``group_id`` (of every partition it committed,
        or of ``partitions``; those without a commit are left out).

        OffsetFetch v8+ (Kafka 3.0+) asks in the batched form (KIP-709), older brokers in
        the single-group form; asking for every partition needs v2+ (Kafka 0.10.2). Works
        for groups of either protocol (``"classic"`` and ``"consumer"``).

        Raises:
            TypeError: ``partitions`` is one ``TopicPartition`` or a ``str`` instead of a
                collection of them.
        """
        return await self._calls.list_consumer_group_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> None:
        """Commit ``offsets`` (the next offset to consume, per partition; an
        ``OffsetAndMetadata`` to attach a metadata string) to ``group_id`` from outside the
        group: an OffsetCommit with no member id and generation -1, as Java's
        ``Admin.alterConsumerGroupOffsets``. The coordinator takes it only while the group
        has no active members; a group that does not exist is created (empty, holding the
        offsets), so lag tools see it. Returns None once every partition is committed.

        Raises:
            UnknownMemberIdError: the group has active members (nothing is committed; the
                error is not retried). ``IllegalGenerationError`` likewise on some brokers.
            UnknownTopicOrPartitionError: a topic does not exist (brokers that name topics
                by id), or a partition does not.
            ValueError: a negative offset.
            TypeError: ``offsets`` is not a mapping of ``TopicPartition``.
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.alter_consumer_group_offsets(group_id, offsets)

    async def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Return, for each partition ``group_id`` committed, how many records lie between
        its committed offset and the end of the partition (the high watermark), for a
        group of either protocol (``"classic"`` and ``"consumer"``).

        Raises:
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.consumer_group_lag(group_id)

    # -- share groups (KIP-932) ------------------------------------------------------

    async def describe_share_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ShareGroupDescription]:
        """Describe share groups (KIP-932, Kafka 4.2+; ShareGroupDescribe, asked of each
        group's coordinator). Returns a :class:`ShareGroupDescription` per group id: its
        state, coordinator, group and assignment epochs, assignor and members (member id,
        client id and host, rack, subscribed topic names, and the partitions assigned to
        it; in a share group several members may be assigned the same partition).

        Raises:
            GroupIdNotFoundError: a group does not exist, or is no share group (a consumer
                or classic group of that id: :meth:`describe_consumer_groups` describes it).
            GroupAuthorizationFailedError: describing a group is not allowed.
            UnsupportedVersionError: the coordinator does not know share groups.
            TypeError: ``group_ids`` is a ``str`` (write ``describe_share_groups(["g"])``).
        """
        return await self._calls.describe_share_groups(group_ids)

    async def list_share_group_offsets(
        self, group_id: str, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionOffsetInfo]:
        """Return the share-partition start offset of each partition of share group
        ``group_id`` (of every partition it has state for, or of ``partitions``; those
        without state are left out), as :class:`SharePartitionOffsetInfo`: the start
        offset, its leader epoch and the broker's lag (Kafka 4.2+, else None).

        Every record before the start offset is done with (accepted, rejected or
        archived); measured on Kafka 4.3.1, the start offset reported stays where the group
        began (or where :meth:`alter_share_group_offsets` put it) while the records after
        it are accepted, so the lag (:meth:`share_group_lag`) is what tells the progress.
        An unknown group has no offsets: ``{}``.

        Raises:
            UnknownTopicOrPartitionError: a partition asked for does not exist.
            TypeError: ``partitions`` is one ``TopicPartition`` or a ``str`` instead of a
                collection of them.
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.list_share_group_offsets(group_id, partitions)

    async def share_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Return, for each partition share group ``group_id`` has state for, how many of
        its records are not yet done with: neither accepted, rejected nor archived, from
        the share-partition start offset to the end of the partition (the high
        watermark). Records acquired by a member and not yet acknowledged count.

        This is the broker's own count (``SharePartitionOffsetInfo.lag``, Kafka 4.2+).
        Where the broker gives none (before Kafka 4.2, or a start offset past the high
        watermark) it is the high watermark less the start offset (ListOffsets), which
        also counts the records acknowledged ahead of the start offset. An unknown group
        has no partitions: ``{}``.

        Raises:
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.share_group_lag(group_id)

    async def alter_share_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Set the share-partition start offset of each partition given, for share group
        ``group_id``: its members then take records from that offset on (a reset back
        delivers again records already done with; forward skips them). The group must be
        empty (no member: stop or close every share consumer of it first); a group that
        does not exist yet is created with those offsets (measured on Kafka 4.3.1, as is an
        offset past the end of the partition being taken as given).

        Raises:
            NonEmptyGroupError: the group has members.
            UnknownTopicOrPartitionError: a topic or partition does not exist.
            TypeError: ``offsets`` is no mapping of ``TopicPartition`` to offset.
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.alter_share_group_offsets(group_id, offsets)

    async def delete_share_group_offsets(self, group_id: str, topics: Collection[str]) -> None:
        """Delete the state of share group ``group_id`` for every partition of ``topics``:
        the group forgets their start offsets and, when it next reads those topics,
        starts again where ``share.auto.offset.reset`` says. The group must be empty (no
        member).

        Raises:
            NonEmptyGroupError: the group has members.
            UnknownTopicOrPartitionError: a topic does not exist.
            TypeError: ``topics`` is a ``str`` (write ``delete_share_group_offsets(g, ["t"])``).
            KafkaTimeoutError: retriable errors persisted past ``default_api_timeout_ms``.
        """
        return await self._calls.delete_share_group_offsets(group_id, topics)


class AdminCalls(TopicCalls, ConfigCalls, GroupCalls, ShareGroupCalls):
    """Every call of the Admin client (one module per area) over one cluster, its
    settings and its coordinators: what an :class:`Admin` holds and delegates to."""


habits.install(Admin)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
