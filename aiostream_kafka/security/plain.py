"""SASL PLAIN (RFC 4616): the user name and password in one client message.

PLAIN sends the password as is: use it only over TLS (``SASL_SSL``) outside tests.
"""

from __future__ import annotations

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security.mechanism import MASK, printable


def _check(what: str, value: str, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise ConfigError(f"PLAIN {what} must be a str, not {type(value).__name__}")
    if not value and not allow_empty:
        raise ConfigError(f"PLAIN {what} must not be empty")
    if "\x00" in value:  # the message's separator (RFC 4616 section 2)
        raise ConfigError(f"PLAIN {what} must not contain a NUL character")


class PlainMechanism:
    """PLAIN with a user name and password (``authzid`` empty: act as that user).

    Raises:
        ConfigError: a value is empty, not a string, or contains a NUL character (the
            message does not show the password).
    """

    __slots__ = ("_authzid", "_password", "_username")

    name = "PLAIN"

    def __init__(self, username: str, password: str, *, authzid: str = "") -> None:
        _check("username", username)
        _check("password", password)
        _check("authzid", authzid, allow_empty=True)
        self._username = username
        self._password = password
        self._authzid = authzid

    @property
    def username(self) -> str:
        return self._username

    def exchange(self) -> PlainExchange:
        """A new exchange (synchronous; :meth:`begin` is the same for the connection)."""
        message = f"{self._authzid}\x00{self._username}\x00{self._password}".encode()
        return PlainExchange(message, self._username)

    async def begin(self) -> PlainExchange:
        return self.exchange()

    def __repr__(self) -> str:
        return f"PlainMechanism(username={self._username!r}, password={MASK})"


class PlainExchange:
    """One PLAIN authentication: one client message, no server data (RFC 4616)."""

    __slots__ = ("_done", "_message", "_started", "_username")

    mechanism = "PLAIN"

    def __init__(self, message: bytes, username: str) -> None:
        self._message = message
        self._username = username
        self._started = False
        self._done = False

    def start(self) -> bytes:
        if self._started:
            raise RuntimeError("PLAIN exchange already started")
        self._started = True
        return self._message

    def step(self, challenge: bytes) -> bytes | None:
        if not self._started or self._done:
            raise SaslAuthenticationFailedError(
                "PLAIN: unexpected message from the server "
                f"({'before the client message' if not self._started else 'after success'})"
            )
        if challenge:
            raise SaslAuthenticationFailedError(
                f"PLAIN: the server sent data, which PLAIN never does: {printable(challenge)}"
            )
        self._done = True
        return None

    @property
    def done(self) -> bool:
        return self._done

    def __repr__(self) -> str:
        state = "done" if self._done else "sent" if self._started else "new"
        return f"PlainExchange(username={self._username!r}, password={MASK}, state={state})"
