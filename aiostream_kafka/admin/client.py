"""``Admin``: topics, configs, offsets and consumer groups of a Kafka cluster.

Every call sends its requests to the broker that can answer them (any broker for topic and
config changes, which KRaft brokers forward to the controller; partition leaders for
offsets and record deletion; the group coordinator for group calls), retries retriable
errors with back-off until ``default_api_timeout_ms``, and raises a non-retriable broker
error as its typed exception, naming the topic, partition or group it concerns.

This module is the public face (the constructor, the lifecycle, each call's signature and
documentation); the calls are written one module per area: ``topics``, ``offsets``,
``configs``, ``groups``, over the shared ``plumbing`` (retries, coordinator look-up).
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Collection, Mapping, Sequence
from types import TracebackType
from typing import Any, Never

from aiostream_kafka import habits
from aiostream_kafka.admin.configs import ConfigCalls
from aiostream_kafka.admin.groups import GroupCalls
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
    TopicDescription,
)
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import DEFAULT_CLOSE_TIMEOUT_S, shielded
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.options import check_options
from aiostream_kafka.requests.errors import broker_error as broker_error  # its old home
from aiostream_kafka.structs import TopicPartition

log = logging.getLogger(__name__)


class Admin:
    """Administrative client of a Kafka cluster.

    Use as ``async with Admin(bootstrap_servers="host:9092") as admin: ...``. Every
    option is a keyword parameter of the constructor, whose docstring says what each does
    (the options of :class:`~aiostream_kafka.config.ClientConfig`).

    Raises:
        ConfigError: an invalid option, before any network I/O.
    """

    # BEGIN GENERATED __init__ (tools/gen_signatures.py; do not edit by hand)
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "aiostream-kafka",
        request_timeout_ms: int = 30_000,
        socket_connection_setup_timeout_ms: int = 10_000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        metadata_max_age_ms: int = 300_000,
        metadata_max_idle_ms: int = 300_000,
        default_api_timeout_ms: int = 60_000,
        bootstrap_timeout_ms: int = 10_000,
        connections_max_idle_ms: int = 540_000,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        sasl_oauth_token_provider: Any = None,
        max_pipelined_requests: int = 100,
        **unknown: Never,
    ) -> None:
        """Create an admin client; it connects in :meth:`start` (or ``async with``).

        Args:
            bootstrap_servers: Where to find the cluster: `"host:port[,host:port]"` or a list of
                `"host:port"` (IPv6 hosts in brackets: `"[::1]:9092"`). After the first metadata
                answer the client talks to the brokers the metadata names, and falls back to these
                addresses only when none of those answers. (required)
            client_id: Sent in the header of every request; brokers show it in their logs and
                request metrics and apply client quotas by it. (default `'aiostream-kafka'`)
            request_timeout_ms: How long to wait for the answer to one request. When it runs out the
                connection is closed and every request in flight on it fails with a retriable
                `NetworkError`, which the caller retries within its own deadline. A Fetch gets
                `fetch_max_wait_ms` on top, since the broker may hold it that long. The producer
                uses the same value for its Produce requests. (ms, default `30000` (30 s))
            socket_connection_setup_timeout_ms: How long opening one connection (TCP connect, and
                the TLS handshake with `SSL`) may take before it fails with `KafkaTimeoutError`.
                (ms, default `10000` (10 s))
            reconnect_backoff_ms: Wait before connecting again to an address whose last attempt
                failed; it doubles with each further failure up to `reconnect_backoff_max_ms`, with
                ±20 % jitter. (ms, default `50`)
            reconnect_backoff_max_ms: Upper bound of the reconnect back-off. Must be at least
                `reconnect_backoff_ms`. (ms, default `1000` (1 s))
            retry_backoff_ms: First wait before retrying an operation that failed with a retriable
                error (metadata refreshes, Admin calls, offset lookups, produce retries); it doubles
                with each further failure up to `retry_backoff_max_ms`. (ms, default `100`)
            retry_backoff_max_ms: Upper bound of the retry back-off. (ms, default `1000` (1 s))
            metadata_max_age_ms: Cluster metadata older than this is refreshed even when no error
                asked for it. A consumer subscribed with a `pattern` also looks for new matching
                topics this often. (ms, default `300000` (5 min))
            metadata_max_idle_ms: A topic the producer has not sent to for this long is dropped from
                its metadata requests (KIP-526), and its per-partition state with it; sending to it
                again fetches its metadata again. (ms, default `300000` (5 min))
            default_api_timeout_ms: Deadline of operations that retry as a whole: `start()` (the
                first metadata), Admin calls without their own `timeout_ms`, the consumer's offset
                lookups (`seek_to_beginning`, `seek_to_end`, `offsets_for_times`, ...), commits and
                reading committed offsets. Past it they raise `KafkaTimeoutError` with the last
                error. (ms, default `60000` (1 min))
            bootstrap_timeout_ms: How long `start()` keeps trying the bootstrap addresses (each
                failed attempt logs a warning) before it raises `BootstrapError` naming every
                address and its last error. Only the first metadata request has this short deadline;
                later refreshes use `default_api_timeout_ms`. (ms, default `10000` (10 s))
            connections_max_idle_ms: A connection with nothing in flight that has not been used for
                this long is closed (below the broker's own 10-minute limit, so that the client ends
                it cleanly); the next request opens a new one. (ms, default `540000` (9 min))
            security_protocol: `"PLAINTEXT"`, `"SSL"` (TLS), `"SASL_PLAINTEXT"` or `"SASL_SSL"`
                (SASL authentication, without or with TLS; see Security). (default `'PLAINTEXT'`)
            ssl_context: The `ssl.SSLContext` for `SSL` and `SASL_SSL` connections. Without one, a
                context is built from the system's trust store (or `ssl_cafile`, and `ssl_certfile`
                for mutual TLS); giving both a context and the files is a `ConfigError`, and so is a
                context with a protocol without TLS. (default `None`)
            ssl_cafile: PEM file of the certificate authorities to trust instead of the system's
                (Kafka's `ssl.truststore.location` with a PEM truststore). (default `None`)
            ssl_certfile: PEM file of the client certificate (chain) for mutual TLS; its key is in
                it or in `ssl_keyfile`. (default `None`)
            ssl_keyfile: PEM file of the client certificate's private key. (default `None`)
            ssl_password: Password of an encrypted `ssl_keyfile`. Never shown in a repr or a
                message. (default `None`)
            ssl_check_hostname: Check that the broker's certificate names the host connected to.
                Turning it off still verifies the certificate against the trusted authorities.
                (default `True`)
            sasl_mechanism: `"PLAIN"`, `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"` or `"OAUTHBEARER"`;
                required with `SASL_PLAINTEXT` and `SASL_SSL`. GSSAPI (Kerberos) is not supported
                yet. (default `None`)
            sasl_plain_username: User name for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API key).
                (default `None`)
            sasl_plain_password: Password for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API
                secret). Never shown in a repr, log line or error message. (default `None`)
            sasl_oauth_token_provider: For `OAUTHBEARER`: an object with `async def token(self) ->
                str`, asked for a token at every (re-)authentication;
                `aiostream_kafka.security.OAuthClientCredentialsProvider` is a ready OIDC
                client-credentials one (KIP-768). (default `None`)
            max_pipelined_requests: Requests written to one connection and not yet answered. A
                caller beyond it waits for a slot; a slot frees when the answer is read, not when a
                caller gives up. (default `100`)
            **unknown: not an option: a name given here raises `ConfigError` saying what to write
                instead (typed `Never`, so that a type checker flags it too).

        Raises:
            ConfigError: an unknown option, an invalid value or two options that contradict each
                other, before any network I/O.
        """
        check_options("Admin", unknown)
        self.config = ClientConfig(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            socket_connection_setup_timeout_ms=socket_connection_setup_timeout_ms,
            reconnect_backoff_ms=reconnect_backoff_ms,
            reconnect_backoff_max_ms=reconnect_backoff_max_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            metadata_max_age_ms=metadata_max_age_ms,
            metadata_max_idle_ms=metadata_max_idle_ms,
            default_api_timeout_ms=default_api_timeout_ms,
            bootstrap_timeout_ms=bootstrap_timeout_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            security_protocol=security_protocol,
            ssl_context=ssl_context,
            ssl_cafile=ssl_cafile,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
            ssl_password=ssl_password,
            ssl_check_hostname=ssl_check_hostname,
            sasl_mechanism=sasl_mechanism,
            sasl_plain_username=sasl_plain_username,
            sasl_plain_password=sasl_plain_password,
            sasl_oauth_token_provider=sasl_oauth_token_provider,
            max_pipelined_requests=max_pipelined_requests,
        )
        # END GENERATED __init__
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

    async def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Return every group known to any broker (each broker lists the groups it
        coordinates).

        ``group_type`` is ``"classic"`` for the groups of brokers older than ListGroups v5
        (Kafka 3.8), which do not tell it: before KIP-848 every group was a classic one.
        """
        return await self._calls.list_consumer_groups()

    async def describe_consumer_groups(
        self, group_ids: Collection[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """Describe classic consumer groups: state, protocol and members' assignments.

        Raises:
            GroupIdNotFoundError: a group does not exist (Kafka 4 brokers, KIP-1043).
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
        the single-group form; asking for every partition needs v2+ (Kafka 0.10.2).

        Raises:
            TypeError: ``partitions`` is one ``TopicPartition`` or a ``str`` instead of a
                collection of them.
        """
        return await self._calls.list_consumer_group_offsets(group_id, partitions)

    async def consumer_group_lag(self, group_id: str) -> dict[TopicPartition, int]:
        """Return, for each partition ``group_id`` committed, how many records lie between
        its committed offset and the end of the partition (the high watermark)."""
        return await self._calls.consumer_group_lag(group_id)


class AdminCalls(TopicCalls, ConfigCalls, GroupCalls):
    """Every call of the Admin client (one module per area) over one cluster, its
    settings and its coordinators: what an :class:`Admin` holds and delegates to."""


habits.install(Admin)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
