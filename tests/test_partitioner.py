"""Partitioning: murmur2 byte-compatible with the Java client, sticky keyless records."""

from __future__ import annotations

import itertools
import os
import random

from hypothesis import given
from hypothesis import strategies as st
from producer_oracle import librdkafka_partitions, read_all

from aiostream_kafka.producer import Producer
from aiostream_kafka.producer.partitioner import (
    KeyPartitions,
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)
from aiostream_kafka.testing import KafkaCluster


def test_murmur2_matches_the_java_client_golden_values() -> None:
    # Values of org.apache.kafka.common.utils.Utils.murmur2 (Kafka's UtilsTest).
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in cases.items():
        assert murmur2(key) == expected, key


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_in_range_and_accepts_any_bytes_like(key: bytes, n: int) -> None:
    p = partition_for_key(key, n)
    assert 0 <= p < n
    assert partition_for_key(bytearray(key), n) == p == partition_for_key(memoryview(key), n)


def test_key_partitions_remembers_murmur2_per_topic_and_partition_count() -> None:
    """The producer's key -> partition memory answers what partition_for_key does, for a
    topic whose partition count changed too, for non-bytes keys (not kept), and across
    its limit (emptied, then filled again)."""
    cache = KeyPartitions(limit=50)
    keys = [b"user-%d" % i for i in range(120)]
    for _ in range(2):
        for key in keys:
            assert cache.partition("t", key, 6) == partition_for_key(key, 6)
            assert cache.partition("t", key, 600) == partition_for_key(key, 600)
            assert cache.partition("u", key, 7) == partition_for_key(key, 7)
    assert cache.partition("t", bytearray(b"user-3"), 6) == partition_for_key(b"user-3", 6)
    assert cache.partition("t", memoryview(b"user-4"), 6) == partition_for_key(b"user-4", 6)
    assert all(len(table) <= 50 for _, table in cache._tables.values())
    cache.forget("t")
    assert "t" not in cache._tables and "u" in cache._tables


def test_sticky_partitioner_sticks_then_moves_to_another_available_partition() -> None:
    sticky = StickyPartitioner(random.Random(7))
    first = sticky.partition("t", 6, [0, 2, 4])
    assert first in (0, 2, 4)
    assert all(sticky.partition("t", 6, [0, 2, 4]) == first for _ in range(10))
    seen = set()
    previous = first
    for _ in range(50):
        nxt = sticky.next_partition("t", 6, [0, 2, 4])
        assert nxt != previous and nxt in (0, 2, 4)
        seen.add(nxt)
        previous = nxt
    assert seen == {0, 2, 4}
    assert sticky.next_partition("t", 1, None) == 0  # one partition: no choice


async def test_keyed_records_land_where_the_java_partitioner_puts_them(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    partitions = 7
    ours = await new_topic(partitions=partitions)
    theirs = await new_topic(partitions=partitions)
    rng = random.Random(11)
    keys = [f"key-{i}".encode() for i in range(300)] + [
        os.urandom(rng.randrange(0, 40)) for _ in range(300)
    ]
    bs = kafka_cluster.bootstrap_servers
    async with Producer(bs, linger_ms=1) as producer:
        futures = [
            await producer.enqueue(ours, value=str(i).encode(), key=k) for i, k in enumerate(keys)
        ]
        metas = [await f for f in futures]
    expected = [partition_for_key(k, partitions) for k in keys]
    assert [m.partition for m in metas] == expected
    # What the broker holds, read by librdkafka, agrees with the metadata.
    stored = {int(r.value): r.partition for r in await read_all(bs, ours, partitions)}  # type: ignore[arg-type]
    assert [stored[i] for i in range(len(keys))] == expected
    # And librdkafka's murmur2_random partitioner (the Java algorithm) picks the same.
    assert await librdkafka_partitions(bs, theirs, keys) == expected


async def test_keyless_records_fill_sticky_batches(kafka_cluster: KafkaCluster, new_topic) -> None:
    topic = await new_topic(partitions=4)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=50, batch_size=4096) as p:
        futures = [await p.enqueue(topic, value=b"v" * 100) for _ in range(400)]
        metas = [await f for f in futures]
    # Runs of consecutive records share a partition (whole batches), and more than one
    # partition is used over time.
    runs = 1 + sum(1 for a, b in itertools.pairwise(metas) if a.partition != b.partition)
    assert runs <= 400 * 140 // 4096 + 2, runs  # about one run per ~4 KiB batch
    assert len({m.partition for m in metas}) > 1
