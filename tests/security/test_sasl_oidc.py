"""The OIDC client-credentials token provider against a small identity provider served by
``http.server`` in a thread."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol.error_codes import SaslAuthenticationFailedError
from aiostream_kafka.security import (
    OAuthBearerMechanism,
    OAuthClientCredentialsProvider,
    TokenEndpointError,
    TokenProvider,
)
from aiostream_kafka.security.oidc import safe_url
from aiostream_kafka.testing.local import free_ports
from aiostream_kafka.testing.sasl import unsecured_jwt

SECRET = "s3cr3t/with:odd=chars&"


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    form: dict[str, str]


# (status, headers, body) for a request
Answer = tuple[int, dict[str, str], bytes]


def ok(token: str = "tok-1", expires_in: object = 3600, **extra: object) -> Answer:
    body: dict[str, object] = {"access_token": token, "token_type": "Bearer", **extra}
    if expires_in is not None:
        body["expires_in"] = expires_in
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


@dataclass
class IdentityProvider:
    url: str
    seen: list[Seen] = field(default_factory=list)
    answer: Callable[[Seen], Answer] = lambda seen: ok()
    delay_s: float = 0.0


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    state: IdentityProvider

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode()
            seen = Seen(self.path, dict(self.headers.items()), dict(urllib.parse.parse_qsl(body)))
            state.seen.append(seen)
            if state.delay_s:
                threading.Event().wait(state.delay_s)
            status, headers, payload = state.answer(seen)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that gave up (the timeout test) is not an error here

    server = Server(("127.0.0.1", 0), Handler)
    state = IdentityProvider(f"http://127.0.0.1:{server.server_address[1]}/oauth2/token")
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def provider(idp: IdentityProvider, **kwargs: object) -> OAuthClientCredentialsProvider:
    return OAuthClientCredentialsProvider(idp.url, "my-client", SECRET, **kwargs)  # type: ignore[arg-type]


async def test_client_credentials_request(idp: IdentityProvider) -> None:
    p = provider(idp, scope="kafka.read kafka.write", params={"audience": "kafka"})
    assert isinstance(p, TokenProvider)
    assert await p.token() == "tok-1"
    [seen] = idp.seen
    assert seen.path == "/oauth2/token"
    assert seen.form == {
        "grant_type": "client_credentials",
        "scope": "kafka.read kafka.write",
        "audience": "kafka",
    }
    assert seen.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert (
        seen.headers["Authorization"]
        == "Basic " + base64.b64encode(f"my-client:{SECRET}".encode()).decode()
    )


async def test_urlencoded_credentials(idp: IdentityProvider) -> None:
    await provider(idp, urlencode_credentials=True).token()
    basic = idp.seen[0].headers["Authorization"].removeprefix("Basic ")
    client_id, _, secret = base64.b64decode(basic).decode().partition(":")
    assert client_id == "my-client"
    assert secret == urllib.parse.quote_plus(SECRET) != SECRET


async def test_token_is_cached_and_refreshed_at_80_percent(idp: IdentityProvider) -> None:
    clock = Clock()
    tokens = iter(["tok-1", "tok-2", "tok-3"])
    idp.answer = lambda seen: ok(next(tokens), expires_in=100)
    p = provider(idp, clock=clock)
    assert await p.token() == "tok-1"
    clock.now += 79
    assert await p.token() == "tok-1"
    assert p.fetches == 1
    assert p.expires_in == pytest.approx(21)
    clock.now += 1  # 80% of the lifetime
    assert await p.token() == "tok-2"
    assert p.fetches == 2
    p.invalidate()
    assert await p.token() == "tok-3"


async def test_refresh_ratio_is_configurable(idp: IdentityProvider) -> None:
    clock = Clock()
    idp.answer = lambda seen: ok(expires_in="100")  # some providers send a string
    p = provider(idp, clock=clock, refresh_ratio=0.5)
    await p.token()
    clock.now += 49
    await p.token()
    clock.now += 1
    await p.token()
    assert p.fetches == 2


async def test_concurrent_callers_share_one_request(idp: IdentityProvider) -> None:
    idp.delay_s = 0.3
    p = provider(idp)
    tokens = await asyncio.gather(*(p.token() for _ in range(10)))
    assert tokens == ["tok-1"] * 10
    assert len(idp.seen) == 1 and p.fetches == 1


async def test_lifetime_from_the_jwt_when_expires_in_is_missing(idp: IdentityProvider) -> None:
    token = unsecured_jwt("svc", lifetime_s=1000)
    idp.answer = lambda seen: ok(token, expires_in=None)
    p = provider(idp)
    assert await p.token() == token
    assert p.expires_in is not None and 990 < p.expires_in <= 1000
    await p.token()
    assert p.fetches == 1


async def test_a_token_without_expiry_is_not_cached(
    idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    idp.answer = lambda seen: ok("opaque", expires_in=None)
    p = provider(idp)
    with caplog.at_level(logging.WARNING, "aiostream_kafka.security.oidc"):
        await p.token()
        await p.token()
    assert p.fetches == 2
    assert "no expiry" in caplog.text


async def test_refused_credentials(idp: IdentityProvider) -> None:
    # An identity provider that echoes the secret in its error must not leak it either.
    body = {"error": "invalid_client", "error_description": f"bad secret {SECRET}"}
    idp.answer = lambda seen: (401, {}, json.dumps(body).encode())
    p = provider(idp)
    with pytest.raises(TokenEndpointError) as info:
        await p.token()
    error = info.value
    assert isinstance(error, SaslAuthenticationFailedError)
    assert error.status == 401 and not error.retriable
    assert str(error) == (
        f"the OAuth token endpoint {idp.url} answered HTTP 401: invalid_client "
        "(bad secret <hidden>)"
    )
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert error.__cause__ is None and error.__context__ is None


@pytest.mark.parametrize(("status", "retriable"), [(400, False), (429, True), (503, True)])
async def test_http_errors(idp: IdentityProvider, status: int, retriable: bool) -> None:
    idp.answer = lambda seen: (status, {}, b"<html>oops</html>")
    with pytest.raises(TokenEndpointError, match=f"answered HTTP {status}$") as info:
        await provider(idp).token()
    assert info.value.retriable is retriable


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        ((200, {}, b"not json"), "did not answer a JSON object"),
        ((200, {}, b"[]"), "did not answer a JSON object"),
        (ok(token=""), "has no access_token"),
        ((200, {}, b'{"token_type": "Bearer"}'), "has no access_token"),
        (ok(token="two words"), "is not a bearer token"),
        ((200, {}, b"x" * (2 << 20)), "more than"),
    ],
)
async def test_malformed_answers(idp: IdentityProvider, answer: Answer, match: str) -> None:
    idp.answer = lambda seen: answer
    with pytest.raises(TokenEndpointError, match=match) as info:
        await provider(idp).token()
    assert not info.value.retriable


async def test_redirects_are_not_followed(idp: IdentityProvider) -> None:
    elsewhere = f"{idp.url.rsplit('/', 2)[0]}/elsewhere"
    idp.answer = lambda seen: (
        (302, {"Location": elsewhere}, b"") if seen.path == "/oauth2/token" else ok()
    )
    with pytest.raises(TokenEndpointError, match="answered HTTP 302"):
        await provider(idp).token()
    assert [s.path for s in idp.seen] == ["/oauth2/token"]


async def test_unreachable_endpoint_is_retriable() -> None:
    [port] = free_ports(1)
    url = f"http://127.0.0.1:{port}/token?key=query-secret"
    p = OAuthClientCredentialsProvider(url, "c", SECRET, timeout_s=5)
    with pytest.raises(TokenEndpointError, match="ConnectionRefusedError") as info:
        await p.token()
    message = str(info.value)
    assert f"http://127.0.0.1:{port}/token:" in message
    assert "query-secret" not in message
    assert info.value.retriable and info.value.status is None


async def test_timeout_is_retriable(idp: IdentityProvider) -> None:
    idp.delay_s = 1.0
    with pytest.raises(TokenEndpointError, match="timed out") as info:
        await provider(idp, timeout_s=0.2).token()
    assert info.value.retriable


async def test_failed_refresh_keeps_the_valid_token(
    idp: IdentityProvider, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    idp.answer = lambda seen: ok("tok-1", expires_in=100)
    p = provider(idp, clock=clock)
    await p.token()
    clock.now += 85  # due for refresh, 15 s left
    idp.answer = lambda seen: (503, {}, b"")
    with caplog.at_level(logging.WARNING, "aiostream_kafka.security.oidc"):
        assert await p.token() == "tok-1"
    assert "using the cached one" in caplog.text and SECRET not in caplog.text
    assert await p.token() == "tok-1"  # no new request before the retry delay (7.5 s)
    assert p.fetches == 2
    clock.now += 8
    idp.answer = lambda seen: ok("tok-2", expires_in=100)
    assert await p.token() == "tok-2"
    clock.now += 200  # expired and the endpoint down: the error is raised
    idp.answer = lambda seen: (503, {}, b"")
    with pytest.raises(TokenEndpointError):
        await p.token()


async def test_feeds_the_oauthbearer_mechanism(idp: IdentityProvider) -> None:
    token = unsecured_jwt("svc")
    idp.answer = lambda seen: ok(token)
    exchange = await OAuthBearerMechanism(provider(idp)).begin()
    assert exchange.start() == f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_settings_are_checked() -> None:
    for url in ("file:///etc/passwd", "ftp://idp/token", "idp/token", "https:///token"):
        with pytest.raises(ConfigError, match="token endpoint URL"):
            OAuthClientCredentialsProvider(url, "c", SECRET)
    with pytest.raises(ConfigError, match="client id"):
        OAuthClientCredentialsProvider("https://idp/token", "", SECRET)
    with pytest.raises(ConfigError, match="client secret"):
        OAuthClientCredentialsProvider("https://idp/token", "c", "")
    with pytest.raises(ConfigError, match="refresh_ratio"):
        OAuthClientCredentialsProvider("https://idp/token", "c", SECRET, refresh_ratio=1.5)
    for url in ("ftp://u:pw-in-url@idp/token", "https://u:pw-in-url@idp/token"):
        with pytest.raises(ConfigError, match="URL") as info:
            OAuthClientCredentialsProvider(url, "c", SECRET)
        assert "pw-in-url" not in str(info.value)


def test_repr_masks_the_secret() -> None:
    p = OAuthClientCredentialsProvider(
        "https://idp.example:8443/oauth2/token?k=q", "my-client", SECRET, scope="s"
    )
    text = repr(p) + str(p) + repr(OAuthBearerMechanism(p))
    assert SECRET not in text and "k=q" not in text
    assert repr(p) == (
        "OAuthClientCredentialsProvider('https://idp.example:8443/oauth2/token', "
        "client_id='my-client', client_secret=<hidden>, scope='s')"
    )
    assert safe_url("https://[::1]:9/t?x#y") == "https://[::1]:9/t"
    assert safe_url("https://u:pw@idp/t") == "https://idp/t"


def test_usable_from_several_event_loops(idp: IdentityProvider) -> None:
    p = provider(idp)
    assert asyncio.run(p.token()) == "tok-1"
    p.invalidate()
    assert asyncio.run(p.token()) == "tok-1"  # another loop: a lock of its own
    assert p.fetches == 2


@pytest.mark.parametrize("expires_in", ["nan", "inf", "soon", 0, -5])
async def test_unusable_lifetimes_are_not_cached(idp: IdentityProvider, expires_in: object) -> None:
    idp.answer = lambda seen: ok("opaque", expires_in=expires_in)
    p = provider(idp)
    await p.token()
    await p.token()
    assert p.fetches == 2 and p.expires_in is None
