"""Authentication: SASL mechanisms (sans-IO) and OAuth token providers.

* :class:`SaslMechanism` / :class:`SaslExchange`: the interface a connection drives (see
  :mod:`aiostream_kafka.security.mechanism` for the loop);
* :func:`create_mechanism`: the mechanism for ``sasl_mechanism`` and its credentials;
* :class:`PlainMechanism` (RFC 4616), :class:`ScramMechanism` (RFC 5802/7677,
  SCRAM-SHA-256 and SCRAM-SHA-512), :class:`OAuthBearerMechanism` (RFC 7628);
* token providers for OAUTHBEARER: anything with ``async def token(self) -> str``
  (:class:`TokenProvider`), :class:`StaticTokenProvider`, and
  :class:`OAuthClientCredentialsProvider` (OIDC client credentials, KIP-768);
* :func:`jwt_expiry`: a JWT's ``exp``, unverified, for refresh scheduling.

Failures raise :class:`~aiostream_kafka.protocol.error_codes.SaslAuthenticationFailedError`
(a token endpoint's: its subclass :class:`TokenEndpointError`); invalid settings raise
:class:`~aiostream_kafka.errors.ConfigError`. No secret ever appears in a ``repr`` or an
error message.
"""

from __future__ import annotations

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.security.errors import TokenEndpointError
from aiostream_kafka.security.mechanism import MASK, SaslExchange, SaslMechanism
from aiostream_kafka.security.oauth import (
    OAuthBearerExchange,
    OAuthBearerMechanism,
    StaticTokenProvider,
    TokenProvider,
    jwt_expiry,
    unverified_jwt_claims,
)
from aiostream_kafka.security.oidc import OAuthClientCredentialsProvider
from aiostream_kafka.security.plain import PlainExchange, PlainMechanism
from aiostream_kafka.security.scram import ScramExchange, ScramMechanism

#: The values of ``security_protocol``.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The values of ``sasl_mechanism``.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def create_mechanism(
    mechanism: str,
    *,
    username: str | None = None,
    password: str | None = None,
    token_provider: TokenProvider | None = None,
) -> SaslMechanism:
    """The :class:`SaslMechanism` for ``sasl_mechanism`` and its credentials.

    PLAIN and SCRAM take ``username`` and ``password`` (``sasl_plain_username``,
    ``sasl_plain_password``); OAUTHBEARER takes ``token_provider``
    (``sasl_oauth_token_provider``).

    Raises:
        ConfigError: an unknown mechanism, or missing or invalid credentials for it (the
            message never shows a secret).
    """
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        if token_provider is not None:
            raise ConfigError(f"sasl_oauth_token_provider is for OAUTHBEARER, not {mechanism}")
        if username is None or password is None:
            raise ConfigError(
                f"sasl_mechanism={mechanism} needs sasl_plain_username and sasl_plain_password"
            )
        if mechanism == "PLAIN":
            return PlainMechanism(username, password)
        return ScramMechanism(mechanism, username, password)
    if mechanism == "OAUTHBEARER":
        if token_provider is None:
            raise ConfigError(
                "sasl_mechanism=OAUTHBEARER needs sasl_oauth_token_provider: an object with "
                "`async def token(self) -> str`, e.g. OAuthClientCredentialsProvider"
            )
        if username is not None or password is not None:
            raise ConfigError(
                "sasl_plain_username/sasl_plain_password are not used by OAUTHBEARER; "
                "the token provider authenticates"
            )
        return OAuthBearerMechanism(token_provider)
    raise ConfigError(
        f"unknown sasl_mechanism {mechanism!r}; use one of {', '.join(SASL_MECHANISMS)} "
        "(GSSAPI is not supported yet)"
    )


__all__ = [
    "MASK",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "OAuthBearerExchange",
    "OAuthBearerMechanism",
    "OAuthClientCredentialsProvider",
    "PlainExchange",
    "PlainMechanism",
    "SaslExchange",
    "SaslMechanism",
    "ScramExchange",
    "ScramMechanism",
    "StaticTokenProvider",
    "TokenEndpointError",
    "TokenProvider",
    "create_mechanism",
    "jwt_expiry",
    "unverified_jwt_claims",
]
