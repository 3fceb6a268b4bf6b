"""Test helpers for SASL: unsigned OAUTHBEARER tokens for the harness's brokers.

A ``KafkaCluster(sasl=True)`` validates OAUTHBEARER tokens with Kafka's *unsecured*
validator: it accepts an unsigned JWS (``{"alg": "none"}``) and takes the principal from
its ``sub`` claim, checking only ``exp`` (and ``iat``/``scope`` when present). Never use
such tokens, or a broker that accepts them, outside tests.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def unsecured_jwt(
    principal: str,
    *,
    lifetime_s: float = 3600.0,
    scope: str | None = None,
    claims: Mapping[str, object] | None = None,
    now: float | None = None,
) -> str:
    """Return an unsigned JWS compact token ``header.payload.`` for ``principal``.

    Claims: ``sub`` (the principal), ``iat`` (``now``, default the current time) and
    ``exp`` (``iat + lifetime_s``; a negative lifetime makes an expired token), ``scope``
    when given, then ``claims`` (which may override any of them).
    """
    issued = time.time() if now is None else now
    payload: dict[str, object] = {
        "sub": principal,
        "iat": int(issued),
        "exp": int(issued + lifetime_s),
    }
    if scope is not None:
        payload["scope"] = scope
    payload.update(claims or {})
    header = _b64url(json.dumps({"alg": "none"}, separators=(",", ":")).encode())
    body = _b64url(json.dumps(payload, separators=(",", ":")).encode())
    return f"{header}.{body}."


class UnsecuredTokenProvider:
    """A token provider (``async def token() -> str``) minting a fresh unsigned token for
    ``principal`` on every call; ``calls`` counts them (tests of re-authentication)."""

    def __init__(self, principal: str, *, lifetime_s: float = 3600.0) -> None:
        self.principal = principal
        self.lifetime_s = lifetime_s
        self.calls = 0

    async def token(self) -> str:
        self.calls += 1
        return unsecured_jwt(self.principal, lifetime_s=self.lifetime_s)

    def __repr__(self) -> str:
        return f"UnsecuredTokenProvider(principal={self.principal!r}, calls={self.calls})"
