"""``BrokerConnection``: one socket to one broker, requests pipelined over it.

One reader task owns the read side of the socket. A caller of :meth:`request` encodes its
request, registers a future under a fresh correlation id, writes the frame (awaiting
``drain()``, so a slow broker pushes back on writers) and awaits the future; the reader
task splits the byte stream into frames and completes the future whose correlation id a
frame carries. Many requests are in flight at once, up to ``max_in_flight``.

Why the pieces are the way they are:

* The broker answers the requests of one connection one at a time, in order, so a
  response that does not match the oldest outstanding correlation id means the stream is
  out of step: the connection is failed as a whole (``ProtocolError``).
* A cancelled caller gives up only its own future. The response still arrives (the broker
  has the request) and the reader drops it; the in-flight slot is freed only then, so the
  bound counts what the broker really holds.
* A request that times out leaves the connection with an answer owed that may never come,
  and every request behind it waits on it; like Kafka's Java client, the connection is
  closed, failing the others with a retriable :class:`NetworkError`.
* The deadline covers the write too: a broker that stops reading fills the kernel buffers,
  then ``drain()`` waits. A failed or timed-out connection is *aborted* (RST, buffered bytes
  dropped), never closed gracefully, which would wait for the peer to read them: that wait
  is the kernel's TCP give-up, minutes long.
* Connecting tries every address a name resolves to, staggered (happy eyeballs, RFC 8305,
  asyncio's own implementation: it keeps the asyncio streams this module is built on), so
  one blackholed address does not eat the whole connect timeout.
* Responses are decoded by the caller, not by the reader: a cancelled caller costs no
  decoding, and a malformed body fails only its own request.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import ssl as ssl_module
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    ProtocolError,
    TLSHandshakeError,
    UnsupportedVersionError,
)
from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.error_codes import error_from_code
from aiostream_kafka.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from aiostream_kafka.protocol.headers import decode_response, encode_request, peek_correlation_id
from aiostream_kafka.protocol.messages import API_NAMES
from aiostream_kafka.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiostream_kafka.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiostream_kafka.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiostream_kafka.protocol.versions import ApiVersionTable

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Response)

_UNSUPPORTED_VERSION = 35
_UNSUPPORTED_SASL_MECHANISM = 33
_READ_CHUNK = 256 * 1024
_STREAM_LIMIT = 1024 * 1024
# RFC 8305's recommended delay before the next address is tried in parallel.
_HAPPY_EYEBALLS_DELAY_S = 0.25
# How long a graceful close may take to flush what was written before the socket is
# aborted instead.
_CLOSE_FLUSH_S = 1.0


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """What every connection of a client shares. Validated by the client's config."""

    client_id: str = "aiostream-kafka"
    request_timeout_ms: int = 30_000
    connect_timeout_ms: int = 10_000
    max_in_flight: int = 100
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ssl_context: ssl_module.SSLContext | None = None
    # A SaslMechanism (aiostream_kafka.security) for SASL_PLAINTEXT / SASL_SSL, else None.
    sasl: Any = field(default=None, repr=False)
    client_software_name: str = "aiostream-kafka"
    client_software_version: str = "0.1.0.dev0"


class _Pending:
    __slots__ = ("api_key", "future", "version")

    def __init__(self, api_key: int, version: int, future: asyncio.Future[bytes]) -> None:
        self.api_key = api_key
        self.version = version
        self.future = future


class BrokerConnection:
    """A connection to the broker at ``host:port``; create with :meth:`open`.

    ``node_id`` is the broker's id when known (None for a bootstrap address), used in
    messages. The connection is not re-opened when lost: it fails every request with a
    retriable :class:`NetworkError` and reports ``closed``; the pool opens a new one.
    """

    def __init__(
        self, host: str, port: int, settings: ConnectionSettings, node_id: int | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        self.settings = settings
        self.api_versions: ApiVersionTable | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        # The reader and re-authentication tasks; a crash (a bug) fails the connection.
        self._scope = TaskScope(f"connection {self.description}", on_fail=self._crashed)
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._correlation_ids = itertools.count(1)
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._closed: KafkaError | None = None
        # monotonic time of the last request (the pool closes connections idle too long)
        self.last_used = time.monotonic()
        # KIP-368: when to re-authenticate (monotonic), the task doing it, and the gate that
        # holds new requests while it runs (the broker takes only SASL requests then).
        self._reauth_at: float | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self._gate: asyncio.Event | None = None
        self.reauthentications = 0

    def __repr__(self) -> str:
        node = f" node {self.node_id}" if self.node_id is not None else ""
        state = "closed" if self._closed else "open"
        return f"<BrokerConnection{node} {self.host}:{self.port} {state}>"

    @property
    def description(self) -> str:
        """``"broker 2 (127.0.0.1:9092)"`` or ``"127.0.0.1:9092"`` for messages."""
        if self.node_id is not None and self.node_id >= 0:
            return f"broker {self.node_id} ({self.host}:{self.port})"
        return f"{self.host}:{self.port}"

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; it takes no more requests."""
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests written whose response has not been read yet."""
        return len(self._pending)

    @property
    def finished(self) -> bool:
        """True once the connection is closed and its reader task has ended: nothing of it
        is left to await."""
        task = self._reader_task
        return self._closed is not None and (task is None or task.done())

    @classmethod
    async def open(
        cls, host: str, port: int, settings: ConnectionSettings, node_id: int | None = None
    ) -> BrokerConnection:
        """Connect, start the reader task and negotiate API versions (ApiVersions).

        Raises:
            NetworkError: the broker cannot be reached or the connection drops.
            KafkaTimeoutError: connecting took longer than ``connect_timeout_ms``.
            UnsupportedVersionError: the broker shares no ApiVersions version with us.
            SaslAuthenticationFailedError: wrong credentials (not retriable).
            UnsupportedSaslMechanismError: the broker does not enable ``sasl_mechanism``; the
                message lists the ones it does.
        """
        conn = cls(host, port, settings, node_id)
        try:
            await conn._connect()
            await conn._negotiate()
            if settings.sasl is not None:
                await conn._authenticate()
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _connect(self) -> None:
        timeout_s = self.settings.connect_timeout_ms / 1000
        ctx = self.settings.ssl_context
        try:
            async with asyncio.timeout(timeout_s):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=ctx,
                    server_hostname=self.host if ctx is not None else None,
                    limit=_STREAM_LIMIT,
                    happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY_S,
                    interleave=1,
                )
        except TimeoutError:
            raise KafkaTimeoutError(
                f"connecting to {self.description} took longer than "
                f"connect_timeout_ms={self.settings.connect_timeout_ms}"
            ) from None
        except ssl_module.SSLError as exc:
            raise TLSHandshakeError(
                f"TLS handshake with {self.description} failed: {exc}. Check that the "
                "ssl_context trusts the broker's certificate and that the host name matches."
            ) from exc
        except OSError as exc:
            hint = ""
            if ctx is not None and not isinstance(exc, ConnectionRefusedError):
                hint = (
                    " (the connection dropped during the TLS handshake: is this port a TLS "
                    "listener? security_protocol='SSL' needs the broker's SSL listener)"
                )
            raise NetworkError(
                f"cannot connect to {self.description}: {exc or type(exc).__name__}{hint}"
            ) from exc
        self._reader_task = self._scope.spawn(
            self._read_loop(),
            name=f"aiostream-kafka reader {self.host}:{self.port}",
            crash=Crash.FAIL_OWNER,
        )

    async def _negotiate(self) -> None:
        version = ApiVersionsRequest.MAX_STABLE_VERSION
        request = ApiVersionsRequest(
            client_software_name=self.settings.client_software_name,
            client_software_version=self.settings.client_software_version,
        )
        for _ in range(2):
            response = await self.request(request, version=version)
            assert isinstance(response, ApiVersionsResponse)
            if response.error_code == _UNSUPPORTED_VERSION:
                # KIP-511: the broker answers with its own ApiVersions range; retry within it.
                broker_range = next(
                    (a for a in response.api_keys if a.api_key == ApiVersionsRequest.API_KEY), None
                )
                if broker_range is None:
                    break
                version = min(version, broker_range.max_version)
                continue
            if response.error_code != 0:
                raise error_from_code(response.error_code, f"ApiVersions to {self.description}")
            self.api_versions = ApiVersionTable.from_response(response)
            return
        raise UnsupportedVersionError(
            f"{self.description} supports no ApiVersions version this client speaks"
        )

    async def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate round trips (KIP-152), as the mechanism
        says. Schedules the KIP-368 re-authentication when the broker gives the session a
        lifetime. Never logs the exchanged bytes: they hold the credentials."""
        mechanism = self.settings.sasl
        exchange = await mechanism.begin()
        name = mechanism.name
        handshake = await self.request(
            SaslHandshakeRequest(mechanism=name), version=1, _authenticating=True
        )
        assert isinstance(handshake, SaslHandshakeResponse)
        if handshake.error_code == _UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(handshake.mechanisms) or "none"
            raise error_from_code(
                handshake.error_code,
                f"{self.description} does not enable SASL mechanism {name} on this listener; "
                f"it enables: {enabled}. Set sasl_mechanism to one of those.",
            )
        if handshake.error_code:
            raise error_from_code(handshake.error_code, f"SaslHandshake with {self.description}")
        auth_bytes: bytes | None = exchange.start()
        response: SaslAuthenticateResponse | None = None
        while auth_bytes is not None:
            answer = await self.request(
                SaslAuthenticateRequest(auth_bytes=auth_bytes), _authenticating=True
            )
            assert isinstance(answer, SaslAuthenticateResponse)
            response = answer
            if answer.error_code:
                detail = answer.error_message or "no detail given"
                raise error_from_code(
                    answer.error_code,
                    f"SASL {name} authentication with {self.description} failed: {detail}. "
                    "Check the credentials (and the broker's users / ACLs for them).",
                )
            auth_bytes = exchange.step(answer.auth_bytes)
        lifetime_ms = response.session_lifetime_ms if response is not None else 0
        if lifetime_ms > 0:
            # KIP-368: re-authenticate well before the broker ends the session, at a random
            # point between 85% and 95% of its lifetime (as the Java client), so that many
            # connections do not re-authenticate in step.
            delay_s = lifetime_ms / 1000 * random.uniform(0.85, 0.95)
            self._reauth_at = time.monotonic() + delay_s
        else:
            self._reauth_at = None
        log.debug("%s: authenticated with SASL %s (session lifetime %d ms)", self, name,
                  lifetime_ms)  # fmt: skip

    def _start_reauthentication(self) -> None:
        self._reauth_at = None
        self._gate = asyncio.Event()
        self._reauth_task = self._scope.spawn(
            self._reauthenticate(),
            name=f"aiostream-kafka re-authentication {self}",
            crash=Crash.FAIL_OWNER,
        )

    async def _reauthenticate(self) -> None:
        gate = self._gate
        try:
            await self._authenticate()
            self.reauthentications += 1
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            log.warning("%s: re-authentication failed: %s", self, exc)
            self._fail(exc if isinstance(exc, NetworkError) else _as_network_error(exc, self))
        finally:  # a bug (the scope's _crashed) leaves no request held at the gate either
            self._gate = None
            if gate is not None:
                gate.set()

    def version_for(self, request_type: type[Request]) -> int:
        """Return the negotiated version of ``request_type`` for this broker.

        Raises :class:`UnsupportedVersionError` naming the API and both version ranges.
        """
        if self.api_versions is None:
            return request_type.MIN_VERSION
        return self.api_versions.version_for(request_type.API_KEY)

    async def request(
        self,
        request: Request,
        *,
        version: int | None = None,
        timeout_ms: float | None = None,
        expect_response: bool = True,
        _authenticating: bool = False,
    ) -> Response:
        """Send ``request`` and return the broker's response, decoded.

        ``version`` defaults to the negotiated one. ``timeout_ms`` (default
        ``request_timeout_ms``) bounds the wait for the response; when it passes the
        connection is closed. With ``expect_response=False`` (Produce with acks=0) it
        returns as soon as the request is written, with ``None`` typed as a response.

        Raises:
            NetworkError: the connection is closed or was lost (retriable).
            KafkaTimeoutError: no response within the timeout (retriable).
            ProtocolError: the response does not decode.
            UnsupportedVersionError: no common version of this API with the broker.
        """
        if self._closed is not None:
            raise NetworkError(f"connection to {self.description} is closed: {self._closed}")
        if version is None:
            version = self.version_for(type(request))
        api_key = request.API_KEY
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        frame = encode_request(request, version, correlation_id, self.settings.client_id)
        if len(frame) - 4 > self.settings.max_frame_bytes:
            raise ProtocolError(
                f"{API_NAMES.get(api_key, api_key)} request of {len(frame) - 4} bytes exceeds "
                f"max_frame_bytes={self.settings.max_frame_bytes}"
            )
        timeout_s = (
            timeout_ms if timeout_ms is not None else self.settings.request_timeout_ms
        ) / 1000
        if _authenticating or (
            self._gate is None
            and (self._reauth_at is None or time.monotonic() < self._reauth_at)
            and not self._slots.locked()
        ):
            await self._slots.acquire()  # free: no wait
        else:
            await self._wait_to_send(api_key, timeout_s)
        if self._closed is not None:  # closed while we waited for a slot
            self._slots.release()
            raise NetworkError(f"connection to {self.description} is closed: {self._closed}")
        future: asyncio.Future[bytes] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = _Pending(api_key, version, future)
        else:
            self._slots.release()
        self.last_used = time.monotonic()
        writer = self._writer
        assert writer is not None
        # One deadline for writing and for the answer: a broker that stopped reading
        # blocks drain() just as one that stopped answering blocks the future.
        writing = True
        try:
            async with asyncio.timeout(timeout_s):
                writer.write(frame)
                await writer.drain()
                writing = False
                if future is None:
                    return None  # type: ignore[return-value]  # documented: no answer for acks=0
                payload = await future
        except TimeoutError:
            _give_up(future)
            name = API_NAMES.get(api_key, str(api_key))
            what = "could not be written" if writing else "got no response"
            timeout_error = KafkaTimeoutError(
                f"{name} request to {self.description} {what} within "
                f"{timeout_s * 1000:.0f} ms; the connection is aborted"
            )
            self._fail(NetworkError(f"a {name} request timed out on this connection"))
            raise timeout_error from None
        except (OSError, RuntimeError) as exc:
            _give_up(future)
            error = NetworkError(f"writing to {self.description} failed: {exc}")
            self._fail(error)
            raise error from exc
        finally:
            _give_up(future)
        return decode_response(api_key, version, payload)[1]

    async def _wait_to_send(self, api_key: int, timeout_s: float) -> None:
        """Wait at the re-authentication gate (starting re-authentication when it is due),
        then for an in-flight slot, both bounded by the request's timeout (the answer then
        gets a timeout of its own). Such a wait says nothing about the connection, which
        stays open.

        Raises:
            KafkaTimeoutError: still waiting after ``timeout_s``.
            NetworkError: the connection closed meanwhile.
        """
        waiting_for = "re-authentication"
        try:
            async with asyncio.timeout(timeout_s):
                if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
                    self._start_reauthentication()
                while self._gate is not None:  # held while the connection re-authenticates
                    await self._gate.wait()
                    if self._closed is not None:
                        raise NetworkError(
                            f"connection to {self.description} is closed: {self._closed}"
                        )
                waiting_for = f"a free in-flight slot (max_in_flight={self.settings.max_in_flight})"
                await self._slots.acquire()
        except TimeoutError:
            raise KafkaTimeoutError(
                f"{API_NAMES.get(api_key, api_key)} request to {self.description} waited "
                f"{timeout_s * 1000:.0f} ms for {waiting_for} without being sent"
            ) from None

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        decoder = FrameDecoder(self.settings.max_frame_bytes)
        try:
            while True:
                data = await reader.read(_READ_CHUNK)
                if not data:
                    raise NetworkError(f"{self.description} closed the connection")
                for frame in decoder.feed(data):
                    self._dispatch(frame)
        except asyncio.CancelledError:
            self._fail(NetworkError("connection closed by the client"))
            raise
        except KafkaError as exc:
            self._fail(exc if isinstance(exc, NetworkError) else _as_network_error(exc, self))
        except OSError as exc:
            self._fail(NetworkError(f"connection to {self.description} lost: {exc}"))

    def _crashed(self, exc: Exception) -> None:
        """The reader or the re-authentication task crashed (a bug): fail the requests
        rather than leave them hanging."""
        self._fail(_as_network_error(KafkaError(repr(exc)), self))

    def _dispatch(self, frame: bytes) -> None:
        correlation_id = peek_correlation_id(frame)
        oldest = next(iter(self._pending), None)
        if correlation_id != oldest:
            raise ProtocolError(
                f"{self.description} answered correlation id {correlation_id}, expected {oldest}"
            )
        pending = self._pending.pop(correlation_id)
        self._slots.release()
        if not pending.future.done():  # else its caller was cancelled: drop the response
            pending.future.set_result(frame)

    def _fail(self, error: KafkaError, *, graceful: bool = False) -> None:
        """Mark the connection dead and fail every in-flight request with ``error``.

        The socket is aborted (buffered bytes dropped) unless ``graceful``: then it is
        closed after what was written is flushed (:meth:`close` bounds that wait).
        """
        if self._closed is None:
            self._closed = error
            if self._pending:
                log.info("%s: failing %d in-flight request(s): %s", self, len(self._pending), error)
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._slots.release()
            if not entry.future.done():
                entry.future.set_exception(error)
        if self._writer is not None:
            # The reader task sees the end of the stream and returns by itself; close()
            # awaits it.
            transport = self._writer.transport
            if graceful:
                transport.close()
            else:
                transport.abort()

    def abandon(self, error: KafkaError) -> None:
        """Close without waiting: fail what is in flight with ``error`` and close the socket
        once what was written is flushed; the reader task ends by itself (``finished``)."""
        self._fail(error, graceful=True)

    async def close(self) -> None:
        """Close the connection; in-flight requests fail with :class:`NetworkError`.

        What was written is flushed for at most a second, then the socket is aborted, so
        close is bounded even when the broker stopped reading. Cancelling ``close`` still
        ends the reader task (then re-raises)."""
        self._fail(
            NetworkError(f"connection to {self.description} closed by the client"), graceful=True
        )
        writer, flushed = self._writer, False
        try:
            if writer is not None:
                try:
                    async with asyncio.timeout(_CLOSE_FLUSH_S):
                        await writer.wait_closed()
                    flushed = True
                except (TimeoutError, OSError, ssl_module.SSLError):
                    pass
        finally:
            if writer is not None and not flushed:
                writer.transport.abort()
            self._reader_task = self._reauth_task = None
            await self._scope.aclose()


def _give_up(future: asyncio.Future[bytes] | None) -> None:
    """The caller no longer waits for ``future``: cancel it, so that whatever would complete
    it later (the answer, or the connection failing) leaves no unretrieved exception."""
    if future is not None and not future.done():
        future.cancel()


def _as_network_error(exc: KafkaError, conn: BrokerConnection) -> NetworkError:
    error = NetworkError(f"connection to {conn.description} failed: {exc}")
    error.__cause__ = exc
    return error
