"""Unit tests of aiostream_kafka.protocol.compression (no broker)."""

from __future__ import annotations

import gzip
import os
import sys
import threading
import tracemalloc
import zlib

import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiostream_kafka.errors import ConfigError, CorruptRecordError, KafkaError, ProtocolError
from aiostream_kafka.protocol import compression
from aiostream_kafka.protocol.compression import (
    CompressionType,
    CompressionUnavailableError,
    DecompressionLimitError,
    compress,
    decompress,
    ensure_available,
    is_available,
)

cramjam = pytest.importorskip("cramjam")

CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
]
COMPRESSED = CODECS[1:]
MiB = 1024 * 1024

PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 1000,
    os.urandom(100_000),  # incompressible
    bytes(300_000),  # several snappy/lz4 blocks
]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec: CompressionType, payload: bytes) -> None:
    data = compress(codec, payload)
    assert decompress(codec, data) == payload


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_accepts_memoryview_and_bytearray(codec: CompressionType) -> None:
    payload = b"abc" * 5000
    data = compress(codec, memoryview(bytearray(payload)))
    assert decompress(codec, bytearray(data)) == payload
    assert decompress(codec, memoryview(data)) == payload


@pytest.mark.parametrize("level", [1, 9])
def test_levels(level: int) -> None:
    payload = b"abcdefgh" * 10_000
    for codec in (CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD):
        assert decompress(codec, compress(codec, payload, level=level)) == payload


def test_gzip_is_a_gzip_member_and_reads_stdlib_and_concatenated_members() -> None:
    data = compress(CompressionType.GZIP, b"payload")
    assert data[:2] == b"\x1f\x8b"
    assert gzip.decompress(data) == b"payload"
    two = gzip.compress(b"first ", mtime=0) + gzip.compress(b"second", mtime=0)
    assert decompress(CompressionType.GZIP, two) == b"first second"
    # zlib-wrapped deflate is accepted too (wbits auto-detection)
    assert decompress(CompressionType.GZIP, zlib.compress(b"zlib")) == b"zlib"


def test_lz4_writes_what_java_reads() -> None:
    # Java's Lz4BlockInputStream decodes every block alone: blocks must be independent.
    data = compress(CompressionType.LZ4, os.urandom(200_000) + bytes(200_000))
    info = lz4.frame.get_frame_info(data)
    assert info["block_linked"] is False
    assert info["block_size"] == 64 * 1024
    assert info["content_checksum"] is False
    # frames written by the lz4 library with other options decode too
    payload = b"lz4 " * 50_000
    other = lz4.frame.compress(payload, block_linked=True, content_checksum=True, store_size=True)
    assert decompress(CompressionType.LZ4, other) == payload


def test_zstd_reads_streamed_frames_without_content_size_and_several_frames() -> None:
    payload = b"zstd " * 40_000
    cobj = zstandard.ZstdCompressor().compressobj()  # no content size in the header
    streamed = cobj.compress(payload) + cobj.flush()
    assert zstandard.frame_content_size(streamed) == -1
    assert decompress(CompressionType.ZSTD, streamed) == payload
    two = compress(CompressionType.ZSTD, b"one ") + compress(CompressionType.ZSTD, b"two")
    assert decompress(CompressionType.ZSTD, two) == b"one two"


def test_zstd_frames_with_checksum_skippable_frames_and_large_windows() -> None:
    payload = os.urandom(3000) * 40
    with_checksum = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    first = with_checksum.compress(payload) + with_checksum.flush()
    skippable = (0x184D2A5A).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"skip!"
    second = compress(CompressionType.ZSTD, b"end")
    assert decompress(CompressionType.ZSTD, first + skippable + second) == payload + b"end"
    # a 16 MiB window (above what a thread's reused decompressor may keep) decodes with a
    # decompressor of its own
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=24)
    wide = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = wide.compress(payload) + wide.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 16 * MiB
    decompress(CompressionType.ZSTD, second)
    reused = compression._local.zstd_decompressor
    assert decompress(CompressionType.ZSTD, frame) == payload
    assert compression._local.zstd_decompressor is reused


def test_zstd_content_size_is_enforced() -> None:
    payload = os.urandom(3000) * 30
    frame = compress(CompressionType.ZSTD, payload)
    assert zstandard.frame_content_size(frame) == len(payload)
    # a declared size above the budget is refused before decoding
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.ZSTD, frame, max_decompressed_bytes=len(payload) - 1)
    with pytest.raises(DecompressionLimitError):  # also as the second frame
        decompress(CompressionType.ZSTD, frame + frame, max_decompressed_bytes=len(payload))
    # a header that lies about the size (4-byte field after the descriptor) is corrupt
    assert frame[4] >> 6 == 2 and frame[4] & 0x20  # single segment, 4-byte content size
    for lie in (1000, len(payload) + 1000):
        forged = frame[:5] + lie.to_bytes(4, "little") + frame[9:]
        with pytest.raises(CorruptRecordError):
            decompress(CompressionType.ZSTD, forged)


def test_codec_state_is_reused_per_thread_and_level() -> None:
    compress(CompressionType.ZSTD, b"x" * 100, level=3)
    level3 = compression._local.zstd_compressors[3]
    compress(CompressionType.ZSTD, b"y" * 100, level=5)
    compress(CompressionType.ZSTD, b"z" * 100)  # default level 3
    assert compression._local.zstd_compressors[3] is level3
    assert compression._local.zstd_compressors[5] is not level3
    seen: list[object] = []

    def other_thread() -> None:
        compress(CompressionType.ZSTD, b"x" * 100, level=3)
        seen.append(compression._local.zstd_compressors[3])

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert seen and seen[0] is not level3  # each thread has its own


def test_reused_decompressors_recover_after_a_corrupt_batch() -> None:
    payload = b"recover " * 10_000
    for codec in (CompressionType.ZSTD, CompressionType.LZ4):
        data = compress(codec, payload)
        with pytest.raises(CorruptRecordError):
            decompress(codec, data[: len(data) // 2])
        with pytest.raises(ProtocolError):
            decompress(codec, data[:20] + bytes(200) + data[220:])
        assert decompress(codec, data) == payload


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_concurrent_threads_compress_and_decompress_correctly(codec: CompressionType) -> None:
    # the codec objects are not thread-safe: every thread must use its own
    payloads = [os.urandom(2000) * (20 + n) for n in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(n: int) -> None:
        try:
            barrier.wait()
            for i in range(30):
                payload = payloads[(n + i) % len(payloads)]
                level = (1, 3, 6)[i % 3] if codec is not CompressionType.SNAPPY else None
                data = compress(codec, payload, level=level)
                assert decompress(codec, data) == payload
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def _xerial(payload: bytes, block: int) -> bytes:
    out = [b"\x82SNAPPY\x00", (1).to_bytes(4, "big"), (1).to_bytes(4, "big")]
    for i in range(0, len(payload), block):
        raw = bytes(cramjam.snappy.compress_raw(payload[i : i + block]))
        out += [len(raw).to_bytes(4, "big"), raw]
    return b"".join(out)


def test_snappy_default_is_xerial_framing_like_java() -> None:
    payload = os.urandom(1000) * 100  # 100 KB: four 32 KiB blocks
    data = compress(CompressionType.SNAPPY, payload)
    assert data[:8] == b"\x82SNAPPY\x00"
    assert data == _xerial(payload, 32 * 1024)


def test_snappy_raw_encoding_and_both_decodings() -> None:
    payload = b"snappy " * 10_000
    raw = compress(CompressionType.SNAPPY, payload, snappy_xerial_framing=False)
    assert raw == bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(CompressionType.SNAPPY, raw) == payload
    assert decompress(CompressionType.SNAPPY, _xerial(payload, 1000)) == payload


def test_snappy_reads_aiokafka_xerial_and_raw() -> None:
    from aiokafka import codec  # type: ignore[import-untyped]

    payload = b"interop " * 20_000
    assert decompress(CompressionType.SNAPPY, codec.snappy_encode(payload)) == payload
    raw = codec.snappy_encode(payload, xerial_compatible=False)
    assert decompress(CompressionType.SNAPPY, raw) == payload
    assert codec.snappy_decode(compress(CompressionType.SNAPPY, payload)) == payload


# -- bounded decompression --------------------------------------------------------------


def _bomb(codec: CompressionType, size: int) -> bytes:
    """Compress ``size`` zero bytes in 1 MiB steps so the test itself stays small."""
    chunk = bytes(MiB)
    if codec is CompressionType.GZIP:
        gz = zlib.compressobj(1, zlib.DEFLATED, 31)
        return b"".join(gz.compress(chunk) for _ in range(size // MiB)) + gz.flush()
    if codec is CompressionType.LZ4:
        ctx = lz4.frame.LZ4FrameCompressor(block_linked=False)
        parts = [ctx.begin()] + [ctx.compress(chunk) for _ in range(size // MiB)]
        return b"".join([*parts, ctx.flush()])
    if codec is CompressionType.ZSTD:
        zc = zstandard.ZstdCompressor().compressobj()
        return b"".join(zc.compress(chunk) for _ in range(size // MiB)) + zc.flush()
    return _xerial(bytes(size), 32 * 1024) if codec is CompressionType.SNAPPY else bytes(size)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decompression_bomb_is_refused_with_bounded_memory(codec: CompressionType) -> None:
    bomb = _bomb(codec, 64 * MiB)
    limit = 2 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(DecompressionLimitError, match="max_decompressed_bytes"):
            decompress(codec, bomb, max_decompressed_bytes=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the limit plus one codec step, never the 64 MiB the input inflates to
    assert peak < limit + 6 * MiB, peak
    # and with room enough it decodes
    if codec is not CompressionType.NONE:
        assert len(decompress(codec, _bomb(codec, 4 * MiB), max_decompressed_bytes=4 * MiB)) == (
            4 * MiB
        )


def test_limit_is_exact() -> None:
    payload = b"a" * 1000
    for codec in CODECS:
        data = compress(codec, payload)
        assert decompress(codec, data, max_decompressed_bytes=1000) == payload
        with pytest.raises(DecompressionLimitError):
            decompress(codec, data, max_decompressed_bytes=999)


def test_snappy_length_preamble_is_checked_before_allocating() -> None:
    lying = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + b"\x00" * 10  # claims 4 GiB
    with pytest.raises(DecompressionLimitError):
        decompress(CompressionType.SNAPPY, lying)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, bytes([0xFF] * 6))  # preamble too long


def test_errors_are_kafka_errors() -> None:
    assert issubclass(DecompressionLimitError, ProtocolError)
    assert not DecompressionLimitError.retriable
    assert issubclass(CompressionUnavailableError, ConfigError)
    assert issubclass(CompressionUnavailableError, KafkaError)


# -- corrupt input ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_garbage_raises_protocol_errors_only(codec: CompressionType) -> None:
    for junk in (b"\x00", b"garbage garbage garbage", os.urandom(64)):
        # CorruptRecordError, or DecompressionLimitError when junk "claims" a huge size;
        # raw snappy may even accept some junk. Nothing else may escape.
        try:
            decompress(codec, junk)
        except ProtocolError:
            pass
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00garbage")


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_truncated_streams_raise(codec: CompressionType) -> None:
    data = compress(codec, os.urandom(5000) + b"tail" * 1000)
    if codec is CompressionType.SNAPPY:
        data = compress(codec, os.urandom(5000) + b"tail" * 1000, snappy_xerial_framing=False)
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            decompress(codec, data[:cut])


def test_unknown_codec() -> None:
    with pytest.raises(CorruptRecordError, match="codec id 5"):
        decompress(5, b"")
    with pytest.raises(ConfigError):
        compress(7, b"")
    with pytest.raises(ConfigError):
        ensure_available(9)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    codec=st.sampled_from(COMPRESSED),
    payload=st.binary(max_size=3000),
    data=st.data(),
)
def test_fuzz_mutated_streams_raise_only_protocol_errors(
    codec: CompressionType, payload: bytes, data: st.DataObject
) -> None:
    blob = bytearray(compress(codec, payload * 3))
    mode = data.draw(st.sampled_from(["flip", "truncate", "random"]))
    if mode == "flip" and blob:
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif mode == "truncate":
        del blob[data.draw(st.integers(0, len(blob))) :]
    else:
        blob = bytearray(data.draw(st.binary(max_size=200)))
    try:
        out = decompress(codec, bytes(blob), max_decompressed_bytes=64 * 1024)
    except ProtocolError:
        return
    assert len(out) <= 64 * 1024


# -- optional libraries ------------------------------------------------------------------


def test_missing_snappy_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cramjam", None)  # makes `import cramjam` fail
    monkeypatch.setattr(compression, "_modules", {})
    assert not is_available(CompressionType.SNAPPY)
    with pytest.raises(CompressionUnavailableError, match=r"pip install aiostream-kafka\[snappy\]"):
        ensure_available(CompressionType.SNAPPY)
    with pytest.raises(CompressionUnavailableError):
        compress(CompressionType.SNAPPY, b"x")
    with pytest.raises(CompressionUnavailableError, match="cramjam"):
        decompress(CompressionType.SNAPPY, b"x")
    # the other codecs are unaffected
    assert is_available(CompressionType.LZ4)
    assert is_available(CompressionType.GZIP)


def test_all_codecs_available_here() -> None:
    for codec in CODECS:
        assert is_available(codec)
