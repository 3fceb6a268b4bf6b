"""Decoders fed bad input raise ProtocolError and nothing else, and never hang.

Every (message, version) decoder gets: every truncation of a valid encoding, random
bytes, and valid encodings with bits flipped or bytes overwritten.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_strategies import all_message_versions, case_id, message_strategy

from aiostream_kafka.errors import ProtocolError
from aiostream_kafka.protocol.base import Message
from aiostream_kafka.protocol.messages import (
    FetchResponse,
    MetadataResponse,
    ProduceRequest,
    SaslAuthenticateRequest,
)

CASES = all_message_versions()

FUZZ = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def decode_or_protocol_error(cls: type[Message], data: bytes, version: int) -> Message | None:
    """Decode; return None on ProtocolError. Any other exception fails the test."""
    try:
        return cls.decode(data, version)
    except ProtocolError:
        return None


@pytest.mark.parametrize("case", CASES, ids=case_id)
@FUZZ
@given(data=st.data())
def test_bad_input_raises_only_protocol_error(
    case: tuple[type[Message], int], data: st.DataObject
) -> None:
    cls, version = case
    valid = data.draw(message_strategy(cls, version)).encode(version)

    # Every strict prefix of a valid encoding is invalid: decoding is a deterministic
    # left-to-right parse that would need the missing bytes.
    for cut in range(len(valid)):
        with pytest.raises(ProtocolError):
            cls.decode(valid[:cut], version)

    decode_or_protocol_error(cls, data.draw(st.binary(max_size=64)), version)

    if valid:
        mutated = bytearray(valid)
        for _ in range(data.draw(st.integers(1, 4))):
            index = data.draw(st.integers(0, len(mutated) - 1))
            if data.draw(st.booleans()):
                mutated[index] ^= 1 << data.draw(st.integers(0, 7))
            else:
                mutated[index] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        decode_or_protocol_error(cls, bytes(mutated), version)


@pytest.mark.parametrize(
    ("cls", "version", "data"),
    [
        # int32 bytes length of 2 GiB in a 10-byte buffer
        (SaslAuthenticateRequest, 0, b"\x7f\xff\xff\xff" + b"\x00" * 6),
        # int32 array length of 2**31 - 1 topics
        (ProduceRequest, 3, b"\xff\xff\x00\x01\x00\x00\x00\x10\x7f\xff\xff\xff\x00"),
        # compact array length varint of 2**32 - 1 brokers
        (MetadataResponse, 12, b"\x00\x00\x00\x00\xff\xff\xff\xff\x0f\x00"),
        # compact records length of 2**28 in a Fetch response partition
        (
            FetchResponse,
            12,
            b"\x00" * 10
            + b"\x02\x02a\x02"
            + b"\x00" * 30
            + b"\x00\xff\xff\xff\xff\x80\x80\x80\x80\x01",
        ),
        # negative int16 string length other than -1 in a non-nullable string
        (ProduceRequest, 3, b"\xff\xff\x00\x01\x00\x00\x00\x10\x00\x00\x00\x01\x80\x00"),
        # varint longer than 5 bytes
        (MetadataResponse, 12, b"\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\x01"),
    ],
)
def test_huge_declared_lengths_fail_fast(cls: type[Message], version: int, data: bytes) -> None:
    start = time.perf_counter()
    with pytest.raises(ProtocolError):
        cls.decode(data, version)
    assert time.perf_counter() - start < 0.1


def test_invalid_utf8_is_a_protocol_error() -> None:
    data = b"\xff\xff\x00\x01\x00\x00\x00\x10\x00\x00\x00\x01\x00\x02\xc3\x28\x00\x00\x00\x00"
    with pytest.raises(ProtocolError, match="UnicodeDecodeError"):
        ProduceRequest.decode(data, 3)


def test_null_in_a_non_nullable_field_is_a_protocol_error() -> None:
    # ProduceRequest v3: topic name int16 length -1
    data = b"\xff\xff\x00\x01\x00\x00\x00\x10\x00\x00\x00\x01\xff\xff\x00\x00\x00\x00"
    with pytest.raises(ProtocolError, match="null string"):
        ProduceRequest.decode(data, 3)
