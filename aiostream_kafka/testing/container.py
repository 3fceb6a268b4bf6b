"""Kafka brokers in Docker containers (image ``apache/kafka``) through testcontainers.

Used when a Docker daemon answers (developer laptops, CI services with Docker). Each node
is one container in combined broker+controller mode on a private Docker network; its client
listener is published on the same free port on 127.0.0.1 of the host, so the address it
advertises works from the host unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiostream_kafka.errors import BrokerUnavailableError
from aiostream_kafka.testing import probe
from aiostream_kafka.testing.jars import KAFKA_VERSION
from aiostream_kafka.testing.local import HOST, free_ports, new_cluster_id

log = logging.getLogger(__name__)

IMAGE = f"apache/kafka:{KAFKA_VERSION}"
_CONTROLLER_PORT = 9093
_INTERNAL_PORT = 19092


def docker_available(timeout: float = 3.0) -> bool:
    """Return True when the ``docker`` package is installed and a daemon answers a ping."""
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


class ContainerKafkaCluster:
    """``brokers`` Kafka containers. Use through :class:`KafkaCluster`."""

    def __init__(
        self,
        brokers: int = 1,
        server_properties: Mapping[str, str] | None = None,
        *,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.brokers = brokers
        self.server_properties = dict(server_properties or {})
        self.start_timeout_s = start_timeout_s
        self.ports: dict[int, int] = {}
        self.containers: dict[int, Any] = {}
        self._network: Any = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{HOST}:{p}" for p in self.ports.values())

    def _env(self, node_id: int, cluster_id: str) -> dict[str, str]:
        voters = ",".join(f"{i}@kafka-{i}:{_CONTROLLER_PORT}" for i in range(1, self.brokers + 1))
        port = self.ports[node_id]
        replication = str(min(3, self.brokers))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://0.0.0.0:{port},INTERNAL://0.0.0.0:{_INTERNAL_PORT},"
            f"CONTROLLER://0.0.0.0:{_CONTROLLER_PORT}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{port},"
            f"INTERNAL://kafka-{node_id}:{_INTERNAL_PORT}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "INTERNAL:PLAINTEXT",
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "2" if self.brokers >= 3 else "1",
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": "2" if self.brokers >= 3 else "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.server_properties)
        # The apache/kafka image maps KAFKA_FOO_BAR=... to foo.bar=... (and ___ to -, __ to _).
        env = {
            "KAFKA_" + k.replace("-", "___").replace("_", "__").replace(".", "_").upper(): v
            for k, v in props.items()
        }
        env["CLUSTER_ID"] = cluster_id
        return env

    async def start(self) -> None:
        await asyncio.to_thread(self._start_sync)
        deadline = time.monotonic() + self.start_timeout_s
        for node_id, port in self.ports.items():
            await self._wait_serving(node_id, port, deadline)

    def _start_sync(self) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        cluster_id = new_cluster_id()
        ports = free_ports(self.brokers)
        self.ports = {i: ports[i - 1] for i in range(1, self.brokers + 1)}
        self._network = Network().create()
        try:
            for node_id, port in self.ports.items():
                container = (
                    DockerContainer(IMAGE)
                    .with_network(self._network)
                    .with_network_aliases(f"kafka-{node_id}")
                    .with_bind_ports(port, (HOST, port))  # type: ignore[arg-type]  # docker-py accepts (ip, port)
                )
                for key, value in self._env(node_id, cluster_id).items():
                    container = container.with_env(key, value)
                container.start()
                self.containers[node_id] = container
        except BaseException:
            self.close_now()
            raise

    async def _wait_serving(self, node_id: int, port: int, deadline: float) -> None:
        while True:
            try:
                await probe.api_versions(HOST, port, timeout_s=2.0)
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    logs = self._logs(node_id)
                    raise BrokerUnavailableError(
                        f"Kafka container {node_id} on {HOST}:{port} did not come up within "
                        f"{self.start_timeout_s:.0f}s ({exc!r}). Last lines of its log:\n{logs}"
                    ) from exc
            await asyncio.sleep(0.3)

    def _logs(self, node_id: int) -> str:
        container = self.containers.get(node_id)
        if container is None:
            return ""
        try:
            out, err = container.get_logs()
            text = (out + err).decode("utf-8", "replace")
            return "\n".join(text.splitlines()[-60:])
        except Exception as exc:
            return f"(logs unavailable: {exc!r})"

    def _wrapped(self, node_id: int) -> Any:
        if node_id not in self.containers:
            raise ValueError(f"no node {node_id}; nodes are {sorted(self.containers)}")
        return self.containers[node_id].get_wrapped_container()

    async def kill_broker(self, node_id: int) -> None:
        await asyncio.to_thread(self._wrapped(node_id).kill)

    async def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109
        await asyncio.to_thread(self._wrapped(node_id).stop, timeout=int(timeout))

    async def start_broker(self, node_id: int) -> None:
        await asyncio.to_thread(self._wrapped(node_id).start)
        await self._wait_serving(
            node_id, self.ports[node_id], time.monotonic() + self.start_timeout_s
        )

    def close_now(self) -> None:
        for container in self.containers.values():
            with contextlib.suppress(Exception):
                container.stop()
        self.containers.clear()
        if self._network is not None:
            with contextlib.suppress(Exception):
                self._network.remove()
            self._network = None

    async def close(self) -> None:
        await asyncio.to_thread(self.close_now)
