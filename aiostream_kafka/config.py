"""Configuration shared by every client, checked before any network I/O.

Names mirror Kafka's own settings in snake_case (``request.timeout.ms`` ->
``request_timeout_ms``). Every check raises :class:`ConfigError` naming the setting, the
bad value and what is accepted.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiostream_kafka import __version__
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.net.connection import ConnectionSettings

Address = tuple[str, int]


def parse_bootstrap_servers(value: str | Sequence[str]) -> list[Address]:
    """Parse ``"host:port,host:port"`` (or a list of ``"host:port"``) into addresses.

    IPv6 hosts are written in brackets: ``"[::1]:9092"``.

    Raises:
        ConfigError: empty, or an entry without a valid port.
    """
    if isinstance(value, str):
        entries = [e.strip() for e in value.split(",")]
    elif isinstance(value, Sequence):
        entries = [str(e).strip() for e in value]
    else:
        raise ConfigError(
            f"bootstrap_servers must be a 'host:port[,host:port]' string or a list of them, "
            f"got {type(value).__name__}"
        )
    entries = [e for e in entries if e]
    if not entries:
        raise ConfigError("bootstrap_servers is empty: give at least one 'host:port'")
    addresses: list[Address] = []
    for entry in entries:
        if entry.startswith("["):
            host, sep, rest = entry[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
            ok = bool(sep)
        else:
            host, sep, port_text = entry.rpartition(":")
            ok = bool(sep) and ":" not in host
        if not ok or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(
                f"bootstrap_servers entry {entry!r} is not 'host:port' with a port in 1-65535 "
                "(write IPv6 hosts as '[::1]:9092')"
            )
        addresses.append((host, int(port_text)))
    return addresses


def _positive_int(name: str, value: Any, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


@dataclass(slots=True)
class ClientConfig:
    """Settings every client (Admin, Producer, Consumer) shares.

    Timeouts and back-offs are in milliseconds, as in Kafka.
    """

    bootstrap_servers: str | Sequence[str]
    client_id: str = "aiostream-kafka"
    request_timeout_ms: int = 30_000
    socket_connection_setup_timeout_ms: int = 10_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    metadata_max_age_ms: int = 300_000
    metadata_max_idle_ms: int = 300_000
    default_api_timeout_ms: int = 60_000
    bootstrap_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 540_000
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    max_pipelined_requests: int = 100
    addresses: list[Address] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.addresses = parse_bootstrap_servers(self.bootstrap_servers)
        if not isinstance(self.client_id, str):
            raise ConfigError(f"client_id must be a str, got {self.client_id!r}")
        for name in (
            "request_timeout_ms",
            "socket_connection_setup_timeout_ms",
            "reconnect_backoff_ms",
            "reconnect_backoff_max_ms",
            "retry_backoff_ms",
            "retry_backoff_max_ms",
            "metadata_max_age_ms",
            "metadata_max_idle_ms",
            "default_api_timeout_ms",
            "bootstrap_timeout_ms",
            "connections_max_idle_ms",
            "max_pipelined_requests",
        ):
            _positive_int(name, getattr(self, name))
        if self.reconnect_backoff_max_ms < self.reconnect_backoff_ms:
            raise ConfigError(
                f"reconnect_backoff_max_ms ({self.reconnect_backoff_max_ms}) must be >= "
                f"reconnect_backoff_ms ({self.reconnect_backoff_ms})"
            )
        protocol = str(self.security_protocol).upper()
        if protocol not in ("PLAINTEXT", "SSL"):
            raise ConfigError(
                f"security_protocol must be 'PLAINTEXT' or 'SSL', got {self.security_protocol!r}"
                " (SASL comes later)"
            )
        self.security_protocol = protocol
        if protocol == "SSL" and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise ConfigError(f"ssl_context must be an ssl.SSLContext, got {self.ssl_context!r}")
        if protocol == "PLAINTEXT" and self.ssl_context is not None:
            raise ConfigError("ssl_context is set but security_protocol is 'PLAINTEXT'; use 'SSL'")

    def connection_settings(self) -> ConnectionSettings:
        """The per-connection settings derived from this config."""
        return ConnectionSettings(
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=self.socket_connection_setup_timeout_ms,
            max_in_flight=self.max_pipelined_requests,
            ssl_context=self.ssl_context,
            client_software_version=__version__,
        )


def split_client_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword options into (ClientConfig fields, the rest)."""
    names = set(ClientConfig.__dataclass_fields__) - {"addresses"}
    common = {k: v for k, v in options.items() if k in names}
    rest = {k: v for k, v in options.items() if k not in names}
    return common, rest
