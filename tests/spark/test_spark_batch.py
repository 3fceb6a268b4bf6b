"""Batch reads against the real broker through a local[2] SparkSession."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _data import produce_rows

from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _read(spark: Any, bs: str, **options: str) -> Any:
    reader = spark.read.format("aiostream_kafka").option("kafka.bootstrap.servers", bs)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _triples(df: Any) -> set[tuple[int, int, bytes]]:
    return {(r.partition, r.offset, bytes(r.value)) for r in df.collect()}


async def test_batch_read_json_offsets_is_exact(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    rows = await produce_rows(bs, topic, 3, 30)
    starting = {topic: {"0": 5, "1": -2, "2": 10}}
    ending = {topic: {"0": 20, "1": -1, "2": 12}}
    df = _read(
        spark,
        bs,
        subscribe=topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    got = df.collect()
    expected = {
        (r.partition, r.offset, r.value)
        for r in rows
        if (r.partition == 0 and 5 <= r.offset < 20)
        or r.partition == 1
        or (r.partition == 2 and 10 <= r.offset < 12)
    }
    assert len(got) == len(expected) == 15 + 30 + 2
    assert {(r.partition, r.offset, bytes(r.value)) for r in got} == expected
    by_offset = {(r.partition, r.offset): r for r in rows}
    for r in got:
        src = by_offset[(r.partition, r.offset)]
        assert bytes(r.key) == src.key
        assert r.topic == topic
        assert r.timestampType == 0
        assert int(r.timestamp.timestamp() * 1000) == src.timestamp_ms


async def test_batch_read_by_timestamps_with_headers(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    base = int(time.time() * 1000) - 3_600_000
    rows = await produce_rows(bs, topic, 2, 20, base_ts=base)
    # partition 0 from record 5 to record 15 (exclusive), partition 1 from 12 to the end
    starting = {topic: {"0": base + 5000, "1": base + 11_500}}
    ending = {topic: {"0": base + 15_000, "1": base + 99_000_000}}
    df = _read(
        spark,
        bs,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps(starting),
        endingOffsetsByTimestamp=json.dumps(ending),
        includeHeaders="true",
    )
    got = df.collect()
    expected = [
        r
        for r in rows
        if (r.partition == 0 and 5 <= r.offset < 15) or (r.partition == 1 and r.offset >= 12)
    ]
    assert sorted((r.partition, r.offset) for r in got) == sorted(
        (r.partition, r.offset) for r in expected
    )
    by_offset = {(r.partition, r.offset): r for r in rows}
    for r in got:
        headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
        assert headers == by_offset[(r.partition, r.offset)].headers


async def test_batch_read_min_partitions_assign_and_pattern(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    rows = await produce_rows(bs, topic, 2, 50, headers=False)
    df = _read(spark, bs, subscribe=topic, minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    assert _triples(df) == {(r.partition, r.offset, r.value) for r in rows}
    assert df.count() == 100  # no record twice

    df = _read(spark, bs, assign=json.dumps({topic: [1]}))
    assert _triples(df) == {(r.partition, r.offset, r.value) for r in rows if r.partition == 1}

    pattern = topic[: len(topic) - 3].replace(".", r"\.") + ".*"
    df = _read(spark, bs, subscribePattern=pattern)
    assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}
    assert df.count() == 100
