"""SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka speaks them.

The exchange (no channel binding, gs2 header ``n,,``)::

    client-first   n,,n=<user>,r=<client nonce>[,<extensions>]
    server-first   r=<client nonce><server nonce>,s=<salt base64>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<client proof base64>
    server-final   v=<server signature base64>      (or e=<error>)

Like Kafka, the user name is not SASLprep-normalized; its ``,`` and ``=`` are escaped as
``=2C`` and ``=3D``, and the password is used as its UTF-8 bytes, which is how Kafka's own
tools store the credentials. The client refuses a server nonce that does not extend its
own, an iteration count below 4096 (Kafka's minimum) or above ``max_iterations`` (Kafka's
maximum, 16384, by default: the count is chosen by the server and costs client CPU), and a
server signature that does not verify.

``step`` on the server-first message runs PBKDF2 (a few milliseconds at 4096 iterations);
the salted password is kept per (salt, iterations) on the mechanism, so later connections
to brokers of the same cluster skip it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security.mechanism import MASK, printable

#: Kafka's bounds on the iteration count (``ScramMechanism`` in the Java client).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()  # "biws"
# printable = %x21-2B / %x2D-7E: any visible ASCII character except ","
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+\Z")
_EXTENSION_KEY = re.compile(r"[A-Za-z]+\Z")
_EXTENSION_VALUE = re.compile(r"[\x21-\x2b\x2d-\x7e]+\Z")


def escape_username(username: str) -> str:
    """RFC 5802 ``saslname``: ``=`` as ``=3D`` and ``,`` as ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def new_nonce() -> str:
    """A client nonce: 32 random URL-safe base64 characters (192 bits)."""
    return secrets.token_urlsafe(24)


class ScramMechanism:
    """SCRAM-SHA-256 or SCRAM-SHA-512 with a user name and password.

    ``extensions`` are sent in the client-first message (Kafka: ``{"tokenauth": "true"}``
    to authenticate with a delegation token, whose id is then the user name and its HMAC
    the password).

    Raises:
        ConfigError: an unknown mechanism, an empty user name or password, or a malformed
            extension (never showing the password).
    """

    __slots__ = ("_extensions", "_hash", "_max_iterations", "_name", "_password", "_salted",
                 "_username")  # fmt: skip

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        extensions: Mapping[str, str] | None = None,
        max_iterations: int = MAX_ITERATIONS,
    ) -> None:
        if mechanism not in _HASHES:
            raise ConfigError(
                f"unknown SCRAM mechanism {mechanism!r}; use one of {sorted(_HASHES)}"
            )
        for what, value in (("username", username), ("password", password)):
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{mechanism} {what} must be a non-empty str")
        if max_iterations < MIN_ITERATIONS:
            raise ConfigError(f"max_iterations must be >= {MIN_ITERATIONS}")
        ext = dict(extensions or {})
        for key, value in ext.items():
            if not _EXTENSION_KEY.match(key) or key in ("m", "r"):
                raise ConfigError(f"invalid {mechanism} extension name {key!r}")
            if not _EXTENSION_VALUE.match(value):
                raise ConfigError(f"invalid value for {mechanism} extension {key!r}")
        self._name = mechanism
        self._hash = _HASHES[mechanism]
        self._username = username
        self._password = password
        self._extensions = ext
        self._max_iterations = max_iterations
        # (salt, iterations, salted password) of the last exchange: brokers of one
        # cluster share the stored credential, so connections reuse the PBKDF2 result.
        self._salted: tuple[bytes, int, bytes] | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def username(self) -> str:
        return self._username

    def exchange(self, nonce: str | None = None) -> ScramExchange:
        """A new exchange; ``nonce`` fixes the client nonce (tests only: it must be fresh
        and unpredictable for every authentication)."""
        return ScramExchange(self, new_nonce() if nonce is None else nonce)

    async def begin(self) -> ScramExchange:
        return self.exchange()

    def _salted_password(self, salt: bytes, iterations: int) -> bytes:
        cached = self._salted
        if cached is not None and cached[0] == salt and cached[1] == iterations:
            return cached[2]
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        self._salted = (salt, iterations, salted)
        return salted

    def __repr__(self) -> str:
        return f"ScramMechanism({self._name!r}, username={self._username!r}, password={MASK})"


class ScramExchange:
    """One SCRAM authentication (client side)."""

    __slots__ = ("_auth_message", "_client_first_bare", "_mech", "_nonce",
                 "_server_signature", "_state")  # fmt: skip

    def __init__(self, mechanism: ScramMechanism, nonce: str) -> None:
        if not _NONCE.match(nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self._mech = mechanism
        self._nonce = nonce
        self._state = "new"
        self._client_first_bare = ""
        self._auth_message = b""
        self._server_signature = b""

    @property
    def mechanism(self) -> str:
        return self._mech.name

    @property
    def done(self) -> bool:
        return self._state == "done"

    def _fail(self, reason: str) -> SaslAuthenticationFailedError:
        self._state = "failed"
        return SaslAuthenticationFailedError(f"{self._mech.name}: {reason}")

    def start(self) -> bytes:
        if self._state != "new":
            raise RuntimeError(f"{self._mech.name} exchange already started")
        extensions = "".join(f",{k}={v}" for k, v in self._mech._extensions.items())
        self._client_first_bare = (
            f"n={escape_username(self._mech.username)},r={self._nonce}{extensions}"
        )
        self._state = "client-first"
        return (_GS2_HEADER + self._client_first_bare).encode()

    def step(self, challenge: bytes) -> bytes | None:
        if self._state == "client-first":
            return self._client_final(challenge)
        if self._state == "client-final":
            self._verify(challenge)
            return None
        raise self._fail(f"unexpected message from the server in state {self._state!r}")

    def _attributes(self, message: str, what: str) -> list[tuple[str, str]]:
        attrs = []
        for part in message.split(","):
            if len(part) < 2 or part[1] != "=" or not ("a" <= part[0].lower() <= "z"):
                raise self._fail(f"malformed {what}: {printable(message)}")
            attrs.append((part[0], part[2:]))
        return attrs

    def _decode(self, challenge: bytes, what: str) -> str:
        try:
            return bytes(challenge).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"the {what} is not UTF-8: {printable(challenge)}") from None

    def _client_final(self, challenge: bytes) -> bytes:
        server_first = self._decode(challenge, "server-first message")
        attrs = self._attributes(server_first, "server-first message")
        if attrs[0][0] == "m":
            raise self._fail("the server requires an extension this client does not know")
        if len(attrs) < 3 or [k for k, _ in attrs[:3]] != ["r", "s", "i"]:
            raise self._fail(f"malformed server-first message: {printable(server_first)}")
        nonce, salt_b64, iterations_text = (v for _, v in attrs[:3])
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("invalid server nonce: it does not extend the client nonce")
        if not _NONCE.match(nonce):
            raise self._fail("invalid server nonce: not printable ASCII")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail(f"the salt is not base64: {printable(salt_b64)}") from None
        if not salt:
            raise self._fail("the server sent an empty salt")
        if not iterations_text.isascii() or not iterations_text.isdigit():
            raise self._fail(f"the iteration count is not a number: {printable(iterations_text)}")
        iterations = int(iterations_text)
        if iterations < MIN_ITERATIONS:
            raise self._fail(
                f"the server asks for {iterations} iterations, fewer than the minimum "
                f"{MIN_ITERATIONS}"
            )
        if iterations > self._mech._max_iterations:
            raise self._fail(
                f"the server asks for {iterations} iterations, more than the maximum "
                f"{self._mech._max_iterations}"
            )

        digest = self._mech._hash
        salted = self._mech._salted_password(salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, digest)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", digest)
        self._server_signature = hmac.digest(server_key, auth_message, digest)
        self._auth_message = auth_message
        self._state = "client-final"
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify(self, challenge: bytes) -> None:
        server_final = self._decode(challenge, "server-final message")
        attrs = self._attributes(server_final, "server-final message")
        key, value = attrs[0]
        if key == "e":
            raise self._fail(f"the server reports an error: {printable(value)}")
        if key != "v":
            raise self._fail(f"malformed server-final message: {printable(server_final)}")
        try:
            signature = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail("the server signature is not base64") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise self._fail(
                "the server's signature does not verify: the server does not know this "
                "user's credentials"
            )
        self._state = "done"

    def __repr__(self) -> str:
        return (
            f"ScramExchange({self._mech.name!r}, username={self._mech.username!r}, "
            f"password={MASK}, state={self._state!r})"
        )
