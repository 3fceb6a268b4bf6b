"""``ConsumerConfig``: the consumer's own settings, checked before any network I/O.

Names follow Kafka's Java consumer in snake_case (``fetch.max.wait.ms`` ->
``fetch_max_wait_ms``) where the setting exists there; the prefetch bounds
(``max_prefetch_batches``, ``max_prefetch_bytes``) and ``poll_interval_ms`` are this
client's own (from fs2-kafka's ``maxPrefetchBatches`` and ``pollInterval``). Every check
raises :class:`ConfigError` naming the setting, the value and what is accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.serde import Deserializer

__all__ = ["AUTO_OFFSET_RESET", "ISOLATION_LEVELS", "ConsumerConfig", "GroupOptions"]

ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
AUTO_OFFSET_RESET = ("earliest", "latest", "none")

_MIB = 1024 * 1024


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise ConfigError(f"{name} must be {bound}, got {value}")
    return value


@dataclass(slots=True)
class ConsumerConfig:
    """Consumer settings (the shared client settings live in ``ClientConfig``).

    Bounds, in their units:

    * ``max_prefetch_batches`` -- fetched chunks (the records one Fetch returned for one
      partition) queued per partition, not counting the one being delivered;
    * ``max_prefetch_bytes`` -- all queued chunks of all partitions together, in
      decompressed record-batch bytes; must be at least ``max_partition_fetch_bytes``;
    * ``fetch_max_bytes`` -- one Fetch response (the broker's ``max_bytes``);
    * ``max_partition_fetch_bytes`` -- one partition within one Fetch response.

    ``poll_interval_ms``: fetch rounds to a broker that return no records start at most
    this often (the broker's long poll counts towards it; never more than
    ``fetch_max_wait_ms``). ``missing_topic_timeout_ms`` is how long an assigned topic may be
    absent from the cluster metadata before the iterators raise
    ``UnknownTopicOrPartitionError``.
    """

    group_id: str | None = None
    auto_offset_reset: str = "earliest"
    enable_auto_commit: bool = False
    isolation_level: str = "read_uncommitted"
    max_prefetch_batches: int = 2
    max_prefetch_bytes: int = 64 * _MIB
    poll_interval_ms: int = 50
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * _MIB
    max_partition_fetch_bytes: int = _MIB
    check_crcs: bool = True
    client_rack: str | None = None
    missing_topic_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.group_id is not None and not isinstance(self.group_id, str):
            raise ConfigError(f"group_id must be a str or None, got {self.group_id!r}")
        if self.auto_offset_reset not in AUTO_OFFSET_RESET:
            raise ConfigError(
                f"auto_offset_reset must be one of {', '.join(map(repr, AUTO_OFFSET_RESET))}, "
                f"got {self.auto_offset_reset!r}"
            )
        if not isinstance(self.enable_auto_commit, bool):
            raise ConfigError(f"enable_auto_commit must be a bool, got {self.enable_auto_commit!r}")
        if self.enable_auto_commit and self.group_id is None:
            raise ConfigError("enable_auto_commit=True needs a group_id (offsets are per group)")
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(
                "isolation_level must be 'read_uncommitted' or 'read_committed', "
                f"got {self.isolation_level!r}"
            )
        _int("max_prefetch_batches", self.max_prefetch_batches, 1, 1024)
        _int("max_prefetch_bytes", self.max_prefetch_bytes, 1024)
        _int("poll_interval_ms", self.poll_interval_ms, 0)
        _int("fetch_max_wait_ms", self.fetch_max_wait_ms, 0)
        _int("fetch_min_bytes", self.fetch_min_bytes, 1)
        _int("fetch_max_bytes", self.fetch_max_bytes, 1024)
        _int("max_partition_fetch_bytes", self.max_partition_fetch_bytes, 1024)
        _int("missing_topic_timeout_ms", self.missing_topic_timeout_ms, 0)
        if self.max_prefetch_bytes < self.max_partition_fetch_bytes:
            raise ConfigError(
                f"max_prefetch_bytes ({self.max_prefetch_bytes}) must be >= "
                f"max_partition_fetch_bytes ({self.max_partition_fetch_bytes}): the prefetch "
                "budget must hold at least one partition's fetch"
            )
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be a callable (bytes | None) -> Any, got {value!r}")
        if not isinstance(self.check_crcs, bool):
            raise ConfigError(f"check_crcs must be a bool, got {self.check_crcs!r}")
        if self.client_rack is not None and not isinstance(self.client_rack, str):
            raise ConfigError(f"client_rack must be a str or None, got {self.client_rack!r}")

    @property
    def isolation(self) -> int:
        """The wire value of ``isolation_level`` (0 or 1)."""
        return ISOLATION_LEVELS[self.isolation_level]


@dataclass(slots=True)
class GroupOptions:
    """The consumer group settings: keyword options of ``Consumer`` that take effect (and
    may differ from their defaults) only with a ``group_id``.

    ``max_poll_interval_ms`` is also the rebalance timeout sent in JoinGroup (or in the
    joining ConsumerGroupHeartbeat); ``partition_assignment_strategy`` is one assignor name
    or a list in order of preference (classic protocol); ``group_protocol`` is
    ``"classic"`` or ``"consumer"`` (KIP-848), ``group_remote_assignor`` the broker-side
    assignor of the consumer protocol. The values are checked where the group settings are built
    (``consumer.group.group_config``).
    """

    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: str | Sequence[str] = "cooperative-sticky"
    auto_commit_interval_ms: int = 5_000
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None

    def changed(self) -> list[str]:
        """The names of the options that differ from their defaults."""
        defaults = GroupOptions()
        return [
            name
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(defaults, name)
        ]


def split_topics(
    positional: tuple[str, ...], bootstrap_servers: str | Sequence[str] | None
) -> tuple[str | Sequence[str], tuple[str, ...]]:
    """Tell the bootstrap servers from the topics among ``Consumer``'s positional
    arguments: without ``bootstrap_servers=`` the first one is it (``Consumer(bs)``).
    Returns ``(bootstrap_servers, topics)``; the generated ``Consumer.__init__`` calls it.

    Raises:
        ConfigError: no bootstrap servers, or a topic that is not a str.
    """
    if bootstrap_servers is None:
        if not positional:
            raise ConfigError(
                'Consumer needs bootstrap_servers: Consumer(bootstrap_servers="host:9092", '
                '...) or Consumer("topic", ..., bootstrap_servers="host:9092")'
            )
        bootstrap_servers, positional = positional[0], positional[1:]
    for topic in positional:
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"topics must be non-empty str, got {topic!r}")
    return bootstrap_servers, positional
