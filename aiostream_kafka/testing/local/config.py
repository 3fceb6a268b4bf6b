"""What a local broker is configured with: its ports and files, its properties, the logging
configuration, and the SASL users of a ``sasl=True`` cluster. Writing files only; the
processes are :mod:`~aiostream_kafka.testing.local.process`'s."""

from __future__ import annotations

import base64
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO

from aiostream_kafka.testing.jars import uses_log4j1, version_tuple
from aiostream_kafka.testing.tls import TlsMaterial

HOST = "127.0.0.1"

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


@dataclass
class Node:
    """One broker of a local cluster: its ports, directory and (while it runs) process."""

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
    log_handle: IO[bytes] | None = field(default=None, repr=False)

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


def broker_properties(
    node: Node,
    nodes: Mapping[int, Node],
    *,
    version: str,
    tls_material: TlsMaterial | None,
    sasl: bool,
    racks: list[str] | None,
    server_properties: Mapping[str, str],
    zookeeper_port: int | None,
) -> dict[str, str]:
    """The ``server.properties`` of ``node``, one of ``nodes`` (the whole cluster): a
    combined ``broker,controller`` KRaft node, or with ``zookeeper_port`` a broker
    registered in that ZooKeeper (older versions). ``server_properties`` override."""
    brokers = len(nodes)
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in nodes.values())
    replication = str(min(3, brokers))
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
    if node.tls_port is not None and tls_material is not None:
        listeners += f",SSL://{HOST}:{node.tls_port}"
        advertised += f",SSL://{HOST}:{node.tls_port}"
        protocols += ",SSL:SSL"
        # A PEM keystore: the PKCS#8 key and the certificate chain in one file.
        tls_props = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls_material.server_keystore),
            "ssl.client.auth": "none",
        }
    sasl_props: dict[str, str] = {}
    if sasl:
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
    if zookeeper_port is not None:
        return _zookeeper_mode_properties(
            node, brokers, replication, zookeeper_port, server_properties
        )
    if version_tuple(version) < (4,):
        # Kafka 3.x refuses a controller listener among a broker's advertised ones
        # (the static voters name the controllers).
        advertised = ",".join(a for a in advertised.split(",") if not a.startswith("CONTROLLER://"))
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
        "transaction.state.log.min.isr": "2" if brokers >= 3 else "1",
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": "2" if brokers >= 3 else "1",
        "group.initial.rebalance.delay.ms": "0",
        # KIP-848 groups: let a test set a group's consumer.heartbeat.interval.ms and
        # consumer.session.timeout.ms low (the defaults stay 5 s and 45 s).
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.min.session.timeout.ms": "1000",
        # Share groups (KIP-932): let a test set a group's share.heartbeat.interval.ms low
        # and lock records for as little as a second (the defaults stay 5 s and 30 s).
        "group.share.min.heartbeat.interval.ms": "100",
        "group.share.min.record.lock.duration.ms": "1000",
        # Quick controlled shutdown and failure detection for fault tests.
        "controller.quorum.election.timeout.ms": "1000",
        "controller.quorum.fetch.timeout.ms": "2000",
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "500",
        **tls_props,
        **sasl_props,
    }
    if racks is not None:
        props["broker.rack"] = racks[node.node_id - 1]
    props.update(server_properties)
    return props


def _zookeeper_mode_properties(
    node: Node,
    brokers: int,
    replication: str,
    zookeeper_port: int,
    server_properties: Mapping[str, str],
) -> dict[str, str]:
    """A broker registered in the cluster's ZooKeeper (Kafka 2.x/3.x)."""
    listeners = f"PLAINTEXT://{HOST}:{node.port}"
    props = {
        "broker.id": str(node.node_id),
        "zookeeper.connect": f"{HOST}:{zookeeper_port}",
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
        "transaction.state.log.min.isr": "2" if brokers >= 3 else "1",
        "transaction.state.log.num.partitions": "10",
        "group.initial.rebalance.delay.ms": "0",
        # A killed broker's registration lasts as long as its ZooKeeper session.
        "zookeeper.session.timeout.ms": "6000",
    }
    props.update(server_properties)
    return props


def log_config_path(directory: Path, version: str) -> Path:
    """Where the logging configuration of a cluster in ``directory`` goes: Log4j 1 for
    Kafka 2.x/3.x (and their ZooKeeper), Log4j 2 from Kafka 4."""
    if uses_log4j1(version):
        return directory / "log4j.properties"
    return directory / "log4j2.properties"


def write_config(
    directory: Path,
    version: str,
    nodes: Iterable[Node],
    properties: Callable[[Node], Mapping[str, str]],
) -> None:
    """Write the logging configuration of the cluster in ``directory`` and each node's
    properties file (``properties(node)``; its directory created)."""
    log_config_path(directory, version).write_text(_LOG4J1 if uses_log4j1(version) else _LOG4J2)
    for node in nodes:
        node.directory.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in properties(node).items())
        node.properties_file.write_text(text)
