"""``commitOffsetsToGroup``: a streaming query's progress in a Kafka consumer group, where
Kafka's lag tools read it (our Admin and confluent-kafka's agree), never ahead of the
batches Spark committed to its checkpoint."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _data import produce_rows
from helpers import eventually

from aiostream_kafka.admin import Admin
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _query(spark: Any, bs: str, topic: str, ckpt: Path, group: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("commitOffsetsToGroup", "true")
        .option("kafka.group.id", group)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def _checkpointed(ckpt: Path) -> dict[TopicPartition, int] | None:
    """The end offsets of the last batch in the checkpoint's commit log (None: none yet)."""
    commits = [int(p.name) for p in (ckpt / "commits").glob("[0-9]*")] if ckpt.exists() else []
    if not commits:
        return None
    lines = (ckpt / "offsets" / str(max(commits))).read_text().splitlines()
    source = json.loads(lines[2])  # v1, the batch's metadata, then one line per source
    return {TopicPartition(t, int(p)): o for t, parts in source.items() for p, o in parts.items()}


async def _group(admin: Admin, group: str) -> dict[TopicPartition, int]:
    return {tp: om.offset for tp, om in (await admin.list_consumer_group_offsets(group)).items()}


async def test_lag_falls_to_zero_for_our_admin_and_confluent_kafka(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as CkTP
    from confluent_kafka.admin import AdminClient

    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=3)
    await produce_rows(bs, topic, 3, 40, headers=False)
    group = f"spark-lag-{uuid.uuid4().hex[:8]}"
    query = _query(spark, bs, topic, tmp_path / "ckpt", group, maxOffsetsPerTrigger="50")
    try:
        await asyncio.to_thread(query.processAllAvailable)
        async with Admin(bs) as admin:
            # processAllAvailable returned: the trigger that found nothing new committed
            # the last batch's end (no new batch is needed for that)
            lag = await eventually(
                lambda: admin.consumer_group_lag(group), lambda lag: len(lag) == 3, 10
            )
            assert lag == {TopicPartition(topic, p): 0 for p in range(3)}
            ours = await _group(admin, group)
        assert ours == {TopicPartition(topic, p): 40 for p in range(3)}
        peer = AdminClient({"bootstrap.servers": bs})
        request = ConsumerGroupTopicPartitions(group, [CkTP(topic, p) for p in range(3)])
        answer = peer.list_consumer_group_offsets([request])[group].result(timeout=20)
        theirs = {
            TopicPartition(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions
        }
        assert theirs == ours

        # more records: the group follows the query
        await produce_rows(bs, topic, 3, 10, headers=False)
        await asyncio.to_thread(query.processAllAvailable)
        async with Admin(bs) as admin:
            await eventually(
                lambda: _group(admin, group),
                lambda got: got == {TopicPartition(topic, p): 50 for p in range(3)},
                10,
            )
            assert set((await admin.consumer_group_lag(group)).values()) == {0}
    finally:
        query.stop()


async def test_group_is_never_ahead_of_the_checkpoint(
    spark: Any, kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=2)
    await produce_rows(bs, topic, 2, 150, headers=False)
    group = f"spark-ahead-{uuid.uuid4().hex[:8]}"
    ckpt = tmp_path / "ckpt"
    # 300 offsets at most 20 a trigger: about 15 batches, watched while they run
    query = _query(spark, bs, topic, ckpt, group, maxOffsetsPerTrigger="20")
    seen: list[dict[TopicPartition, int]] = []
    try:
        async with Admin(bs) as admin:
            deadline = time.monotonic() + 120
            while len(seen) < 4 and time.monotonic() < deadline:
                # the group first, then the checkpoint, which only moves forward: a group
                # offset past the checkpoint's would have been committed before Spark's
                committed = await _group(admin, group)
                checkpointed = _checkpointed(ckpt)
                if committed:
                    assert checkpointed is not None
                    for tp, offset in committed.items():
                        assert offset <= checkpointed[tp], (committed, checkpointed)
                    if not seen or committed != seen[-1]:
                        seen.append(committed)
                await asyncio.sleep(0.05)
    finally:
        query.stop()
    assert len(seen) >= 4, f"the group moved only {len(seen)} times: {seen}"
    # stopped mid-way: the group holds a batch end the checkpoint committed, none further
    async with Admin(bs) as admin:
        final = await _group(admin, group)
    checkpointed = _checkpointed(ckpt)
    assert checkpointed is not None
    assert sum(checkpointed.values()) < 300  # mid-way indeed
    assert all(final[tp] <= checkpointed[tp] for tp in final)
    assert sum(final.values()) >= sum(checkpointed.values()) - 20  # at most one batch behind
