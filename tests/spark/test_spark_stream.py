"""Streaming reads: rate-limited micro-batches into a Parquet sink with a checkpoint,
restart, Trigger.AvailableNow, minOffsetsPerTrigger/maxTriggerDelay, and a partition or a
topic (subscribePattern) added while the query runs."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _data import produce_rows

from aiostream_kafka.admin import Admin
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _stream(spark: Any, bs: str, topic: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _parquet_rows(spark: Any, path: Path) -> list[tuple[int, int, bytes]]:
    return sorted(
        (r.partition, r.offset, bytes(r.value))
        for r in spark.read.parquet(str(path)).select("partition", "offset", "value").collect()
    )


async def test_rate_limited_stream_restarts_from_checkpoint_exactly_once(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    first = await produce_rows(bs, topic, 3, 100, headers=False)
    sink, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def start() -> Any:
        return (
            _stream(spark, bs, topic, startingOffsets="earliest", maxOffsetsPerTrigger="60")
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert len(batches) >= 5  # 300 offsets at <= 60 per trigger
    assert all(p["numInputRows"] <= 60 for p in batches)
    assert sum(p["numInputRows"] for p in batches) == 300

    second = await produce_rows(bs, topic, 3, 40, headers=False)
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    expected = sorted((r.partition, r.offset, r.value) for r in first + second)
    assert _parquet_rows(spark, sink) == expected  # every record exactly once


async def test_available_now_reads_what_is_there_and_stops(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    rows = await produce_rows(bs, topic, 2, 50, headers=False)
    query = (
        _stream(spark, bs, topic, startingOffsets="earliest", maxOffsetsPerTrigger="30")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    data_batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(data_batches) >= 4
    assert _parquet_rows(spark, tmp_path / "out") == sorted(
        (r.partition, r.offset, r.value) for r in rows
    )


async def test_new_partitions_are_read_from_the_beginning(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=1)
    await produce_rows(bs, topic, 1, 10, headers=False)
    query = (
        _stream(spark, bs, topic, startingOffsets="latest")
        .writeStream.format("memory")
        .queryName("new_parts")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        async with Admin(bs) as admin:
            await admin.create_partitions({topic: 2})
        await produce_rows(bs, topic, 2, 5, headers=False)
        deadline = time.monotonic() + 60
        got: list[tuple[int, int]] = []
        while time.monotonic() < deadline:
            query.processAllAvailable()
            got = sorted(
                (r.partition, r.offset)
                for r in spark.sql("select partition, offset from new_parts").collect()
            )
            if len(got) >= 10:
                break
            await asyncio.sleep(0.5)
    finally:
        query.stop()
    # the 5 new records of partition 0 (after 'latest') and all 5 of the new partition 1
    assert got == [(0, o) for o in range(10, 15)] + [(1, o) for o in range(5)]
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {topic: {"0": 15, "1": 5}}


async def test_min_offsets_per_trigger_waits_for_enough_or_max_trigger_delay(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    delay = 10.0
    began = time.time()
    query = (
        _stream(spark, bs, topic, minOffsetsPerTrigger="50", maxTriggerDelay=f"{delay:.0f}s")
        .writeStream.format("memory")
        .queryName("min_offsets")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def count() -> int:
        return int(spark.sql("select count(*) from min_offsets").collect()[0][0])

    async def wait_for(rows: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if count() >= rows:
                return
            await asyncio.sleep(0.2)

    try:
        query.processAllAvailable()  # the first trigger goes through (nothing there yet)
        await produce_rows(bs, topic, 2, 10, headers=False)  # 20 < 50
        await asyncio.sleep(2)
        seen, checked = count(), time.time()
        await produce_rows(bs, topic, 2, 20, headers=False)  # 60 >= 50
        await wait_for(60, 60)
        await produce_rows(bs, topic, 2, 1, headers=False)  # 2 < 50: only after the delay
        await wait_for(62, 60)
        assert count() == 62
        batches = [
            (_progress_time(p), p["numInputRows"])
            for p in query.recentProgress
            if p["numInputRows"] > 0
        ]
        latest = json.loads(query.lastProgress["sources"][0]["latestOffset"])
    finally:
        query.stop()
    if checked < began + delay - 0.5:  # (the first trigger came after `began`)
        assert seen == 0, batches
    # the 2 offsets (the last batch) waited for maxTriggerDelay after the trigger before
    assert batches[-1][1] == 2 and batches[-1][0] - batches[-2][0] >= delay - 0.5, batches
    # a batch of fewer than 50 offsets only after the delay, from the previous data batch
    # (or the query's start); on a fast enough machine the first 20 waited for the 40
    for (before, _), (at, rows) in zip([(began, 0), *batches], batches, strict=False):
        assert rows >= 50 or at - before >= delay - 0.5, batches
    if checked < began + delay - 5:
        assert [rows for _, rows in batches] == [60, 2], batches
    assert latest == {topic: {"0": 31, "1": 31}}  # reportLatestOffset


def _progress_time(progress: dict[str, Any]) -> float:
    """A progress entry's trigger start as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


async def test_available_now_reads_to_its_target_despite_min_offsets_per_trigger(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    rows = await produce_rows(bs, topic, 2, 50, headers=False)
    query = (
        _stream(spark, bs, topic, startingOffsets="earliest", minOffsetsPerTrigger="1000")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)  # not held back until maxTriggerDelay (15 min)
    assert query.exception() is None
    assert _parquet_rows(spark, tmp_path / "out") == sorted(
        (r.partition, r.offset, r.value) for r in rows
    )


async def test_pattern_picks_up_a_topic_created_while_running(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    first = await new_topic(partitions=1)
    await produce_rows(bs, first, 1, 5, headers=False)
    query = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribePattern", f"^{first}(-later)?$")
        .option("startingOffsets", "latest")
        .load()
        .writeStream.format("memory")
        .queryName("pattern_new_topic")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        later = await new_topic(name=f"{first}-later", partitions=2)
        await produce_rows(bs, later, 2, 3, headers=False)  # before the query sees it
        deadline = time.monotonic() + 60
        got: list[tuple[str, int, int]] = []
        while time.monotonic() < deadline:
            query.processAllAvailable()
            got = sorted(
                (r.topic, r.partition, r.offset)
                for r in spark.sql(
                    "select topic, partition, offset from pattern_new_topic"
                ).collect()
            )
            if len(got) >= 6:
                break
            await asyncio.sleep(0.5)
    finally:
        query.stop()
    # the new topic is read from offset 0, as by the built-in source
    assert got == [(later, p, o) for p in range(2) for o in range(3)]
