"""What the consumer's components ask of each other, as small ``Protocol`` s.

The engine (``engine.FetchEngine``) owns the components and wires them together; each
component names the part of its owner it uses as a protocol of its own module
(``scheduler.SchedulerHost``, ``fetcher.FetchHost``, ``positions.ResolverHost``,
``iterators.StreamHost``), so that no component imports the engine and a test can hand
a component a small fake. The protocols here are the ones several components share: the
offset resolver's metadata requests and a wake-up. Nothing here imports a component.
"""

from __future__ import annotations

from typing import Protocol

from .partition import PartitionState

__all__ = ["MetadataRequests", "ResolverRequests", "Wakeable"]


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
