"""Errors of the security package that Kafka's error table has no code for.

Failures of the SASL exchange itself reuse the generated classes of
:mod:`aiostream_kafka.protocol.error_codes`: ``SaslAuthenticationFailedError`` (58),
``UnsupportedSaslMechanismError`` (33) and ``IllegalSaslStateError`` (34).
"""

from __future__ import annotations

from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError


class TokenEndpointError(SaslAuthenticationFailedError):
    """An OAuth token endpoint could not give a token.

    ``retriable`` is true when asking again later may work (the endpoint was unreachable,
    timed out, answered HTTP 429 or 5xx) and false when the request itself is refused
    (wrong client id or secret, unknown scope). ``status`` is the HTTP status, if any.
    The message names the endpoint (without user info or query) but never the secret.
    """

    def __init__(self, message: str, *, retriable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status


__all__ = ["TokenEndpointError"]
