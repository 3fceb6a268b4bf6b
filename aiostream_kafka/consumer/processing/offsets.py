"""Completed offsets beyond the committed one, kept in a commit's metadata (sans-IO).

``process()`` runs handlers out of offset order, so a partition's committed offset can only
be its first record whose handler has not finished; the records finished above it are
written into the commit's metadata string so that a restart skips them instead of running
them again (the idea of Confluent's Parallel Consumer, in an encoding of our own).

The text is ``PREFIX`` followed by base64 of::

    crc32 of the body (4 bytes, big-endian)
    body: varint(committed)
          then per run of consecutive completed offsets, lowest first:
          varint(gap) varint(length - 1)

where a run's gap is counted from ``committed`` for the first run and from one past the end
of the previous run for the others, minus one (runs are maximal, so two runs are at least
one offset apart). Varints are unsigned LEB128 of any size up to 64 bits. Runs are the
point: handlers of one partition finish roughly in order, so a few hundred runs describe
tens of thousands of completed offsets.

The committed offset is written in the body: metadata read with a committed offset below
the one it was written with (offsets reset backwards by a tool that kept the metadata)
means "do these again" and decodes to nothing; above it, the offsets under the new
committed offset are dropped. The checksum makes anything that is not our own writing
decode to nothing.

The size bound: the broker refuses a commit whose metadata is longer than
``offset.metadata.max.bytes`` (4096 by default) with OFFSET_METADATA_TOO_LARGE, which would
lose the committed offset too. :data:`MAX_METADATA_BYTES` stays well below it. The caller
keeps under it with :func:`fits` (exact) or :func:`runs_that_fit` (a cheap bound the
scheduler checks before starting a record); :func:`encode_completed` never raises for
size: past the bound it keeps the lowest runs that fit and drops the rest (dropping a
completed offset only means running its record again after a restart, never skipping one).
"""

from __future__ import annotations

import base64
import binascii
import logging
import zlib
from collections.abc import Iterable

__all__ = [
    "MAX_DECODED_OFFSETS",
    "MAX_METADATA_BYTES",
    "MIN_RUNS_THAT_FIT",
    "PREFIX",
    "decode_completed",
    "encode_completed",
    "fits",
    "runs_that_fit",
]

log = logging.getLogger(__name__)

#: Marks our encoding and its version ("aiostream_kafka process, version 1").
PREFIX = "akp1:"

#: The longest metadata written, in bytes (the text is ASCII): half the broker's default
#: ``offset.metadata.max.bytes`` (4096), leaving room for a lowered broker setting.
MAX_METADATA_BYTES = 2048

#: The most offsets a decode returns (the lowest ones); the rest are dropped (run again).
#: Guards memory against a hostile or absurd run length.
MAX_DECODED_OFFSETS = 1 << 20

_MAX_VARINT_BYTES = 10  # a 64-bit value
_CRC_BYTES = 4

# payload bytes base64 can carry in the bound, less the checksum and the committed offset
_runs_room = (MAX_METADATA_BYTES - len(PREFIX)) // 4 * 3 - _CRC_BYTES - _MAX_VARINT_BYTES


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, new_pos)``; ValueError when truncated or longer than 64 bits."""
    result = 0
    shift = 0
    for i in range(pos, min(len(buf), pos + _MAX_VARINT_BYTES)):
        b = buf[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i + 1
        shift += 7
    raise ValueError("truncated or over-long varint")


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _text_len(payload_len: int) -> int:
    return len(PREFIX) + 4 * ((payload_len + 2) // 3)


def _runs(committed: int, completed: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(first, length)`` of the offsets ``>= committed``, lowest first."""
    runs: list[tuple[int, int]] = []
    first = last = -2
    for offset in sorted(set(completed)):
        if offset < committed:
            continue
        if offset == last + 1:
            last = offset
            continue
        if last >= first >= 0:
            runs.append((first, last - first + 1))
        first = last = offset
    if last >= first >= 0:
        runs.append((first, last - first + 1))
    return runs


def _encode_runs(committed: int, runs: list[tuple[int, int]]) -> list[bytes]:
    """Each run's bytes (the body after the committed offset)."""
    out: list[bytes] = []
    end = committed  # one past the previous run (the first run's gap counts from here)
    for i, (first, length) in enumerate(runs):
        piece = bytearray()
        _put_varint(piece, first - end - (1 if i else 0))
        _put_varint(piece, length - 1)
        out.append(bytes(piece))
        end = first + length
    return out


def _check_committed(committed: int) -> None:
    if committed < 0:
        raise ValueError(f"committed offset must be >= 0, got {committed}")


def fits(committed: int, completed: Iterable[int]) -> bool:
    """Whether :func:`encode_completed` would keep every offset of ``completed`` (those at or
    above ``committed``) within :data:`MAX_METADATA_BYTES`. Raises ValueError for a negative
    ``committed``."""
    _check_committed(committed)
    head = _CRC_BYTES + _varint_len(committed)
    body = sum(len(p) for p in _encode_runs(committed, _runs(committed, completed)))
    return _text_len(head + body) <= MAX_METADATA_BYTES


def runs_that_fit(span: int) -> int:
    """How many runs are sure to fit in :data:`MAX_METADATA_BYTES` when every completed
    offset lies within ``span`` offsets of the committed one (each varint of a run is then
    at most ``span``'s length; the committed offset is counted at its longest): a bound to
    check in O(1) before a run may be added. :data:`MIN_RUNS_THAT_FIT` whatever the span."""
    return _runs_room // (2 * _varint_len(max(span, 0)))


#: The runs that fit whatever the span (offsets are below 2**63).
MIN_RUNS_THAT_FIT = runs_that_fit(1 << 63)


def encode_completed(committed: int, completed: Iterable[int]) -> str:
    """The metadata text for a commit of ``committed`` with the offsets of ``completed`` done
    (offsets below ``committed`` are left out; an empty set gives a short text too). At most
    :data:`MAX_METADATA_BYTES` long: when the offsets do not fit, the lowest runs that fit
    are kept (the others will be run again after a restart; a WARNING is logged). Raises
    ValueError for a negative ``committed``."""
    _check_committed(committed)
    runs = _runs(committed, completed)
    pieces = _encode_runs(committed, runs)
    head = bytearray()
    _put_varint(head, committed)
    size = _CRC_BYTES + len(head)
    kept = 0
    for piece in pieces:
        if _text_len(size + len(piece)) > MAX_METADATA_BYTES:
            break
        size += len(piece)
        kept += 1
    if kept < len(pieces):
        log.warning(
            "completed offsets above %d need more than %d bytes of commit metadata: "
            "%d of %d runs kept, the offsets from %d on will be processed again after a restart",
            committed, MAX_METADATA_BYTES, kept, len(pieces), runs[kept][0],
        )  # fmt: skip
    body = bytes(head) + b"".join(pieces[:kept])
    payload = zlib.crc32(body).to_bytes(_CRC_BYTES, "big") + body
    return PREFIX + base64.b64encode(payload).decode("ascii")


def decode_completed(metadata: str, committed: int) -> set[int]:
    """The completed offsets at or above ``committed`` that ``metadata`` (written by
    :func:`encode_completed`) names. Never raises: metadata of another tool or version,
    garbage, or metadata written for a higher committed offset than ``committed`` (an offset
    reset backwards) give an empty set (logged at DEBUG); past
    :data:`MAX_DECODED_OFFSETS` offsets the higher ones are dropped."""
    if not isinstance(metadata, str) or not metadata.startswith(PREFIX):
        if isinstance(metadata, str) and metadata:
            log.debug("commit metadata %.40r is not ours (or another version): ignored", metadata)
        return set()
    try:
        payload = base64.b64decode(metadata[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        log.debug("commit metadata %.40r is not valid base64: ignored", metadata)
        return set()
    body = payload[_CRC_BYTES:]
    if len(payload) <= _CRC_BYTES or zlib.crc32(body) != int.from_bytes(payload[:_CRC_BYTES]):
        log.debug("commit metadata %.40r fails its checksum: ignored", metadata)
        return set()
    try:
        base, pos = _get_varint(body, 0)
        runs: list[tuple[int, int]] = []
        end = base
        while pos < len(body):
            gap, pos = _get_varint(body, pos)
            length, pos = _get_varint(body, pos)
            first = end + gap + (1 if runs else 0)
            runs.append((first, length + 1))
            end = first + length + 1
    except ValueError:
        log.debug("commit metadata %.40r is truncated: ignored", metadata)
        return set()
    if committed < base:
        log.debug("commit metadata written at offset %d, read at %d: ignored", base, committed)
        return set()
    out: set[int] = set()
    for first, length in runs:
        lo = max(first, committed)
        hi = first + length
        if lo >= hi:
            continue
        room = MAX_DECODED_OFFSETS - len(out)
        if hi - lo > room:
            out.update(range(lo, lo + room))
            log.debug("commit metadata names over %d offsets: the rest ignored", len(out))
            break
        out.update(range(lo, hi))
    return out
