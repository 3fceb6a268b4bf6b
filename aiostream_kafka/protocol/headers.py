"""Request and response headers, and whole-message encode/decode helpers.

On the wire every request and response is a frame: a 4-byte big-endian size, then a
header, then the body. Which header version goes with which message is fixed by the
API and its version (``ApiKeys.java`` in Kafka):

* request header v1 for non-flexible versions, v2 (adds a tagged-field section) for
  flexible ones -- v0 was removed in Kafka 4.0. ``client_id`` is an int16-length
  string in both, so that any broker can read the header of an ApiVersions request;
* response header v0 for non-flexible versions, v1 for flexible ones, except the
  ApiVersions response, which always uses v0 (KIP-511).

The helpers here build a complete frame (size prefix included) from a request, and take
apart a response frame *without* its size prefix -- what
:class:`~aiostream_kafka.protocol.framing.FrameDecoder` yields.
"""

from __future__ import annotations

import struct

from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError
from aiostream_kafka.protocol.base import API_VERSIONS_API_KEY, Request, Response
from aiostream_kafka.protocol.messages import API_KEYS, API_NAMES
from aiostream_kafka.protocol.messages.request_header import RequestHeader
from aiostream_kafka.protocol.messages.response_header import ResponseHeader
from aiostream_kafka.protocol.primitives import INT16, INT32, write_nullable_string

__all__ = [
    "RequestHeader",
    "ResponseHeader",
    "decode_request",
    "decode_response",
    "decode_response_header",
    "encode_request",
    "encode_response",
    "peek_correlation_id",
    "request_header_version",
    "response_header_version",
]

_UNSUPPORTED_VERSION = 35
# api key, api version, correlation id: the start of every request header
_REQUEST_HEADER_START = struct.Struct(">hhi")
_SIZE_PLACEHOLDER = b"\0\0\0\0"


def _no_such_version(message_type: type[Request], version: int) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"{message_type.__name__} has no version {version} (this client knows versions "
        f"{message_type.MIN_VERSION}-{message_type.MAX_VERSION})"
    )


def _api(api_key: int) -> tuple[type[Request], type[Response]]:
    try:
        return API_KEYS[api_key]
    except KeyError:
        raise UnsupportedVersionError(f"API key {api_key} is not known to this client") from None


def request_header_version(api_key: int, api_version: int) -> int:
    """Return the request header version (1 or 2) for ``api_version`` of ``api_key``."""
    return _api(api_key)[0].header_version(api_version)


def response_header_version(api_key: int, api_version: int) -> int:
    """Return the response header version (0 or 1) for ``api_version`` of ``api_key``."""
    return _api(api_key)[1].header_version(api_version)


def encode_request(
    request: Request, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Return the frame of ``request`` in ``version``: size prefix, header and body.

    Raises :class:`UnsupportedVersionError` if the request has no such version or holds a
    value that ``version`` cannot carry, and :class:`ValueError` for an invalid value.
    """
    if not request.supports_version(version):
        raise _no_such_version(type(request), version)
    out = bytearray(_SIZE_PLACEHOLDER)
    try:
        out += _REQUEST_HEADER_START.pack(request.API_KEY, version, correlation_id)
    except struct.error:
        raise ValueError(f"correlation id {correlation_id} is not an int32") from None
    write_nullable_string(out, client_id)
    if request.header_version(version) >= 2:
        out.append(0)  # no tagged fields in the header
    request.encode_into(out, version)
    out[0:4] = INT32.pack(len(out) - 4)
    return bytes(out)


def encode_response(response: Response, version: int, correlation_id: int) -> bytes:
    """Return the frame of ``response`` in ``version``: size prefix, header and body.

    The inverse of :func:`decode_response`, for mock brokers in tests. Raises like
    :func:`encode_request`.
    """
    out = bytearray(_SIZE_PLACEHOLDER)
    try:
        out += INT32.pack(correlation_id)
    except struct.error:
        raise ValueError(f"correlation id {correlation_id} is not an int32") from None
    if response.header_version(version) >= 1:
        out.append(0)
    response.encode_into(out, version)
    out[0:4] = INT32.pack(len(out) - 4)
    return bytes(out)


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """Return the correlation id at the start of a response frame (size prefix removed).

    A connection reads it to find which request a response answers -- and so the API key
    and version needed to decode the rest. Raises :class:`ProtocolError` if the frame is
    shorter than 4 bytes.
    """
    if len(frame) < 4:
        raise ProtocolError(f"response frame of {len(frame)} bytes has no correlation id")
    correlation_id: int = INT32.unpack_from(frame, 0)[0]
    return correlation_id


def decode_response_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[ResponseHeader, int]:
    """Decode the response header at the start of ``frame``; return it and the body offset."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    return ResponseHeader.decode_from(view, 0, header_version)


def decode_response(
    api_key: int, version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Response]:
    """Decode a response frame (size prefix removed) to ``(correlation_id, response)``.

    ``api_key`` and ``version`` are those of the request it answers. Record fields of the
    response are memoryviews into ``frame``. A broker that does not support the version
    of an ApiVersions request answers with an ApiVersions v0 body (KIP-511); that body is
    decoded as v0, as Kafka's Java client does.

    Raises :class:`ProtocolError` if the frame is malformed or has trailing bytes, and
    :class:`UnsupportedVersionError` if this client has no such API or version.
    """
    response_type = _api(api_key)[1]
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    header, pos = ResponseHeader.decode_from(view, 0, response_type.header_version(version))
    if api_key == API_VERSIONS_API_KEY and version > 0:
        return header.correlation_id, _decode_api_versions(response_type, view, pos, version)
    return header.correlation_id, _decode_body(response_type, view, pos, version)


def _decode_body(
    response_type: type[Response], view: memoryview, pos: int, version: int
) -> Response:
    response, end = response_type.decode_from(view, pos, version)
    if end != len(view):
        name = API_NAMES.get(response_type.API_KEY, str(response_type.API_KEY))
        raise ProtocolError(f"{len(view) - end} trailing bytes after {name} response v{version}")
    return response


def _decode_api_versions(
    response_type: type[Response], view: memoryview, pos: int, version: int
) -> Response:
    # The error code leads the body in every version.
    if len(view) - pos >= 2 and INT16.unpack_from(view, pos)[0] == _UNSUPPORTED_VERSION:
        return _decode_body(response_type, view, pos, 0)
    try:
        return _decode_body(response_type, view, pos, version)
    except ProtocolError:
        return _decode_body(response_type, view, pos, 0)


def decode_request(
    frame: bytes | bytearray | memoryview,
) -> tuple[RequestHeader, Request]:
    """Decode a request frame (size prefix removed) to ``(header, request)``.

    The inverse of :func:`encode_request`, for mock brokers in tests. Raises
    :class:`ProtocolError` for a malformed frame and :class:`UnsupportedVersionError` for
    an API key or version this client does not know.
    """
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(view) < _REQUEST_HEADER_START.size:
        raise ProtocolError(f"request frame of {len(view)} bytes is shorter than a header")
    api_key, version, _ = _REQUEST_HEADER_START.unpack_from(view, 0)
    request_type = _api(api_key)[0]
    if not request_type.supports_version(version):
        raise _no_such_version(request_type, version)
    header, pos = RequestHeader.decode_from(view, 0, request_type.header_version(version))
    request, end = request_type.decode_from(view, pos, version)
    if end != len(view):
        raise ProtocolError(f"{len(view) - end} trailing bytes after {request_type.__name__}")
    return header, request
