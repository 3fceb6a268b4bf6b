"""``ShareConsumerConfig``: the settings of a share consumer beside the client ones,
validated (``ConfigError``) before any I/O."""

from __future__ import annotations

from dataclasses import dataclass

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.serde import Deserializer

__all__ = ["ACKNOWLEDGEMENT_MODES", "ShareConsumerConfig"]

ACKNOWLEDGEMENT_MODES = ("implicit", "explicit")


@dataclass(slots=True)
class ShareConsumerConfig:
    """Settings of a :class:`~aiostream_kafka.ShareConsumer` (see its docstring)."""

    group_id: str
    acknowledgement_mode: str = "implicit"
    max_prefetch_records: int = 2000
    max_prefetch_bytes: int = 16 * 1024 * 1024
    auto_renew_locks: bool = True
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    check_crcs: bool = True
    client_rack: str | None = None
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError(f"group_id must be a non-empty str, got {self.group_id!r}")
        if self.acknowledgement_mode not in ACKNOWLEDGEMENT_MODES:
            raise ConfigError(
                f"acknowledgement_mode must be one of {', '.join(ACKNOWLEDGEMENT_MODES)}, "
                f"got {self.acknowledgement_mode!r}"
            )
        for name in ("max_prefetch_records", "max_prefetch_bytes", "fetch_max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.auto_renew_locks, bool):
            raise ConfigError(f"auto_renew_locks must be a bool, got {self.auto_renew_locks!r}")
        wait = self.fetch_max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
            raise ConfigError(f"fetch_max_wait_ms must be an int >= 0, got {wait!r}")
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable, got {value!r}")
        if self.client_rack is not None and not isinstance(self.client_rack, str):
            raise ConfigError(f"client_rack must be a str, got {self.client_rack!r}")
