"""The local cluster: its nodes' lifecycle (format, start, readiness, stop/kill/start one
node, teardown), built from the configuration (:mod:`.config`), process
(:mod:`.process`) and ZooKeeper (:mod:`.zookeeper`) modules."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiostream_kafka.concurrency import gather_all
from aiostream_kafka.errors import BrokerUnavailableError
from aiostream_kafka.testing import probe
from aiostream_kafka.testing.jars import (
    KAFKA_VERSION,
    ensure_kafka_jars,
    java_executable,
    version_tuple,
)
from aiostream_kafka.testing.local.config import (
    HOST,
    KRAFT_DEFAULT_FROM,
    Node,
    broker_properties,
    free_ports,
    log_config_path,
    new_cluster_id,
    scram_format_arguments,
    write_config,
)
from aiostream_kafka.testing.local.process import java_command, log_tail, reap, spawn_jvm
from aiostream_kafka.testing.local.zookeeper import LocalZooKeeper
from aiostream_kafka.testing.tls import TlsMaterial, make_tls_material

log = logging.getLogger("aiostream_kafka.testing.local")

_FORMAT_TIMEOUT_S = 120.0
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and the JVM binding it

# Clusters not closed by their owner (a crashed test run) are cleaned at interpreter exit.
_LIVE: weakref.WeakSet[LocalKafkaCluster] = weakref.WeakSet()


@atexit.register
def _close_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.close_now()


class LocalKafkaCluster:
    """``brokers`` Kafka JVMs on this machine. Use through :class:`KafkaCluster`."""

    def __init__(
        self,
        brokers: int = 1,
        server_properties: Mapping[str, str] | None = None,
        *,
        start_timeout_s: float = 120.0,
        heap: str = "512m",
        jvm_options: list[str] | None = None,
        proxied: bool = False,
        tls: bool = False,
        sasl: bool = False,
        racks: list[str] | None = None,
        version: str = KAFKA_VERSION,
        zookeeper: bool | None = None,
        features: Mapping[str, int] | None = None,
        classpath: Sequence[str] = (),
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"racks must name one rack per broker ({brokers}), got {racks!r}")
        self.racks = list(racks) if racks is not None else None
        release = version_tuple(version)
        if zookeeper is None:
            zookeeper = release < KRAFT_DEFAULT_FROM
        if zookeeper and release >= (4,):
            raise ValueError(f"Kafka {version} has no ZooKeeper mode (removed in 4.0)")
        if not zookeeper and release < (2, 8):
            raise ValueError(f"Kafka {version} has no KRaft mode (it came in 2.8)")
        if zookeeper and features:
            raise ValueError("features need KRaft mode (they are set when formatting)")
        self.features = dict(features or {})
        if zookeeper and (proxied or tls or sasl):
            raise ValueError(
                "proxied, tls and sasl are not supported in ZooKeeper mode (older brokers)"
            )
        self.version = version
        self.zookeeper = zookeeper
        self.zookeeper_port: int | None = None
        self._zookeeper: LocalZooKeeper | None = None
        self.brokers = brokers
        self.sasl = sasl
        self.server_properties = dict(server_properties or {})
        self.start_timeout_s = start_timeout_s
        self.heap = heap
        self.jvm_options = list(jvm_options or [])
        self.classpath = [str(entry) for entry in classpath]
        self.proxied = proxied
        self.tls = tls
        self.tls_material: TlsMaterial | None = None
        self.directory: Path | None = None
        self.nodes: dict[int, Node] = {}
        self._lib: Path | None = None
        self._java: str | None = None

    # -- configuration -------------------------------------------------------------------

    def _properties(self, node: Node) -> dict[str, str]:
        return broker_properties(
            node,
            self.nodes,
            version=self.version,
            tls_material=self.tls_material,
            sasl=self.sasl,
            racks=self.racks,
            server_properties=self.server_properties,
            zookeeper_port=self.zookeeper_port if self.zookeeper else None,
        )

    def _write_config(self) -> None:
        assert self.directory is not None
        write_config(self.directory, self.version, self.nodes.values(), self._properties)
        if self.zookeeper:
            assert self.zookeeper_port is not None
            self._zookeeper = LocalZooKeeper(self.directory / "zookeeper", self.zookeeper_port)
            self._zookeeper.write_config()

    def _java_command(self, main_class: str, *args: str, heap: str | None = None) -> list[str]:
        assert self._java is not None and self._lib is not None and self.directory is not None
        return java_command(
            self._java,
            self._lib,
            log_config_path(self.directory, self.version),
            self.version,
            self.jvm_options,
            main_class,
            *args,
            heap=heap,
            classpath=self.classpath,
        )

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def tls_bootstrap_servers(self) -> str:
        """The TLS listeners' addresses (``tls=True``)."""
        return ",".join(f"{HOST}:{n.tls_port}" for n in self.nodes.values() if n.tls_port)

    @property
    def sasl_plaintext_bootstrap_servers(self) -> str:
        """The SASL_PLAINTEXT listeners' addresses (``sasl=True``)."""
        return ",".join(f"{HOST}:{n.sasl_port}" for n in self.nodes.values() if n.sasl_port)

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The SASL_SSL listeners' addresses (``sasl=True`` and ``tls=True``)."""
        return ",".join(f"{HOST}:{n.sasl_ssl_port}" for n in self.nodes.values() if n.sasl_ssl_port)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{n.port}" for n in self.nodes.values())

    def advertised_ports(self) -> dict[int, tuple[int, int]]:
        """``{node_id: (listening port, advertised port)}``; they differ when proxied."""
        return {
            n.node_id: (n.port, n.port if n.advertised_port is None else n.advertised_port)
            for n in self.nodes.values()
        }

    async def start(self) -> None:
        """Resolve the jars (once), format and start every node, wait until all serve."""
        self._java = java_executable()
        self._lib = await asyncio.to_thread(ensure_kafka_jars, self.version)
        self.directory = Path(tempfile.mkdtemp(prefix="aiostream-kafka-"))
        _LIVE.add(self)
        try:
            if self.tls:
                self.tls_material = await asyncio.to_thread(
                    make_tls_material, self.directory / "tls"
                )
            for attempt in range(1, _START_ATTEMPTS + 1):
                extra = (1 if self.tls else 0) + (1 if self.sasl else 0)
                extra += 1 if self.sasl and self.tls else 0
                per_node = (4 if self.proxied else 2) + extra
                ports = free_ports(per_node * self.brokers + (1 if self.zookeeper else 0))
                if self.zookeeper:
                    self.zookeeper_port = ports.pop()
                self.nodes = {}
                for i in range(1, self.brokers + 1):
                    mine = ports[per_node * (i - 1) : per_node * i]
                    node = Node(i, mine[0], mine[1], self.directory / f"node-{i}")
                    if self.proxied:
                        node.advertised_port, node.internal_port = mine[2], mine[3]
                    spare = iter(mine[4 if self.proxied else 2 :])
                    if self.tls:
                        node.tls_port = next(spare)
                    if self.sasl:
                        node.sasl_port = next(spare)
                        if self.tls:
                            node.sasl_ssl_port = next(spare)
                    self.nodes[i] = node
                self._write_config()
                if self._zookeeper is not None:
                    await self._zookeeper.start(
                        self._java_command,
                        time.monotonic() + self.start_timeout_s,
                        self.start_timeout_s,
                        self.version,
                    )
                else:
                    await self._format()
                for node in self.nodes.values():
                    self._spawn(node)
                try:
                    await self._wait_cluster_ready(time.monotonic() + self.start_timeout_s)
                    return
                except BrokerUnavailableError as exc:
                    in_use = any(
                        "Address already in use" in log_tail(path, 400)
                        for path in [n.log_file for n in self.nodes.values()]
                        + ([self._zookeeper.log_file] if self._zookeeper is not None else [])
                    )
                    self.close_now(remove_dir=False)
                    if not in_use or attempt == _START_ATTEMPTS:
                        raise
                    log.warning("port taken while starting (%s); retrying with other ports", exc)
                    for node in self.nodes.values():
                        shutil.rmtree(node.directory, ignore_errors=True)
                    shutil.rmtree(self.directory / "zookeeper", ignore_errors=True)
        except BaseException:
            self.close_now()
            raise

    def _stop_zookeeper(self) -> None:
        if self._zookeeper is not None:
            self._zookeeper.stop()

    def _feature_arguments(self) -> list[str]:
        """``--feature name=level`` for each requested feature level (KIP-1022)."""
        args: list[str] = []
        for name, level in self.features.items():
            args += ["--feature", f"{name}={level}"]
        return args

    async def _format(self) -> None:
        cluster_id = new_cluster_id()

        async def format_node(node: Node) -> None:
            cmd = self._java_command(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(node.properties_file),
                "--ignore-formatted",
                *(scram_format_arguments() if self.sasl else ()),
                *self._feature_arguments(),
                heap="256m",
            )
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), _FORMAT_TIMEOUT_S)
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
                raise
            if proc.returncode != 0:
                raise BrokerUnavailableError(
                    f"Formatting the storage of Kafka node {node.node_id} failed "
                    f"(exit {proc.returncode}):\n{out.decode('utf-8', 'replace')[-4000:]}"
                )

        await gather_all(*(format_node(n) for n in self.nodes.values()))

    def _spawn(self, node: Node) -> None:
        cmd = self._java_command("kafka.Kafka", str(node.properties_file), heap=self.heap)
        node.process, node.log_handle = spawn_jvm(cmd, node.log_file)
        log.info(
            "started Kafka node %d (pid %d) on %s:%d, log %s",
            node.node_id,
            node.process.pid,
            HOST,
            node.port,
            node.log_file,
        )

    def _failure(self, node: Node, what: str) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"Kafka {self.version} node {node.node_id} on {HOST}:{node.port} {what}. "
            f"Last lines of its log ({node.log_file}):\n{log_tail(node.log_file)}"
        )

    async def _wait_node_serving(self, node: Node, deadline: float) -> None:
        while True:
            if node.process is None or node.process.poll() is not None:
                code = None if node.process is None else node.process.returncode
                raise self._failure(node, f"exited with code {code} while starting")
            try:
                apis = await probe.api_versions(HOST, node.port, timeout_s=2.0)
                if probe.METADATA_KEY in apis:
                    return
            except (TimeoutError, OSError, EOFError, asyncio.IncompleteReadError):
                pass
            except Exception as exc:  # a malformed answer while starting up: keep polling
                log.debug("probe of node %d: %r", node.node_id, exc)
            if time.monotonic() > deadline:
                raise self._failure(node, f"did not come up within {self.start_timeout_s:.0f}s")
            await asyncio.sleep(0.2)

    async def _wait_cluster_ready(self, deadline: float) -> None:
        live = [n for n in self.nodes.values() if n.running() or n.process is not None]
        await gather_all(*(self._wait_node_serving(n, deadline) for n in live))
        await self._wait_registered(
            {n.node_id for n in self.nodes.values() if n.running()}, deadline
        )

    async def _wait_registered(self, expected: set[int], deadline: float) -> None:
        """Wait until every running node's metadata lists exactly the running nodes."""
        while True:
            ok = True
            for node in self.nodes.values():
                if not node.running():
                    continue
                try:
                    brokers = await probe.metadata_brokers(HOST, node.port, timeout_s=2.0)
                except Exception:
                    ok = False
                    break
                if {b[0] for b in brokers} != expected:
                    ok = False
                    break
            if ok:
                return
            if time.monotonic() > deadline:
                node = next(iter(self.nodes.values()))
                raise self._failure(
                    node, f"did not see brokers {sorted(expected)} registered in time"
                )
            await asyncio.sleep(0.2)

    def _node(self, node_id: int) -> Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ValueError(f"no node {node_id}; nodes are {sorted(self.nodes)}") from None

    def _reap(self, node: Node) -> None:
        reap(node.process, node.log_handle)
        node.process = None
        node.log_handle = None

    async def kill_broker(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (no controlled shutdown) and wait until it is gone."""
        node = self._node(node_id)
        await asyncio.to_thread(self._reap, node)
        log.info("killed Kafka node %d", node_id)

    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Stop node ``node_id`` gracefully (SIGTERM, controlled shutdown); SIGKILL after
        ``timeout`` seconds."""
        node = self._node(node_id)
        proc = node.process
        if proc is None or proc.poll() is not None:
            self._reap(node)
            return
        proc.terminate()
        deadline = time.monotonic() + timeout
        try:
            # Popen has no awaitable wait; poll it (a stop takes a few seconds at most).
            while proc.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        finally:
            if proc.poll() is None:
                log.warning("Kafka node %d ignored SIGTERM for %.0fs; killing it", node_id, timeout)
            self._reap(node)
        log.info("stopped Kafka node %d", node_id)

    async def start_broker(self, node_id: int) -> None:
        """Start node ``node_id`` again (same ports and data) and wait until it serves and
        every running node sees it."""
        node = self._node(node_id)
        if node.running():
            return
        self._reap(node)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            self._spawn(node)
            try:
                await self._wait_node_serving(node, deadline)
                break
            except BrokerUnavailableError:
                # ZooKeeper mode: a killed broker stays registered until its session
                # expires (zookeeper.session.timeout.ms), and a broker starting meanwhile
                # exits on NodeExists; start it again once the session is gone.
                if not self.zookeeper or "NodeExists" not in log_tail(node.log_file, 400):
                    raise
                if time.monotonic() > deadline:
                    raise
                self._reap(node)
                await asyncio.sleep(1.0)
        await self._wait_registered(
            {n.node_id for n in self.nodes.values() if n.running()}, deadline
        )

    def close_now(self, remove_dir: bool = True) -> None:
        """Kill every node and (by default) remove the cluster's directory. Synchronous and
        idempotent, so that it also runs from ``finally`` blocks of cancelled tasks."""
        for node in self.nodes.values():
            self._reap(node)
        self._stop_zookeeper()
        if remove_dir and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
            _LIVE.discard(self)

    async def close(self) -> None:
        """Stop every node and remove all files of the cluster."""
        self.close_now()
