"""An OAUTHBEARER token provider for the OAuth 2 client credentials grant (KIP-768).

:class:`OAuthClientCredentialsProvider` asks an identity provider's token endpoint for an
access token (``POST grant_type=client_credentials[&scope=...]`` with the client id and
secret in HTTP basic auth, RFC 6749 section 4.4), caches it, and fetches a new one once
``refresh_ratio`` (80%) of its lifetime has passed. The lifetime is the response's
``expires_in``, else the token's own ``exp`` claim (read without verification).

Standard library only: ``urllib`` in a worker thread, bounded by ``timeout_s``; HTTPS is
verified with ``ssl.create_default_context()`` unless an ``ssl_context`` is given.
Redirects are not followed (they would carry the credentials elsewhere). ``urllib.request``
and ``http.client`` (with ``email``, 10-20 ms to import) are imported on the first request,
not with the package.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.security.errors import TokenEndpointError
from aiostream_kafka.security.mechanism import MASK
from aiostream_kafka.security.oauth import check_token, jwt_expiry

if TYPE_CHECKING:
    import urllib.request

log = logging.getLogger(__name__)

#: The largest token endpoint answer read (a token response is a few kilobytes).
MAX_RESPONSE_BYTES = 1 << 20
#: After a failed refresh while the cached token is still valid, wait at most this long
#: before asking the endpoint again (and at most half the token's remaining lifetime).
RETRY_AFTER_FAILURE_S = 10.0


def _no_redirect() -> urllib.request.HTTPRedirectHandler:
    """A handler that follows no redirect: the 3xx answer is raised as an HTTPError."""
    import urllib.request

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    return _NoRedirect()


def safe_url(url: str) -> str:
    """``url`` without user info, query or fragment: what error messages may show."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class OAuthClientCredentialsProvider:
    """Access tokens from an OAuth 2 / OIDC token endpoint (client credentials grant).

    Args:
        token_endpoint_url: the ``https://`` (or ``http://``, for tests) URL of the
            identity provider's token endpoint.
        client_id, client_secret: the client's credentials, sent as HTTP basic auth.
        scope: the ``scope`` parameter, if the identity provider wants one.
        params: more form parameters (e.g. ``{"audience": "..."}``).
        refresh_ratio: the part of a token's lifetime after which a new one is fetched.
        timeout_s: bound of one request to the endpoint (connect and read).
        ssl_context: for ``https`` endpoints; default ``ssl.create_default_context()``.
        urlencode_credentials: form-urlencode the client id and secret inside the basic
            auth header (RFC 6749 section 2.3.1). Off by default, as in Kafka's Java client
            (``sasl.oauthbearer.header.urlencode``): most identity providers expect them
            as they are.
        clock: monotonic seconds (tests).

    ``await provider.token()`` returns the cached token while it is fresh and otherwise
    fetches one; concurrent callers on one event loop share one request. If a refresh fails
    while the cached token has not expired yet, the cached token is returned (and a warning
    logged); the endpoint is asked again after at most ``RETRY_AFTER_FAILURE_S``.

    Raises (from :meth:`token`):
        TokenEndpointError: the endpoint is unreachable, refuses the credentials or answers
            something else than a token; ``retriable`` tells whether trying again may help.
            The message names the endpoint, never the secret.
    """

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        params: Mapping[str, str] | None = None,
        refresh_ratio: float = 0.8,
        timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        urlencode_credentials: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urllib.parse.urlsplit(token_endpoint_url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ConfigError(
                f"the token endpoint URL must be an https:// (or http://) URL, got "
                f"{safe_url(token_endpoint_url)!r}"
            )
        if parts.username is not None or parts.password is not None:
            raise ConfigError(
                "the token endpoint URL must not hold credentials (user info); pass "
                "client_id and client_secret"
            )
        if not client_id or not isinstance(client_id, str):
            raise ConfigError("the OAuth client id must be a non-empty str")
        if not client_secret or not isinstance(client_secret, str):
            raise ConfigError("the OAuth client secret must be a non-empty str")
        if not 0.0 < refresh_ratio <= 1.0:
            raise ConfigError(f"refresh_ratio must be in (0, 1], got {refresh_ratio}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0, got {timeout_s}")
        self._url = token_endpoint_url
        self._shown_url = safe_url(token_endpoint_url)
        self._client_id = client_id
        self._secret = client_secret
        self._scope = scope
        self._params = dict(params or {})
        self._refresh_ratio = refresh_ratio
        self._timeout_s = timeout_s
        self._ssl_context = ssl_context
        self._urlencode = urlencode_credentials
        self._clock = clock
        # the cached token, the monotonic time it expires (None: unknown, never cached)
        # and the monotonic time to fetch a new one
        self._token: str | None = None
        self._expires_at = 0.0
        self._refresh_at = 0.0
        # One request at a time per event loop (an asyncio.Lock belongs to one loop; a
        # provider used from another loop gets a new lock).
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self.fetches = 0  #: requests made to the endpoint (successful or not)

    @property
    def token_endpoint_url(self) -> str:
        return self._shown_url

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def expires_in(self) -> float | None:
        """Seconds until the cached token expires (``None`` when none is cached)."""
        if self._token is None:
            return None
        return self._expires_at - self._clock()

    def invalidate(self) -> None:
        """Drop the cached token (e.g. the broker rejected it): the next call fetches."""
        self._token = None

    async def token(self) -> str:
        cached = self._token
        if cached is not None and self._clock() < self._refresh_at:
            return cached
        loop = asyncio.get_running_loop()
        lock = self._lock
        if lock is None or self._lock_loop is not loop:
            lock = self._lock = asyncio.Lock()
            self._lock_loop = loop
        async with lock:
            cached = self._token
            now = self._clock()
            if cached is not None and now < self._refresh_at:
                return cached  # fetched by the caller we waited for
            try:
                return await self._fetch()
            except TokenEndpointError as exc:
                now = self._clock()
                if cached is None or cached is not self._token or now >= self._expires_at:
                    raise
                retry = min(RETRY_AFTER_FAILURE_S, (self._expires_at - now) / 2)
                self._refresh_at = now + retry
                log.warning(
                    "refreshing the OAuth token failed (%s); using the cached one, which "
                    "expires in %.0fs; retrying in %.1fs",
                    exc,
                    self._expires_at - now,
                    retry,
                )
                return cached

    async def _fetch(self) -> str:
        self.fetches += 1
        started = self._clock()
        status, body = await asyncio.to_thread(self._post)
        if status != 200:
            raise self._http_error(status, body)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise TokenEndpointError(
                f"the OAuth token endpoint {self._shown_url} did not answer a JSON object",
                retriable=False,
                status=status,
            )
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise TokenEndpointError(
                f"the answer of the OAuth token endpoint {self._shown_url} has no access_token",
                retriable=False,
                status=status,
            )
        try:
            check_token(token)
        except Exception:
            raise TokenEndpointError(
                f"the access_token from {self._shown_url} is not a bearer token",
                retriable=False,
                status=status,
            ) from None
        lifetime = self._lifetime(answer.get("expires_in"), token)
        if lifetime is None or lifetime <= 0:
            log.warning(
                "the token from %s has no expiry (no expires_in, no exp claim): it is not "
                "cached and every authentication fetches a new one",
                self._shown_url,
            )
            self._token = None
            return token
        self._token = token
        self._expires_at = started + lifetime
        self._refresh_at = started + lifetime * self._refresh_ratio
        log.debug("fetched an OAuth token from %s, valid %.0fs", self._shown_url, lifetime)
        return token

    @staticmethod
    def _lifetime(expires_in: object, token: str) -> float | None:
        if isinstance(expires_in, str):
            try:
                expires_in = float(expires_in)
            except ValueError:
                expires_in = None
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
            lifetime: float | None = float(expires_in)
        else:
            exp = jwt_expiry(token)
            lifetime = None if exp is None else exp - time.time()
        return lifetime if lifetime is not None and math.isfinite(lifetime) else None

    def _authorization(self) -> str:
        client_id, secret = self._client_id, self._secret
        if self._urlencode:
            client_id = urllib.parse.quote_plus(client_id)
            secret = urllib.parse.quote_plus(secret)
        return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()

    def _post(self) -> tuple[int, bytes]:
        """One request, in a worker thread: ``(HTTP status, body)``."""
        import http.client
        import urllib.error
        import urllib.request

        form = {"grant_type": "client_credentials", **self._params}
        if self._scope:
            form["scope"] = self._scope
        request = urllib.request.Request(
            self._url,
            data=urllib.parse.urlencode(form).encode(),
            method="POST",
            headers={
                "Authorization": self._authorization(),
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
        )
        handlers: list[urllib.request.BaseHandler] = [_no_redirect()]
        if request.type == "https":
            context = self._ssl_context or ssl.create_default_context()
            handlers.append(urllib.request.HTTPSHandler(context=context))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(request, timeout=self._timeout_s) as response:
                return response.status, self._read(response)
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, self._read(exc)
            finally:
                exc.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            text = reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
            raise TokenEndpointError(
                f"cannot get a token from the OAuth token endpoint {self._shown_url}: "
                f"{self._scrub(text)}",
                retriable=not isinstance(reason, ssl.SSLCertVerificationError),
            ) from None

    def _read(self, response: object) -> bytes:
        read = getattr(response, "read", None)
        body: bytes = read(MAX_RESPONSE_BYTES + 1) if callable(read) else b""
        if len(body) > MAX_RESPONSE_BYTES:
            raise TokenEndpointError(
                f"the OAuth token endpoint {self._shown_url} answered more than "
                f"{MAX_RESPONSE_BYTES} bytes",
                retriable=False,
            )
        return body

    def _http_error(self, status: int, body: bytes) -> TokenEndpointError:
        detail = ""
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and "error" in answer:
            detail = f": {answer['error']}"
            if answer.get("error_description"):
                detail += f" ({answer['error_description']})"
        detail = self._scrub(detail)[:300]
        return TokenEndpointError(
            f"the OAuth token endpoint {self._shown_url} answered HTTP {status}{detail}",
            retriable=status == 429 or status >= 500,
            status=status,
        )

    def _scrub(self, text: str) -> str:
        """``text`` with the secret (as is and URL-encoded) masked."""
        for form in {self._secret, urllib.parse.quote_plus(self._secret)}:
            text = text.replace(form, MASK)
        return text

    def __repr__(self) -> str:
        return (
            f"OAuthClientCredentialsProvider({self._shown_url!r}, client_id="
            f"{self._client_id!r}, client_secret={MASK}, scope={self._scope!r})"
        )
