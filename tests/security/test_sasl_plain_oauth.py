"""PLAIN and OAUTHBEARER client messages, the JWT helpers, and ``create_mechanism``."""

from __future__ import annotations

import base64
import json

import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security import (
    OAuthBearerExchange,
    OAuthBearerMechanism,
    PlainMechanism,
    SaslExchange,
    SaslMechanism,
    ScramMechanism,
    StaticTokenProvider,
    TokenProvider,
    create_mechanism,
    jwt_expiry,
    unverified_jwt_claims,
)
from aiostream_kafka.testing.sasl import UnsecuredTokenProvider, unsecured_jwt

TOKEN = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9."


# -- PLAIN ---------------------------------------------------------------------------------


async def test_plain_message_and_completion() -> None:
    exchange = await PlainMechanism("admin", "admin-secret").begin()
    assert exchange.mechanism == "PLAIN"
    assert exchange.start() == b"\x00admin\x00admin-secret"
    assert not exchange.done
    assert exchange.step(b"") is None
    assert exchange.done


def test_plain_with_authzid_and_utf8() -> None:
    exchange = PlainMechanism("jörg", "pässwörd", authzid="ops").exchange()
    assert exchange.start() == "ops\x00jörg\x00pässwörd".encode()


def test_plain_refuses_server_data_and_extra_messages() -> None:
    exchange = PlainMechanism("admin", "pw").exchange()
    with pytest.raises(SaslAuthenticationFailedError, match="before the client message"):
        exchange.step(b"")
    exchange.start()
    with pytest.raises(SaslAuthenticationFailedError, match="sent data"):
        exchange.step(b"surprise")
    exchange = PlainMechanism("admin", "pw").exchange()
    exchange.start()
    exchange.step(b"")
    with pytest.raises(SaslAuthenticationFailedError, match="after success"):
        exchange.step(b"")
    with pytest.raises(RuntimeError):
        exchange.start()


@pytest.mark.parametrize(
    ("username", "password", "what"),
    [("", "pw", "username"), ("a\x00b", "pw", "username"), ("admin", "", "password"),
     ("admin", "se\x00cret", "password")],
)  # fmt: skip
def test_plain_invalid_credentials(username: str, password: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as info:
        PlainMechanism(username, password)
    assert "se\x00cret" not in str(info.value)


def test_plain_repr_masks_the_password() -> None:
    mechanism = PlainMechanism("admin", "admin-secret")
    exchange = mechanism.exchange()
    exchange.start()
    for obj in (mechanism, exchange):
        assert "admin-secret" not in repr(obj) and "admin-secret" not in str(obj)
    assert repr(mechanism) == "PlainMechanism(username='admin', password=<hidden>)"


# -- OAUTHBEARER ---------------------------------------------------------------------------


async def test_oauthbearer_message() -> None:
    exchange = await OAuthBearerMechanism(StaticTokenProvider(TOKEN)).begin()
    assert exchange.mechanism == "OAUTHBEARER"
    assert exchange.start() == f"n,,\x01auth=Bearer {TOKEN}\x01\x01".encode()
    assert exchange.step(b"") is None
    assert exchange.done


def test_oauthbearer_message_with_extensions() -> None:
    mechanism = OAuthBearerMechanism(
        StaticTokenProvider(TOKEN),
        extensions={"logicalCluster": "lkc-123", "identityPoolId": "pool-9"},
    )
    assert (
        mechanism.exchange(TOKEN).start()
        == (
            f"n,,\x01auth=Bearer {TOKEN}\x01logicalCluster=lkc-123\x01identityPoolId=pool-9\x01\x01"
        ).encode()
    )


async def test_a_providers_extensions_method_is_read_at_each_authentication() -> None:
    """aiokafka's AbstractTokenProvider habit: ``extensions()`` beside ``token()``."""

    class Provider:
        def __init__(self) -> None:
            self.calls = 0

        async def token(self) -> str:
            return TOKEN

        def extensions(self) -> dict[str, str]:
            self.calls += 1
            return {"logicalCluster": f"lkc-{self.calls}"}

    provider = Provider()
    mechanism = OAuthBearerMechanism(provider, extensions={"identityPoolId": "pool-9"})
    for n in (1, 2):
        exchange = await mechanism.begin()
        assert (
            exchange.start()
            == (
                f"n,,\x01auth=Bearer {TOKEN}\x01identityPoolId=pool-9\x01logicalCluster=lkc-{n}"
                "\x01\x01"
            ).encode()
        )


async def test_malformed_extensions_from_a_provider_are_a_config_error() -> None:
    class Provider:
        async def token(self) -> str:
            return TOKEN

        def extensions(self) -> dict[str, str]:
            return {"auth": "reserved"}

    with pytest.raises(ConfigError, match="extension"):
        await OAuthBearerMechanism(Provider()).begin()


@pytest.mark.parametrize(
    "extensions",
    [{"auth": "x"}, {"a1": "x"}, {"": "x"}, {"ok": ""}, {"ok": "a\x01b"}, {"ok": "\x7f"}],
)
def test_oauthbearer_invalid_extensions(extensions: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="extension"):
        OAuthBearerMechanism(StaticTokenProvider(TOKEN), extensions=extensions)


def test_oauthbearer_rejected_token_gets_the_dummy_answer() -> None:
    exchange = OAuthBearerExchange(TOKEN)
    exchange.start()
    error = json.dumps({"status": "invalid_token", "scope": "kafka"}).encode()
    assert exchange.step(error) == b"\x01"  # RFC 7628 section 3.2.3
    assert not exchange.done
    assert exchange.server_error == "status='invalid_token', scope='kafka'"
    with pytest.raises(SaslAuthenticationFailedError, match="rejected the token: status="):
        exchange.step(b"")


def test_oauthbearer_unexpected_messages() -> None:
    exchange = OAuthBearerExchange(TOKEN)
    with pytest.raises(SaslAuthenticationFailedError, match="before the client message"):
        exchange.step(b"")
    exchange = OAuthBearerExchange(TOKEN)
    exchange.start()
    exchange.step(b"")
    with pytest.raises(SaslAuthenticationFailedError, match="after success"):
        exchange.step(b"")
    with pytest.raises(RuntimeError):
        exchange.start()


@pytest.mark.parametrize("token", ["", "has space", "a\x01b", "tok=en", "ünïcode"])
async def test_oauthbearer_invalid_token_is_refused_without_showing_it(token: str) -> None:
    with pytest.raises(SaslAuthenticationFailedError, match="not a bearer token") as info:
        await OAuthBearerMechanism(_Fixed(token)).begin()  # type: ignore[arg-type]
    if token:
        assert token not in str(info.value)


class _Fixed:
    """A provider returning whatever it was given, valid or not."""

    def __init__(self, value: object) -> None:
        self.value = value

    async def token(self) -> object:
        return self.value


async def test_oauthbearer_provider_errors() -> None:
    class Broken:
        async def token(self) -> str:
            raise OSError("idp down, secret=hunter2")

    with pytest.raises(SaslAuthenticationFailedError, match="Broken failed: OSError") as info:
        await OAuthBearerMechanism(Broken()).begin()
    assert "hunter2" not in str(info.value)
    assert isinstance(info.value.__cause__, OSError)  # kept for debugging, not in the message

    with pytest.raises(SaslAuthenticationFailedError, match="must be a str"):
        await OAuthBearerMechanism(_Fixed(b"bytes-token")).begin()  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="async def token"):
        OAuthBearerMechanism(object())  # type: ignore[arg-type]


async def test_oauthbearer_asks_the_provider_for_every_authentication() -> None:
    provider = UnsecuredTokenProvider("admin")
    mechanism = OAuthBearerMechanism(provider)
    first = (await mechanism.begin()).start()
    await mechanism.begin()
    assert provider.calls == 2
    assert first.startswith(b"n,,\x01auth=Bearer ey")


def test_oauthbearer_reprs_mask_the_token() -> None:
    provider = StaticTokenProvider(TOKEN)
    mechanism = OAuthBearerMechanism(provider)
    exchange = mechanism.exchange(TOKEN)
    exchange.start()
    for obj in (provider, mechanism, exchange):
        assert TOKEN not in repr(obj) and TOKEN not in str(obj)
        assert "<hidden>" in repr(obj)


# -- JWT helpers ---------------------------------------------------------------------------


def test_jwt_expiry_reads_exp_without_verifying() -> None:
    token = unsecured_jwt("admin", lifetime_s=60, now=1_000_000)
    assert jwt_expiry(token) == 1_000_060.0
    assert unverified_jwt_claims(token) == {"sub": "admin", "iat": 1_000_000, "exp": 1_000_060}


def _jwt(payload: bytes) -> str:
    encoded = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    return f"eyJhbGciOiJIUzI1NiJ9.{encoded}.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    "token",
    [
        "opaque-token",
        "a.b",
        "a.!!!.c",
        _jwt(b"[1, 2]"),
        _jwt(b"not json"),
        _jwt(b'{"sub": "x"}'),
        _jwt(b'{"exp": "tomorrow"}'),
        _jwt(b'{"exp": true}'),
    ],
)
def test_jwt_expiry_of_tokens_without_a_usable_exp(token: str) -> None:
    assert jwt_expiry(token) is None


def test_jwt_claims_errors_do_not_show_the_token() -> None:
    with pytest.raises(ValueError, match="not a JWT") as info:
        unverified_jwt_claims("secret-opaque-token")
    assert "secret-opaque-token" not in str(info.value)
    assert jwt_expiry(_jwt(b'{"exp": 1700000000.5}')) == 1700000000.5


# -- create_mechanism ----------------------------------------------------------------------


async def test_create_mechanism() -> None:
    plain = create_mechanism("PLAIN", username="u", password="p")
    assert isinstance(plain, PlainMechanism) and plain.name == "PLAIN"
    for name in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        scram = create_mechanism(name, username="u", password="p")
        assert isinstance(scram, ScramMechanism) and scram.name == name
    oauth = create_mechanism("OAUTHBEARER", token_provider=StaticTokenProvider(TOKEN))
    assert oauth.name == "OAUTHBEARER"
    for mechanism in (plain, scram, oauth):
        assert isinstance(mechanism, SaslMechanism)
        assert isinstance(await mechanism.begin(), SaslExchange)
    assert isinstance(StaticTokenProvider(TOKEN), TokenProvider)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mechanism": "GSSAPI"}, "unknown sasl_mechanism 'GSSAPI'.*GSSAPI is not supported"),
        ({"mechanism": "plain", "username": "u", "password": "p"}, "unknown sasl_mechanism"),
        ({"mechanism": "PLAIN", "username": "u"}, "needs sasl_plain_username and"),
        ({"mechanism": "SCRAM-SHA-256", "password": "p"}, "needs sasl_plain_username"),
        ({"mechanism": "OAUTHBEARER"}, "needs sasl_oauth_token_provider"),
        (
            {"mechanism": "OAUTHBEARER", "token_provider": StaticTokenProvider(TOKEN),
             "username": "u"},
            "not used by OAUTHBEARER",
        ),
        (
            {"mechanism": "PLAIN", "username": "u", "password": "p",
             "token_provider": StaticTokenProvider(TOKEN)},
            "is for OAUTHBEARER",
        ),
    ],
)  # fmt: skip
def test_create_mechanism_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        create_mechanism(**kwargs)  # type: ignore[arg-type]
