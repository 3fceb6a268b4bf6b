"""One fake broker's listener: an asyncio server on a loopback port, a task per
connection.

A connection's task reads frames (the project's :class:`FrameDecoder`, bounded by
``max_frame_bytes``), decodes each request with the generated codec
(:func:`decode_request`), runs its handler and writes the encoded response before it
reads the next request: like Kafka, which mutes a connection while one of its requests is
being served, answers go out in order and a long-polling Fetch holds up what follows it.

What cannot be served:

* bytes that are not a frame or a request (a bad size, an unknown API key or version, a
  malformed body): that connection is closed and the event logged; the others go on;
* ApiVersions in a version the codec lacks: a v0 answer with ``UNSUPPORTED_VERSION`` and
  the served ranges (KIP-511), so the client retries in one of them;
* an API the fake does not serve (never advertised): ``UNSUPPORTED_VERSION`` in the
  response's top-level error code where it has one, else the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import traceback
from typing import Any

from aiostream_kafka.concurrency import Crash, TaskScope
from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError
from aiostream_kafka.protocol.base import API_VERSIONS_API_KEY, Message, Response
from aiostream_kafka.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from aiostream_kafka.protocol.headers import decode_request, encode_response
from aiostream_kafka.protocol.messages import API_KEYS, API_NAMES
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import (
    PLAINTEXT,
    SASL_PLAINTEXT,
    Connection,
    RequestContext,
)
from aiostream_kafka.testing.fake.handlers import REGISTRY, api_versions_response, error_response
from aiostream_kafka.testing.fake.sasl import SaslServer
from aiostream_kafka.testing.fake.state import BrokerInfo, ClusterState, HandlerCrash

log = logging.getLogger(__name__)

__all__ = ["BrokerServer"]

_CHUNK = 256 * 1024
#: What a SASL listener serves before the client authenticated: ApiVersions,
#: SaslHandshake, SaslAuthenticate.
_PRE_AUTH = frozenset({18, 17, 36})
_HEADER_START = struct.Struct(">hhi")
#: How long a response may wait for the client to read it.
WRITE_TIMEOUT_S = 30.0


class _Close(Exception):
    """The connection must be closed (the reason is logged where raised)."""


class BrokerServer:
    """The listener of one broker of a fake cluster, on its event loop."""

    def __init__(
        self,
        state: ClusterState,
        broker: BrokerInfo,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        listener: str = PLAINTEXT,
    ) -> None:
        self.state = state
        self.broker = broker
        #: ``PLAINTEXT``, or ``SASL_PLAINTEXT`` (clients authenticate first).
        self.listener = listener
        self.max_frame_bytes = max_frame_bytes
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._scope = TaskScope(f"fake broker {broker.node_id}")
        #: Connections accepted since the cluster started.
        self.connections_accepted = 0

    @property
    def serving(self) -> bool:
        """Whether the listener is open."""
        return self._server is not None

    @property
    def open_connections(self) -> int:
        """Client connections open now."""
        return len(self._writers)

    async def start(self) -> None:
        """Listen on the broker's port (a free one the first time; the same one after a
        restart, so that clients' metadata stays right).

        Raises:
            OSError: the port cannot be bound.
        """
        if self._server is not None:
            return
        if self._scope.closed:
            self._scope = TaskScope(f"fake broker {self.broker.node_id}")
        sasl = self.listener == SASL_PLAINTEXT
        port = self.broker.sasl_port if sasl else self.broker.port
        self._server = await asyncio.start_server(
            self._accept, self.broker.host, port, reuse_address=True
        )
        bound = self._server.sockets[0].getsockname()[1]
        if sasl:
            self.broker.sasl_port = bound
        else:
            self.broker.port = bound

    async def stop(self) -> None:
        """Close the listener and every connection (their requests in progress are
        cancelled); wait for the connection tasks, bounded."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.drop_connections()
        await self._scope.aclose()

    def stop_now(self) -> None:
        """Close the listener and abort the connections without waiting (no loop needed
        to be running afterwards)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.drop_connections()

    def drop_connections(self) -> int:
        """Reset every open connection (RST); return how many there were."""
        writers = list(self._writers)
        for writer in writers:
            if not writer.transport.is_closing():
                writer.transport.abort()
        return len(writers)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._scope.closed:
            writer.transport.abort()
            return
        self.connections_accepted += 1
        self._scope.spawn(
            self._serve(reader, writer),
            name=f"fake broker {self.broker.node_id} connection",
            crash=Crash.LOG,
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/127.0.0.1"
        decoder = FrameDecoder(self.max_frame_bytes)
        users = self.state.sasl_users
        conn = Connection(
            self.listener,
            SaslServer(users) if self.listener == SASL_PLAINTEXT and users is not None else None,
        )
        self._writers.add(writer)
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    return
                try:
                    frames = decoder.feed(data)
                except ProtocolError as exc:
                    log.info("fake broker %d: closing %s: %s", self.broker.node_id, peer, exc)
                    return
                for frame in frames:
                    out = await self._answer(frame, client_host, conn)
                    if out:
                        writer.write(out)
                        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT_S)
                    if conn.close_after_response:
                        return
        except _Close:
            return
        except (ConnectionError, TimeoutError) as exc:
            log.debug("fake broker %d: connection %s ended: %r", self.broker.node_id, peer, exc)
        finally:
            self._writers.discard(writer)
            for hook in list(conn.on_close):
                hook()
            if not writer.transport.is_closing():
                writer.transport.abort()

    async def _answer(self, frame: bytes, client_host: str, conn: Connection) -> bytes:
        """The encoded response to one request frame (b"": none is sent).

        Raises _Close when the connection must be closed.
        """
        node_id = self.broker.node_id
        if len(frame) < _HEADER_START.size:
            log.info("fake broker %d: a %d-byte frame is no request", node_id, len(frame))
            raise _Close
        api_key, version, correlation_id = _HEADER_START.unpack_from(frame, 0)
        spec = REGISTRY.get(api_key)
        max_version = -1 if spec is None else self.state.max_version(api_key, spec.max_version)
        if api_key == API_VERSIONS_API_KEY and (
            spec is None or not spec.min_version <= version <= max_version
        ):
            # KIP-511: answered in v0 with the versions served, whatever was asked.
            return encode_response(
                api_versions_response(self.state, errors.UNSUPPORTED_VERSION), 0, correlation_id
            )
        try:
            header, request = decode_request(frame)
        except (ProtocolError, UnsupportedVersionError) as exc:
            log.info(
                "fake broker %d: closing a connection: request %s v%d undecodable: %s",
                node_id,
                API_NAMES.get(api_key, api_key),
                version,
                exc,
            )
            raise _Close from None
        if conn.sasl is not None and not conn.sasl.authenticated and api_key not in _PRE_AUTH:
            log.info(
                "fake broker %d: closing a connection: %s before SASL authentication",
                node_id,
                API_NAMES.get(api_key, api_key),
            )
            raise _Close
        self.state.log_request(
            node_id,
            api_key,
            API_NAMES.get(api_key, str(api_key)),
            version,
            correlation_id,
            header.client_id,
        )
        response: Response | None
        if spec is None or not spec.min_version <= version <= max_version:
            response = _top_level_error(API_KEYS[api_key][1], version, errors.UNSUPPORTED_VERSION)
            if response is None:
                log.info(
                    "fake broker %d: closing a connection: %s v%d is not served",
                    node_id,
                    API_NAMES.get(api_key, api_key),
                    version,
                )
                raise _Close
        else:
            failure = self.state.hooks.take_failure(api_key, node_id)
            if failure is not None:
                response = error_response(spec, request, version, failure)
                if response is None:
                    log.info(
                        "fake broker %d: no error response for %s: closing",
                        node_id,
                        spec.request_type.__name__,
                    )
                    raise _Close
            else:
                ctx = RequestContext(self.state, self.broker, header, version, client_host, conn)
                try:
                    response = await spec.handle(ctx, request)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.state.hooks.crashes.append(
                        HandlerCrash(
                            node_id,
                            spec.request_type.__name__.removesuffix("Request"),
                            version,
                            repr(exc),
                            traceback.format_exc(),
                        )
                    )
                    log.exception(
                        "fake broker %d: the handler of %s v%d failed; closing the connection",
                        node_id,
                        spec.request_type.__name__,
                        version,
                    )
                    raise _Close from None
        delay = self.state.hooks.take_delay(api_key)
        if delay > 0:
            # Real time even under a ManualClock (clock.py): the test awaits the answer.
            await asyncio.sleep(delay)
        if response is None:
            return b""
        return _encode(response, version, correlation_id)


def _top_level_error(response_type: type[Response], version: int, code: int) -> Response | None:
    for info in response_type.FIELDS:
        if info.name == "error_code" and info.versions is not None:
            if info.versions[0] <= version <= info.versions[1]:
                response = response_type()
                response.error_code = code  # type: ignore[attr-defined]
                return response
    return None


def _encode(response: Response, version: int, correlation_id: int) -> bytes:
    try:
        return encode_response(response, version, correlation_id)
    except UnsupportedVersionError:
        # A handler set a field this version lacks: reset such fields to their defaults.
        _fit(response, version)
        return encode_response(response, version, correlation_id)


def _fit(message: Message, version: int) -> None:
    """Reset, recursively, every field of ``message`` that ``version`` does not carry."""
    defaults: Any = None
    for info in message.FIELDS:
        value = getattr(message, info.name)
        if info.versions is None or not info.versions[0] <= version <= info.versions[1]:
            if defaults is None:
                defaults = type(message)()
            setattr(message, info.name, getattr(defaults, info.name))
        elif info.struct is not None and value is not None:
            for item in value if isinstance(value, list) else [value]:
                _fit(item, version)
