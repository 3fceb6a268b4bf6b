"""SASL OAUTHBEARER (RFC 7628, KIP-255) and the token provider hook.

The client sends one message, the gs2 header then key/value pairs each ended by ``\\x01``
and a final ``\\x01``::

    n,,\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01...]\\x01

The server answers with nothing on success. On failure it sends a JSON error
(``{"status": "invalid_token", ...}``), to which the client answers ``\\x01`` (RFC 7628
section 3.2.3), after which the broker fails the authentication (error 58).

The token comes from a *token provider*: any object with ``async def token(self) -> str``
(:class:`TokenProvider`), asked once per authentication, so a provider that caches and
refreshes its token (like :class:`~aiostream_kafka.security.oidc.OAuthClientCredentialsProvider`)
keeps re-authentications (KIP-368) supplied with fresh tokens.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security.mechanism import MASK, printable

# RFC 6750 b64token; Kafka's broker checks tokens against the same pattern.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*\Z")
# RFC 7628 section 3.1: key = 1*(ALPHA); value = *(VCHAR / SP / HTAB / CR / LF)
_EXTENSION_KEY = re.compile(r"[A-Za-z]+\Z")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+\Z")
_SEP = "\x01"


@runtime_checkable
class TokenProvider(Protocol):
    """Where OAUTHBEARER tokens come from: ``await provider.token()`` returns a bearer
    token (usually a JWT) valid now. Called before every authentication, so it should
    cache its token and fetch a new one before the old one expires."""

    async def token(self) -> str: ...


class StaticTokenProvider:
    """A provider returning one fixed token (obtained elsewhere; it is never refreshed)."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        check_token(token)
        self._token = token

    async def token(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return f"StaticTokenProvider(token={MASK})"


def check_token(token: object) -> str:
    """Return ``token`` if it is a valid RFC 6750 bearer token, else raise
    :class:`SaslAuthenticationFailedError` (without showing it)."""
    if not isinstance(token, str):
        raise SaslAuthenticationFailedError(
            f"OAUTHBEARER: the token must be a str, not {type(token).__name__}"
        )
    if not _B64TOKEN.match(token):
        raise SaslAuthenticationFailedError(
            "OAUTHBEARER: the token is empty or not a bearer token (RFC 6750 b64token: "
            "letters, digits and -._~+/ then '=' padding)"
        )
    return token


def _check_extensions(extensions: Mapping[str, str]) -> dict[str, str]:
    checked = {}
    for key, value in extensions.items():
        if not isinstance(key, str) or not _EXTENSION_KEY.match(key) or key == "auth":
            raise ConfigError(f"invalid OAUTHBEARER extension name {key!r} (letters only)")
        if not isinstance(value, str) or not _EXTENSION_VALUE.match(value):
            raise ConfigError(f"invalid value for OAUTHBEARER extension {key!r}")
        checked[key] = value
    return checked


class OAuthBearerMechanism:
    """OAUTHBEARER with a token provider.

    ``extensions`` are SASL extensions sent with every token (e.g. Confluent Cloud's
    ``logicalCluster`` and ``identityPoolId``); a provider with an ``extensions()`` method
    (aiokafka's ``AbstractTokenProvider``) adds its own, read at every authentication.

    Raises:
        ConfigError: ``token_provider`` has no ``token`` method, or an extension is
            malformed.
    """

    __slots__ = ("_extensions", "_provider")

    name = "OAUTHBEARER"

    def __init__(
        self, token_provider: TokenProvider, *, extensions: Mapping[str, str] | None = None
    ) -> None:
        if not callable(getattr(token_provider, "token", None)):
            raise ConfigError(
                "the OAUTHBEARER token provider must have an `async def token(self) -> str` "
                f"method; got {type(token_provider).__name__}"
            )
        self._provider = token_provider
        self._extensions = _check_extensions(extensions or {})

    @property
    def token_provider(self) -> TokenProvider:
        return self._provider

    def exchange(self, token: str) -> OAuthBearerExchange:
        """A new exchange presenting ``token`` (synchronous; :meth:`begin` gets the token
        from the provider)."""
        return OAuthBearerExchange(check_token(token), self._extensions)

    async def begin(self) -> OAuthBearerExchange:
        try:
            token = await self._provider.token()
        except KafkaError:
            raise
        except Exception as exc:
            raise SaslAuthenticationFailedError(
                f"OAUTHBEARER: the token provider {type(self._provider).__name__} failed: "
                f"{type(exc).__name__}"
            ) from exc
        extensions = self._extensions
        provided = getattr(self._provider, "extensions", None)
        if callable(provided):  # aiokafka's AbstractTokenProvider habit
            try:
                extra = provided()
            except Exception as exc:
                raise SaslAuthenticationFailedError(
                    f"OAUTHBEARER: extensions() of the token provider "
                    f"{type(self._provider).__name__} failed: {type(exc).__name__}"
                ) from exc
            if extra:
                extensions = {**extensions, **_check_extensions(extra)}
        return OAuthBearerExchange(check_token(token), extensions)

    def __repr__(self) -> str:
        return f"OAuthBearerMechanism(token_provider={self._provider!r})"


class OAuthBearerExchange:
    """One OAUTHBEARER authentication (client side)."""

    __slots__ = ("_extensions", "_server_error", "_state", "_token")

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None) -> None:
        self._token = check_token(token)
        self._extensions = _check_extensions(extensions or {})
        self._state = "new"
        self._server_error: str | None = None

    @property
    def done(self) -> bool:
        return self._state == "done"

    @property
    def server_error(self) -> str | None:
        """The server's JSON error (RFC 7628 section 3.2.2) after a rejected token, to add
        to the broker's error message; ``None`` otherwise."""
        return self._server_error

    def start(self) -> bytes:
        if self._state != "new":
            raise RuntimeError("OAUTHBEARER exchange already started")
        self._state = "sent"
        pairs = [f"auth=Bearer {self._token}"]
        pairs += [f"{k}={v}" for k, v in self._extensions.items()]
        return ("n,," + _SEP + "".join(p + _SEP for p in pairs) + _SEP).encode()

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == "sent":
            if not challenge:
                self._state = "done"
                return None
            self._server_error = _describe_error(bytes(challenge))
            self._state = "rejected"
            return _SEP.encode()  # the dummy response that ends a failed exchange
        if self._state == "rejected":
            raise SaslAuthenticationFailedError(
                f"OAUTHBEARER: the server rejected the token: {self._server_error}"
            )
        when = {"new": "before the client message", "done": "after success"}.get(
            self._state, "after a failure"
        )
        self._state = "failed"
        raise SaslAuthenticationFailedError(
            f"OAUTHBEARER: unexpected message from the server ({when})"
        )

    def __repr__(self) -> str:
        return f"OAuthBearerExchange(token={MASK}, state={self._state!r})"


def _describe_error(challenge: bytes) -> str:
    try:
        error = json.loads(challenge)
    except ValueError:
        return printable(challenge)
    if not isinstance(error, dict):
        return printable(challenge)
    parts = [f"{k}={printable(str(error[k]), 100)}" for k in ("status", "scope") if k in error]
    return ", ".join(parts) or printable(challenge)


def unverified_jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT (JWS compact form) **without verifying its signature**: for
    scheduling refreshes only, never to trust what it says.

    Raises:
        ValueError: ``token`` is not a JWS compact token with a JSON object payload (the
            message does not show the token).
    """
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT: a JWS compact token has three '.'-separated parts")
    payload = parts[1]
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        claims = json.loads(raw)
    except (binascii.Error, ValueError):
        raise ValueError("not a JWT: the payload is not base64url-encoded JSON") from None
    if not isinstance(claims, dict):
        raise ValueError("not a JWT: the payload is not a JSON object")
    return claims


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), read without verification;
    ``None`` when the token is not a JWT or has no numeric ``exp``."""
    try:
        exp = unverified_jwt_claims(token).get("exp")
    except ValueError:
        return None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)
