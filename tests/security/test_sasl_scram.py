"""SCRAM-SHA-256/512 client: the RFC test vectors, and every server message it must refuse."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security import scram
from aiostream_kafka.security.scram import ScramMechanism, escape_username

# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC7677 = (
    b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
)
# RFC 5802 section 5: SCRAM-SHA-1, same user and password.
RFC5802 = (
    b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
    b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
    b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
    b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
)
SERVER_FIRST_256 = RFC7677[1]


def _exchange(mechanism: str = "SCRAM-SHA-256", nonce: str = "rOprNGfwEbeRWgbNEkqO"):  # type: ignore[no-untyped-def]
    return ScramMechanism(mechanism, "user", "pencil").exchange(nonce=nonce)


def test_rfc7677_sha256_exchange() -> None:
    exchange = _exchange()
    assert exchange.start() == RFC7677[0]
    assert exchange.step(RFC7677[1]) == RFC7677[2]
    assert not exchange.done
    assert exchange.step(RFC7677[3]) is None
    assert exchange.done


def test_rfc5802_exchange_with_sha1(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kafka has no SCRAM-SHA-1; the RFC 5802 vector still checks the algorithm with a
    # second hash.
    monkeypatch.setitem(scram._HASHES, "SCRAM-SHA-1", "sha1")
    exchange = _exchange("SCRAM-SHA-1", "fyko+d2lbbFgONRv9qkxdawL")
    assert exchange.start() == RFC5802[0]
    assert exchange.step(RFC5802[1]) == RFC5802[2]
    assert exchange.step(RFC5802[3]) is None
    assert exchange.done


def _server_final(password: str, digest: str, client_first: bytes, server_first: bytes,
                  client_final: bytes) -> bytes:  # fmt: skip
    """The server's side of RFC 5802, written from the RFC's formulas (to check SHA-512,
    which has no RFC vector)."""
    salt = base64.b64decode(server_first.split(b",s=")[1].split(b",")[0])
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, 4096)
    without_proof, proof = client_final.rsplit(b",p=", 1)
    auth = client_first[3:] + b"," + server_first + b"," + without_proof
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored = hashlib.new(digest, client_key).digest()
    signature = hmac.new(stored, auth, digest).digest()
    recovered = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
    assert hashlib.new(digest, recovered).digest() == stored, "the client proof is wrong"
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return b"v=" + base64.b64encode(hmac.new(server_key, auth, digest).digest())


def test_sha512_exchange_verifies_both_ways() -> None:
    exchange = ScramMechanism("SCRAM-SHA-512", "user", "pencil").exchange(nonce="abc")
    first = exchange.start()
    server_first = b"r=abcdef,s=" + base64.b64encode(b"salt-512") + b",i=4096"
    final = exchange.step(server_first)
    assert final is not None
    assert len(base64.b64decode(final.rsplit(b",p=", 1)[1])) == 64
    assert exchange.step(_server_final("pencil", "sha512", first, server_first, final)) is None
    assert exchange.done


def test_default_nonce_is_random_and_fresh() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil")
    first = {mechanism.exchange().start() for _ in range(20)}
    assert len(first) == 20
    nonce = next(iter(first)).split(b",r=")[1]
    assert len(nonce) >= 24 and b"," not in nonce


@pytest.mark.parametrize(
    ("username", "saslname"),
    [("user", "user"), ("a=b", "a=3Db"), ("a,b", "a=2Cb"), ("=,=", "=3D=2C=3D"),
     ("é", "é")],
)  # fmt: skip
def test_username_escaping(username: str, saslname: str) -> None:
    assert escape_username(username) == saslname
    exchange = ScramMechanism("SCRAM-SHA-256", username, "pw").exchange(nonce="n")
    assert exchange.start() == f"n,,n={saslname},r=n".encode()


def test_extensions_in_client_first() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "tokenid", "hmac", extensions={"tokenauth": "true"})
    assert mechanism.exchange(nonce="n").start() == b"n,,n=tokenid,r=n,tokenauth=true"


@pytest.mark.parametrize(
    ("server_first", "reason"),
    [
        (b"r=someoneelse123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4095", "fewer than"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=16385", "more than"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=-1", "not a number"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096x", "not a number"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64!,i=4096", "not base64"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096", "empty salt"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096,s=W22ZaJ0SNY7soEsUEjb6gQ==", "malformed"),
        (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==", "malformed"),
        (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "extension"),
        (b"e=other-error", "malformed"),
        (b"", "malformed"),
        (b"garbage", "malformed"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_bad_server_first_is_refused(server_first: bytes, reason: str) -> None:
    exchange = _exchange()
    exchange.start()
    with pytest.raises(SaslAuthenticationFailedError, match=reason) as info:
        exchange.step(server_first)
    assert "pencil" not in str(info.value)
    assert not exchange.done
    with pytest.raises(SaslAuthenticationFailedError, match="unexpected"):
        exchange.step(RFC7677[3])


def test_server_first_extensions_after_the_mandatory_attributes_are_ignored() -> None:
    exchange = _exchange()
    exchange.start()
    assert exchange.step(SERVER_FIRST_256 + b",x=future") is not None


@pytest.mark.parametrize(
    ("server_final", "reason"),
    [
        (b"v=" + base64.b64encode(b"\x00" * 32), "does not verify"),
        (RFC7677[3][:-6] + b"AAAAA=", "does not verify"),
        (b"v=!!!", "not base64"),
        (b"e=invalid-proof", "reports an error: 'invalid-proof'"),
        (b"x=1", "malformed"),
        (b"", "malformed"),
    ],
)
def test_bad_server_final_is_refused(server_final: bytes, reason: str) -> None:
    exchange = _exchange()
    exchange.start()
    exchange.step(SERVER_FIRST_256)
    with pytest.raises(SaslAuthenticationFailedError, match=reason):
        exchange.step(server_final)
    assert not exchange.done


def test_higher_iteration_bound_is_configurable() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil", max_iterations=20000)
    exchange = mechanism.exchange(nonce="abc")
    exchange.start()
    assert exchange.step(b"r=abcd,s=c2FsdA==,i=20000") is not None


def test_messages_out_of_order() -> None:
    exchange = _exchange()
    with pytest.raises(SaslAuthenticationFailedError, match="unexpected"):
        exchange.step(SERVER_FIRST_256)
    exchange = _exchange()
    exchange.start()
    with pytest.raises(RuntimeError):
        exchange.start()
    exchange.step(SERVER_FIRST_256)
    exchange.step(RFC7677[3])
    with pytest.raises(SaslAuthenticationFailedError, match="unexpected"):
        exchange.step(b"")


def test_salted_password_is_computed_once_per_salt(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = hashlib.pbkdf2_hmac

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counting)
    mechanism = ScramMechanism("SCRAM-SHA-256", "user", "pencil")
    for _ in range(3):
        exchange = mechanism.exchange(nonce="rOprNGfwEbeRWgbNEkqO")
        exchange.start()
        assert exchange.step(SERVER_FIRST_256) == RFC7677[2]
        assert exchange.step(RFC7677[3]) is None
    assert len(calls) == 1
    exchange = mechanism.exchange(nonce="abc")
    exchange.start()
    exchange.step(b"r=abcd,s=b3RoZXI=,i=4096")  # another salt: computed again
    assert len(calls) == 2


def test_invalid_settings() -> None:
    with pytest.raises(ConfigError, match="unknown SCRAM mechanism"):
        ScramMechanism("SCRAM-SHA-1", "user", "pencil")
    with pytest.raises(ConfigError, match="username"):
        ScramMechanism("SCRAM-SHA-256", "", "pencil")
    with pytest.raises(ConfigError, match="password") as info:
        ScramMechanism("SCRAM-SHA-256", "user", "")
    with pytest.raises(ConfigError, match="extension"):
        ScramMechanism("SCRAM-SHA-256", "user", "pencil", extensions={"a,b": "x"})
    with pytest.raises(ConfigError, match="extension"):
        ScramMechanism("SCRAM-SHA-256", "user", "pencil", extensions={"tokenauth": "a,b"})
    with pytest.raises(ValueError):
        ScramMechanism("SCRAM-SHA-256", "user", "pencil").exchange(nonce="a,b")
    assert "pencil" not in str(info.value)


async def test_secrets_never_in_repr() -> None:
    mechanism = ScramMechanism("SCRAM-SHA-512", "user", "pencil-secret")
    exchange = await mechanism.begin()
    exchange.start()
    for obj in (mechanism, exchange):
        assert "pencil-secret" not in repr(obj) and "pencil-secret" not in str(obj)
        assert "<hidden>" in repr(obj)
    assert repr(mechanism) == "ScramMechanism('SCRAM-SHA-512', username='user', password=<hidden>)"
