"""The default partitioner's choice for a whole Arrow column of keys at once.

Kafka's default partitioner puts a keyed record in ``toPositive(murmur2(key)) %
partitions`` (:func:`aiostream_kafka.producer.partitioner.partition_for_key`, one key at
a time in Python: about 1 µs a key). The writer hashes a batch's keys here with numpy, one
pass per distinct key length, and hands the producer each partition's rows with that
partition named, which lands every record where the producer would have put it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

__all__ = ["key_partitions"]

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)


def _murmur2(data: Any, starts: Any, length: int) -> Any:
    """murmur2 (as unsigned 32-bit words) of the ``length``-byte keys at ``starts``."""
    h = np.full(len(starts), (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    n_words = length >> 2
    if n_words:
        index = starts[:, None] + np.arange(n_words * 4, dtype=starts.dtype)
        words = np.ascontiguousarray(data[index]).view("<u4")
        for j in range(n_words):
            k = words[:, j] * _M
            k ^= k >> np.uint32(24)
            k *= _M
            h *= _M
            h ^= k
    tail = length & 3
    if tail:
        at = starts + (length - tail)
        if tail == 3:
            h ^= data[at + 2].astype(np.uint32) << np.uint32(16)
        if tail >= 2:
            h ^= data[at + 1].astype(np.uint32) << np.uint32(8)
        h ^= data[at].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def key_partitions(keys: pa.Array, partitions: int) -> Any:
    """The partition of each key of ``keys`` (binary or large binary) among
    ``partitions``, as ``partition_for_key`` computes it, as a numpy int64 array; the
    entries of null keys are meaningless (the caller leaves those rows to the producer).
    """
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    _, offsets_buf, data_buf = keys.buffers()
    offsets_raw = np.frombuffer(offsets_buf, dtype=offset_type)[keys.offset : keys.offset + n + 1]
    offsets: Any = offsets_raw.astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    hashes = np.empty(n, dtype=np.uint32)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        hashes[rows] = _murmur2(data, starts[rows], int(length))
    return (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % partitions
