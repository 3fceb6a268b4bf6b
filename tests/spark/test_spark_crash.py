"""Exactly-once into a Parquet sink through a crash at the worst point: the whole driver
(Python, its JVM and Python workers) SIGKILLed after a micro-batch wrote a Parquet file
and before the batch's ``_spark_metadata`` entry lists it. The restarted query runs the
batch again from the same offsets; readers of the sink see each record once (the
orphaned file stays on disk, unlisted)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _data import produce_rows
from _servers import missing_spark as _missing

from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]

DRIVER = Path(__file__).with_name("_parquet_driver.py")
ROOT = Path(__file__).resolve().parents[2]


def _listed(sink: Path) -> set[str]:
    """The file names every ``_spark_metadata`` entry of the sink lists."""
    names: set[str] = set()
    log = sink / "_spark_metadata"
    if not log.is_dir():
        return names
    for entry in log.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        for line in entry.read_text().splitlines()[1:]:
            names.add(Path(json.loads(line)["path"]).name)
    return names


def _complete_orphans(sink: Path) -> set[str]:
    """Parquet files that are complete (they end with the footer's magic) and that no
    ``_spark_metadata`` entry lists."""
    done = set()
    for path in sink.glob("part-*.parquet"):
        try:
            with path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                if size <= 8:
                    continue
                f.seek(-4, os.SEEK_END)
                if f.read(4) == b"PAR1":
                    done.add(path.name)
        except FileNotFoundError:
            continue
    return done - _listed(sink)


def _driver(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(DRIVER.parent)])}
    return subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its JVM and Python workers share its process group
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


async def _group_gone(pgid: int, seconds: float) -> bool:
    """Wait until no process of the group is left (killed children are reaped by init)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_sigkill_between_parquet_file_and_metadata_entry_is_exactly_once(
    kafka_cluster: KafkaCluster, new_topic: NewTopic, tmp_path: Path
) -> None:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    bs = kafka_cluster.bootstrap_servers
    topic = await new_topic(partitions=4)
    rows = await produce_rows(bs, topic, 4, 5_000, headers=False)  # 5 triggers of 4,000
    sink, ckpt = tmp_path / "sink", tmp_path / "ckpt"
    args = [bs, topic, str(sink), str(ckpt)]

    orphans: set[str] = set()
    for _attempt in range(3):  # the window is short; a miss is retried on a later batch
        process = _driver("run", *args)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and process.poll() is None:
                if sink.is_dir() and _complete_orphans(sink):
                    os.killpg(process.pid, signal.SIGKILL)
                    break
                await asyncio.sleep(0.002)
        finally:
            _kill_group(process)
        assert process.returncode is not None
        out = process.stdout.read().decode() if process.stdout else ""
        assert process.returncode == -signal.SIGKILL, out[-3000:]
        orphans = _complete_orphans(sink)
        if orphans:
            break
    assert orphans, "never killed between a Parquet file and its _spark_metadata entry"
    assert await _group_gone(process.pid, 30)  # nothing of the killed driver lives on

    result = tmp_path / "rows.json"
    finish = _driver("finish", *args, str(result))
    out_bytes, _ = await asyncio.to_thread(finish.communicate, None, 300)
    assert finish.returncode == 0, out_bytes.decode()[-3000:]
    read = Counter((p, o) for p, o in json.loads(result.read_text()))
    assert sorted(read) == sorted((r.partition, r.offset) for r in rows)
    assert set(read.values()) == {1}  # each record exactly once
    assert orphans <= {p.name for p in sink.glob("part-*.parquet")}  # still there, unlisted
    assert not orphans & _listed(sink)
