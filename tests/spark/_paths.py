"""The read, write and streaming paths, run the same way on every Spark deployment the
tests start (a Spark Connect server; a standalone cluster through one): each checks its
rows exactly and returns where its Python tasks ran (see :func:`tag_executor`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from _data import produce_rows

from aiostream_kafka.consumer import Consumer
from aiostream_kafka.structs import TopicPartition


def tag_executor() -> Any:
    """A ``mapInArrow`` function adding the column ``executor``: the ``--executor-id`` of
    the executor JVM the Python worker runs under (found up its parent processes), or
    ``"driver"`` (a local master runs tasks in the driver's JVM). Built here, as a nested
    function, so that it is pickled by value (the tests' modules are not importable in the
    executors)."""

    def tag(batches: Any) -> Any:
        import os

        import pyarrow as pa  # type: ignore[import-untyped]

        ident = "driver"
        pid = os.getpid()
        for _ in range(8):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                break
            if b"--executor-id" in argv:
                ident = argv[argv.index(b"--executor-id") + 1].decode()
                break
            pid = parent
        for batch in batches:
            yield batch.append_column("executor", pa.array([ident] * batch.num_rows, pa.string()))

    return tag


def tagged(df: Any) -> Any:
    """``df`` with the ``executor`` column (:func:`tag_executor`)."""
    return df.mapInArrow(tag_executor(), df.schema.add("executor", "string"))


def _source(session: Any, bs: str, topic: str, *, stream: bool) -> Any:
    reader = session.readStream if stream else session.read
    return (
        reader.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


async def batch_read(session: Any, bs: str, topic: str, partitions: int) -> set[str]:
    """Read a topic written here; every record exactly. Returns the executors."""
    rows = await produce_rows(bs, topic, partitions, 25, headers=False)
    got = tagged(_source(session, bs, topic, stream=False)).collect()
    assert sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in got) == sorted(
        (r.partition, r.offset, r.key, r.value) for r in rows
    )
    return {r.executor for r in got}


async def batch_write(session: Any, bs: str, topic: str, partitions: int) -> set[str]:
    """Write 200 rows over ``partitions`` partitions; read back with a Consumer of ours.
    Returns the executors that wrote (their ids in the records' headers)."""
    data = [(f"k{i}", f"v{i}", i % partitions) for i in range(200)]
    df = session.createDataFrame(data, "key string, value string, partition int").repartition(2)
    (
        tagged(df)
        .selectExpr(
            "key",
            "value",
            "partition",
            "array(named_struct('key', 'executor', 'value', CAST(executor AS BINARY))) AS headers",
        )
        .write.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", bs)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    got: list[tuple[int, str, str, str]] = []
    async with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        async with asyncio.timeout(60):
            async for batch in consumer.batches():
                for r in batch:
                    assert r.key is not None and r.value is not None
                    got.append(
                        (
                            r.partition,
                            r.key.decode(),
                            r.value.decode(),
                            dict(r.headers)["executor"].decode(),
                        )  # type: ignore[union-attr]
                    )
                if len(got) >= len(data):
                    break
    assert sorted(g[:3] for g in got) == sorted((p, k, v) for k, v, p in data)
    return {g[3] for g in got}


async def streaming_read(
    session: Any, bs: str, topic: str, partitions: int, work: Path
) -> set[str]:
    """A streaming query into Parquet (with a checkpoint) over records written before and
    while it runs; every record exactly once. Returns the executors."""
    first = await produce_rows(bs, topic, partitions, 20, headers=False)
    out, ckpt = work / "out", work / "ckpt"
    query = (
        tagged(_source(session, bs, topic, stream=True))
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        await asyncio.to_thread(query.processAllAvailable)
        second = await produce_rows(bs, topic, partitions, 10, headers=False)
        await asyncio.to_thread(query.processAllAvailable)
        assert query.exception() is None
    finally:
        query.stop()
    got = session.read.parquet(str(out)).collect()
    expected = sorted((r.partition, r.offset, r.value) for r in first + second)
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in got) == expected
    return {r.executor for r in got}
