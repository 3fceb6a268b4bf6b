"""Header versions and whole-frame helpers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError
from aiostream_kafka.protocol.framing import FrameDecoder
from aiostream_kafka.protocol.headers import (
    decode_request,
    decode_response,
    decode_response_header,
    encode_request,
    encode_response,
    peek_correlation_id,
    request_header_version,
    response_header_version,
)
from aiostream_kafka.protocol.messages import (
    API_KEYS,
    FetchRequest,
    MetadataRequest,
    MetadataResponse,
    SaslHandshakeRequest,
)


def test_header_versions() -> None:
    assert request_header_version(3, 8) == 1  # Metadata v8 is not flexible
    assert request_header_version(3, 9) == 2
    assert response_header_version(3, 8) == 0
    assert response_header_version(3, 9) == 1
    assert response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert request_header_version(18, 3) == 2
    assert request_header_version(17, 1) == 1  # SaslHandshake is never flexible
    for request_type, response_type in API_KEYS.values():
        for version in range(request_type.MIN_VERSION, request_type.MAX_VERSION + 1):
            flexible = request_type.is_flexible(version)
            assert request_type.header_version(version) == (2 if flexible else 1)
            if request_type.API_KEY != 18:
                assert response_type.header_version(version) == (1 if flexible else 0)


def test_request_frame_round_trip() -> None:
    request = FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, session_epoch=-1)
    for version in (4, 11, 12, 18):
        frame = encode_request(request, version, correlation_id=77, client_id="me")
        (payload,) = FrameDecoder().feed(frame)
        header, decoded = decode_request(payload)
        assert (header.request_api_key, header.request_api_version) == (1, version)
        assert (header.correlation_id, header.client_id) == (77, "me")
        assert decoded == request


def test_response_frame_round_trip() -> None:
    response = MetadataResponse(
        cluster_id="c",
        controller_id=1,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
    )
    for version in (0, 8, 9, 13):
        frame = encode_response(response, version, correlation_id=5)
        (payload,) = FrameDecoder().feed(frame)
        assert peek_correlation_id(payload) == 5
        header, offset = decode_response_header(payload, response.header_version(version))
        assert header.correlation_id == 5
        correlation_id, decoded = decode_response(3, version, payload)
        assert correlation_id == 5
        expected = MetadataResponse.decode(payload[offset:], version)
        assert decoded == expected


def test_response_errors() -> None:
    frame = encode_response(MetadataResponse(), 9, correlation_id=1)[4:]
    with pytest.raises(ProtocolError, match="trailing"):
        decode_response(3, 9, frame + b"\x00")
    with pytest.raises(ProtocolError):
        decode_response(3, 9, frame[:-1])
    with pytest.raises(ProtocolError):
        peek_correlation_id(b"\x00\x01")
    with pytest.raises(UnsupportedVersionError, match="API key 4 "):
        decode_response(4, 0, frame)  # LeaderAndIsr was removed in Kafka 4.0


def test_request_errors() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_request(MetadataRequest(), 14, 1, None)
    with pytest.raises(ValueError, match="correlation id"):
        encode_request(MetadataRequest(), 1, 1 << 40, None)
    with pytest.raises(ProtocolError):
        decode_request(b"\x00\x03")
    with pytest.raises(UnsupportedVersionError):
        decode_request(b"\x00\x03\x00\x63\x00\x00\x00\x01\xff\xff")
    frame = encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 3, "c")
    _header, request = decode_request(frame[4:])
    assert request == SaslHandshakeRequest(mechanism="PLAIN")


API_VERSION_PAIRS = [
    (api_key, version)
    for api_key, (request_type, _response_type) in sorted(API_KEYS.items())
    for version in range(request_type.MIN_VERSION, request_type.MAX_VERSION + 1)
]


@settings(max_examples=300, deadline=None)
@given(pair=st.sampled_from(API_VERSION_PAIRS), frame=st.binary(max_size=48))
def test_random_response_frames_raise_only_protocol_error(
    pair: tuple[int, int], frame: bytes
) -> None:
    api_key, version = pair
    try:
        decode_response(api_key, version, frame)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    pair=st.sampled_from(API_VERSION_PAIRS),
    tail=st.binary(max_size=48),
    client_id=st.one_of(st.none(), st.text(max_size=5)),
)
def test_random_request_frames_raise_only_protocol_error(
    pair: tuple[int, int], tail: bytes, client_id: str | None
) -> None:
    api_key, version = pair
    request_type = API_KEYS[api_key][0]
    frame = encode_request(request_type(), version, 1, client_id)[4:]
    for data in (frame[: len(frame) // 2], frame[:8] + tail, frame + tail[:1]):
        try:
            decode_request(data)
        except ProtocolError:
            pass
