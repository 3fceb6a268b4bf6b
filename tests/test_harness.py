"""The broker harness: real Kafka clusters started, faulted and torn down by the project."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import processes_mentioning

from aiostream_kafka.errors import BrokerUnavailableError, ProtocolError
from aiostream_kafka.testing import KafkaCluster, probe
from aiostream_kafka.testing import jars as jars_module
from aiostream_kafka.testing.local import cluster as local_cluster

pytestmark = pytest.mark.real_broker(
    reason=(
        "tests the harness of JVM and Docker brokers itself (jars, processes, containers, "
        "KRaft formatting)"
    )
)

_managed_only = pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
    reason="fault tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
)


def needs_managed(test: Callable[..., Any]) -> Callable[..., Any]:
    """A test that starts brokers of its own: marked ``broker``, skipped against an
    external cluster (outside CI)."""
    return pytest.mark.broker(_managed_only(test))


def _first_address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


def _refuses(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return False
    except OSError:
        return True


async def _wait_for_brokers(
    host: str, port: int, expected: set[int], timeout_s: float = 30.0
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    seen: set[int] = set()
    while asyncio.get_running_loop().time() < deadline:
        seen = {b[0] for b in await probe.metadata_brokers(host, port)}
        if seen == expected:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"brokers {sorted(seen)} seen, expected {sorted(expected)}")


# -- the session fixture and the raw protocol check ---------------------------------------


async def test_api_versions_lists_produce_and_fetch(kafka_cluster: KafkaCluster) -> None:
    host, port = _first_address(kafka_cluster.bootstrap_servers)
    apis = await probe.api_versions(host, port)
    assert probe.API_VERSIONS_KEY in apis
    produce_min, produce_max = apis[0]
    fetch_min, fetch_max = apis[1]
    assert produce_min <= produce_max and fetch_min <= fetch_max
    if kafka_cluster.managed:  # the exact ranges of Apache Kafka 4.3.1
        # Produce still advertises 0 as its minimum (KAFKA-18659) though v0-2 are rejected.
        assert (produce_min, produce_max) == (0, 13)
        assert (fetch_min, fetch_max) == (4, 18)


async def test_new_topic_creates_a_topic_with_leaders(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    name = await new_topic(partitions=3)
    other = await new_topic()
    assert name != other
    host, port = _first_address(kafka_cluster.bootstrap_servers)
    payload = await probe._roundtrip(host, port, probe.encode_metadata_v1_all_topics(9), 5.0)
    topics = probe.decode_metadata_v1_leaders(payload)
    code, leaders = topics[name]
    assert code == 0
    assert sorted(leaders) == [0, 1, 2]
    assert all(leader >= 0 for leader in leaders.values())


async def test_new_topic_refuses_an_existing_name(kafka_cluster: KafkaCluster, new_topic) -> None:
    name = await new_topic()
    with pytest.raises(ProtocolError, match="error 36"):  # TOPIC_ALREADY_EXISTS
        await new_topic(name=name)


async def test_decoders_refuse_truncated_answers() -> None:
    with pytest.raises(ProtocolError):
        probe.decode_api_versions_v0(b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x05")
    with pytest.raises(ProtocolError):
        probe.decode_metadata_v1_brokers(b"\x00\x00\x00\x02\x00\x00\x00\x01\x00")


# -- clusters of our own: start, fault, restart, teardown ----------------------------------


@needs_managed
async def test_one_broker_cluster_kill_restart_and_clean_teardown() -> None:
    async with KafkaCluster(brokers=1) as cluster:
        directory = cluster.directory
        assert directory is not None and directory.is_dir()
        host, port = _first_address(cluster.bootstrap_servers)
        assert (await probe.api_versions(host, port))[18][1] >= 3
        assert len(cluster.pids()) == 1

        await cluster.kill_broker(1)
        assert cluster.pids() == []
        assert _refuses(host, port)

        await cluster.start_broker(1)
        assert len(cluster.pids()) == 1
        assert 0 in await probe.api_versions(host, port)

        await cluster.stop_broker(1)
        assert _refuses(host, port)
        await cluster.start_broker(1)
        assert [b[0] for b in await probe.metadata_brokers(host, port)] == [1]
    assert not directory.exists()
    assert processes_mentioning(str(directory)) == []


@needs_managed
@pytest.mark.slow
async def test_three_broker_cluster_kill_and_restart() -> None:
    async with KafkaCluster(brokers=3) as cluster:
        directory = cluster.directory
        assert directory is not None
        addresses = [_first_address(a) for a in cluster.bootstrap_servers.split(",")]
        assert len(addresses) == 3 and len({p for _, p in addresses}) == 3
        host, port = addresses[0]
        await _wait_for_brokers(host, port, {1, 2, 3})
        topic = "replicated"
        await probe.create_topic(
            cluster.bootstrap_servers, topic, partitions=3, replication_factor=3
        )

        await cluster.kill_broker(2)
        assert _refuses(*addresses[1])
        # The controller fences the dead broker once its session times out.
        await _wait_for_brokers(host, port, {1, 3})

        await cluster.start_broker(2)
        await _wait_for_brokers(*addresses[2], {1, 2, 3})

        await cluster.stop_broker(3)  # controlled shutdown while the quorum keeps 2 of 3
        await _wait_for_brokers(host, port, {1, 2})
        await cluster.start_broker(3)
        await _wait_for_brokers(host, port, {1, 2, 3})
        assert len(cluster.pids()) == 3
    assert not directory.exists()
    assert processes_mentioning(str(directory)) == []


def _record_cluster_dirs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the temporary directories clusters create (other processes may be creating
    their own at the same time, so global before/after comparisons would not do)."""
    created: list[str] = []
    real = tempfile.mkdtemp

    def recording(*args: object, **kwargs: object) -> str:
        path = real(*args, **kwargs)  # type: ignore[arg-type]
        created.append(path)
        return path

    monkeypatch.setattr(local_cluster.tempfile, "mkdtemp", recording)
    return created


@needs_managed
async def test_cancelled_start_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    created = _record_cluster_dirs(monkeypatch)
    cluster = KafkaCluster(brokers=1, source="local")
    task = asyncio.create_task(cluster.start())
    # Cancel once the broker JVM runs (format takes a second or two, the broker a few more).
    for _ in range(400):
        await asyncio.sleep(0.05)
        if created and any("kafka.Kafka" in _cmdline(p) for p in processes_mentioning(created[0])):
            break
    else:
        raise AssertionError("the broker JVM never started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(created) == 1
    assert not Path(created[0]).exists()
    assert processes_mentioning(created[0]) == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@needs_managed
async def test_failing_test_body_still_tears_down() -> None:
    directory = None
    with pytest.raises(RuntimeError, match="boom"):
        async with KafkaCluster(brokers=1) as cluster:
            directory = cluster.directory
            raise RuntimeError("boom")
    assert directory is not None and not directory.exists()
    assert processes_mentioning(str(directory)) == []


@needs_managed
async def test_start_timeout_error_carries_the_log_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    created = _record_cluster_dirs(monkeypatch)
    # A broker that can never be ready in 0.5 s: the error must say so and show its log.
    cluster = KafkaCluster(brokers=1, source="local", start_timeout_s=0.5)
    with pytest.raises(BrokerUnavailableError) as info:
        await cluster.start()
    message = str(info.value)
    assert "did not come up within" in message
    assert "Last lines of its log" in message and "broker.log" in message
    assert created and not any(Path(d).exists() for d in created)
    assert all(processes_mentioning(d) == [] for d in created)


@needs_managed
async def test_invalid_broker_setting_fails_with_the_broker_output() -> None:
    cluster = KafkaCluster(
        brokers=1, source="local", server_properties={"num.network.threads": "not-a-number"}
    )
    with pytest.raises(BrokerUnavailableError) as info:
        await cluster.start()
    assert "num.network.threads" in str(info.value)


@needs_managed
async def test_a_taken_port_is_replaced_by_another(monkeypatch: pytest.MonkeyPatch) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    real = local_cluster.free_ports
    calls = []

    def first_one_taken(count: int) -> list[int]:
        ports = real(count)
        calls.append(count)
        if len(calls) == 1:
            ports[0] = busy_port
        return ports

    # the cluster module is the one that calls free_ports
    monkeypatch.setattr(local_cluster, "free_ports", first_one_taken)
    try:
        async with KafkaCluster(brokers=1, source="local") as cluster:
            _, port = _first_address(cluster.bootstrap_servers)
            assert port != busy_port
            assert len(calls) == 2
            assert 0 in await probe.api_versions("127.0.0.1", port)
    finally:
        busy.close()


async def test_external_cluster_is_used_as_is(
    kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_cluster.bootstrap_servers)
    async with KafkaCluster() as external:
        assert external.source == "external" and not external.managed
        assert external.bootstrap_servers == kafka_cluster.bootstrap_servers
        with pytest.raises(BrokerUnavailableError, match="KAFKA_BOOTSTRAP_SERVERS"):
            await external.kill_broker(1)
    host, port = _first_address(kafka_cluster.bootstrap_servers)
    assert 18 in await probe.api_versions(host, port)  # the external cluster was left running


# -- missing prerequisites: one clear error ------------------------------------------------


def _fake_java(tmp_path: Path, version_line: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return bin_dir


def test_missing_java_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BrokerUnavailableError) as info:
        jars_module.java_executable()
    message = str(info.value)
    assert "no `java`" in message and "Java 17" in message
    assert "apt-get install" in message and "KAFKA_BOOTSTRAP_SERVERS" in message


def test_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_java(tmp_path, 'openjdk version "11.0.21" 2023-10-17')))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(BrokerUnavailableError) as info:
        jars_module.java_executable()
    assert "Java 11" in str(info.value) and "17 or newer" in str(info.value)
    assert "KAFKA_BOOTSTRAP_SERVERS" in str(info.value)


def test_java_8_version_string_is_parsed(tmp_path: Path) -> None:
    bin_dir = _fake_java(tmp_path, 'java version "1.8.0_392"')
    assert jars_module.java_major_version(str(bin_dir / "java")) == 8


def test_missing_maven_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOSTREAM_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(_fake_java(tmp_path, 'openjdk version "17.0.15"')))
    with pytest.raises(BrokerUnavailableError) as info:
        jars_module.ensure_kafka_jars()
    message = str(info.value)
    assert "`mvn`" in message and "apt-get install maven" in message
    assert "KAFKA_BOOTSTRAP_SERVERS" in message


# -- the CLI -------------------------------------------------------------------------------


@needs_managed
async def test_cli_dev_broker_serves_until_interrupted() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiostream_kafka.cli",
        "dev-broker",
        "--brokers",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 180)
        bootstrap = line.decode().strip()
        host, port = _first_address(bootstrap)
        assert host == "127.0.0.1"
        apis = await probe.api_versions(host, port)
        assert 0 in apis and 1 in apis
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert _refuses(host, port)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_cli_rejects_zero_brokers() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aiostream_kafka.cli", "dev-broker", "--brokers", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "--brokers must be at least 1" in out.stderr


# -- other Kafka versions ----------------------------------------------------------------------


def test_other_versions_pick_their_mode_and_refuse_what_they_lack() -> None:
    from aiostream_kafka.testing.local import LocalKafkaCluster

    assert not LocalKafkaCluster().zookeeper  # the default version: KRaft
    assert LocalKafkaCluster(version="2.8.2").zookeeper  # before 3.3: ZooKeeper
    assert LocalKafkaCluster(version="3.2.3").zookeeper
    assert not LocalKafkaCluster(version="3.3.2").zookeeper
    assert LocalKafkaCluster(version="3.9.1", zookeeper=True).zookeeper
    assert not LocalKafkaCluster(version="2.8.2", zookeeper=False).zookeeper
    with pytest.raises(ValueError, match="no ZooKeeper mode"):
        LocalKafkaCluster(version="4.0.0", zookeeper=True)
    with pytest.raises(ValueError, match="no KRaft mode"):
        LocalKafkaCluster(version="2.7.2", zookeeper=False)
    with pytest.raises(ValueError, match="ZooKeeper mode"):
        LocalKafkaCluster(version="2.8.2", tls=True)
    with pytest.raises(ValueError, match="source='local'"):
        KafkaCluster(version="2.8.2", source="external")
    assert KafkaCluster(source="local").version == jars_module.KAFKA_VERSION
    assert jars_module.version_tuple("3.9.0-rc1") == (3, 9, 0)
    assert jars_module.uses_log4j1("3.9.1") and not jars_module.uses_log4j1("4.0.0")


@needs_managed
async def test_zookeeper_mode_cluster_of_an_older_version_and_clean_teardown() -> None:
    async with KafkaCluster(version="2.8.2", source="local") as cluster:
        directory = cluster.directory
        assert directory is not None and (directory / "zookeeper").is_dir()
        host, port = _first_address(cluster.bootstrap_servers)
        apis = await probe.api_versions(host, port)
        assert apis[9][1] == 7  # OffsetFetch: 2.8's last single-group version
        assert len(cluster.pids()) == 1  # the broker (ZooKeeper is not a broker)
        assert len(processes_mentioning(str(directory))) == 2  # ... and ZooKeeper
        await cluster.kill_broker(1)
        await cluster.start_broker(1)
        assert [b[0] for b in await probe.metadata_brokers(host, port)] == [1]
    assert not directory.exists()
    assert processes_mentioning(str(directory)) == []
