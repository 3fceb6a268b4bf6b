"""``Admin``: topics, configs, offsets and consumer groups of a Kafka cluster.

Every call sends its requests to the broker that can answer them (any broker for topic and
config changes, which KRaft brokers forward to the controller; partition leaders for
offsets and record deletion; the group coordinator for group calls), retries retriable
errors with back-off until ``default_api_timeout_ms``, and raises a non-retriable broker
error as its typed exception, naming the topic, partition or group it concerns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from aiostream_kafka import _args, habits
from aiostream_kafka.admin._generated import AdminConstructor
from aiostream_kafka.admin.types import (
    AlterConfigOp,
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
    TopicDescription,
)
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.cluster.metadata import ClusterSnapshot, TopicMetadata
from aiostream_kafka.concurrency import DEFAULT_CLOSE_TIMEOUT_S, gather_all, shielded
from aiostream_kafka.errors import (
    ConfigError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.consumer_protocol_assignment import (
    ConsumerProtocolAssignment,
)
from aiostream_kafka.protocol.messages.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
)
from aiostream_kafka.protocol.messages.create_topics import (
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from aiostream_kafka.protocol.messages.delete_groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from aiostream_kafka.protocol.messages.delete_records import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
)
from aiostream_kafka.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from aiostream_kafka.protocol.messages.describe_cluster import (
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from aiostream_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from aiostream_kafka.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")

_ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
_GROUP_KEY_TYPE = 0


def broker_error(code: int, context: str, broker_message: str | None = None) -> KafkaError:
    """The typed exception of Kafka error ``code``, its message saying what it concerns."""
    info = ec.ERRORS_BY_CODE.get(code)
    name = info.name if info else f"error {code}"
    detail = broker_message or (info.description if info else "")
    return ec.error_for_code(code)(f"{context}: {name}: {detail}".rstrip(": "))


class _Retry(Exception):
    """Raised inside an attempt to ask :meth:`Admin._with_retries` for another one."""

    def __init__(self, cause: KafkaError) -> None:
        super().__init__(str(cause))
        self.cause = cause


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

    # -- plumbing --------------------------------------------------------------------------

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        return self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms

    async def _with_retries(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        timeout_ms: int | None = None,
        topics: Collection[str] = (),
    ) -> T:
        """Run ``attempt`` until it succeeds, retrying retriable errors with back-off until
        the timeout; refresh metadata (of ``topics`` too) between attempts. The timeout
        bounds the whole call, the attempt in progress and its metadata refresh included."""
        limit_ms = self._timeout_ms(timeout_ms)

        async def unwrapped() -> T:
            try:
                return await attempt()
            except _Retry as retry:
                # A retriable error the attempt reports: the timeout names it.
                raise retry.cause from retry.cause.__cause__

        async def between(error: Exception) -> None:
            if isinstance(error, ec.NotCoordinatorError | ec.CoordinatorNotAvailableError):
                self._coordinators.clear()  # the coordinator moved: look it up again
            with contextlib.suppress(KafkaTimeoutError):
                await self._cluster.refresh(topics)  # else the next attempt reports it

        return await retry_until(
            what,
            unwrapped,
            deadline=time.monotonic() + limit_ms / 1000,
            limit=f"{limit_ms} ms",
            backoff=Backoff.of(self.config),
            between=between,
        )

    def _raise_first(
        self, errors: dict[str, KafkaError], final: tuple[type[KafkaError], ...] = ()
    ) -> None:
        """Raise for ``errors``: retry if any is retriable (and not of a ``final`` type),
        else raise the first, naming the others."""
        if not errors:
            return
        for error in errors.values():
            if isinstance(error, final):
                error.retriable = False
        retriable = {k: v for k, v in errors.items() if v.retriable}
        if retriable:
            first = next(iter(retriable.values()))
            raise _Retry(first)
        first = next(iter(errors.values()))
        if len(errors) > 1:
            others = "; ".join(f"{k}: {type(v).__name__}" for k, v in list(errors.items())[1:])
            raise type(first)(f"{first} (also failed: {others})")
        raise first

    # -- topics ----------------------------------------------------------------------------

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
        _args.collection(new_topics, "create_topics", NewTopic, "create_topics([NewTopic(...)])")
        if not new_topics:
            return {}
        names = [t.name for t in new_topics]
        if len(set(names)) != len(names):
            raise ConfigError(f"create_topics got the same topic name twice: {names}")
        pending = {t.name: t for t in new_topics}
        timeout = self._timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = CreateTopicsRequest(
                topics=[_creatable(t) for t in pending.values()],
                timeout_ms=min(timeout, self.config.request_timeout_ms),
                validate_only=validate_only,
            )
            response = await self._cluster.send(None, request)
            assert isinstance(response, CreateTopicsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.topics:
                if result.error_code == 0:
                    pending.pop(result.name, None)
                else:
                    errors[result.name] = broker_error(
                        result.error_code, f"topic {result.name!r}", result.error_message
                    )
            self._raise_first(errors)

        await self._with_retries("create_topics", attempt, timeout_ms)
        if validate_only:
            return dict.fromkeys(names)
        if wait_for_leaders:
            # Describe from the metadata that showed the leaders: another refresh may be
            # answered by a broker that has not caught up yet.
            snapshot = await self._wait_for_leaders(names, timeout)
        else:
            snapshot = await self._cluster.refresh(names)
        self._cluster.untrack(names)
        return {n: _describe(snapshot.topics[n]) if n in snapshot.topics else None for n in names}

    async def _wait_for_leaders(
        self, names: Collection[str], timeout_ms: int, counts: Mapping[str, int] | None = None
    ) -> ClusterSnapshot:
        """Wait until the metadata shows every partition of ``names`` with a leader (and,
        with ``counts``, that many partitions); return that metadata."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            snapshot = await self._cluster.refresh(names)
            ready = all(
                n in snapshot.topics
                and snapshot.topics[n].error_code == 0
                and snapshot.topics[n].partitions
                and (counts is None or len(snapshot.topics[n].partitions) >= counts[n])
                and all(p.leader >= 0 for p in snapshot.topics[n].partitions.values())
                for n in names
            )
            if ready:
                return snapshot
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topics {sorted(names)} were created but not every partition had a leader "
                    f"within {timeout_ms} ms"
                )
            await asyncio.sleep(0.05)

    async def delete_topics(
        self, topics: Collection[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete topics by name; return once the metadata no longer lists them.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist (named in the message).
            KafkaTimeoutError: retriable errors persisted past the timeout.
            TypeError: ``topics`` is a ``str`` (write ``delete_topics(["t"])``).
        """
        pending = set(_args.names(topics, "delete_topics"))
        if not pending:
            return
        timeout = self._timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in sorted(pending)],
                topic_names=sorted(pending),
                timeout_ms=min(timeout, self.config.request_timeout_ms),
            )
            response = await self._cluster.send(None, request)
            assert isinstance(response, DeleteTopicsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.responses:
                name = result.name or str(result.topic_id)
                if result.error_code == 0:
                    pending.discard(name)
                else:
                    errors[name] = broker_error(
                        result.error_code, f"topic {name!r}", result.error_message
                    )
            self._raise_first(errors, final=(ec.UnknownTopicOrPartitionError,))

        await self._with_retries("delete_topics", attempt, timeout_ms)
        # Like create_topics: return once the metadata no longer lists them, so that a
        # list_topics or a re-creation right after sees the deletion.
        names = set(topics)
        deadline = time.monotonic() + timeout / 1000
        while True:
            snapshot = await self._cluster.refresh(all_topics=True)
            if not names & {n for n, t in snapshot.topics.items() if t.error_code == 0}:
                break
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topics {sorted(names)} were deleted but still listed after {timeout} ms"
                )
            await asyncio.sleep(0.05)
        self._cluster.untrack(topics)

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
        pending = dict(new_counts)
        if not pending:
            return
        timeout = self._timeout_ms(timeout_ms)

        async def attempt() -> None:
            request = CreatePartitionsRequest(
                topics=[
                    CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=c, assignments=None)
                    for n, c in pending.items()
                ],
                timeout_ms=min(timeout, self.config.request_timeout_ms),
                validate_only=validate_only,
            )
            response = await self._cluster.send(None, request)
            assert isinstance(response, CreatePartitionsResponse)
            errors: dict[str, KafkaError] = {}
            for result in response.results:
                if result.error_code == 0:
                    pending.pop(result.name, None)
                else:
                    errors[result.name] = broker_error(
                        result.error_code, f"topic {result.name!r}", result.error_message
                    )
            self._raise_first(errors)

        await self._with_retries("create_partitions", attempt, timeout_ms)
        if not validate_only:
            await self._wait_for_leaders(list(new_counts), timeout, counts=new_counts)
            self._cluster.untrack(new_counts)

    async def list_topics(self, *, include_internal: bool = False) -> dict[str, TopicDescription]:
        """Return every topic of the cluster (internal ones only with ``include_internal``)."""
        snapshot = await self._with_retries(
            "list_topics", lambda: self._cluster.refresh(all_topics=True)
        )
        return {
            name: _describe(topic)
            for name, topic in sorted(snapshot.topics.items())
            if topic.error_code == 0 and (include_internal or not topic.is_internal)
        }

    async def describe_topics(self, topics: Collection[str]) -> dict[str, TopicDescription]:
        """Return the descriptions of the given topics.

        Raises:
            UnknownTopicOrPartitionError: a topic does not exist.
            TypeError: ``topics`` is a ``str`` (write ``describe_topics(["t"])``).
        """
        names = sorted(set(_args.names(topics, "describe_topics")))

        async def attempt() -> dict[str, TopicDescription]:
            snapshot = await self._cluster.refresh(names)
            errors = {
                n: broker_error(snapshot.topics[n].error_code, f"topic {n!r}")
                for n in names
                if n in snapshot.topics and snapshot.topics[n].error_code != 0
            }
            self._raise_first(errors, final=(ec.UnknownTopicOrPartitionError,))
            return {n: _describe(snapshot.topics[n]) for n in names}

        try:
            return await self._with_retries("describe_topics", attempt)
        finally:
            self._cluster.untrack(names)

    # -- cluster ---------------------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        """Return the cluster id, the active controller and the brokers."""

        async def attempt() -> ClusterDescription:
            response = await self._cluster.send(None, DescribeClusterRequest())
            assert isinstance(response, DescribeClusterResponse)
            if response.error_code:
                raise broker_error(response.error_code, "describe_cluster", response.error_message)
            return ClusterDescription(
                cluster_id=response.cluster_id,
                controller_id=response.controller_id,
                brokers=sorted(
                    (
                        BrokerDescription(b.broker_id, b.host, b.port, b.rack, b.is_fenced)
                        for b in response.brokers
                    ),
                    key=lambda b: b.node_id,
                ),
            )

        return await self._with_retries("describe_cluster", attempt)

    # -- offsets and records ---------------------------------------------------------------

    async def _by_leader(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[int, list[TopicPartition]]:
        """Group partitions by their leader; raise for unknown topics/partitions."""
        parts = list(partitions)
        snapshot = await self._cluster.ensure_fresh({tp.topic for tp in parts})
        grouped: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in parts:
            topic = snapshot.topics.get(tp.topic)
            if topic is not None and topic.error_code != 0:
                self._raise_first(
                    {tp.topic: broker_error(topic.error_code, f"topic {tp.topic!r}")},
                    final=(ec.UnknownTopicOrPartitionError,),
                )
            meta = snapshot.partition(tp)
            if meta is None:
                if topic is not None:
                    missing = ec.UnknownTopicOrPartitionError(
                        f"partition {tp.partition} of topic {tp.topic!r} does not exist "
                        f"(it has {len(topic.partitions)} partitions)"
                    )
                    missing.retriable = False  # the metadata is fresh: waiting will not help
                    raise missing
                raise _Retry(ec.UnknownTopicOrPartitionError(f"topic {tp.topic!r} is unknown"))
            if meta.leader < 0:
                raise _Retry(ec.LeaderNotAvailableError(f"{tp} has no leader"))
            grouped[meta.leader].append(tp)
        return grouped

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
        if isolation_level not in _ISOLATION:
            raise ConfigError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', "
                f"got {isolation_level!r}"
            )
        pending = dict(specs)
        results: dict[TopicPartition, ListOffsetsResult] = {}

        async def attempt() -> dict[TopicPartition, ListOffsetsResult]:
            grouped = await self._by_leader(pending)
            responses = await gather_all(
                *(
                    self._list_offsets_on(leader, tps, pending, isolation_level)
                    for leader, tps in grouped.items()
                )
            )
            errors: dict[str, KafkaError] = {}
            for found, failed in responses:
                results.update(found)
                for tp in found:
                    pending.pop(tp, None)
                errors.update(failed)
            self._raise_first(errors)
            return results

        topics = {tp.topic for tp in specs}
        try:
            return await self._with_retries("list_offsets", attempt, timeout_ms, topics=topics)
        finally:
            self._cluster.untrack(topics)

    async def _list_offsets_on(
        self,
        leader: int,
        tps: list[TopicPartition],
        specs: Mapping[TopicPartition, OffsetSpec],
        isolation_level: str,
    ) -> tuple[dict[TopicPartition, ListOffsetsResult], dict[str, KafkaError]]:
        by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp)
        snapshot = self._cluster.snapshot
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=_ISOLATION[isolation_level],
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=tp.partition,
                            current_leader_epoch=_epoch(snapshot.partition(tp)),
                            timestamp=specs[tp].timestamp,
                        )
                        for tp in parts
                    ],
                )
                for topic, parts in by_topic.items()
            ],
            timeout_ms=self.config.request_timeout_ms,
        )
        response = await self._cluster.send(leader, request)
        assert isinstance(response, ListOffsetsResponse)
        found: dict[TopicPartition, ListOffsetsResult] = {}
        errors: dict[str, KafkaError] = {}
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if p.error_code:
                    errors[str(tp)] = broker_error(
                        p.error_code, f"list_offsets {tp.topic}[{tp.partition}]"
                    )
                else:
                    found[tp] = ListOffsetsResult(
                        p.offset, p.timestamp, p.leader_epoch if p.leader_epoch >= 0 else None
                    )
        return found, errors

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete every record before the given offset of each partition (-1: up to the
        high watermark). Returns the new low watermark of each partition.

        Raises:
            OffsetOutOfRangeError: an offset is beyond the high watermark.
            UnknownTopicOrPartitionError: a topic or partition does not exist.
        """
        pending = dict(offsets)
        results: dict[TopicPartition, int] = {}

        async def attempt() -> dict[TopicPartition, int]:
            grouped = await self._by_leader(pending)

            async def on(leader: int, tps: list[TopicPartition]) -> dict[str, KafkaError]:
                by_topic: dict[str, list[TopicPartition]] = defaultdict(list)
                for tp in tps:
                    by_topic[tp.topic].append(tp)
                request = DeleteRecordsRequest(
                    topics=[
                        DeleteRecordsRequest.DeleteRecordsTopic(
                            name=topic,
                            partitions=[
                                DeleteRecordsRequest.DeleteRecordsPartition(
                                    partition_index=tp.partition, offset=pending[tp]
                                )
                                for tp in parts
                            ],
                        )
                        for topic, parts in by_topic.items()
                    ],
                    timeout_ms=self.config.request_timeout_ms,
                )
                response = await self._cluster.send(leader, request)
                assert isinstance(response, DeleteRecordsResponse)
                errors: dict[str, KafkaError] = {}
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if p.error_code:
                            errors[str(tp)] = broker_error(
                                p.error_code, f"delete_records {tp.topic}[{tp.partition}]"
                            )
                        else:
                            results[tp] = p.low_watermark
                            pending.pop(tp, None)
                return errors

            all_errors: dict[str, KafkaError] = {}
            for errors in await gather_all(*(on(n, t) for n, t in grouped.items())):
                all_errors.update(errors)
            self._raise_first(all_errors)
            return results

        try:
            return await self._with_retries(
                "delete_records", attempt, timeout_ms, topics={tp.topic for tp in offsets}
            )
        finally:
            self._cluster.untrack({tp.topic for tp in offsets})

    # -- configs ---------------------------------------------------------------------------

    @staticmethod
    def _config_node(resource: ConfigResource) -> int | None:
        # Broker-level configs are answered by that broker; the rest by any broker.
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
            if resource.name:
                try:
                    return int(resource.name)
                except ValueError:
                    raise ConfigError(
                        f"a BROKER config resource is named by the broker id, got {resource.name!r}"
                    ) from None
        return None

    @classmethod
    def _config_nodes(
        cls, resources: Iterable[ConfigResource]
    ) -> dict[int | None, list[ConfigResource]]:
        """Group config resources by the broker that answers for them (None: any)."""
        by_node: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for resource in resources:
            by_node[cls._config_node(resource)].append(resource)
        return by_node

    async def describe_configs(
        self, resources: Collection[ConfigResource], *, keys: Collection[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Return the configs of each resource (only ``keys`` when given).

        Raises:
            UnknownTopicOrPartitionError: a topic resource does not exist.
            TypeError: one ``ConfigResource`` instead of a collection, or ``keys`` a ``str``.
        """
        _args.collection(
            resources, "describe_configs", ConfigResource, "describe_configs([resource])"
        )
        if keys is not None:
            _args.names(keys, "describe_configs", "config names")
        by_node = self._config_nodes(resources)
        results: dict[ConfigResource, dict[str, ConfigEntry]] = {}

        async def attempt() -> dict[ConfigResource, dict[str, ConfigEntry]]:
            errors: dict[str, KafkaError] = {}
            for node, group in by_node.items():
                request = DescribeConfigsRequest(
                    resources=[
                        DescribeConfigsRequest.DescribeConfigsResource(
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configuration_keys=sorted(keys) if keys is not None else None,
                        )
                        for r in group
                    ],
                    include_synonyms=False,
                    include_documentation=False,
                )
                response = await self._cluster.send(node, request)
                assert isinstance(response, DescribeConfigsResponse)
                for result in response.results:
                    resource = ConfigResource(
                        ConfigResourceType(result.resource_type), result.resource_name
                    )
                    if result.error_code:
                        errors[f"{resource.type.name} {resource.name!r}"] = broker_error(
                            result.error_code,
                            f"describe_configs {resource.type.name} {resource.name!r}",
                            result.error_message,
                        )
                        continue
                    results[resource] = {
                        c.name: ConfigEntry(
                            name=c.name,
                            value=c.value,
                            source=_config_source(c.config_source),
                            read_only=c.read_only,
                            is_sensitive=c.is_sensitive,
                            is_default=c.config_source == ConfigSource.DEFAULT_CONFIG,
                        )
                        for c in result.configs
                    }
            self._raise_first(errors)
            return results

        return await self._with_retries("describe_configs", attempt)

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
        by_node = self._config_nodes(changes)

        async def attempt() -> None:
            errors: dict[str, KafkaError] = {}
            for node, group in by_node.items():
                request = IncrementalAlterConfigsRequest(
                    resources=[
                        IncrementalAlterConfigsRequest.AlterConfigsResource(
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configs=[
                                IncrementalAlterConfigsRequest.AlterableConfig(
                                    name=op.name, config_operation=int(op.op), value=op.value
                                )
                                for op in changes[r]
                            ],
                        )
                        for r in group
                    ],
                    validate_only=validate_only,
                )
                response = await self._cluster.send(node, request)
                assert isinstance(response, IncrementalAlterConfigsResponse)
                for result in response.responses:
                    if result.error_code:
                        kind = ConfigResourceType(result.resource_type).name
                        label = f"{kind} {result.resource_name!r}"
                        errors[label] = broker_error(
                            result.error_code,
                            f"incremental_alter_configs {label}",
                            result.error_message,
                        )
            self._raise_first(errors)

        await self._with_retries("incremental_alter_configs", attempt)

    # -- consumer groups -------------------------------------------------------------------

    async def find_coordinator(self, group_id: str) -> int:
        """Return the node id of the coordinator of ``group_id``."""
        cached = self._coordinators.get(group_id)
        if cached is not None:
            return cached

        async def attempt() -> int:
            return await self._cluster.find_coordinator(group_id, _GROUP_KEY_TYPE)

        node = await self._with_retries("find_coordinator", attempt)
        self._coordinators[group_id] = node
        return node

    async def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Return every group known to any broker (each broker lists the groups it
        coordinates).

        ``group_type`` is ``"classic"`` for the groups of brokers older than ListGroups v5
        (Kafka 3.8), which do not tell it: before KIP-848 every group was a classic one.
        """
        snapshot = await self._cluster.ensure_fresh()

        async def on(node: int) -> list[ConsumerGroupListing]:
            async def attempt() -> list[ConsumerGroupListing]:
                response = await self._cluster.send(node, ListGroupsRequest())
                assert isinstance(response, ListGroupsResponse)
                if response.error_code:
                    raise broker_error(
                        response.error_code, f"list_consumer_groups on broker {node}"
                    )
                return [
                    ConsumerGroupListing(
                        g.group_id, g.protocol_type, g.group_state, g.group_type or _CLASSIC
                    )
                    for g in response.groups
                ]

            return await self._with_retries(f"list_consumer_groups on broker {node}", attempt)

        listings = await gather_all(*(on(n) for n in snapshot.brokers))
        return sorted((g for part in listings for g in part), key=lambda g: g.group_id)

    async def describe_consumer_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """Describe classic consumer groups: state, protocol and members' assignments.

        Raises:
            GroupIdNotFoundError: a group does not exist (Kafka 4 brokers, KIP-1043).
            TypeError: ``group_ids`` is a ``str`` (write ``describe_consumer_groups(["g"])``).
        """
        _args.names(group_ids, "describe_consumer_groups", "group ids")
        results: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> ConsumerGroupDescription:
                node = await self.find_coordinator(group_id)
                response = await self._cluster.send(node, DescribeGroupsRequest(groups=[group_id]))
                assert isinstance(response, DescribeGroupsResponse)
                g = response.groups[0]
                if g.error_code:
                    raise broker_error(g.error_code, f"group {group_id!r}", g.error_message)
                members = [
                    MemberDescription(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        host=m.client_host,
                        assignment=_decode_assignment(m.member_assignment),
                    )
                    for m in g.members
                ]
                return ConsumerGroupDescription(
                    group_id=g.group_id,
                    state=g.group_state,
                    protocol_type=g.protocol_type,
                    protocol=g.protocol_data,
                    coordinator=node,
                    members=members,
                )

            results[group_id] = await self._with_retries(f"describe group {group_id!r}", attempt)
        return results

    async def delete_consumer_groups(self, group_ids: Collection[str]) -> None:
        """Delete consumer groups (they must have no active members).

        Raises:
            GroupIdNotFoundError: a group does not exist.
            NonEmptyGroupError: a group still has members.
            TypeError: ``group_ids`` is a ``str`` (write ``delete_consumer_groups(["g"])``).
        """
        _args.names(group_ids, "delete_consumer_groups", "group ids")
        for group_id in group_ids:

            async def attempt(group_id: str = group_id) -> None:
                node = await self.find_coordinator(group_id)
                response = await self._cluster.send(
                    node, DeleteGroupsRequest(groups_names=[group_id])
                )
                assert isinstance(response, DeleteGroupsResponse)
                for r in response.results:
                    if r.error_code:
                        raise broker_error(r.error_code, f"group {r.group_id!r}")

            await self._with_retries(f"delete group {group_id!r}", attempt)
            self._coordinators.pop(group_id, None)

    async def list_consumer_group_offsets(
        self, group_id: str, partitions: Collection[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Return the committed offsets of ``group_id`` (of every partition it committed,
        or of ``partitions``; those without a commit are left out).

        OffsetFetch v8+ (Kafka 3.0+) asks in the batched form (KIP-709), older brokers in
        the single-group form; asking for every partition needs v2+ (Kafka 0.10.2).

        Raises:
            TypeError: ``partitions`` is one ``TopicPartition`` or a ``str`` instead of a
                collection of them.
        """
        if partitions is not None:
            _args.collection(
                partitions,
                "list_consumer_group_offsets",
                TopicPartition,
                "list_consumer_group_offsets(group_id, [TopicPartition(topic, partition)])",
            )

        async def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            node = await self.find_coordinator(group_id)
            conn = await self._cluster.connection(node)
            version = conn.version_for(OffsetFetchRequest)
            snapshot = self._cluster.snapshot
            by_topic: dict[str, list[int]] | None = None
            if partitions is not None:
                by_topic = defaultdict(list)
                for tp in partitions:
                    by_topic[tp.topic].append(tp.partition)
                if version >= 10:
                    snapshot = await self._cluster.ensure_fresh(by_topic)
            if version >= 8:
                topics = None
                if by_topic is not None:
                    topics = [
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=t,
                            topic_id=snapshot.topics[t].topic_id
                            if t in snapshot.topics
                            else _ZERO_UUID,
                            partition_indexes=sorted(ps),
                        )
                        for t, ps in by_topic.items()
                    ]
                request = OffsetFetchRequest(
                    groups=[
                        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=topics)
                    ],
                    require_stable=True,
                )
            else:
                if by_topic is None and version < 2:
                    raise UnsupportedVersionError(
                        f"the coordinator of group {group_id!r} (broker {node}) speaks "
                        f"OffsetFetch up to v{version}, which cannot ask for every committed "
                        "partition (v2+, Kafka 0.10.2); pass the partitions"
                    )
                request = OffsetFetchRequest(
                    group_id=group_id,
                    topics=None
                    if by_topic is None
                    else [
                        OffsetFetchRequest.OffsetFetchRequestTopic(
                            name=t, partition_indexes=sorted(ps)
                        )
                        for t, ps in by_topic.items()
                    ],
                    require_stable=version >= 7,
                )
            response = await conn.request(request, version=version)
            assert isinstance(response, OffsetFetchResponse)
            # (name or None, topic id, partitions) whatever the version's shape
            committed: list[tuple[str | None, uuid.UUID | None, list[Any]]]
            if version >= 8:
                group = response.groups[0]
                if group.error_code:
                    raise broker_error(group.error_code, f"group {group_id!r}")
                committed = [(t.name, t.topic_id, t.partitions) for t in group.topics]
            else:
                if response.error_code:
                    raise broker_error(response.error_code, f"group {group_id!r}")
                committed = [(t.name, None, t.partitions) for t in response.topics]
            if any(not name for name, _, _ in committed):
                snapshot = await self._cluster.refresh(all_topics=True)
            result: dict[TopicPartition, OffsetAndMetadata] = {}
            errors: dict[str, KafkaError] = {}
            for topic_name, topic_id, parts in committed:
                name = topic_name or (None if topic_id is None else snapshot.topic_name(topic_id))
                if name is None:
                    continue  # a topic deleted since the commit
                for p in parts:
                    tp = TopicPartition(name, p.partition_index)
                    if p.error_code:
                        errors[str(tp)] = broker_error(p.error_code, f"group {group_id!r} {tp}")
                    elif p.committed_offset >= 0:
                        result[tp] = OffsetAndMetadata(
                            p.committed_offset,
                            p.metadata,
                            p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None,
                        )
            self._raise_first(errors)
            return result

        return await self._with_retries(f"offsets of group {group_id!r}", attempt)

    async def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Return, for each partition ``group_id`` committed, how many records lie between
        its committed offset and the end of the partition (the high watermark)."""
        committed = await self.list_consumer_group_offsets(group_id)
        if not committed:
            return {}
        ends = await self.list_offsets({tp: OffsetSpec.latest() for tp in committed})
        return {tp: max(0, ends[tp].offset - om.offset) for tp, om in sorted(committed.items())}


_ZERO_UUID = uuid.UUID(int=0)
# What ListGroups before v5 (no GroupType) lists: every group was classic before KIP-848.
_CLASSIC = "classic"


def _epoch(meta: Any) -> int:
    return -1 if meta is None else int(meta.leader_epoch)


def _config_source(value: int) -> ConfigSource:
    try:
        return ConfigSource(value)
    except ValueError:
        return ConfigSource.UNKNOWN


def _creatable(topic: NewTopic) -> CreateTopicsRequest.CreatableTopic:
    assignments = []
    if topic.replica_assignment:
        assignments = [
            CreateTopicsRequest.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
            for p, b in sorted(topic.replica_assignment.items())
        ]
    return CreateTopicsRequest.CreatableTopic(
        name=topic.name,
        num_partitions=-1 if assignments else topic.partitions,
        replication_factor=-1 if assignments else topic.replication_factor,
        assignments=assignments,
        configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
            for k, v in sorted(topic.config.items())
        ],
    )


def _describe(topic: TopicMetadata) -> TopicDescription:
    return TopicDescription(
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.is_internal,
        partitions=[
            PartitionInfo(
                p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, p.offline_replicas
            )
            for _, p in sorted(topic.partitions.items())
        ],
    )


def _decode_assignment(raw: bytes | memoryview) -> list[TopicPartition]:
    data = bytes(raw)
    if len(data) < 2:
        return []
    version = int.from_bytes(data[:2], "big", signed=True)
    version = min(
        max(version, ConsumerProtocolAssignment.MIN_VERSION), ConsumerProtocolAssignment.MAX_VERSION
    )
    try:
        assignment, _ = ConsumerProtocolAssignment.decode_from(memoryview(data), 2, version)
    except KafkaError:
        return []
    return [
        TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions
    ]


habits.install(Admin)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
