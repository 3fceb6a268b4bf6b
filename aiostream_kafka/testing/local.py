"""Apache Kafka brokers run locally from the Maven Central jars (KRaft, loopback only).

Each node is one JVM in combined ``broker,controller`` mode with its own client and
controller port (chosen free at run time), its own data dir and its own log file, all under
one temporary directory per cluster. The JVMs are plain ``subprocess.Popen`` children so
that a cluster is not tied to one event loop; on Linux they also get ``PR_SET_PDEATHSIG``
so that they die with the Python process even if it is SIGKILLed.

Older brokers (``version=``, for compatibility tests): Kafka 2.x/3.x run from their own
jars the same way. Before 3.3 KRaft was not production-ready (and before 2.8 it did not
exist), so those versions run in ZooKeeper mode by default: one more JVM, a standalone
ZooKeeper from the ZooKeeper jar Kafka ships, and brokers registered in it
(``zookeeper=True`` asks for that mode on any 2.x/3.x version; Kafka 4 has no ZooKeeper).
ZooKeeper mode is also the only way to make a broker keep a legacy message format
(``message.format.version`` is ignored from ``inter.broker.protocol.version`` 3.0 on, and
KRaft implies 3.0 or later): a 2.x broker does by default, a 3.x one needs
``inter.broker.protocol.version`` below 3.0 in ``server_properties``.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from aiostream_kafka.concurrency import gather_all
from aiostream_kafka.errors import BrokerUnavailableError
from aiostream_kafka.testing import probe
from aiostream_kafka.testing.jars import (
    KAFKA_VERSION,
    ensure_kafka_jars,
    java_executable,
    uses_log4j1,
    version_tuple,
)
from aiostream_kafka.testing.tls import TlsMaterial, make_tls_material

#: The SASL users of a ``sasl=True`` cluster: name -> password. ``admin`` is a super user;
#: ``alice`` has no ACL, so the authorizer denies her every resource.
SASL_USERS: Mapping[str, str] = MappingProxyType({"admin": "admin-secret", "alice": "alice-secret"})
SASL_SUPER_USER = "admin"
#: Every mechanism a SASL listener of the harness offers.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# Accepts unsigned JWS tokens (``alg: none``); the principal is the ``sub`` claim.
_OAUTH_UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
_LOG_TAIL_LINES = 60
_FORMAT_TIMEOUT_S = 120.0
_START_ATTEMPTS = 3  # a free port can be taken between choosing it and the JVM binding it

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
"""

# The same for the Log4j 1 brokers (Kafka 2.x/3.x) and their ZooKeeper.
_LOG4J1 = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
"""

#: First Kafka version whose KRaft mode the harness uses by default (production-ready).
KRAFT_DEFAULT_FROM = (3, 3)
_ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def new_cluster_id() -> str:
    """Return a KRaft cluster id: 22 characters of URL-safe base64 of a random UUID.

    Never one starting with "-", which the storage tool would parse as an option (Kafka's
    own ``Uuid.randomUuid`` skips those too).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of the file at ``path`` (empty if it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    # With a proxied cluster: the port advertised to clients (a FaultProxy's) and the
    # listener brokers use among themselves, so that faults hit only client traffic.
    advertised_port: int | None = None
    internal_port: int | None = None
    # With tls=True: a second client listener speaking TLS.
    tls_port: int | None = None
    # With sasl=True: SASL_PLAINTEXT, and SASL_SSL too when tls=True.
    sasl_port: int | None = None
    sasl_ssl_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    log_handle: object | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def log_file(self) -> Path:
        return self.directory / "broker.log"

    @property
    def properties_file(self) -> Path:
        return self.directory / "server.properties"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


# Clusters not closed by their owner (a crashed test run) are cleaned at interpreter exit.
_LIVE: weakref.WeakSet[LocalKafkaCluster] = weakref.WeakSet()


@atexit.register
def _close_leftovers() -> None:
    for cluster in list(_LIVE):
        cluster.close_now()


def sasl_server_properties(listeners: list[str]) -> dict[str, str]:
    """Broker properties for SASL listeners ``listeners`` (e.g. ``["SASL_PLAINTEXT"]``).

    Every listener offers :data:`SASL_MECHANISMS`: PLAIN users are listed in its JAAS
    configuration, SCRAM users are stored in the cluster metadata at format time
    (:func:`scram_format_arguments`), OAUTHBEARER takes unsigned JWS tokens whose ``sub``
    is the principal. The ``StandardAuthorizer`` denies what no ACL allows, except to the
    super users: :data:`SASL_SUPER_USER` and ``ANONYMOUS``, the principal of the PLAINTEXT
    listeners (the controller's, the brokers' own and the one other tests use).
    """
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in SASL_USERS.items())
    props = {
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "authorizer.class.name": _STANDARD_AUTHORIZER,
        "super.users": f"User:{SASL_SUPER_USER};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    for listener in listeners:
        prefix = f"listener.name.{listener.lower()}"
        props[f"{prefix}.plain.sasl.jaas.config"] = f"{_PLAIN_LOGIN} required {plain_users};"
        for mechanism in _SCRAM_MECHANISMS:
            props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = f"{_SCRAM_LOGIN} required;"
        # The login module's options only matter if the broker itself logged in with it
        # (inter-broker traffic stays on PLAINTEXT), but it must be configured.
        props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
            f'{_OAUTH_LOGIN} required unsecuredLoginStringClaim_sub="{SASL_SUPER_USER}";'
        )
        props[f"{prefix}.oauthbearer.sasl.server.callback.handler.class"] = (
            _OAUTH_UNSECURED_VALIDATOR
        )
    return props


def scram_format_arguments() -> list[str]:
    """``kafka-storage format`` arguments creating every :data:`SASL_USERS` user for both
    SCRAM mechanisms (the broker's default 4096 iterations)."""
    args: list[str] = []
    for mechanism in _SCRAM_MECHANISMS:
        for name, password in SASL_USERS.items():
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args


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
        self._zk_process: subprocess.Popen[bytes] | None = None
        self._zk_log: object | None = None
        self.brokers = brokers
        self.sasl = sasl
        self.server_properties = dict(server_properties or {})
        self.start_timeout_s = start_timeout_s
        self.heap = heap
        self.jvm_options = list(jvm_options or [])
        self.proxied = proxied
        self.tls = tls
        self.tls_material: TlsMaterial | None = None
        self.directory: Path | None = None
        self.nodes: dict[int, _Node] = {}
        self._lib: Path | None = None
        self._java: str | None = None

    # -- configuration -------------------------------------------------------------------

    def _properties(self, node: _Node) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes.values())
        replication = str(min(3, self.brokers))
        listeners = f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}"
        advertised = listeners
        inter_broker = "PLAINTEXT"
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        if node.advertised_port is not None and node.internal_port is not None:
            internal = f"INTERNAL://{HOST}:{node.internal_port}"
            listeners = f"{listeners},{internal}"
            advertised = (
                f"PLAINTEXT://{HOST}:{node.advertised_port},"
                f"CONTROLLER://{HOST}:{node.controller_port},{internal}"
            )
            inter_broker = "INTERNAL"
            protocols += ",INTERNAL:PLAINTEXT"
        tls_props: dict[str, str] = {}
        if node.tls_port is not None and self.tls_material is not None:
            listeners += f",SSL://{HOST}:{node.tls_port}"
            advertised += f",SSL://{HOST}:{node.tls_port}"
            protocols += ",SSL:SSL"
            # A PEM keystore: the PKCS#8 key and the certificate chain in one file.
            tls_props = {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.tls_material.server_keystore),
                "ssl.client.auth": "none",
            }
        sasl_props: dict[str, str] = {}
        if self.sasl:
            sasl_listeners: list[str] = []
            if node.sasl_port is not None:
                sasl_listeners.append("SASL_PLAINTEXT")
                listeners += f",SASL_PLAINTEXT://{HOST}:{node.sasl_port}"
                advertised += f",SASL_PLAINTEXT://{HOST}:{node.sasl_port}"
                protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            if node.sasl_ssl_port is not None:
                sasl_listeners.append("SASL_SSL")
                listeners += f",SASL_SSL://{HOST}:{node.sasl_ssl_port}"
                advertised += f",SASL_SSL://{HOST}:{node.sasl_ssl_port}"
                protocols += ",SASL_SSL:SASL_SSL"
            sasl_props = sasl_server_properties(sasl_listeners)
        if self.zookeeper:
            return self._zookeeper_mode_properties(node, replication)
        if version_tuple(self.version) < (4,):
            # Kafka 3.x refuses a controller listener among a broker's advertised ones
            # (the static voters name the controllers).
            advertised = ",".join(
                a for a in advertised.split(",") if not a.startswith("CONTROLLER://")
            )
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": inter_broker,
            "listener.security.protocol.map": protocols,
            "log.dirs": str(node.data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "2" if self.brokers >= 3 else "1",
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": "2" if self.brokers >= 3 else "1",
            "group.initial.rebalance.delay.ms": "0",
            # Quick controlled shutdown and failure detection for fault tests.
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500",
            **tls_props,
            **sasl_props,
        }
        if self.racks is not None:
            props["broker.rack"] = self.racks[node.node_id - 1]
        props.update(self.server_properties)
        return props

    def _zookeeper_mode_properties(self, node: _Node, replication: str) -> dict[str, str]:
        """A broker registered in the cluster's ZooKeeper (Kafka 2.x/3.x)."""
        listeners = f"PLAINTEXT://{HOST}:{node.port}"
        props = {
            "broker.id": str(node.node_id),
            "zookeeper.connect": f"{HOST}:{self.zookeeper_port}",
            "listeners": listeners,
            "advertised.listeners": listeners,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.data_dir),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "2" if self.brokers >= 3 else "1",
            "transaction.state.log.num.partitions": "10",
            "group.initial.rebalance.delay.ms": "0",
            # A killed broker's registration lasts as long as its ZooKeeper session.
            "zookeeper.session.timeout.ms": "6000",
        }
        props.update(self.server_properties)
        return props

    @property
    def _log_config(self) -> Path:
        assert self.directory is not None
        if uses_log4j1(self.version):
            return self.directory / "log4j.properties"
        return self.directory / "log4j2.properties"

    def _write_config(self) -> None:
        assert self.directory is not None
        self._log_config.write_text(_LOG4J1 if uses_log4j1(self.version) else _LOG4J2)
        for node in self.nodes.values():
            node.directory.mkdir(parents=True, exist_ok=True)
            text = "".join(f"{k}={v}\n" for k, v in self._properties(node).items())
            node.properties_file.write_text(text)
        if self.zookeeper:
            zk_dir = self.directory / "zookeeper"
            zk_dir.mkdir(parents=True, exist_ok=True)
            (zk_dir / "zookeeper.properties").write_text(
                f"dataDir={zk_dir / 'data'}\n"
                f"clientPort={self.zookeeper_port}\n"
                f"clientPortAddress={HOST}\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=srvr\n"
            )

    def _java_command(self, main_class: str, *args: str, heap: str | None = None) -> list[str]:
        assert self._java is not None and self._lib is not None and self.directory is not None
        cmd = [self._java]
        if heap:
            cmd += [f"-Xms{heap}", f"-Xmx{heap}"]
        if uses_log4j1(self.version):
            logging_option = f"-Dlog4j.configuration=file:{self._log_config}"
        else:
            logging_option = f"-Dlog4j2.configurationFile={self._log_config}"
        cmd += [
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            logging_option,
            *self.jvm_options,
            "-cp",
            f"{self._lib}/*",
            main_class,
            *args,
        ]
        return cmd

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
                    node = _Node(i, mine[0], mine[1], self.directory / f"node-{i}")
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
                if self.zookeeper:
                    await self._start_zookeeper(time.monotonic() + self.start_timeout_s)
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
                        + ([self._zookeeper_log_file] if self.zookeeper else [])
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

    @property
    def _zookeeper_log_file(self) -> Path:
        assert self.directory is not None
        return self.directory / "zookeeper" / "zookeeper.log"

    async def _start_zookeeper(self, deadline: float) -> None:
        """Start the standalone ZooKeeper of a ZooKeeper-mode cluster and wait until it
        answers ``srvr``."""
        self._spawn_zookeeper()
        await self._wait_zookeeper(deadline)

    def _spawn_zookeeper(self) -> None:
        assert self.directory is not None and self.zookeeper_port is not None
        cmd = self._java_command(
            _ZOOKEEPER_MAIN,
            str(self.directory / "zookeeper" / "zookeeper.properties"),
            heap="256m",
        )
        handle = open(self._zookeeper_log_file, "ab")
        self._zk_log = handle
        self._zk_process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        log.info(
            "started ZooKeeper (pid %d) on %s:%d for Kafka %s",
            self._zk_process.pid,
            HOST,
            self.zookeeper_port,
            self.version,
        )

    async def _wait_zookeeper(self, deadline: float) -> None:
        assert self._zk_process is not None
        while True:
            if self._zk_process.poll() is not None:
                raise BrokerUnavailableError(
                    f"ZooKeeper exited with code {self._zk_process.returncode} while "
                    f"starting. Last lines of its log ({self._zookeeper_log_file}):\n"
                    f"{log_tail(self._zookeeper_log_file)}"
                )
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                async with asyncio.timeout(2.0):
                    reader, writer = await asyncio.open_connection(HOST, self.zookeeper_port)
                    try:
                        writer.write(b"srvr")
                        answer = await reader.read(4096)
                    finally:
                        writer.close()
                if b"Zookeeper version" in answer:
                    return
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"ZooKeeper on {HOST}:{self.zookeeper_port} did not come up within "
                    f"{self.start_timeout_s:.0f}s. Last lines of its log:\n"
                    f"{log_tail(self._zookeeper_log_file)}"
                )
            await asyncio.sleep(0.2)

    def _stop_zookeeper(self) -> None:
        proc, self._zk_process = self._zk_process, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        if self._zk_log is not None:
            self._zk_log.close()  # type: ignore[attr-defined]
            self._zk_log = None

    def _feature_arguments(self) -> list[str]:
        """``--feature name=level`` for each requested feature level (KIP-1022)."""
        args: list[str] = []
        for name, level in self.features.items():
            args += ["--feature", f"{name}={level}"]
        return args

    async def _format(self) -> None:
        cluster_id = new_cluster_id()

        async def format_node(node: _Node) -> None:
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

    def _spawn(self, node: _Node) -> None:
        cmd = self._java_command("kafka.Kafka", str(node.properties_file), heap=self.heap)
        handle = open(node.log_file, "ab")
        node.log_handle = handle
        node.process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        log.info(
            "started Kafka node %d (pid %d) on %s:%d, log %s",
            node.node_id,
            node.process.pid,
            HOST,
            node.port,
            node.log_file,
        )

    def _failure(self, node: _Node, what: str) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"Kafka {self.version} node {node.node_id} on {HOST}:{node.port} {what}. "
            f"Last lines of its log ({node.log_file}):\n{log_tail(node.log_file)}"
        )

    async def _wait_node_serving(self, node: _Node, deadline: float) -> None:
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

    def _node(self, node_id: int) -> _Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ValueError(f"no node {node_id}; nodes are {sorted(self.nodes)}") from None

    def _reap(self, node: _Node) -> None:
        if node.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=30)
            node.process = None
        if node.log_handle is not None:
            node.log_handle.close()  # type: ignore[attr-defined]
            node.log_handle = None

    async def kill_broker(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (no controlled shutdown) and wait until it is gone."""
        node = self._node(node_id)
        await asyncio.to_thread(self._reap, node)
        log.info("killed Kafka node %d", node_id)

    async def stop_broker(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Stop node ``node_id`` gracefully (SIGTERM, controlled shutdown); SIGKILL after
        ``timeout_s``."""
        node = self._node(node_id)
        proc = node.process
        if proc is None or proc.poll() is not None:
            self._reap(node)
            return
        proc.terminate()
        deadline = time.monotonic() + timeout_s
        try:
            # Popen has no awaitable wait; poll it (a stop takes a few seconds at most).
            while proc.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        finally:
            if proc.poll() is None:
                log.warning(
                    "Kafka node %d ignored SIGTERM for %.0fs; killing it", node_id, timeout_s
                )
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
