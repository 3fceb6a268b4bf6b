"""FrameDecoder: any split of the stream gives the same frames; bad sizes fail at once."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_kafka.errors import ProtocolError
from aiostream_kafka.protocol.framing import FrameDecoder, encode_frame

FRAMES = [b"", b"a", b"hello", bytes(range(256)) * 3, b"\x00\x00\x00\x04"]
STREAM = b"".join(encode_frame(f) for f in FRAMES)


def test_one_byte_at_a_time() -> None:
    boundaries = {0}
    for frame in FRAMES:
        boundaries.add(max(boundaries) + 4 + len(frame))
    decoder = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i : i + 1])
        assert decoder.at_frame_boundary == (i + 1 in boundaries)
    assert out == FRAMES
    assert decoder.at_frame_boundary
    assert decoder.buffered == 0


def test_all_at_once_and_memoryview_input() -> None:
    assert FrameDecoder().feed(memoryview(STREAM)) == FRAMES
    assert FrameDecoder().feed(bytearray(STREAM)) == FRAMES


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split(cuts: list[int]) -> None:
    decoder = FrameDecoder()
    out: list[bytes] = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for start, end in itertools.pairwise(bounds):
        out += decoder.feed(STREAM[start:end])
    assert out == FRAMES


def test_partial_frame_is_reported() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00\x05ab") == []
    assert decoder.buffered == 6
    assert not decoder.at_frame_boundary
    assert decoder.feed(b"cde\x00") == [b"abcde"]
    assert decoder.buffered == 1


@pytest.mark.parametrize("prefix", [b"\x00\x00\x01\x01", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff"])
def test_oversized_or_negative_size_is_refused_before_buffering(prefix: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=256)
    assert decoder.feed(encode_frame(b"x" * 256)) == [b"x" * 256]  # the bound is inclusive
    with pytest.raises(ProtocolError, match="outside"):
        decoder.feed(prefix)
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):  # the stream has lost its framing for good
        decoder.feed(encode_frame(b"ok"))


def test_oversized_size_is_refused_when_split() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(ProtocolError):
        decoder.feed(b"\x00\x0b")


def test_large_frame_in_small_pieces_is_linear() -> None:
    payload = bytes(4 * 1024 * 1024)
    stream = encode_frame(payload)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for i in range(0, len(stream), 1024):  # 4096 feeds; quadratic copying would take seconds
        out += decoder.feed(stream[i : i + 1024])
    assert out == [payload]


def test_bad_bound() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=-1)
