"""The server side of SASL for the fake cluster's SASL_PLAINTEXT listeners: PLAIN and
SCRAM-SHA-256/512 (RFC 5802/7677), with the users the cluster was given.

Sans-IO: :class:`SaslServer` is one connection's authentication (the mechanism chosen by
SaslHandshake v1, then the tokens of SaslAuthenticate); the server closes the connection
after a failure, as Kafka does. SCRAM credentials are derived once per user and
mechanism (Kafka's minimum of 4096 iterations).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiostream_kafka.testing.fake import errors

__all__ = ["MECHANISMS", "SaslServer", "SaslUsers"]

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_FAILED = "Authentication failed: Invalid username or password"


@dataclass(slots=True, frozen=True)
class _ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes


@dataclass(slots=True)
class SaslUsers:
    """The users (name -> password) and mechanisms a SASL listener accepts."""

    users: Mapping[str, str]
    mechanisms: tuple[str, ...] = MECHANISMS
    _scram: dict[tuple[str, str], _ScramCredential] = field(default_factory=dict)

    def scram(self, mechanism: str, user: str) -> _ScramCredential | None:
        """The SCRAM credential of ``user`` (None: no such user)."""
        password = self.users.get(user)
        if password is None:
            return None
        key = (mechanism, user)
        found = self._scram.get(key)
        if found is None:
            name = _HASHES[mechanism]
            salt = os.urandom(16)
            salted = hashlib.pbkdf2_hmac(name, password.encode(), salt, SCRAM_ITERATIONS)
            client_key = hmac.digest(salted, b"Client Key", name)
            found = _ScramCredential(
                salt,
                hashlib.new(name, client_key).digest(),
                hmac.digest(salted, b"Server Key", name),
            )
            self._scram[key] = found
        return found


@dataclass(slots=True)
class SaslResult:
    """One SaslAuthenticate answer; ``close``: the connection is closed after it."""

    error_code: int
    message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False


class SaslServer:
    """One connection's authentication state."""

    def __init__(self, users: SaslUsers) -> None:
        self._users = users
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram_state: tuple[str, str, str, _ScramCredential] | None = None

    @property
    def authenticated(self) -> bool:
        """Whether the client has authenticated."""
        return self.principal is not None

    def handshake(self, mechanism: str) -> int:
        """SaslHandshake: the error code for ``mechanism``."""
        if self.mechanism is not None:
            return errors.ILLEGAL_SASL_STATE
        if mechanism not in self._users.mechanisms:
            return errors.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        return errors.NONE

    def authenticate(self, token: bytes) -> SaslResult:
        """SaslAuthenticate: one token of the exchange."""
        if self.mechanism is None or self.authenticated:
            return SaslResult(errors.ILLEGAL_SASL_STATE, "unexpected SaslAuthenticate", close=True)
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram(token)

    def _plain(self, token: bytes) -> SaslResult:
        parts = token.split(b"\0")
        if len(parts) != 3:
            return SaslResult(
                errors.SASL_AUTHENTICATION_FAILED, "Invalid SASL/PLAIN response", close=True
            )
        user, password = parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        expected = self._users.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return SaslResult(errors.SASL_AUTHENTICATION_FAILED, _FAILED, close=True)
        self.principal = user
        return SaslResult(errors.NONE)

    def _scram(self, token: bytes) -> SaslResult:
        assert self.mechanism is not None
        fail = SaslResult(errors.SASL_AUTHENTICATION_FAILED, _FAILED, close=True)
        text = token.decode(errors="replace")
        if self._scram_state is None:
            # client-first: gs2 header ("n,," or "n,a=authzid,") then "n=user,r=nonce"
            header, _, bare = text.partition(",")
            _authzid, _, bare = bare.partition(",")
            attrs = _attributes(bare)
            user = attrs.get("n", "").replace("=2C", ",").replace("=3D", "=")
            nonce = attrs.get("r")
            if header not in ("n", "y") or not nonce:
                return SaslResult(
                    errors.SASL_AUTHENTICATION_FAILED,
                    "Invalid SCRAM client-first message",
                    close=True,
                )
            credential = self._users.scram(self.mechanism, user)
            if credential is None:
                return fail
            server_nonce = nonce + base64.b64encode(os.urandom(18)).decode()
            server_first = (
                f"r={server_nonce},s={base64.b64encode(credential.salt).decode()},"
                f"i={SCRAM_ITERATIONS}"
            )
            self._scram_state = (user, bare, server_first, credential)
            return SaslResult(errors.NONE, auth_bytes=server_first.encode())
        user, client_first_bare, server_first, credential = self._scram_state
        without_proof, _, proof_attr = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not proof_attr or attrs.get("r") != _attributes(server_first).get("r"):
            return fail
        name = _HASHES[self.mechanism]
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, name)
        try:
            proof = base64.b64decode(proof_attr, validate=True)
        except ValueError:
            return fail
        if len(proof) != len(signature):
            return fail
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(name, client_key).digest(), credential.stored_key):
            return fail
        server_signature = hmac.digest(credential.server_key, auth_message, name)
        self.principal = user
        return SaslResult(
            errors.NONE, auth_bytes=f"v={base64.b64encode(server_signature).decode()}".encode()
        )


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out
