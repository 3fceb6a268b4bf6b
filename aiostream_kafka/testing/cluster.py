"""``KafkaCluster``: a real Apache Kafka cluster for tests, benchmarks and the demo."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol

from aiostream_kafka.errors import BrokerUnavailableError

if TYPE_CHECKING:
    from aiostream_kafka.testing.fake import FakeCluster
    from aiostream_kafka.testing.local import LocalKafkaCluster
    from aiostream_kafka.testing.proxy import FaultProxy

log = logging.getLogger(__name__)

Source = Literal["auto", "external", "docker", "local", "fake"]

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
# force "docker", "local" or "fake" (the in-process FakeCluster) instead of auto-detection
ENV_SOURCE = "AIOSTREAM_KAFKA_BROKER"


class _Backend(Protocol):
    @property
    def bootstrap_servers(self) -> str: ...
    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def close_now(self) -> None: ...
    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None: ...  # noqa: ASYNC109
    async def start_broker(self, node_id: int) -> None: ...
    async def kill_broker(self, node_id: int) -> None: ...


class _ExternalCluster:
    """A cluster someone else runs: its address is used as is, nothing is started."""

    def __init__(self, bootstrap_servers: str) -> None:
        self._bootstrap = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def close_now(self) -> None:
        return None

    def _refuse(self, what: str) -> BrokerUnavailableError:
        return BrokerUnavailableError(
            f"cannot {what}: the cluster comes from {ENV_BOOTSTRAP}={self._bootstrap} and is not "
            f"managed by this process; unset {ENV_BOOTSTRAP} to let the harness start brokers"
        )

    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        raise self._refuse(f"stop broker {node_id}")

    async def start_broker(self, node_id: int) -> None:
        raise self._refuse(f"start broker {node_id}")

    async def kill_broker(self, node_id: int) -> None:
        raise self._refuse(f"kill broker {node_id}")


class KafkaCluster:
    """A real Apache Kafka cluster, started for the duration of an ``async with`` block.

    Where the brokers come from, in order: an explicit ``KAFKA_BOOTSTRAP_SERVERS`` (used as
    is; nothing is started, and stopping or killing brokers raises), else Docker
    (``apache/kafka`` through testcontainers) when a daemon answers, else Apache Kafka run
    from the Maven Central jars on this machine (resolved once into a per-user cache; needs
    Java 17+ and Maven). ``AIOSTREAM_KAFKA_BROKER=local`` or ``=docker`` forces a source;
    ``AIOSTREAM_KAFKA_BROKER=fake`` (or ``source="fake"``) serves the brokers in process
    with :class:`~aiostream_kafka.testing.fake.FakeCluster` (no JVM; ``cluster.fake.control``
    injects faults), also when ``KAFKA_BOOTSTRAP_SERVERS`` is set.

    Brokers are KRaft nodes in combined broker+controller mode listening on free loopback
    ports; every cluster has its own temporary directory, removed on exit, also when the
    block fails or is cancelled.

    Example::

        async with KafkaCluster(brokers=3) as cluster:
            print(cluster.bootstrap_servers)
            await cluster.kill_broker(2)
            await cluster.start_broker(2)

    With ``tls=True`` (local brokers only) every broker also listens for TLS
    (``tls_bootstrap_servers``) with a certificate from a throwaway CA that
    ``tls_client_context()`` trusts.

    With ``sasl=True`` (local brokers only) every broker also has a ``SASL_PLAINTEXT``
    listener (``sasl_plaintext_bootstrap_servers``) and, with ``tls=True`` as well, a
    ``SASL_SSL`` one (``sasl_ssl_bootstrap_servers``, same test CA). Both offer the
    mechanisms ``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512`` and ``OAUTHBEARER`` with the
    users of :attr:`sasl_users` (``admin``, a super user, and ``alice``, who has no ACL);
    OAUTHBEARER accepts unsigned JWS tokens (``alg: none``; see
    :func:`aiostream_kafka.testing.sasl.unsecured_jwt`) whose ``sub`` claim is the user. The
    ``StandardAuthorizer`` runs with ``allow.everyone.if.no.acl.found=false``: ``alice`` is
    denied every topic and group until ACLs are created for ``User:alice``. The PLAINTEXT
    listener (``bootstrap_servers``) keeps working as before: its principal ``ANONYMOUS``
    is a super user. KIP-368 re-authentication can be switched on through
    ``server_properties``, globally (``connections.max.reauth.ms``) or for one listener
    and mechanism (``listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms``).

    With ``racks=["a", "b", ...]`` (local brokers only; one per broker, in node id order)
    each broker gets a ``broker.rack``. For follower fetching (KIP-392) add
    ``server_properties={"replica.selector.class":
    "org.apache.kafka.common.replica.RackAwareReplicaSelector"}``.

    With ``proxied=True`` (local brokers only) every broker advertises to clients the
    address of a :class:`~aiostream_kafka.testing.proxy.FaultProxy` in front of it
    (``cluster.proxy(node_id)``) and ``bootstrap_servers`` lists the proxies, so that all
    client traffic can be cut, delayed or blackholed; brokers talk to each other on a
    separate listener that the proxies do not touch. The proxies run on the event loop
    that called :meth:`start`, so a proxied cluster is started and used in one loop.

    With ``version="2.8.2"`` (local brokers only) another Apache Kafka release runs instead
    of the default :data:`~aiostream_kafka.testing.jars.KAFKA_VERSION`, from its own jars
    (resolved once, like the default's), for tests against older brokers. Versions before
    3.3 run in ZooKeeper mode (a ZooKeeper JVM is started too); ``zookeeper=True`` asks for
    it on any 2.x/3.x version, e.g. to keep a legacy ``message.format.version``. Not
    combinable with ``proxied``, ``tls`` or ``sasl`` in ZooKeeper mode.

    With ``classpath=[dir_or_jar, ...]`` (local brokers only) the entries are added to the
    brokers' JVM classpath after Kafka's jars: broker plugins of a test, such as a metrics
    reporter enabled with ``server_properties={"metric.reporters": "Class"}``.

    With ``features={"transaction.version": 1}`` (local KRaft brokers) the storage is
    formatted with those feature levels (``kafka-storage format --feature``) instead of
    the release's defaults, e.g. to test the transaction protocol v1 on Kafka 4; the fake
    takes ``transaction.version`` only.
    """

    def __init__(
        self,
        brokers: int = 1,
        server_properties: Mapping[str, str] | None = None,
        *,
        source: Source = "auto",
        start_timeout_s: float = 120.0,
        heap: str = "512m",
        proxied: bool = False,
        tls: bool = False,
        sasl: bool = False,
        racks: list[str] | None = None,
        version: str | None = None,
        zookeeper: bool | None = None,
        features: Mapping[str, int] | None = None,
        classpath: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"racks must name one rack per broker ({brokers}), got {racks!r}")
        self.racks = list(racks) if racks is not None else None
        self.features: dict[str, int] = dict(features or {})
        from aiostream_kafka.testing.jars import KAFKA_VERSION

        self.version = version or KAFKA_VERSION
        self.zookeeper = zookeeper
        self.brokers = brokers
        self.proxied = proxied
        self.tls = tls
        self.sasl = sasl
        self._proxies: dict[int, FaultProxy] = {}
        self.server_properties: dict[str, str] = dict(server_properties or {})
        self.start_timeout_s = start_timeout_s
        self.heap = heap
        self.source: Source = self._pick_source(source)
        if proxied and self.source != "local":
            raise ValueError(
                f"proxied=True needs brokers run from local jars (source 'local'), not "
                f"{self.source!r}: only they can advertise the proxies' addresses"
            )
        if tls and self.source != "local":
            raise ValueError(
                f"tls=True needs brokers run from local jars (source 'local'), not "
                f"{self.source!r}: the harness writes their certificates"
            )
        if racks is not None and self.source != "local":
            raise ValueError(
                f"racks needs brokers run from local jars (source 'local'), not "
                f"{self.source!r}: the harness writes each broker's broker.rack"
            )
        if sasl and self.source != "local":
            raise ValueError(
                f"sasl=True needs brokers run from local jars (source 'local'), not "
                f"{self.source!r}: the harness configures their SASL listeners, users and "
                f"authorizer at format time; unset {ENV_BOOTSTRAP} and set "
                f"{ENV_SOURCE}=local (or pass source='local')"
            )
        if (self.version != KAFKA_VERSION or zookeeper) and self.source != "local":
            raise ValueError(
                f"version={self.version!r}/zookeeper={zookeeper!r} needs brokers run from "
                f"local jars (source 'local'), not {self.source!r}; pass source='local'"
            )
        if self.features and self.source not in ("local", "fake"):
            raise ValueError(
                f"features needs brokers run from local jars (source 'local') or the fake "
                f"(only transaction.version), not {self.source!r}: they are set when the "
                f"harness formats the storage"
            )
        if self.source == "fake" and set(self.features) - {"transaction.version"}:
            raise ValueError(
                f"the fake cluster knows only the feature transaction.version, not "
                f"{sorted(set(self.features) - {'transaction.version'})}"
            )
        self.classpath = [os.fspath(entry) for entry in classpath]
        if self.classpath and self.source != "local":
            raise ValueError(
                f"classpath needs brokers run from local jars (source 'local'), not "
                f"{self.source!r}: the entries are added to the brokers' JVM classpath"
            )
        self._backend: _Backend | None = None
        self.startup_seconds: float | None = None

    @staticmethod
    def _pick_source(source: Source) -> Source:
        if source != "auto":
            return source
        forced_fake = os.environ.get(ENV_SOURCE, "").strip().lower() == "fake"
        if os.environ.get(ENV_BOOTSTRAP) and not forced_fake:
            return "external"
        forced = os.environ.get(ENV_SOURCE, "").strip().lower()
        if forced in ("local", "docker", "fake"):
            return forced  # type: ignore[return-value]
        from aiostream_kafka.testing.container import docker_available

        return "docker" if docker_available() else "local"

    @property
    def managed(self) -> bool:
        """True when this process started the brokers (so it may stop and kill them)."""
        return self.source != "external"

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:port[,127.0.0.1:port...]"``, the addresses of every broker."""
        if self._backend is None:
            raise RuntimeError("the cluster is not started; use `async with KafkaCluster()`")
        if self._proxies:
            return ",".join(p.address for p in self._proxies.values())
        return self._backend.bootstrap_servers

    @property
    def tls_bootstrap_servers(self) -> str:
        """The addresses of the brokers' TLS listeners (``tls=True``)."""
        backend = self._local_backend("tls_bootstrap_servers")
        if not backend.tls:
            raise RuntimeError("the cluster was started without tls=True")
        return backend.tls_bootstrap_servers

    @property
    def tls_ca_file(self) -> Path:
        """The PEM file of the test CA (``tls=True``), for clients configured by path
        (e.g. librdkafka's ``ssl.ca.location``)."""
        backend = self._local_backend("tls_ca_file")
        if backend.tls_material is None:
            raise RuntimeError("the cluster was started without tls=True")
        return backend.tls_material.ca_cert

    def tls_client_context(self) -> ssl.SSLContext:
        """An ``SSLContext`` that trusts the cluster's test CA (``tls=True``)."""
        backend = self._local_backend("tls_client_context")
        if backend.tls_material is None:
            raise RuntimeError("the cluster was started without tls=True")
        return backend.tls_material.client_context()

    @property
    def sasl_plaintext_bootstrap_servers(self) -> str:
        """The addresses of the brokers' ``SASL_PLAINTEXT`` listeners (``sasl=True``)."""
        backend = self._sasl_backend("sasl_plaintext_bootstrap_servers")
        return backend.sasl_plaintext_bootstrap_servers

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """The addresses of the brokers' ``SASL_SSL`` listeners (``sasl=True, tls=True``);
        their certificates are trusted by :meth:`tls_client_context`."""
        backend = self._sasl_backend("sasl_ssl_bootstrap_servers")
        if not backend.tls:
            raise RuntimeError("the cluster was started with sasl=True but without tls=True")
        return backend.sasl_ssl_bootstrap_servers

    @property
    def sasl_users(self) -> dict[str, str]:
        """``{user: password}`` of the SASL users (``sasl=True``), valid for PLAIN and both
        SCRAM mechanisms: ``admin`` (:attr:`sasl_super_user`) and ``alice`` (no ACL)."""
        from aiostream_kafka.testing.local import SASL_USERS

        if not self.sasl:
            raise RuntimeError("the cluster was created without sasl=True")
        return dict(SASL_USERS)

    @property
    def sasl_super_user(self) -> str:
        """The SASL user the authorizer lets do everything (``"admin"``)."""
        from aiostream_kafka.testing.local import SASL_SUPER_USER

        return SASL_SUPER_USER

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        """The mechanisms every SASL listener offers."""
        from aiostream_kafka.testing.local import SASL_MECHANISMS

        return SASL_MECHANISMS

    def _sasl_backend(self, what: str) -> LocalKafkaCluster:
        backend = self._local_backend(what)
        if not backend.sasl:
            raise RuntimeError("the cluster was started without sasl=True")
        return backend

    def _local_backend(self, what: str) -> LocalKafkaCluster:
        from aiostream_kafka.testing.local import LocalKafkaCluster

        if not isinstance(self._backend, LocalKafkaCluster):
            raise RuntimeError(f"{what} needs a started local cluster")
        return self._backend

    def proxy(self, node_id: int) -> FaultProxy:
        """The fault-injecting proxy in front of broker ``node_id`` (``proxied=True``)."""
        try:
            return self._proxies[node_id]
        except KeyError:
            raise ValueError(
                f"no proxy for node {node_id}: the cluster is not proxied or not started"
            ) from None

    @property
    def node_ids(self) -> list[int]:
        """The node ids of the brokers (1..brokers); empty for an external cluster."""
        return list(range(1, self.brokers + 1)) if self.managed else []

    def log_file(self, node_id: int) -> Path | None:
        """The log file of a local node (None for Docker or external clusters)."""
        from aiostream_kafka.testing.local import LocalKafkaCluster

        if isinstance(self._backend, LocalKafkaCluster):
            return self._backend._node(node_id).log_file
        return None

    @property
    def directory(self) -> Path | None:
        """The temporary directory of a local cluster (None for other sources)."""
        from aiostream_kafka.testing.local import LocalKafkaCluster

        if isinstance(self._backend, LocalKafkaCluster):
            return self._backend.directory
        return None

    def pids(self) -> list[int]:
        """Process ids of the running broker JVMs of a local cluster."""
        from aiostream_kafka.testing.local import LocalKafkaCluster

        if isinstance(self._backend, LocalKafkaCluster):
            return [
                n.process.pid
                for n in self._backend.nodes.values()
                if n.process is not None and n.process.poll() is None
            ]
        return []

    async def start(self) -> None:
        """Start the brokers and wait until every one serves requests.

        Raises:
            BrokerUnavailableError: Java/Maven is missing, or a broker did not come up in
                ``start_timeout_s`` (the message holds the tail of its log).
        """
        if self._backend is not None:
            raise RuntimeError("cluster already started")
        started = time.monotonic()
        backend: _Backend
        if self.source == "external":
            backend = _ExternalCluster(os.environ[ENV_BOOTSTRAP])
        elif self.source == "docker":
            from aiostream_kafka.testing.container import ContainerKafkaCluster

            backend = ContainerKafkaCluster(
                self.brokers, self.server_properties, start_timeout_s=self.start_timeout_s
            )
        elif self.source == "fake":
            backend = self._fake_backend()
        elif self.source == "local":
            from aiostream_kafka.testing.local import LocalKafkaCluster

            backend = LocalKafkaCluster(
                self.brokers,
                self.server_properties,
                start_timeout_s=self.start_timeout_s,
                heap=self.heap,
                proxied=self.proxied,
                tls=self.tls,
                sasl=self.sasl,
                racks=self.racks,
                version=self.version,
                zookeeper=self.zookeeper,
                features=self.features,
                classpath=self.classpath,
            )
        else:
            raise ValueError(f"unknown source {self.source!r}")
        self._backend = backend
        try:
            await backend.start()
            if self.proxied:
                await self._start_proxies(backend)
        except BaseException:
            self._backend = None
            await self._close_proxies()
            backend.close_now()
            raise
        self.startup_seconds = time.monotonic() - started
        log.info(
            "Kafka %s cluster (%s, %d broker(s)) up at %s in %.1fs",
            self.version,
            self.source,
            self.brokers,
            backend.bootstrap_servers,
            self.startup_seconds,
        )

    def _fake_backend(self) -> FakeCluster:
        """The in-process :class:`FakeCluster`, with the few broker settings it knows
        taken from ``server_properties`` (the others are ignored)."""
        from aiostream_kafka.testing.fake import FakeCluster

        props = self.server_properties
        return FakeCluster(
            self.brokers,
            auto_create_topics=props.get("auto.create.topics.enable", "false") == "true",
            default_partitions=int(props.get("num.partitions", "1")),
            default_replication_factor=int(props.get("default.replication.factor", "1")),
            group_min_session_timeout_ms=int(props.get("group.min.session.timeout.ms", "6000")),
            group_initial_rebalance_delay_ms=int(
                props.get("group.initial.rebalance.delay.ms", "0")
            ),
            transaction_version=self.features.get("transaction.version", 2),
        )

    @property
    def fake(self) -> FakeCluster:
        """The :class:`FakeCluster` behind a cluster whose source is ``"fake"`` (its
        ``control`` injects faults).

        Raises ``RuntimeError`` for another source or before the cluster is started.
        """
        from aiostream_kafka.testing.fake import FakeCluster

        if not isinstance(self._backend, FakeCluster):
            raise RuntimeError("the cluster is not a started fake one (source 'fake')")
        return self._backend

    async def _start_proxies(self, backend: _Backend) -> None:
        from aiostream_kafka.testing.local import HOST, LocalKafkaCluster
        from aiostream_kafka.testing.proxy import FaultProxy

        assert isinstance(backend, LocalKafkaCluster)
        for node_id, (port, advertised) in backend.advertised_ports().items():
            proxy = FaultProxy(HOST, port, listen_host=HOST, listen_port=advertised)
            await proxy.start()
            self._proxies[node_id] = proxy

    async def _close_proxies(self) -> None:
        proxies, self._proxies = list(self._proxies.values()), {}
        for proxy in proxies:
            await proxy.close()

    async def close(self) -> None:
        """Stop every broker and remove the cluster's files. Idempotent."""
        backend, self._backend = self._backend, None
        try:
            await self._close_proxies()
        finally:
            if backend is not None:
                try:
                    await backend.close()
                finally:
                    backend.close_now()

    def _require(self) -> _Backend:
        if self._backend is None:
            raise RuntimeError("the cluster is not started")
        return self._backend

    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        """Stop broker ``node_id`` gracefully (controlled shutdown) and wait until it is down.

        Raises:
            BrokerUnavailableError: the cluster comes from ``KAFKA_BOOTSTRAP_SERVERS``.
            ValueError: there is no such node.
        """
        await self._require().stop_broker(node_id, timeout)

    async def start_broker(self, node_id: int) -> None:
        """Start a stopped or killed broker again and wait until the cluster sees it.

        Raises:
            BrokerUnavailableError: it did not come back in time (with its log tail), or the
                cluster comes from ``KAFKA_BOOTSTRAP_SERVERS``.
        """
        await self._require().start_broker(node_id)

    async def kill_broker(self, node_id: int) -> None:
        """Kill broker ``node_id`` abruptly (SIGKILL, no controlled shutdown).

        Raises:
            BrokerUnavailableError: the cluster comes from ``KAFKA_BOOTSTRAP_SERVERS``.
        """
        await self._require().kill_broker(node_id)

    async def __aenter__(self) -> KafkaCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Shielded so that a cancelled test still waits for its brokers to be gone.
        await asyncio.shield(self.close())

    # Synchronous helpers for code without a running event loop (fixtures, CLI).
    def start_blocking(self) -> None:
        """Start the cluster from synchronous code (runs a private event loop; a fake
        cluster keeps serving from a thread of its own)."""
        if self.proxied:
            raise RuntimeError("a proxied cluster lives in one event loop: use `async with`")
        if self.source == "fake":
            if self._backend is not None:
                raise RuntimeError("cluster already started")
            fake = self._fake_backend()
            fake.start_blocking()
            self._backend = fake
            self.startup_seconds = fake.startup_seconds
            return
        asyncio.run(self.start())

    def close_blocking(self) -> None:
        """Close the cluster from synchronous code."""
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.close_now()
