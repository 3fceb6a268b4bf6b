"""What the consumer's components ask of each other, as small ``Protocol`` s.

The engine (``engine.FetchEngine``) owns the components and wires them together; each
component names the part of its owner it uses as a protocol of its own module
(``scheduler.SchedulerHost``, ``fetcher.FetchHost``, ``positions.ResolverHost``,
``iterators.StreamHost``), so that no component imports the engine and a test can hand
a component a small fake. The protocols here are the ones several components share: the
offset resolver's metadata requests, a wake-up, and the engine's parts every component
reads (``EngineParts``). Nothing here imports a component but the prefetch buffer (a leaf).
"""

from __future__ import annotations

from typing import Protocol

from aiostream_kafka.cluster import Cluster
from aiostream_kafka.config import ClientConfig

from .config import ConsumerConfig
from .partition import PartitionState
from .prefetch import PrefetchBuffer

__all__ = ["EngineParts", "MetadataRequests", "ResolverRequests", "Wakeable"]


class EngineParts(Protocol):
    """What the scheduler, the fetchers and the resolver all read of the engine: the
    cluster, the client's and the consumer's settings, the prefetch buffer."""

    @property
    def buffer(self) -> PrefetchBuffer: ...
    @property
    def cluster(self) -> Cluster: ...
    @property
    def client(self) -> ClientConfig: ...
    @property
    def config(self) -> ConsumerConfig: ...


class Wakeable(Protocol):
    """A task that re-plans when woken (the scheduler, the offset resolver)."""

    def wake(self) -> None:
        """Re-plan soon: something it waits for may have changed."""


class MetadataRequests(Wakeable, Protocol):
    """What the scheduler asks of the offset resolver: a wake-up, or fresh metadata."""

    def request_metadata(self) -> None:
        """Refresh the cluster metadata soon (a leader is unknown or moved)."""


class ResolverRequests(MetadataRequests, Protocol):
    """What a fetcher asks of the offset resolver: also a check of one topic."""

    def check_topic(self, ps: PartitionState) -> None:
        """The broker does not know ``ps``'s topic: find out whether it was deleted."""
