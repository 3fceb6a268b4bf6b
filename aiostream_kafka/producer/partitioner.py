"""Choosing the partition of a record.

* An explicit ``partition`` is used as is.
* A keyed record goes to ``toPositive(murmur2(key)) % partitions``: the Java client's
  built-in partitioner, byte for byte, so that records with the same key land in the same
  partition whichever client (Java, librdkafka's ``murmur2_random``, this one) wrote them.
* A keyless record goes to the *sticky* partition of its topic (KIP-480): every keyless
  record sticks to one partition until the batch it fills there is complete (full, or taken
  by the sender), then a new partition is chosen at random. That yields large batches at
  low ``linger_ms`` instead of one tiny batch per partition, which round-robin gives.
"""

from __future__ import annotations

import random
import struct
from typing import Final

__all__ = ["KeyPartitions", "StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK32: Final = 0xFFFFFFFF

# Whether this module runs compiled (mypyc: see aiostream_kafka._native).
COMPILED: Final[bool] = not __file__.endswith(".py")

# Unpackers of n little-endian uint32 words, built once per word count.
_WORDS: dict[int, struct.Struct] = {}


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Return the 32-bit murmur2 hash of ``data`` as Kafka's ``Utils.murmur2`` computes it
    (seed ``0x9747b28c``, little-endian words), as a signed int like Java's."""
    if COMPILED:
        return _murmur2_native(data if type(data) is bytes else bytes(data))
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    n_words = length >> 2
    if n_words:
        unpack = _WORDS.get(n_words)
        if unpack is None:
            unpack = _WORDS.setdefault(n_words, struct.Struct(f"<{n_words}I"))
        for k in unpack.unpack_from(data, 0):
            k = (k * _M) & _MASK32
            k ^= k >> 24
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    if tail:
        at = length - tail
        if tail == 3:
            h ^= data[at + 2] << 16
        if tail >= 2:
            h ^= data[at + 1] << 8
        h ^= data[at]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_M_LO: Final = _M & 0xFFFF
_M_HI: Final = _M >> 16


def _mul32(k: int) -> int:
    """``(k * _M) & _MASK32`` for ``0 <= k < 2**32`` from products of 16-bit halves:
    compiled, mypyc multiplies natively only when both factors are below 2**30 (it takes
    the long-integer path otherwise), which ``k * _M`` never is (~100 ns a product)."""
    lo = k & 0xFFFF
    return (lo * _M_LO + ((((k >> 16) * _M_LO + lo * _M_HI) & 0xFFFF) << 16)) & _MASK32


def _murmur2_native(data: bytes) -> int:
    """:func:`murmur2` written for mypyc (byte indexing and small ints: about 20x the
    interpreted loop once compiled, and slower than it interpreted, so only the compiled
    build calls it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end = length & ~3
    i = 0
    while i < end:
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = _mul32(k)
        k ^= k >> 24
        k = _mul32(k)
        h = _mul32(h) ^ k
        i += 4
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = _mul32(h)
    h ^= h >> 13
    h = _mul32(h)
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, partitions: int) -> int:
    """The partition of a keyed record among ``partitions``, as the Java client picks it."""
    return to_positive(murmur2(key)) % partitions


class StickyPartitioner:
    """The sticky partition of each topic for keyless records (KIP-480).

    The accumulator asks :meth:`partition` for every keyless record and calls
    :meth:`next_partition` when the sticky partition's batch is complete; the new
    partition is drawn among those with a leader (``available``) when there are any, and
    differs from the previous one whenever possible.
    """

    __slots__ = ("_current", "_random")

    def __init__(self, rng: random.Random | None = None) -> None:
        self._current: dict[str, int] = {}
        self._random = rng or random.Random()

    def partition(self, topic: str, partitions: int, available: list[int] | None = None) -> int:
        """The current sticky partition of ``topic`` (choosing one the first time)."""
        current = self._current.get(topic)
        if current is None or current >= partitions:
            current = self._choose(topic, partitions, available, None)
        return current

    def forget(self, topic: str) -> None:
        """Drop the state of ``topic`` (no longer produced to)."""
        self._current.pop(topic, None)

    def next_partition(
        self, topic: str, partitions: int, available: list[int] | None = None
    ) -> int:
        """Move ``topic`` to another partition (its batch is complete) and return it."""
        return self._choose(topic, partitions, available, self._current.get(topic))

    def _choose(
        self, topic: str, partitions: int, available: list[int] | None, previous: int | None
    ) -> int:
        candidates: list[int] | range = available if available else range(partitions)
        if len(candidates) == 1:
            choice = candidates[0]
        else:
            choice = self._random.choice(candidates)
            while choice == previous:
                choice = self._random.choice(candidates)
        self._current[topic] = choice
        return choice


class KeyPartitions:
    """The partitions of the keys a producer sent lately, per topic: ``murmur2`` in Python
    costs about a microsecond and a half per key, a dict look-up a few tens of
    nanoseconds, and keys repeat (users, orders, devices). A topic's table is dropped
    when its partition count changes, and emptied when it holds ``limit`` keys (the
    keys seen since fill it again); only ``bytes`` keys are kept (hashable, immutable).
    """

    __slots__ = ("_tables", "limit")

    def __init__(self, limit: int = 65536) -> None:
        self._tables: dict[str, tuple[int, dict[bytes, int]]] = {}
        self.limit = limit

    def partition(self, topic: str, key: bytes | bytearray | memoryview, partitions: int) -> int:
        """:func:`partition_for_key` of ``key`` among ``partitions``, remembered."""
        if type(key) is not bytes:
            return partition_for_key(key, partitions)
        entry = self._tables.get(topic)
        if entry is None or entry[0] != partitions:
            entry = self._tables[topic] = (partitions, {})
        table = entry[1]
        found = table.get(key)
        if found is not None:
            return found
        if len(table) >= self.limit:
            table.clear()
        found = table[key] = partition_for_key(key, partitions)
        return found

    def forget(self, topic: str) -> None:
        """Drop the table of ``topic`` (no longer produced to)."""
        self._tables.pop(topic, None)
