"""SaslHandshake (v1: the tokens then travel in SaslAuthenticate) and SaslAuthenticate, on
a SASL_PLAINTEXT listener of the fake (``FakeCluster(sasl_users=...)``). On a plain
listener both are refused as Kafka refuses them there (``ILLEGAL_SASL_STATE``)."""

from __future__ import annotations

from aiostream_kafka.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiostream_kafka.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve


@serve(SaslHandshakeRequest, min_version=1)
async def sasl_handshake(
    ctx: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    sasl = ctx.connection.sasl
    users = ctx.state.sasl_users
    mechanisms = list(users.mechanisms) if users is not None else []
    if sasl is None:
        return SaslHandshakeResponse(error_code=errors.ILLEGAL_SASL_STATE, mechanisms=mechanisms)
    code = sasl.handshake(request.mechanism)
    if code:
        ctx.connection.close_after_response = True
    return SaslHandshakeResponse(error_code=code, mechanisms=mechanisms)


@serve(SaslAuthenticateRequest)
async def sasl_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    sasl = ctx.connection.sasl
    if sasl is None:
        ctx.connection.close_after_response = True
        return SaslAuthenticateResponse(
            error_code=errors.ILLEGAL_SASL_STATE,
            error_message="SASL is not enabled on this listener",
        )
    result = sasl.authenticate(bytes(request.auth_bytes))
    if result.close:
        ctx.connection.close_after_response = True
    return SaslAuthenticateResponse(
        error_code=result.error_code,
        error_message=result.message,
        auth_bytes=result.auth_bytes,
        session_lifetime_ms=0,
    )
