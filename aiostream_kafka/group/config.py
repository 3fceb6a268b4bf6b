"""A group member's settings: shared by the membership (``group.coordinator``) and its
committed offsets (``group.offsets``), which both read them; a module of its own so that
neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from aiostream_kafka.errors import ConfigError

__all__ = ["GroupConfig"]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Group settings (names as Kafka's, in snake_case). Validated on construction."""

    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000  # the consumer's max_poll_interval_ms
    heartbeat_interval_ms: int = 3_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    metadata_check_interval_ms: int = 5_000
    default_api_timeout_ms: int = 60_000
    rack_id: str | None = None
    # "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848, ConsumerGroupHeartbeat).
    protocol: str = "classic"
    # Under "consumer": the broker-side assignor ("uniform", "range"; None: the broker's).
    remote_assignor: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError(f"group_id must be a non-empty string, got {self.group_id!r}")
        if self.group_instance_id is not None and not self.group_instance_id:
            raise ConfigError("group_instance_id must be a non-empty string or None")
        for name in (
            "session_timeout_ms",
            "rebalance_timeout_ms",
            "heartbeat_interval_ms",
            "metadata_check_interval_ms",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms}); a third of it is usual"
            )
