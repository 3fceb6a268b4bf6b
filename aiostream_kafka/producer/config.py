"""``ProducerConfig``: the producer's own settings, checked before any network I/O.

Names and defaults follow Kafka 4's Java producer in snake_case (``linger.ms`` ->
``linger_ms``, default 5 since KIP-1030). Every check raises :class:`ConfigError` naming the
setting, the value and what is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.compression import CompressionType, ensure_available
from aiostream_kafka.serde import Serializer

__all__ = ["ProducerConfig"]

_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
_CODECS = {
    None: CompressionType.NONE,
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
# Idempotence keeps order with at most 5 requests in flight per connection: brokers cache
# the metadata of the last 5 batches of each producer and partition to detect duplicates.
_MAX_IDEMPOTENT_IN_FLIGHT = 5


def _int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise ConfigError(f"{name} must be {bound}, got {value}")
    return value


@dataclass(slots=True)
class ProducerConfig:
    """Producer settings; see the README for what each does.

    ``acks``: ``"all"`` (or -1), 1 or 0. ``compression_type``: None, ``"gzip"``,
    ``"snappy"``, ``"lz4"`` or ``"zstd"``. ``enable_idempotence``: None (the default)
    means on unless ``acks`` is not ``"all"`` or more than 5 requests may be in flight, as
    in Kafka 3.2+; True with such settings is a :class:`ConfigError`. A
    ``transactional_id`` makes the producer transactional, which implies idempotence (so
    the same conflicts are errors, as is ``enable_idempotence=False``).
    """

    acks: int | str = "all"
    linger_ms: int = 5
    batch_size: int = 16_384
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60_000
    max_request_size: int = 1_048_576
    compression_type: str | None = None
    compression_level: int | None = None
    enable_idempotence: bool | None = None
    max_in_flight_requests_per_connection: int = 5
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    # Resolved by __post_init__ (not options).
    required_acks: int = field(init=False, default=-1)
    compression: CompressionType = field(init=False, default=CompressionType.NONE)
    idempotent: bool = field(init=False, default=True)

    def __post_init__(self) -> None:
        acks = self.acks.strip().lower() if isinstance(self.acks, str) else self.acks
        if isinstance(acks, bool) or acks not in _ACKS:
            raise ConfigError(f"acks must be 'all', -1, 1 or 0, got {self.acks!r}")
        self.required_acks = _ACKS[acks]
        _int("linger_ms", self.linger_ms, 0)
        # batch_size 0 means "no batching" in Kafka, i.e. one record per batch.
        _int("batch_size", self.batch_size, 0)
        self.batch_size = max(1, self.batch_size)
        _int("buffer_memory", self.buffer_memory, 1)
        _int("max_block_ms", self.max_block_ms, 0)
        _int("max_request_size", self.max_request_size, 1)
        _int("max_in_flight_requests_per_connection", self.max_in_flight_requests_per_connection, 1)
        _int("delivery_timeout_ms", self.delivery_timeout_ms, 1)
        _int("request_timeout_ms", self.request_timeout_ms, 1)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            # As in Java: a record must be able to wait out its linger and one request.
            raise ConfigError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be >= linger_ms "
                f"({self.linger_ms}) + request_timeout_ms ({self.request_timeout_ms})"
            )
        codec = self.compression_type
        if isinstance(codec, str):
            codec = codec.strip().lower()
        if codec not in _CODECS:
            raise ConfigError(
                "compression_type must be None, 'gzip', 'snappy', 'lz4' or 'zstd', "
                f"got {self.compression_type!r}"
            )
        self.compression = _CODECS[codec]
        ensure_available(self.compression)  # CompressionUnavailableError is a ConfigError
        if self.compression_level is not None:
            _int("compression_level", self.compression_level, -131072, 22)
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable or None, got {value!r}")
        conflicts = []
        if self.required_acks != -1:
            conflicts.append(f"acks={self.acks!r} (idempotence needs acks='all')")
        if self.max_in_flight_requests_per_connection > _MAX_IDEMPOTENT_IN_FLIGHT:
            conflicts.append(
                "max_in_flight_requests_per_connection="
                f"{self.max_in_flight_requests_per_connection} (idempotence allows at most 5)"
            )
        if self.enable_idempotence is not None and not isinstance(self.enable_idempotence, bool):
            raise ConfigError(
                f"enable_idempotence must be True, False or None, got {self.enable_idempotence!r}"
            )
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ConfigError(
                    f"transactional_id must be a non-empty str or None, got "
                    f"{self.transactional_id!r}"
                )
            if self.enable_idempotence is False:
                raise ConfigError(
                    "transactional_id needs idempotence: drop enable_idempotence=False"
                )
            if conflicts:
                raise ConfigError(
                    "transactional_id (which implies idempotence) conflicts with "
                    + " and ".join(conflicts)
                )
        # Brokers refuse more than transaction.max.timeout.ms (15 min by default); they
        # answer INVALID_TRANSACTION_TIMEOUT, raised by init_transactions().
        _int("transaction_timeout_ms", self.transaction_timeout_ms, 1)
        if self.enable_idempotence is None:
            self.idempotent = not conflicts
        elif self.enable_idempotence:
            if conflicts:
                raise ConfigError(
                    "enable_idempotence=True conflicts with "
                    + " and ".join(conflicts)
                    + "; change those settings or pass enable_idempotence=False"
                )
            self.idempotent = True
        else:
            self.idempotent = False
