"""The interface between a broker connection and a SASL mechanism.

A mechanism is split in two objects so that one configuration serves every connection:

* a :class:`SaslMechanism` holds the configuration (credentials, token provider) and is
  shared by all connections of a client; ``await mechanism.begin()`` starts one
  authentication and may do asynchronous work first (OAUTHBEARER fetches its token there);
* the :class:`SaslExchange` it returns is the sans-IO state machine of that one
  authentication: it makes the client's messages and checks the server's, and does no I/O.

A connection drives it after ApiVersions (KIP-152)::

    exchange = await mechanism.begin()               # may await a token provider
    # SaslHandshake v1 with mechanism.name; error 33 if the broker does not offer it
    auth_bytes = exchange.start()
    while True:
        response = ...SaslAuthenticate(auth_bytes)   # raise_for_code(error_code, message)
        auth_bytes = exchange.step(response.auth_bytes)
        if auth_bytes is None:
            break                                    # exchange.done is now True
    # response.session_lifetime_ms > 0: re-authenticate before then (KIP-368), with a new
    # exchange from mechanism.begin() on the same connection

Every server message a SaslAuthenticate response carries goes to :meth:`SaslExchange.step`,
including the last one (SCRAM's server signature is verified there). ``step`` raises
:class:`~aiostream_kafka.protocol.error_codes.SaslAuthenticationFailedError` for a server
message that is malformed, unexpected, or fails verification.

Secrets (passwords, tokens, client secrets) never appear in a ``repr``, ``str``, log line or
exception message of these objects. The *bytes* an exchange produces do contain them: a
connection must never log ``auth_bytes`` or a SaslAuthenticate request.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

#: Shown in place of a secret in every ``repr``.
MASK = "<hidden>"


@runtime_checkable
class SaslExchange(Protocol):
    """The client side of one SASL authentication: a sans-IO state machine.

    Used once: :meth:`start` once, then :meth:`step` for every server message until it
    returns ``None``. A new authentication (another connection, a KIP-368
    re-authentication) takes a new exchange from :meth:`SaslMechanism.begin`.
    """

    @property
    def mechanism(self) -> str:
        """The SASL mechanism name, e.g. ``"SCRAM-SHA-256"``."""
        ...

    def start(self) -> bytes:
        """Return the client's first message (the first SaslAuthenticate ``auth_bytes``).

        Raises:
            RuntimeError: called twice.
        """
        ...

    def step(self, challenge: bytes) -> bytes | None:
        """Take the server's message; return the client's next one, or ``None`` when the
        exchange is complete (then :attr:`done` is true).

        Raises:
            SaslAuthenticationFailedError: the server's message is malformed, comes when
                none is expected, reports an error, or fails verification.
        """
        ...

    @property
    def done(self) -> bool:
        """True once the exchange completed successfully (and the server was verified when
        the mechanism can verify it)."""
        ...


@runtime_checkable
class SaslMechanism(Protocol):
    """A configured SASL mechanism, shared by every connection of a client."""

    @property
    def name(self) -> str:
        """The mechanism name sent in SaslHandshake: ``"PLAIN"``, ``"SCRAM-SHA-256"``,
        ``"SCRAM-SHA-512"`` or ``"OAUTHBEARER"``."""
        ...

    async def begin(self) -> SaslExchange:
        """Start one authentication: do what must happen before the first message (fetch a
        token) and return a fresh :class:`SaslExchange`.

        Raises:
            SaslAuthenticationFailedError: the credentials cannot be obtained (a token
                provider failed or returned an invalid token).
        """
        ...


def printable(data: bytes | str, limit: int = 200) -> str:
    """A server message made safe for an exception message: ``repr``-escaped, shortened."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    shown = repr(text[:limit])
    return shown + ("..." if len(text) > limit else "")
