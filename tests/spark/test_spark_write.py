"""Writes: a batch write and a streaming write, read back with the source; key, value and
headers must round-trip."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from _data import produce_rows

from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _read_all(spark: Any, bs: str, topic: str) -> list[Any]:
    rows: list[Any] = (
        spark.read.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    return rows


def _headers(row: Any) -> list[tuple[str, bytes | None]]:
    return [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers or []]


async def test_batch_write_round_trips_key_value_headers(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    out = await new_topic(partitions=3)
    data = [
        (
            f"k{i}" if i % 5 else None,
            f"value {i}",
            [("h", f"x{i}".encode()), ("empty", None)] if i % 2 else [],
            i % 3,
        )
        for i in range(500)
    ]
    df = spark.createDataFrame(
        data,
        "key string, value string, headers array<struct<key:string,value:binary>>, partition int",
    ).repartition(2)
    (
        df.write.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", out)
        .mode("append")
        .save()
    )
    got = _read_all(spark, bs, out)
    assert len(got) == 500
    seen = {
        (None if r.key is None else bytes(r.key).decode(), bytes(r.value).decode()): (
            _headers(r),
            r.partition,
        )
        for r in got
    }
    for key, value, headers, partition in data:
        assert seen[(key, value)] == (headers, partition)


async def test_stream_write_round_trips(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    source = await new_topic(partitions=2)
    out = await new_topic(partitions=2)
    rows = await produce_rows(bs, source, 2, 100)
    query = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", "70")
        .load()
        .selectExpr("key", "value", "headers", "CAST(partition AS INT) AS partition")
        .writeStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", out)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    got = _read_all(spark, bs, out)
    assert sorted((bytes(r.key), bytes(r.value), r.partition) for r in got) == sorted(
        (r.key, r.value, r.partition) for r in rows
    )
    by_key = {r.key: r for r in rows}
    for r in got:
        assert tuple(_headers(r)) == by_key[bytes(r.key)].headers
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {
        source: {"0": 100, "1": 100}
    }


def _checkpoint_batches(ckpt: Path) -> tuple[dict[int, dict[str, dict[str, int]]], set[int]]:
    """The micro-batches in a checkpoint: {batch id: the source's end offsets} from
    ``offsets/`` and the ids ``commits/`` lists as done."""
    ends = {
        int(f.name): json.loads(f.read_text().splitlines()[-1])
        for f in (ckpt / "offsets").iterdir()
        if f.name.isdigit()
    }
    done = {int(f.name) for f in (ckpt / "commits").iterdir() if f.name.isdigit()}
    return ends, done


async def test_stream_write_restarted_loses_nothing_and_repeats_one_batch_at_most(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    source = await new_topic(partitions=3)
    out = await new_topic(partitions=2)
    rows = await produce_rows(bs, source, 3, 100, headers=False)
    ckpt = tmp_path / "ckpt"

    def start(**trigger: Any) -> Any:
        return (
            spark.readStream.format("aiostream_kafka")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "30")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("aiostream_kafka")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", out)
            .option("checkpointLocation", str(ckpt))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="0 seconds")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # stop after a few batches, wherever it is
            if sum(p["numInputRows"] > 0 for p in query.recentProgress) >= 3:
                break
            await asyncio.sleep(0.05)
    finally:
        query.stop()
    ends, done = _checkpoint_batches(ckpt)
    assert 3 <= len(ends) < 10, (ends, done)  # stopped before the 300 offsets were read
    # a batch planned but not committed when the query stopped runs again on restart
    replayed = sorted(set(ends) - done)
    assert len(replayed) <= 1 and set(done) <= set(ends), (ends, done)
    query = start(availableNow=True)
    assert query.awaitTermination(240)
    assert query.exception() is None

    values = Counter(bytes(r.value) for r in _read_all(spark, bs, out))
    assert set(values) == {r.value for r in rows}  # nothing lost
    again = {value for value, n in values.items() if n > 1}
    assert all(n <= 2 for n in values.values())
    # duplicates only from the replayed batch (at-least-once: a replayed micro-batch
    # writes its rows again), none from committed ones
    allowed: set[bytes] = set()
    for batch in replayed:
        before = ends.get(batch - 1, {source: {}})[source]
        for p, end in ends[batch][source].items():
            allowed |= {f"v{p}-{o}".encode() for o in range(before.get(p, 0), end)}
    assert again <= allowed, (sorted(again), replayed)


async def test_batch_write_topic_and_partition_columns_per_row(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    """Rows of one task going to two topics, some to a named partition and some not
    (keyed: the producer's partitioner), in the order of the rows within each partition."""
    bs = kafka_cluster.bootstrap_servers
    first = await new_topic(partitions=2)
    second = await new_topic(partitions=3)
    data = [
        (
            first if i % 3 else second,
            None if i % 4 == 0 else i % 2,
            f"k{i % 7}" if i % 5 else None,
            f"value {i}".encode(),
            [("i", str(i).encode())] if i % 2 else None,
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(
        data,
        "topic string, partition int, key string, value binary, "
        "headers array<struct<key:string,value:binary>>",
    ).coalesce(1)
    df.write.format("aiostream_kafka").option("kafka.bootstrap.servers", bs).mode("append").save()
    got = {topic: _read_all(spark, bs, topic) for topic in (first, second)}
    assert sum(map(len, got.values())) == 300
    by_value = {
        bytes(r.value): (topic, r.partition, r.offset, r.key, _headers(r))
        for topic, rows in got.items()
        for r in rows
    }
    for topic, partition, key, value, headers in data:
        got_topic, got_partition, _, got_key, got_headers = by_value[value]
        assert got_topic == topic
        if partition is not None:
            assert got_partition == partition
        assert got_key == (None if key is None else key.encode())
        assert got_headers == (headers or [])
    # one task, so the rows of each partition are in the rows' order
    for topic, rows in got.items():
        for p in {r.partition for r in rows}:
            in_partition = sorted(
                (r.offset, int(bytes(r.value).split()[1])) for r in rows if r.partition == p
            )
            numbers = [n for _, n in in_partition]
            assert numbers == sorted(numbers), (topic, p)


async def test_batch_write_null_topic_fails_the_write(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    df = spark.createDataFrame([(topic, "a"), (None, "b")], "topic string, value string")
    with pytest.raises(Exception) as info:  # Spark wraps the worker's ConfigError
        df.coalesce(1).write.format("aiostream_kafka").option("kafka.bootstrap.servers", bs).mode(
            "append"
        ).save()
    assert "null 'topic'" in str(info.value)
