"""Compression codecs of Kafka record batches, with a bound on decompressed size.

Sans-IO: bytes in, bytes out. The codec of a batch is bits 0-2 of its attributes
(:class:`CompressionType`); the records section after the record count is compressed as
one stream.

Wire formats, as the Java client writes and reads them:

* ``GZIP``: a gzip member (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes; several
  concatenated members are read, like ``GZIPInputStream`` does.
* ``SNAPPY``: Java wraps the records in xerial's ``SnappyOutputStream``, i.e. the header
  ``\\x82SNAPPY\\x00`` + int32 version + int32 compatible version, then blocks of
  int32 big-endian length + raw snappy. librdkafka writes plain raw snappy. We read both
  (xerial's ``SnappyInputStream`` also falls back to raw input) and write the xerial
  framing by default so Java, librdkafka and older clients all decode our batches.
  Snappy needs the optional ``cramjam`` package (``pip install aiostream-kafka[snappy]``).
* ``LZ4``: the standard LZ4 frame format. Java's ``Lz4BlockInputStream`` decodes every
  block on its own, so we write independent 64 KiB blocks without content size, like
  ``Lz4BlockOutputStream``. Legacy magic 0 messages were written with a wrong frame header
  checksum (KAFKA-3160: the checksum covered the frame's magic number too), which Java
  ignores for magic 0; :func:`repair_lz4_header_checksum` rewrites it before decoding.
* ``ZSTD``: zstd frames (KIP-110), several concatenated frames accepted on read.

Bounded memory: :func:`decompress` never produces more than ``max_decompressed_bytes``
(plus one codec-sized step), however the compressed input lies about its content size;
going over raises :class:`DecompressionLimitError`. Corrupt input raises
:class:`~aiostream_kafka.errors.CorruptRecordError`; no codec library exception escapes.

Codec state is reused: each thread keeps one zstd compressor per level, one zstd
decompressor and one lz4 frame decompressor (:data:`_local`) instead of creating them per
batch (``python benchmarks/codec_bench.py --compression`` measures it). The libraries'
objects are not safe for concurrent use, and codec jobs run on the event loop and in
worker threads at once (:func:`~aiostream_kafka.concurrency.run_in_worker`): one set per
thread, never shared.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Mapping
from enum import IntEnum
from types import ModuleType
from typing import Any, Final

from aiostream_kafka.errors import ConfigError, CorruptRecordError, ProtocolError

DEFAULT_MAX_DECOMPRESSED_BYTES: Final = 64 * 1024 * 1024
"""Default bound on the decompressed size of one record batch (64 MiB).

Kafka's default ``max.partition.fetch.bytes`` is 1 MiB of *compressed* data; real batches
rarely exceed a 10x ratio, so this leaves a wide margin while capping what one hostile
or corrupt batch can make the consumer allocate."""

_Buffer = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """Codec of a record batch: bits 0-2 of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


OFFLOAD_MIN_BYTES: Final[Mapping[int, int]] = {
    CompressionType.GZIP: 64 * 1024,
    CompressionType.SNAPPY: 512 * 1024,
    CompressionType.LZ4: 512 * 1024,
    CompressionType.ZSTD: 256 * 1024,
}
"""Input size from which a codec job is worth a worker thread (see :func:`worth_offloading`).

The input is what the codec reads: the uncompressed records when compressing, the
compressed records when decompressing. Below these sizes a job costs at most about 2 ms of
CPU (measured with ``python -m benchmarks.loop_stall --codec-costs`` and with JSON-like
data, 2-core x86 machine under load: gzip compresses 64 KiB in 0.7-1.9 ms, zstd 256 KiB in
0.5-2.5 ms, lz4 512 KiB in 0.4-1.3 ms, snappy 512 KiB in 0.3-0.5 ms; decompressing is 3-10
times cheaper per input byte, except on highly compressible data where the output per input
byte grows: 512 KiB of snappy-compressed JSON inflates in 1.4 ms). Running it inline costs
the event loop less than handing it to a thread would gain (a round trip through
a worker thread is about 0.1 ms); the producer's default 16 KiB batches always stay
inline."""


def worth_offloading(compression: CompressionType | int, input_bytes: int) -> bool:
    """Whether a job of ``compression`` on ``input_bytes`` bytes should run in a worker
    thread rather than on the event loop (the codecs release the GIL while they work)."""
    limit = OFFLOAD_MIN_BYTES.get(compression)
    return limit is not None and input_bytes >= limit


class CompressionUnavailableError(ConfigError):
    """The library a codec needs is not installed; the message names the pip command."""


class DecompressionLimitError(ProtocolError):
    """A compressed batch inflates beyond ``max_decompressed_bytes``.

    Not retriable: fetching the same batch again gives the same bytes. Either the batch is
    hostile (a decompression bomb) or the consumer's bound is too small for the data.
    """


# What to install when a codec's library is missing.
_INSTALL_HINT: Final = {
    CompressionType.SNAPPY: ("cramjam", "pip install aiostream-kafka[snappy]"),
    CompressionType.LZ4: ("lz4", "pip install lz4 (a dependency of aiostream-kafka)"),
    CompressionType.ZSTD: ("zstandard", "pip install zstandard (a dependency of aiostream-kafka)"),
}

_modules: dict[CompressionType, ModuleType] = {}


def _module(codec: CompressionType) -> Any:
    """Import (once) and return the library behind ``codec``."""
    mod = _modules.get(codec)
    if mod is not None:
        return mod
    name, hint = _INSTALL_HINT[codec]
    try:
        if codec is CompressionType.SNAPPY:
            import cramjam

            mod = cramjam
        elif codec is CompressionType.LZ4:
            import lz4.frame  # type: ignore[import-untyped]

            mod = lz4.frame
        else:
            import zstandard

            mod = zstandard
    except ImportError as exc:
        raise CompressionUnavailableError(
            f"{codec.name.lower()} compression needs the {name!r} package: {hint}"
        ) from exc
    _modules[codec] = mod
    return mod


class _CodecState(threading.local):
    """This thread's reusable codec objects (see the module docstring)."""

    def __init__(self) -> None:
        self.zstd_compressors: dict[int, Any] = {}  # level -> zstandard.ZstdCompressor
        self.zstd_decompressor: Any = None
        self.lz4_decompressor: Any = None


_local: Final = _CodecState()


def _zstd_compressor(zstd: Any, level: int) -> Any:
    """This thread's ``ZstdCompressor`` for ``level`` (each ``compress()`` call starts a
    new frame: the context keeps only its allocations between calls)."""
    compressors = _local.zstd_compressors
    cctx = compressors.get(level)
    if cctx is None:
        cctx = compressors[level] = zstd.ZstdCompressor(level=level)
    return cctx


def _codec(compression: int) -> CompressionType:
    try:
        return CompressionType(compression)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec id {compression}") from None


def is_available(compression: CompressionType | int) -> bool:
    """Return whether the library for ``compression`` can be imported."""
    try:
        ensure_available(compression)
    except CompressionUnavailableError:
        return False
    return True


def ensure_available(compression: CompressionType | int) -> None:
    """Raise :class:`CompressionUnavailableError` if ``compression`` cannot be used here.

    Producers call this while validating their configuration, before any I/O.
    Raises ``ConfigError`` for an unknown codec id.
    """
    try:
        codec = CompressionType(compression)
    except ValueError:
        raise ConfigError(f"unknown compression type {compression!r}") from None
    if codec in _INSTALL_HINT:
        _module(codec)


# ---------------------------------------------------------------------------------------
# compression

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"  # version 1, compat 1
_XERIAL_BLOCK: Final = 32 * 1024  # Java's default snappy block size in Kafka


def compress(
    compression: CompressionType | int,
    data: _Buffer,
    *,
    level: int | None = None,
    snappy_xerial_framing: bool = True,
) -> bytes:
    """Compress ``data`` for a record batch and return the compressed bytes.

    ``level`` is the codec's level (gzip 0-9, default 6; lz4 frame 0-16, default 0 = fast;
    zstd 1-22, default 3 like Kafka); it is ignored for snappy. ``snappy_xerial_framing``
    selects the xerial framing Java writes (default) or raw snappy as librdkafka writes.

    Raises :class:`CompressionUnavailableError` when the codec's library is missing and
    ``ConfigError`` for an unknown codec.
    """
    try:
        codec = CompressionType(compression)
    except ValueError:
        raise ConfigError(f"unknown compression type {compression!r}") from None
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        # wbits=31: gzip container, as GZIPOutputStream writes.
        return zlib.compress(data, -1 if level is None else level, wbits=31)
    if codec is CompressionType.LZ4:
        lz4f = _module(codec)
        out: bytes = lz4f.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4f.BLOCKSIZE_MAX64KB,
            block_linked=False,  # Java decodes each block independently
            content_checksum=False,
            store_size=False,
        )
        return out
    if codec is CompressionType.ZSTD:
        cctx = _zstd_compressor(_module(codec), 3 if level is None else level)
        return bytes(cctx.compress(data))
    snappy = _module(codec).snappy
    if not snappy_xerial_framing:
        return bytes(snappy.compress_raw(data))
    view = memoryview(data).cast("B")
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(len(block).to_bytes(4, "big"))
        parts.append(block)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------
# bounded decompression


def _over_limit(codec: str, limit: int) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"{codec} batch decompresses to more than max_decompressed_bytes={limit}"
    )


def decompress(
    compression: CompressionType | int,
    data: _Buffer,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress a record batch's records section and return the bytes.

    Output beyond ``max_decompressed_bytes`` is never produced: the codecs are driven in
    bounded steps and :class:`DecompressionLimitError` is raised as soon as the limit is
    passed. Malformed or truncated input raises ``CorruptRecordError``; an unknown codec
    id raises ``CorruptRecordError`` (it came from the wire); a missing optional library
    raises :class:`CompressionUnavailableError`.
    """
    codec = _codec(compression)
    if codec is CompressionType.NONE:
        if len(data) > max_decompressed_bytes:
            raise _over_limit("uncompressed", max_decompressed_bytes)
        return bytes(data)
    mod: Any = None if codec is CompressionType.GZIP else _module(codec)
    try:
        if codec is CompressionType.GZIP:
            return _gunzip(data, max_decompressed_bytes)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(mod, data, max_decompressed_bytes)
        if codec is CompressionType.ZSTD:
            return _zstd_decompress(mod, data, max_decompressed_bytes)
        return _snappy_decompress(mod.snappy, data, max_decompressed_bytes)
    except ProtocolError:
        raise
    except MemoryError:
        # Cannot happen with bounded steps; kept so no allocation failure leaks as such.
        raise _over_limit(codec.name.lower(), max_decompressed_bytes) from None
    except Exception as exc:  # the codec libraries raise RuntimeError, ZstdError, ...
        raise CorruptRecordError(f"corrupt {codec.name.lower()} data: {exc}") from exc


_STEP: Final = 1024 * 1024  # output produced per codec call at most (gzip, lz4)


def _gunzip(data: _Buffer, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    tail: bytes | _Buffer = data
    try:
        while True:
            # wbits=47 = 32 + 15: accept a gzip or a zlib header.
            dec = zlib.decompressobj(47)
            while not dec.eof:
                chunk = dec.decompress(tail, min(limit - total + 1, _STEP))
                total += len(chunk)
                if total > limit:
                    raise _over_limit("gzip", limit)
                parts.append(chunk)
                new_tail = dec.unconsumed_tail
                if not chunk and len(new_tail) >= len(tail):
                    raise CorruptRecordError("truncated gzip data")
                tail = new_tail
            tail = dec.unused_data
            # Another member follows only if it starts with the gzip magic; like
            # GZIPInputStream, trailing bytes that are not a member are ignored.
            if not tail.startswith(b"\x1f\x8b"):
                break
    except zlib.error as exc:
        raise CorruptRecordError(f"corrupt gzip data: {exc}") from None
    return b"".join(parts)


def _lz4_decompress(lz4f: Any, data: _Buffer, limit: int) -> bytes:
    dec = _local.lz4_decompressor
    if dec is None:
        dec = _local.lz4_decompressor = lz4f.LZ4FrameDecompressor()
    parts: list[bytes] = []
    total = 0
    pending: _Buffer = data
    while True:
        dec.reset()  # also after a previous batch that failed half-way
        chunk: bytes = dec.decompress(pending, max_length=min(limit - total + 1, _STEP))
        while True:
            total += len(chunk)
            if total > limit:
                raise _over_limit("lz4", limit)
            parts.append(chunk)
            if dec.eof:
                break
            if dec.needs_input:
                raise CorruptRecordError("truncated lz4 frame")
            chunk = dec.decompress(b"", max_length=min(limit - total + 1, _STEP))
        pending = dec.unused_data
        if not pending:
            break
    return b"".join(parts)


# zstd frames (RFC 8878). A block regenerates at most 128 KiB, so the blocks of a frame
# bound what decoding them can produce: the blocks are walked (3-byte headers) and fed to
# the decompressor in groups whose bound fits the remaining budget. A frame that declares
# its content size within the budget (ours and librdkafka's) is decoded in one call into
# a buffer of exactly that size; Java's streamed frames declare none.
_ZSTD_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK: Final = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC: Final = 0x184D2A50
_ZSTD_BLOCK_MAX: Final = 128 * 1024
_ZSTD_MAX_WINDOW: Final = 1 << 27  # zstd's own default cap
# Frames with a larger window decode with a decompressor of their own, dropped after the
# batch, so that a thread's reused one never holds more than this (plus a block) of
# window buffer.
_ZSTD_REUSE_MAX_WINDOW: Final = 8 * 1024 * 1024


def _zstd_decompressor(zstd: Any) -> Any:
    dctx = _local.zstd_decompressor
    if dctx is None:
        dctx = _local.zstd_decompressor = zstd.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    return dctx


def _zstd_decompress(zstd: Any, data: _Buffer, limit: int) -> bytes:
    view = memoryview(data).cast("B")
    dctx = _zstd_decompressor(zstd)
    # Fast path: a single frame that declares its size. decompress() writes into a buffer
    # of exactly the declared size (more output is an error), checked against the budget
    # first; anything else (several frames, corrupt data) takes the general path.
    try:
        size = zstd.frame_content_size(view)
    except zstd.ZstdError:
        size = -1
    if size > limit:
        raise _over_limit("zstd", limit)
    if size > 0:
        try:
            out: bytes = dctx.decompress(view, allow_extra_data=False)
        except zstd.ZstdError:
            pass
        else:
            return out
    return _zstd_frames(zstd, dctx, view, limit)


def _zstd_frames(zstd: Any, dctx: Any, view: memoryview, limit: int) -> bytes:
    """Decode the zstd frames in ``view`` one after the other, walking their blocks."""
    size = len(view)
    parts: list[bytes] = []
    total = 0
    pos = 0
    while pos < size:
        if pos + 4 > size:
            raise CorruptRecordError("truncated zstd frame")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if pos + 8 > size:
                raise CorruptRecordError("truncated zstd skippable frame")
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            if pos > size:
                raise CorruptRecordError("truncated zstd skippable frame")
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError("not a zstd frame")
        if pos + 5 > size:
            raise CorruptRecordError("truncated zstd frame header")
        descriptor = view[pos + 4]
        single_segment = descriptor & 0x20
        header = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
        fcs_bytes = (0 if not single_segment else 1, 2, 4, 8)[descriptor >> 6]
        if pos + header + fcs_bytes > size:
            raise CorruptRecordError("truncated zstd frame header")
        window = 0
        if not single_segment:
            wd = view[pos + 5]
            window_log = 10 + (wd >> 3)
            window = (1 << window_log) + ((1 << window_log) >> 3) * (wd & 7)
        if fcs_bytes:
            fcs_at = pos + header
            declared = int.from_bytes(view[fcs_at : fcs_at + fcs_bytes], "little")
            declared += 256 if fcs_bytes == 2 else 0
            if declared > limit - total:
                raise _over_limit("zstd", limit)
            window = window or declared
        checksum = 4 if descriptor & 0x04 else 0
        # a decompressor of its own for a large window (see _ZSTD_REUSE_MAX_WINDOW)
        frame_dctx = (
            dctx
            if window <= _ZSTD_REUSE_MAX_WINDOW
            else zstd.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
        )
        dec = frame_dctx.decompressobj()
        start = pos
        pos += header + fcs_bytes
        bound = 0  # most the blocks since ``start`` can regenerate
        last = False
        while not last:
            if pos + 3 > size:
                raise CorruptRecordError("truncated zstd frame")
            block = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            last = bool(block & 1)
            kind = (block >> 1) & 3
            block_size = block >> 3
            if kind == 3:
                raise CorruptRecordError("corrupt zstd data: reserved block type")
            # raw and RLE blocks regenerate exactly their size, compressed ones at most
            # 128 KiB (larger sizes are refused by the decoder)
            bound += _ZSTD_BLOCK_MAX if kind == 2 else block_size
            pos += 3 + (1 if kind == 1 else block_size) + (checksum if last else 0)
            if pos > size:
                raise CorruptRecordError("truncated zstd frame")
            if last or bound > max(limit - total, _ZSTD_BLOCK_MAX):
                chunk: bytes = dec.decompress(view[start:pos])
                total += len(chunk)
                if total > limit:
                    raise _over_limit("zstd", limit)
                parts.append(chunk)
                start = pos
                bound = 0
        if not dec.eof or dec.unused_data:
            raise CorruptRecordError("corrupt zstd frame")
    return b"".join(parts)


# xxHash32 (https://github.com/Cyan4973/xxHash), for the LZ4 frame header checksum only
# (a few bytes): pure Python is fast enough and needs no extra dependency.
_M32: Final = 0xFFFFFFFF
_XXP1: Final = 2654435761
_XXP2: Final = 2246822519
_XXP3: Final = 3266489917
_XXP4: Final = 668265263
_XXP5: Final = 374761393


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """Return the 32-bit xxHash of ``data`` (pure Python; meant for short inputs)."""
    buf = bytes(data)
    n = len(buf)
    i = 0
    if n >= 16:
        lanes = [
            (seed + _XXP1 + _XXP2) & _M32,
            (seed + _XXP2) & _M32,
            seed & _M32,
            (seed - _XXP1) & _M32,
        ]
        while i + 16 <= n:
            for k in range(4):
                word = int.from_bytes(buf[i : i + 4], "little")
                lanes[k] = (_rotl32((lanes[k] + word * _XXP2) & _M32, 13) * _XXP1) & _M32
                i += 4
        h = (
            _rotl32(lanes[0], 1)
            + _rotl32(lanes[1], 7)
            + _rotl32(lanes[2], 12)
            + _rotl32(lanes[3], 18)
        ) & _M32
    else:
        h = (seed + _XXP5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (h + int.from_bytes(buf[i : i + 4], "little") * _XXP3) & _M32
        h = (_rotl32(h, 17) * _XXP4) & _M32
        i += 4
    while i < n:
        h = (h + buf[i] * _XXP5) & _M32
        h = (_rotl32(h, 11) * _XXP1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _XXP2) & _M32
    h ^= h >> 13
    h = (h * _XXP3) & _M32
    h ^= h >> 16
    return h


_LZ4_FRAME_MAGIC: Final = b"\x04\x22\x4d\x18"


def lz4_header_checksum(frame: bytes | bytearray | memoryview, *, broken: bool = False) -> int:
    """Return the header checksum byte an LZ4 frame starting at ``frame[0]`` should carry:
    the second byte of xxHash32 of the frame descriptor (FLG, BD, optional content size and
    dictionary id). ``broken=True`` gives what Kafka's legacy magic 0 writer put there
    (KAFKA-3160): the same hash taken from the frame's first byte, magic number included.

    Raises ``CorruptRecordError`` if ``frame`` is not the start of an LZ4 frame.
    """
    view = memoryview(frame).cast("B")
    if len(view) < 7 or view[:4].tobytes() != _LZ4_FRAME_MAGIC:
        raise CorruptRecordError("not an lz4 frame")
    flg = view[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(view) <= end:
        raise CorruptRecordError("truncated lz4 frame header")
    return (xxh32(view[0 if broken else 4 : end]) >> 8) & 0xFF


def repair_lz4_header_checksum(frame: bytes | bytearray | memoryview) -> bytes:
    """Return ``frame`` (an LZ4 frame) with its header checksum byte recomputed, so that a
    frame from Kafka's legacy magic 0 writer (KAFKA-3160) decodes; like Java, which ignores
    that byte for magic 0 messages. Only the first frame's header is rewritten (Kafka
    writes one frame per message).

    Raises ``CorruptRecordError`` if ``frame`` is not an LZ4 frame.
    """
    out = bytearray(frame)
    flg = out[4] if len(out) > 4 else 0
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    out[end] = lz4_header_checksum(out)
    return bytes(out)


def _raw_snappy_length(data: _Buffer, start: int, end: int) -> int:
    """Return the uncompressed length preamble (unsigned varint) of a raw snappy block."""
    result = 0
    shift = 0
    pos = start
    while pos < end and shift <= 28:
        b = data[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        pos += 1
        shift += 7
    raise CorruptRecordError("bad snappy length preamble")


def _snappy_block(snappy: Any, block: _Buffer, budget: int, limit: int) -> bytes:
    # Raw snappy starts with its uncompressed length: refuse before allocating it.
    if _raw_snappy_length(block, 0, len(block)) > budget:
        raise _over_limit("snappy", limit)
    return bytes(snappy.decompress_raw(block))


def _snappy_decompress(snappy: Any, data: _Buffer, limit: int) -> bytes:
    view = memoryview(data).cast("B")
    if not (len(view) >= 16 and view[:8].tobytes() == _XERIAL_MAGIC):
        return _snappy_block(snappy, view, limit, limit)
    parts: list[bytes] = []
    total = 0
    pos = 16
    end = len(view)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block header")
        length = int.from_bytes(view[pos : pos + 4], "big", signed=True)
        pos += 4
        if length < 0 or pos + length > end:
            raise CorruptRecordError("truncated xerial snappy block")
        chunk = _snappy_block(snappy, view[pos : pos + length], limit - total, limit)
        pos += length
        total += len(chunk)
        parts.append(chunk)
    return b"".join(parts)


__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "OFFLOAD_MIN_BYTES",
    "CompressionType",
    "CompressionUnavailableError",
    "DecompressionLimitError",
    "compress",
    "decompress",
    "ensure_available",
    "is_available",
    "lz4_header_checksum",
    "repair_lz4_header_checksum",
    "worth_offloading",
    "xxh32",
]
