"""What the fake cluster knows, shared by its brokers: brokers, topics, partitions and
their leaders (the controller's part), producer ids, the group coordinator, and the
hooks the control API sets (failures, delays, the request log).

Everything here runs on the cluster's one event loop; nothing here does I/O. The servers
(``server.py``) read and change it through the handlers; :class:`~.cluster.FakeCluster`
and :class:`~.control.Control` own it.
"""

from __future__ import annotations

import re
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from uuid import UUID

from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.clock import Clock, RealClock
from aiostream_kafka.testing.fake.consumer_groups import ConsumerGroupCoordinator
from aiostream_kafka.testing.fake.fetch_sessions import FetchSessionCache
from aiostream_kafka.testing.fake.groups import GroupCoordinator
from aiostream_kafka.testing.fake.log import PartitionLog
from aiostream_kafka.testing.fake.sasl import SaslUsers
from aiostream_kafka.testing.fake.share_groups import ShareCoordinator
from aiostream_kafka.testing.fake.transactions import TransactionCoordinator

__all__ = [
    "BrokerInfo",
    "ClusterState",
    "DelayRule",
    "FailRule",
    "HandlerCrash",
    "HandlerCrashError",
    "Hooks",
    "Partition",
    "RequestLogEntry",
    "Topic",
    "TopicError",
]

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_TOPIC_LENGTH = 249
#: Requests kept in the request log (the oldest are dropped first).
REQUEST_LOG_SIZE = 10_000
#: api key -> highest version served with ``transaction.version`` 1 (Produce,
#: TxnOffsetCommit, EndTxn: their next versions are transaction protocol v2).
TRANSACTION_V1_CAPS = {0: 11, 28: 4, 26: 4}


class TopicError(Exception):
    """A topic operation refused with a Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class BrokerInfo:
    """A broker as clients see it in Metadata."""

    node_id: int
    host: str
    port: int = 0
    #: The SASL_PLAINTEXT listener's port (0: none).
    sasl_port: int = 0
    rack: str | None = None
    alive: bool = True
    #: Fetch sessions (KIP-227) live on the broker that made them.
    fetch_sessions: FetchSessionCache = field(default_factory=FetchSessionCache)


@dataclass(slots=True)
class Partition:
    """One partition: its replicas, its leader (-1: offline) and its log."""

    topic: str
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    log: PartitionLog


@dataclass(slots=True)
class Topic:
    """A topic: name, id, partitions and configs set at creation or later."""

    name: str
    topic_id: UUID
    partitions: list[Partition]
    configs: dict[str, str]
    internal: bool = False


@dataclass(slots=True)
class FailRule:
    """Answer the next ``remaining`` requests of an API with ``error_code``."""

    error_code: int
    remaining: int
    #: Only requests to this broker (None: any).
    node_id: int | None = None


@dataclass(slots=True)
class DelayRule:
    """Hold the next ``remaining`` responses of an API (None: all) for ``seconds``."""

    seconds: float
    remaining: int | None


@dataclass(slots=True, frozen=True)
class RequestLogEntry:
    """One request the fake received (``Control.requests``)."""

    node_id: int
    api_key: int
    api_name: str
    api_version: int
    correlation_id: int
    client_id: str | None
    #: When it was received: seconds since the epoch, on the cluster's clock.
    at: float


@dataclass(slots=True, frozen=True)
class HandlerCrash:
    """A handler of the fake that raised (a bug in the fake, or a request it cannot
    serve that it should refuse properly): its connection was closed."""

    node_id: int
    api_name: str
    api_version: int
    error: str
    traceback: str

    def __str__(self) -> str:
        return f"broker {self.node_id}: {self.api_name} v{self.api_version}: {self.error}"


class HandlerCrashError(AssertionError):
    """Handlers of the fake cluster crashed while serving the test's clients (raised by
    ``FakeCluster``'s ``async with`` exit, :meth:`FakeCluster.check` and the pytest
    plugin, so that a bug in the fake cannot hide behind a client's retries)."""

    def __init__(self, crashes: list[HandlerCrash]) -> None:
        self.crashes = list(crashes)
        lines = "\n".join(f"  {c}" for c in crashes)
        super().__init__(
            f"{len(crashes)} request handler crash(es) in the fake Kafka cluster:\n{lines}\n"
            f"first traceback:\n{crashes[0].traceback}"
        )


@dataclass(slots=True)
class Hooks:
    """What the control API set: failures and delays per API key, and the request log."""

    fail: dict[int, list[FailRule]] = field(default_factory=dict)
    #: api key -> [seconds, responses left to delay (None: every one)]
    delay: dict[int, list[DelayRule]] = field(default_factory=dict)
    log: deque[RequestLogEntry] = field(default_factory=lambda: deque(maxlen=REQUEST_LOG_SIZE))
    #: Handlers that raised, oldest first.
    crashes: list[HandlerCrash] = field(default_factory=list)

    def take_delay(self, api_key: int) -> float:
        """Seconds to hold this response (and count it against the rule)."""
        rules = self.delay.get(api_key)
        if not rules:
            return 0.0
        rule = rules[0]
        if rule.remaining is not None:
            rule.remaining -= 1
            if rule.remaining <= 0:
                rules.pop(0)
        return rule.seconds

    def take_failure(self, api_key: int, node_id: int) -> int | None:
        """The error code to answer this request with, if a rule applies (and count it)."""
        rules = self.fail.get(api_key)
        if not rules:
            return None
        for rule in rules:
            if rule.node_id is None or rule.node_id == node_id:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    rules.remove(rule)
                return rule.error_code
        return None


class ClusterState:
    """The cluster's shared state (see the module docstring)."""

    def __init__(
        self,
        brokers: int,
        *,
        host: str,
        cluster_id: str,
        auto_create_topics: bool,
        default_partitions: int,
        default_replication_factor: int,
        group_min_session_timeout_ms: int,
        group_max_session_timeout_ms: int,
        group_initial_rebalance_delay_ms: int,
        transaction_version: int = 2,
        group_consumer_session_timeout_ms: int = 45_000,
        group_consumer_heartbeat_interval_ms: int = 1_000,
        sasl_users: SaslUsers | None = None,
        clock: Clock | None = None,
    ) -> None:
        #: Every timeout and timestamp of the fake reads this clock (``clock.py``).
        self.clock: Clock = clock if clock is not None else RealClock()
        self.brokers: dict[int, BrokerInfo] = {
            node_id: BrokerInfo(node_id, host) for node_id in range(1, brokers + 1)
        }
        self.cluster_id = cluster_id
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[UUID, Topic] = {}
        self.hooks = Hooks()
        self.groups = GroupCoordinator(
            min_session_timeout_ms=group_min_session_timeout_ms,
            max_session_timeout_ms=group_max_session_timeout_ms,
            initial_rebalance_delay_ms=group_initial_rebalance_delay_ms,
            clock=self.clock,
        )
        self.consumer_groups = ConsumerGroupCoordinator(
            self._topic_table,
            session_timeout_ms=group_consumer_session_timeout_ms,
            heartbeat_interval_ms=group_consumer_heartbeat_interval_ms,
            clock=self.clock,
        )
        self.transactions = TransactionCoordinator(self)
        #: Share groups (KIP-932): their coordinator, share partitions and sessions.
        self.share_groups = ShareCoordinator(self)
        #: Who may authenticate on the SASL listeners (None: there are none).
        self.sasl_users = sasl_users
        #: The broker settings the fake was started with (DescribeConfigs answers them as
        #: static broker configs; the others with Kafka's defaults).
        self.broker_settings: dict[str, str] = {
            "auto.create.topics.enable": str(auto_create_topics).lower(),
            "num.partitions": str(default_partitions),
            "default.replication.factor": str(default_replication_factor),
            "group.min.session.timeout.ms": str(group_min_session_timeout_ms),
            "group.max.session.timeout.ms": str(group_max_session_timeout_ms),
            "group.initial.rebalance.delay.ms": str(group_initial_rebalance_delay_ms),
            "group.consumer.session.timeout.ms": str(group_consumer_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(group_consumer_heartbeat_interval_ms),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
        }
        #: The finalized ``transaction.version`` (KIP-890): 2 serves the v2 requests, 1
        #: caps Produce at v11, TxnOffsetCommit and EndTxn at v4, as Kafka does.
        self.transaction_version = transaction_version
        self.version_caps: dict[int, int] = (
            {} if transaction_version >= 2 else dict(TRANSACTION_V1_CAPS)
        )
        self._next_producer_id = 1000
        self._topics_created = 0

    def max_version(self, api_key: int, served: int) -> int:
        """The highest version of an API served by this cluster (``served``: what its
        handler serves; lower with ``transaction.version`` 1)."""
        cap = self.version_caps.get(api_key)
        return served if cap is None else min(served, cap)

    def _topic_table(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {
            name: (topic.topic_id, len(topic.partitions))
            for name, topic in self.topics.items()
            if not topic.internal
        }

    def check_group_member(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """The error code of a transactional offset commit by this group member (the
        generation is the member epoch in a KIP-848 group)."""
        code = self.consumer_groups.check_commit(
            group_id, generation_id, member_id, transactional=True
        )
        if code is not None:
            return code
        return self.groups.check_member(group_id, generation_id, member_id, group_instance_id)

    def check_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        """The error code of an OffsetCommit for the whole request (either kind of group)."""
        code = self.consumer_groups.check_commit(group_id, generation_id, member_id)
        if code is not None:
            return code
        return self.groups.check_commit(group_id, generation_id, member_id, group_instance_id)

    def close(self) -> None:
        """Cancel the coordinators' timers and answer their waiting members."""
        self.groups.close()
        self.consumer_groups.close()
        self.transactions.close()
        self.share_groups.close()

    # -- brokers -----------------------------------------------------------------------

    def alive_brokers(self) -> list[BrokerInfo]:
        """The brokers serving now, in node id order."""
        return [b for b in self.brokers.values() if b.alive]

    @property
    def controller_id(self) -> int:
        """The lowest alive node id (-1 when none is alive)."""
        alive = self.alive_brokers()
        return alive[0].node_id if alive else -1

    def coordinator_for(self, key: str) -> int:
        """The broker coordinating a group or transactional id: a stable hash of the key
        over the brokers, the next alive one if that broker is down (-1: none alive)."""
        ids = sorted(self.brokers)
        start = zlib.crc32(key.encode()) % len(ids)
        for i in range(len(ids)):
            node_id = ids[(start + i) % len(ids)]
            if self.brokers[node_id].alive:
                return node_id
        return -1

    def broker_stopped(self, node_id: int) -> None:
        """Mark a broker down and move the leadership of its partitions to another alive
        replica (the log is shared, so nothing is lost), or leave them offline."""
        self.brokers[node_id].alive = False
        for topic in self.topics.values():
            for partition in topic.partitions:
                if partition.leader == node_id:
                    alive = [r for r in partition.replicas if self.brokers[r].alive]
                    self._set_leader(partition, alive[0] if alive else -1)

    def broker_started(self, node_id: int) -> None:
        """Mark a broker up; offline partitions it holds a replica of get it as leader."""
        self.brokers[node_id].alive = True
        for topic in self.topics.values():
            for partition in topic.partitions:
                if partition.leader < 0 and node_id in partition.replicas:
                    self._set_leader(partition, node_id)

    def _set_leader(self, partition: Partition, node_id: int) -> None:
        partition.leader = node_id
        partition.leader_epoch += 1

    def move_leader(self, topic: str, index: int, node_id: int | None = None) -> int:
        """Make ``node_id`` (default: the next alive replica, or the next alive broker)
        the leader of a partition, bumping its leader epoch; return the new leader.

        Raises ``KeyError`` for an unknown partition, ``ValueError`` for a broker that is
        not alive.
        """
        partition = self.require_partition(topic, index)
        if node_id is None:
            candidates = [r for r in partition.replicas if r != partition.leader]
            candidates += [b for b in sorted(self.brokers) if b not in candidates]
            alive = [c for c in candidates if c != partition.leader and self.brokers[c].alive]
            if not alive:
                raise ValueError(f"no other alive broker to lead {topic}-{index}")
            node_id = alive[0]
        if node_id not in self.brokers or not self.brokers[node_id].alive:
            raise ValueError(f"broker {node_id} is not alive")
        if node_id not in partition.replicas:
            partition.replicas.append(node_id)
        self._set_leader(partition, node_id)
        return node_id

    # -- topics ----------------------------------------------------------------------

    def topic(self, name: str) -> Topic | None:
        """The topic named ``name``, if it exists."""
        return self.topics.get(name)

    def partition(self, topic: str, index: int) -> Partition | None:
        """A partition, if its topic exists and has that index."""
        found = self.topics.get(topic)
        if found is None or not 0 <= index < len(found.partitions):
            return None
        return found.partitions[index]

    def require_partition(self, topic: str, index: int) -> Partition:
        """A partition; raises ``KeyError`` naming it when it does not exist."""
        partition = self.partition(topic, index)
        if partition is None:
            raise KeyError(f"no partition {topic}-{index}")
        return partition

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> Topic:
        """Create a topic (``-1``: the cluster's default partitions / replication factor).

        Raises :class:`TopicError` with Kafka's code for an invalid name, an existing
        topic, a bad partition count, replication factor or replica assignment.
        """
        self._check_name(name)
        if name in self.topics:
            raise TopicError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        replica_lists = self._place(name, partitions, replication_factor, assignments, 0)
        topic = Topic(name, uuid.uuid4(), [], dict(configs or {}))
        if validate_only:
            return topic
        self._topics_created += 1
        for index, replicas in enumerate(replica_lists):
            topic.partitions.append(self._new_partition(name, index, replicas))
        self.topics[name] = topic
        self.topics_by_id[topic.topic_id] = topic
        return topic

    def _new_partition(self, topic: str, index: int, replicas: list[int]) -> Partition:
        alive = [r for r in replicas if self.brokers[r].alive]
        return Partition(
            topic, index, replicas, alive[0] if alive else -1, 0, PartitionLog(topic, index)
        )

    def _check_name(self, name: str) -> None:
        if not name or name in (".", "..") or len(name) > _MAX_TOPIC_LENGTH:
            raise TopicError(errors.INVALID_TOPIC_EXCEPTION, f"Topic name {name!r} is illegal")
        if not _LEGAL_TOPIC.match(name):
            raise TopicError(
                errors.INVALID_TOPIC_EXCEPTION,
                f"Topic name {name!r} is illegal: it contains a character other than "
                "ASCII alphanumerics, '.', '_' and '-'",
            )

    def _place(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: list[list[int]] | None,
        first_index: int,
    ) -> list[list[int]]:
        """Replica lists of new partitions: the given assignment, else spread from a
        start broker that moves with every topic so leaders are spread over brokers."""
        if assignments:
            for replicas in assignments:
                if not replicas or len(set(replicas)) != len(replicas):
                    raise TopicError(errors.INVALID_REPLICA_ASSIGNMENT, f"bad replicas {replicas}")
                unknown = [r for r in replicas if r not in self.brokers]
                if unknown:
                    raise TopicError(
                        errors.INVALID_REPLICA_ASSIGNMENT, f"unknown broker(s) {unknown}"
                    )
            return [list(r) for r in assignments]
        if partitions == -1:
            partitions = self.default_partitions
        if replication_factor == -1:
            replication_factor = self.default_replication_factor
        if partitions < 1:
            raise TopicError(errors.INVALID_PARTITIONS, "Number of partitions must be at least 1.")
        if replication_factor < 1:
            raise TopicError(
                errors.INVALID_REPLICATION_FACTOR, "Replication factor must be at least 1."
            )
        ids = sorted(self.brokers)
        if replication_factor > len(ids):
            raise TopicError(
                errors.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The "
                f"target replication factor of {replication_factor} cannot be reached "
                f"because only {len(ids)} broker(s) are registered.",
            )
        start = self._topics_created
        return [
            [ids[(start + p + r) % len(ids)] for r in range(replication_factor)]
            for p in range(first_index, first_index + partitions)
        ]

    def delete_topic(self, name: str) -> Topic:
        """Delete a topic; raises :class:`TopicError` when it does not exist."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
            )
        del self.topics_by_id[topic.topic_id]
        for partition in topic.partitions:
            partition.leader = -1
            partition.log.delete_records(-1)  # wakes long polls, which then see it gone
        return topic

    def add_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None = None,
        *,
        validate_only: bool = False,
    ) -> None:
        """Grow a topic to ``count`` partitions; raises :class:`TopicError`."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(
                errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
            )
        current = len(topic.partitions)
        if count <= current:
            raise TopicError(
                errors.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than or equal "
                f"to the requested {count}.",
            )
        if assignments is not None and len(assignments) != count - current:
            raise TopicError(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"{len(assignments)} assignments for {count - current} new partitions",
            )
        rf = len(topic.partitions[0].replicas) if topic.partitions else 1
        replica_lists = self._place(name, count - current, rf, assignments, current)
        if validate_only:
            return
        for offset, replicas in enumerate(replica_lists):
            topic.partitions.append(self._new_partition(name, current + offset, replicas))

    # -- producers -------------------------------------------------------------------

    def new_producer_id(self) -> int:
        """A fresh producer id (InitProducerId)."""
        self._next_producer_id += 1
        return self._next_producer_id

    # -- the request log -------------------------------------------------------------

    def log_request(
        self,
        node_id: int,
        api_key: int,
        api_name: str,
        version: int,
        correlation_id: int,
        client_id: str | None,
    ) -> None:
        """Remember a request (``Control.requests``)."""
        self.hooks.log.append(
            RequestLogEntry(
                node_id,
                api_key,
                api_name,
                version,
                correlation_id,
                client_id,
                self.clock.wall_ms() / 1000,
            )
        )
