"""The clients' start hooks of the KIP-714 metrics push: each builds its client's
collector and resource attributes and starts a :class:`TelemetryPusher` (None when
``enable_metrics_push`` is off). They take plain values and callables, never a client."""

from __future__ import annotations

from collections.abc import Callable

from aiostream_kafka._version import __version__
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import TaskScope
from aiostream_kafka.telemetry.client_metrics import (
    CONSUMER_PREFIX,
    CommitCounters,
    ConnectionMetrics,
    ConsumerMetrics,
    FetchCounters,
    ProducerMetrics,
)
from aiostream_kafka.telemetry.push import SOFTWARE_NAME, TelemetryPusher
from aiostream_kafka.telemetry.stats import ProducerStats, Window

__all__ = ["start_consumer_push", "start_producer_push", "start_share_consumer_push"]


def _resource(cluster: Cluster, **labels: str | None) -> dict[str, str]:
    """The OTLP resource: the client's identity (the broker adds its own labels: client
    instance id, source address, principal...) and the KIP's client labels that are set."""
    resource = {
        "client_id": cluster.config.client_id,
        "client_software_name": SOFTWARE_NAME,
        "client_software_version": __version__,
    }
    resource.update({name: value for name, value in labels.items() if value})
    return resource


def _pool_connections(cluster: Cluster) -> Callable[[], int]:
    return lambda: cluster.pool.connections_created


def start_producer_push(
    cluster: Cluster,
    stats: ProducerStats,
    *,
    transactional_id: str | None,
    scope: TaskScope | None = None,
) -> TelemetryPusher | None:
    """Start the producer's metrics push (None: ``enable_metrics_push`` is off).

    Raises:
        ScopeClosedError: ``scope`` is closed.
    """
    if not cluster.config.enable_metrics_push:
        return None
    pusher = TelemetryPusher(
        cluster,
        ProducerMetrics(stats, _pool_connections(cluster)),
        _resource(cluster, transactional_id=transactional_id),
        what="producer",
    )
    pusher.start(scope)
    return pusher


def start_consumer_push(
    cluster: Cluster,
    fetch: FetchCounters,
    fetch_latency: dict[int, Window],
    *,
    group_id: str | None,
    group_instance_id: str | None,
    client_rack: str | None,
    assigned_partitions: Callable[[], int] | None,
    commits: Callable[[], CommitCounters] | None,
) -> TelemetryPusher | None:
    """Start the consumer's metrics push (None: ``enable_metrics_push`` is off); the
    group's callables are None without a group.

    Raises:
        ScopeClosedError: never in practice (the pusher's own scope is new).
    """
    if not cluster.config.enable_metrics_push:
        return None
    pusher = TelemetryPusher(
        cluster,
        ConsumerMetrics(
            fetch,
            fetch_latency,
            _pool_connections(cluster),
            assigned_partitions,
            commits,
        ),
        _resource(
            cluster,
            group_id=group_id,
            group_instance_id=group_instance_id,
            client_rack=client_rack,
        ),
        what="consumer",
    )
    pusher.start()
    return pusher


def start_share_consumer_push(
    cluster: Cluster, *, group_id: str, client_rack: str | None, scope: TaskScope | None = None
) -> TelemetryPusher | None:
    """Start a share consumer's metrics push: the connection metrics only (None:
    ``enable_metrics_push`` is off).

    Raises:
        ScopeClosedError: ``scope`` is closed.
    """
    if not cluster.config.enable_metrics_push:
        return None
    pusher = TelemetryPusher(
        cluster,
        ConnectionMetrics(CONSUMER_PREFIX, _pool_connections(cluster)),
        _resource(cluster, group_id=group_id, client_rack=client_rack),
        what="share consumer",
    )
    pusher.start(scope)
    return pusher
