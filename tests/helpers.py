"""Helpers shared by the tests (the fixtures come from the project's pytest plugin)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from aiostream_kafka import Admin, Consumer, OffsetSpec, Record, TopicPartition

T = TypeVar("T")

# Topic config for tests that write records with fixed timestamps in the past
# (1_700_000_000_000 is November 2023): the broker's time retention (7 days by default)
# deletes every segment up to the high watermark, the active one included, at its next
# retention check (every 5 minutes), so records could vanish between writing and reading.
KEEP_OLD_RECORDS = {"retention.ms": "-1"}


def processes_mentioning(text: str) -> list[int]:
    """Return the pids of live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "State:\tZ" in status:  # a zombie is already dead
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


async def eventually(
    probe: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout_s: float = 15.0
) -> T:
    """Call ``probe`` until ``check`` accepts its result; fail after ``timeout_s``.

    For state that the broker applies asynchronously (config changes travel through the
    KRaft metadata log before a broker serves them).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if check(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"still {value!r} after {timeout_s}s")
        await asyncio.sleep(0.1)


async def read_records(
    bs: str, topic: str, partitions: int, isolation_level: str, timeout_s: float = 30.0
) -> list[Record]:
    """Every record of ``topic`` a consumer reading ``isolation_level`` hands out, up to
    the high watermark (read_committed: past the last marker)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with Admin(bs) as admin:
        ends = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()))
    records: list[Record] = []
    async with Consumer(bs, isolation_level=isolation_level) as consumer:
        consumer.assign(tps)

        async def pump() -> None:
            async for record in consumer.stream():
                records.append(record)

        task = asyncio.create_task(pump())
        try:
            async with asyncio.timeout(timeout_s):
                while not all((consumer.position(tp) or 0) >= ends[tp].offset for tp in tps):
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.05)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return records
