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

from aiostream_kafka._version import __version__
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.net.connection import ConnectionSettings
from aiostream_kafka.security import SASL_MECHANISMS, SECURITY_PROTOCOLS, create_mechanism

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


_SASL_OPTIONS = (
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_oauth_token_provider",
)


def _tls_context(
    cafile: str | None,
    certfile: str | None,
    keyfile: str | None,
    password: str | None,
    check_hostname: bool,
) -> ssl.SSLContext:
    """A client TLS context: the system's trust store, or ``cafile`` (PEM); a client
    certificate for mutual TLS when ``certfile`` is given."""
    try:
        context = ssl.create_default_context(cafile=cafile)
        if certfile is not None:
            context.load_cert_chain(certfile, keyfile, password)
        elif keyfile is not None:
            raise ConfigError("ssl_keyfile is set without ssl_certfile")
    except (OSError, ssl.SSLError) as exc:
        # Never the password: only which file and why.
        raise ConfigError(f"cannot load the TLS files ({type(exc).__name__}: {exc})") from None
    context.check_hostname = check_hostname
    if not check_hostname:
        context.verify_mode = ssl.CERT_REQUIRED  # the certificate is still verified
    return context


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
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    sasl_oauth_token_provider: Any = field(default=None, repr=False)
    max_pipelined_requests: int = 100
    opentelemetry: bool = True
    tracer_provider: Any = field(default=None, repr=False)
    meter_provider: Any = field(default=None, repr=False)
    enable_metrics_push: bool = True
    addresses: list[Address] = field(init=False, default_factory=list)
    sasl: Any = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.addresses = parse_bootstrap_servers(self.bootstrap_servers)
        if not isinstance(self.client_id, str):
            raise ConfigError(f"client_id must be a str, got {self.client_id!r}")
        if not isinstance(self.enable_metrics_push, bool):
            raise ConfigError(
                f"enable_metrics_push must be a bool, got {self.enable_metrics_push!r}"
            )
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
        if not isinstance(self.opentelemetry, bool):
            raise ConfigError(f"opentelemetry must be a bool, got {self.opentelemetry!r}")
        self._check_security()

    def _check_security(self) -> None:
        protocol = str(self.security_protocol).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        self.security_protocol = protocol
        uses_tls = protocol in ("SSL", "SASL_SSL")
        uses_sasl = protocol.startswith("SASL_")
        files = {
            "ssl_cafile": self.ssl_cafile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
        }
        given = [name for name, value in files.items() if value is not None]
        if self.ssl_context is not None and not isinstance(self.ssl_context, ssl.SSLContext):
            raise ConfigError(f"ssl_context must be an ssl.SSLContext, got {self.ssl_context!r}")
        if not uses_tls and (self.ssl_context is not None or given):
            which = "ssl_context" if self.ssl_context is not None else given[0]
            raise ConfigError(
                f"{which} is set but security_protocol is {protocol!r}; use "
                f"{'SASL_SSL' if uses_sasl else 'SSL'}"
            )
        if self.ssl_context is not None and given:
            raise ConfigError(
                f"give either ssl_context or {', '.join(given)}, not both (load the files into "
                "your context yourself)"
            )
        if not isinstance(self.ssl_check_hostname, bool):
            raise ConfigError(f"ssl_check_hostname must be a bool, got {self.ssl_check_hostname!r}")
        if uses_tls and self.ssl_context is None:
            self.ssl_context = _tls_context(
                self.ssl_cafile,
                self.ssl_certfile,
                self.ssl_keyfile,
                self.ssl_password,
                self.ssl_check_hostname,
            )
        sasl_given = [name for name in _SASL_OPTIONS if getattr(self, name) is not None]
        if not uses_sasl:
            if sasl_given:
                raise ConfigError(
                    f"{sasl_given[0]} is set but security_protocol is {protocol!r}; use "
                    "'SASL_PLAINTEXT' or 'SASL_SSL'"
                )
            return
        mechanism = str(self.sasl_mechanism or "").upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(
                f"security_protocol={protocol} needs sasl_mechanism, one of "
                f"{', '.join(SASL_MECHANISMS)}; got {self.sasl_mechanism!r} (GSSAPI/Kerberos "
                "is not supported yet)"
            )
        self.sasl_mechanism = mechanism
        self.sasl = create_mechanism(
            mechanism,
            username=self.sasl_plain_username,
            password=self.sasl_plain_password,
            token_provider=self.sasl_oauth_token_provider,
        )

    def connection_settings(self) -> ConnectionSettings:
        """The per-connection settings derived from this config."""
        return ConnectionSettings(
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            connect_timeout_ms=self.socket_connection_setup_timeout_ms,
            max_in_flight=self.max_pipelined_requests,
            ssl_context=self.ssl_context,
            sasl=self.sasl,
            client_software_version=__version__,
        )


def split_client_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword options into (ClientConfig fields, the rest)."""
    names = set(ClientConfig.__dataclass_fields__) - {"addresses"}
    common = {k: v for k, v in options.items() if k in names}
    rest = {k: v for k, v in options.items() if k not in names}
    return common, rest
