"""The completed-offsets commit metadata of ``process()`` (sans-IO): round trips, the size
bound, and anything not ours decoding to nothing."""

from __future__ import annotations

import base64
import logging
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_kafka.consumer.processing.offsets import (
    MAX_DECODED_OFFSETS,
    MAX_METADATA_BYTES,
    MIN_RUNS_THAT_FIT,
    PREFIX,
    decode_completed,
    encode_completed,
    fits,
    runs_that_fit,
)

committed_offsets = st.one_of(st.integers(0, 1000), st.integers(0, (1 << 62) - 1))
deltas = st.sets(st.integers(0, 5000), max_size=400)


def _ours(body: bytes) -> str:
    payload = zlib.crc32(body).to_bytes(4, "big") + body
    return PREFIX + base64.b64encode(payload).decode()


@settings(max_examples=300, deadline=None)  # a body may name 1M offsets (the decode bound)
@given(committed_offsets, deltas, st.sets(st.integers(0, 1000), max_size=20))
def test_a_set_that_fits_comes_back_exactly(
    committed: int, ahead: set[int], below: set[int]
) -> None:
    completed = {committed + d for d in ahead} | {committed - b - 1 for b in below}
    text = encode_completed(committed, completed)
    assert text.isascii() and text.startswith(PREFIX)
    assert len(text.encode()) <= MAX_METADATA_BYTES
    expected = {o for o in completed if o >= committed}
    assert fits(committed, completed)  # 400 offsets within 5000: always fits
    assert decode_completed(text, committed) == expected


@settings(max_examples=200)
@given(
    committed_offsets, st.lists(st.tuples(st.integers(1, 300), st.integers(1, 50)), max_size=3000)
)
def test_the_encoding_stays_in_bounds_and_keeps_the_lowest_offsets(
    committed: int, runs: list[tuple[int, int]]
) -> None:
    completed: set[int] = set()
    at = committed
    for gap, length in runs:  # runs of ``length`` after ``gap`` offsets not done
        at += gap
        completed.update(range(at, at + length))
        at += length
    text = encode_completed(committed, completed)
    assert len(text.encode()) <= MAX_METADATA_BYTES
    got = decode_completed(text, committed)
    assert got <= completed
    # only whole runs are dropped, from the top: what is kept is everything below a cut
    cut = min(completed - got, default=None)
    if cut is None:
        assert fits(committed, completed)
    else:
        assert not fits(committed, completed)
        assert got == {o for o in completed if o < cut}


@settings(deadline=None)
@given(committed_offsets, st.integers(1, 1 << 40), st.data())
def test_runs_that_fit_is_a_safe_bound(committed: int, span: int, data: st.DataObject) -> None:
    n = runs_that_fit(span)
    assert n >= MIN_RUNS_THAT_FIT
    # the worst case: n runs spread over the span, gaps as long as they get, lengths too as
    # far as a set of offsets in memory allows
    part = max(1, span // (2 * n))
    length = min(part, 100_000 // n)
    offsets: list[int] = []
    for i in range(n):
        first = committed + (2 * i + 1) * part
        offsets.extend(range(first, min(first + length, committed + span)))
    if data.draw(st.booleans()):
        offsets = sorted(
            data.draw(st.sets(st.integers(committed, committed + span - 1), max_size=n))
        )
    assert fits(committed, offsets)


def test_runs_are_compact() -> None:
    # 10,000 completed offsets in 3 runs take a few bytes
    completed = set(range(101, 5101)) | set(range(6000, 9000)) | set(range(9001, 11001))
    text = encode_completed(100, completed)
    assert len(text) < 40
    assert decode_completed(text, 100) == completed
    assert decode_completed(encode_completed(7, []), 7) == set()


def test_a_higher_committed_offset_drops_the_offsets_below_it() -> None:
    text = encode_completed(100, {102, 103, 104, 200})
    assert decode_completed(text, 104) == {104, 200}
    assert decode_completed(text, 201) == set()


def test_a_committed_offset_reset_backwards_decodes_to_nothing() -> None:
    # offsets reset to 50 by a tool that kept the metadata: the user wants them run again
    text = encode_completed(100, {102, 103})
    assert decode_completed(text, 50) == set()


@pytest.mark.parametrize(
    "metadata",
    [
        "",
        "some other tool's note",
        '{"completed": [1, 2, 3]}',
        "akp1:",
        "akp1:!!!!",
        "akp1:AAAA",  # too short for the checksum
        "akp2:" + encode_completed(0, {1, 2})[len(PREFIX) :],  # a version we do not know
        encode_completed(0, {1, 2, 5})[:-4],  # truncated
        encode_completed(0, {1, 2, 5}).lower(),  # garbled
        PREFIX + base64.b64encode(b"\x00\x00\x00\x00\x05\x01\x02").decode(),  # bad checksum
    ],
)
def test_foreign_or_garbage_metadata_decodes_to_nothing(
    metadata: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiostream_kafka.consumer.processing.offsets"):
        assert decode_completed(metadata, 0) == set()
    if metadata:
        assert caplog.records and all(r.levelno == logging.DEBUG for r in caplog.records)


def test_a_body_with_a_good_checksum_but_a_truncated_varint_decodes_to_nothing() -> None:
    assert decode_completed(_ours(b"\x00\x01\x80"), 0) == set()
    assert decode_completed(_ours(b"\x00\x01"), 0) == set()  # a gap without its length
    assert decode_completed(_ours(b"\xff" * 11), 0) == set()  # over-long varint
    assert decode_completed(_ours(b"\x00\x01\x02"), 0) == {1, 2, 3}  # the same, well formed


def test_an_absurd_run_is_cut_at_the_decode_bound() -> None:
    huge = bytearray(b"\x00\x00")  # committed 0, first run at 0
    length = 1 << 40
    while length >= 0x80:
        huge.append((length & 0x7F) | 0x80)
        length >>= 7
    huge.append(length)
    got = decode_completed(_ours(bytes(huge)), 0)
    assert len(got) == MAX_DECODED_OFFSETS and min(got) == 0


@settings(max_examples=300, deadline=None)  # a body may name 1M offsets (the decode bound)
@given(st.text(max_size=200), st.integers(0, 1 << 40))
def test_decoding_never_raises(text: str, committed: int) -> None:
    assert isinstance(decode_completed(text, committed), set)
    assert isinstance(decode_completed(PREFIX + text, committed), set)


@settings(max_examples=300, deadline=None)  # a body may name 1M offsets (the decode bound)
@given(st.binary(max_size=60), st.integers(0, 1000))
def test_decoding_any_checksummed_body_never_raises(body: bytes, committed: int) -> None:
    got = decode_completed(_ours(body), committed)
    assert all(o >= committed for o in got)


def test_a_negative_committed_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="committed"):
        encode_completed(-1, {1})
    with pytest.raises(ValueError, match="committed"):
        fits(-1, {1})
