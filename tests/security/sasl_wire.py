"""A minimal SASL client connection for tests: SaslHandshake v1 then SaslAuthenticate v2
round trips (KIP-152) driven by a mechanism of ``aiostream_kafka.security``, over a bare
asyncio stream, without the library's connection layer. It proves the mechanisms against
the real broker until the connection layer drives them."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.protocol.error_codes import raise_for_code
from aiostream_kafka.protocol.framing import FrameDecoder
from aiostream_kafka.protocol.headers import decode_response, encode_request
from aiostream_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiostream_kafka.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiostream_kafka.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiostream_kafka.security import SaslExchange, SaslMechanism


@dataclass
class Session:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    decoder: FrameDecoder
    correlation_id: int = 0
    session_lifetime_ms: int = 0
    round_trips: int = 0

    async def request(self, request: Request, version: int) -> Response:
        self.correlation_id += 1
        self.writer.write(encode_request(request, version, self.correlation_id, "sasl-test"))
        await self.writer.drain()
        while True:
            data = await asyncio.wait_for(self.reader.read(65536), 20)
            if not data:
                raise ConnectionError("the broker closed the connection")
            frames = self.decoder.feed(data)
            if frames:
                assert len(frames) == 1
                correlation_id, response = decode_response(request.API_KEY, version, frames[0])
                assert correlation_id == self.correlation_id
                return response

    async def authenticate(self, mechanism: SaslMechanism) -> SaslExchange:
        """One whole authentication (also a KIP-368 re-authentication on this connection)."""
        exchange = await mechanism.begin()
        handshake = await self.request(SaslHandshakeRequest(mechanism=mechanism.name), 1)
        assert isinstance(handshake, SaslHandshakeResponse)
        raise_for_code(handshake.error_code, f"mechanisms offered: {handshake.mechanisms}")
        auth_bytes: bytes | None = exchange.start()
        while auth_bytes is not None:
            response = await self.request(SaslAuthenticateRequest(auth_bytes=auth_bytes), 2)
            assert isinstance(response, SaslAuthenticateResponse)
            self.round_trips += 1
            raise_for_code(response.error_code, response.error_message)
            self.session_lifetime_ms = response.session_lifetime_ms
            auth_bytes = exchange.step(bytes(response.auth_bytes))
        assert exchange.done
        return exchange

    async def topic_error(self, topic: str) -> int:
        """The error code Metadata gives this principal for ``topic``."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
        )
        response = await self.request(request, 12)
        assert isinstance(response, MetadataResponse)
        return response.topics[0].error_code

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def connect(bootstrap: str, ssl_context: ssl.SSLContext | None = None) -> Session:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    reader, writer = await asyncio.open_connection(
        host, int(port), ssl=ssl_context, server_hostname=host if ssl_context else None
    )
    return Session(reader, writer, FrameDecoder())
