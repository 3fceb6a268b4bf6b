"""Behaviour the JVM connector (spark-sql-kafka-0-10) shows, checked against the real
broker: empty reads, a missing topic, failOnDataLoss=false after deleted records, null
headers, subscribePattern as a search, minPartitions splits, the default save mode (the
one item not fixed: Spark refuses it before the source runs)."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from _data import produce_rows

from aiostream_kafka.admin import Admin
from aiostream_kafka.producer import Producer
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _read(spark: Any, bs: str, **options: str) -> Any:
    reader = spark.read.format("aiostream_kafka").option("kafka.bootstrap.servers", bs)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


async def test_nothing_to_read_gives_no_rows(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    empty = await new_topic(partitions=2)
    assert _read(spark, bs, subscribe=empty).collect() == []
    assert _read(spark, bs, assign=json.dumps({empty: []})).collect() == []
    full = await new_topic(partitions=1)
    await produce_rows(bs, full, 1, 10, headers=False)
    same = json.dumps({full: {"0": 4}})
    df = _read(spark, bs, subscribe=full, startingOffsets=same, endingOffsets=same)
    assert df.collect() == []
    assert df.count() == 0
    # a pattern that matches no topic: no partitions, no rows (as the JVM connector)
    assert _read(spark, bs, subscribePattern="^no-such-topic-zz$").collect() == []


async def test_missing_topic_fails_naming_it(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    there = await new_topic(partitions=1)
    missing = f"missing-{time.time_ns()}"
    for options in (
        {"subscribe": f"{there},{missing}"},
        {"assign": json.dumps({missing: [0]})},
        {"assign": json.dumps({there: [0, 7]})},
    ):
        with pytest.raises(Exception) as info:
            _read(spark, bs, **options).collect()
        text = str(info.value)
        assert "UnknownTopicOrPartition" in text
        assert (missing in text) or (f"{there}-7" in text)
        assert "AssertionError" not in text


async def _produce_and_delete(bs: str, topic: str) -> None:
    async with Producer(bootstrap_servers=bs, linger_ms=2) as producer:
        for i in range(100):
            await producer.enqueue(topic, value=b"v%d" % i, partition=0)
        await producer.flush()
    async with Admin(bs) as admin:
        low = await admin.delete_records({TopicPartition(topic, 0): 50})
    assert low == {TopicPartition(topic, 0): 50}


async def test_fail_on_data_loss_false_reads_what_survives(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await _produce_and_delete(bs, topic)
    starting = json.dumps({topic: {"0": 10}})
    df = _read(spark, bs, subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(50, 100))

    with pytest.raises(Exception) as info:
        _read(spark, bs, subscribe=topic, startingOffsets=starting).collect()
    assert "failOnDataLoss" in str(info.value)
    assert f"{topic}-0" in str(info.value)

    query = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("failOnDataLoss", "false")
        .load()
        .select("offset")
        .writeStream.format("memory")
        .queryName("parity_data_loss")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = sorted(r.offset for r in spark.sql("SELECT offset FROM parity_data_loss").collect())
    assert got == list(range(50, 100))


async def test_headers_null_without_headers(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    async with Producer(bootstrap_servers=bs, linger_ms=2) as producer:
        for i in range(6):
            headers = [("h", b"%d" % i)] if i % 3 == 0 else []
            await producer.enqueue(topic, value=b"v%d" % i, headers=headers, partition=0)
        await producer.flush()
    rows = _read(spark, bs, subscribe=topic, includeHeaders="true").collect()
    got = {
        r.offset: None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers]
        for r in rows
    }
    assert got == {0: [("h", b"0")], 1: None, 2: None, 3: [("h", b"3")], 4: None, 5: None}
    df = _read(spark, bs, subscribe=topic, includeHeaders="true")
    assert df.where("headers IS NULL").count() == 4


async def test_subscribe_pattern_matches_anywhere_in_the_name(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await produce_rows(bs, topic, 1, 5, headers=False)
    middle = topic[4:-4]  # neither a prefix nor a suffix: Java's find(), not matches()
    df = _read(spark, bs, subscribePattern=middle.replace(".", r"\."))
    assert {r.topic for r in df.select("topic").distinct().collect()} == {topic}
    assert df.count() == 5


async def test_min_partitions_splits_as_the_jvm_connector(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    await produce_rows(bs, topic, 3, 100, headers=False)

    def load(ending: dict[str, int], min_partitions: int) -> Any:
        return _read(
            spark,
            bs,
            subscribe=topic,
            endingOffsets=json.dumps({topic: ending}),
            minPartitions=str(min_partitions),
        )

    df = load({"0": 100, "1": 1, "2": 0}, 10)
    # sizes 100, 1 (and 0): partition 1 stays whole, partition 0 gets the other 9 (the JVM
    # connector's count; a share of 10 of 101 for partition 0 would give 11 in all)
    assert df.rdd.getNumPartitions() == 10
    assert df.count() == 101
    # a batch read splits only when minPartitions exceeds the partitions read, the empty
    # one included: 3 is not more than 3, so no split (the JVM connector also gives the
    # empty partition a Spark partition of its own; this source leaves it out)
    df = load({"0": 5, "1": 3, "2": 0}, 3)
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == 8


def test_default_save_mode_is_refused_by_spark(spark: Any, kafka_cluster: KafkaCluster) -> None:
    """Spark refuses the default mode (ErrorIfExists) for every Python data source, in the
    JVM, before any of the source's code runs: its message (which also offers "Overwrite")
    cannot be changed from here, so docs/spark.md names it and the fix, .mode("append").
    This test notices if Spark starts to accept the mode or words it differently."""
    bs = kafka_cluster.bootstrap_servers
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = df.write.format("aiostream_kafka").option("kafka.bootstrap.servers", bs)
    with pytest.raises(Exception) as info:
        writer.option("topic", "t").save()
    text = str(info.value)
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in text
    assert '"aiostream_kafka" cannot be written in the "ErrorIfExists" mode' in text
    # the mode Spark's message suggests besides Append fails with ours, naming append
    with pytest.raises(Exception) as info:
        writer.option("topic", "t").mode("overwrite").save()
    assert '.mode("append")' in str(info.value)
