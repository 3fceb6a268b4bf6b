"""What ``Consumer.health()`` reports of a running ``process()``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiostream_kafka.structs import TopicPartition

__all__ = ["ProcessHealth"]


@dataclass(frozen=True, slots=True)
class ProcessHealth:
    """A running ``process()``, in :attr:`ConsumerHealth.processing`.

    ``in_flight``: handlers running (a record between its attempts counts);
    ``waiting``: records taken whose handler has not started (behind a busy key or
    partition); ``oldest_handler_s``: how long the longest-running handler has run (0.0
    when none runs; one past ``max_poll_interval_ms`` makes the member leave its group,
    as a stuck ``async for`` does); ``gaps``: per partition with finished records beyond
    its committable offset, how many offsets lie from that offset to one past the highest
    finished one (a restart reads them again, skipping the finished ones the commit's
    metadata names); ``throttled``: partitions whose fetching is paused because their
    records wait; ``skipped``/``dead_lettered``: records whose handler failed every
    attempt, skipped or sent to the dead-letter topic."""

    in_flight: int
    waiting: int
    oldest_handler_s: float
    gaps: Mapping[TopicPartition, int]
    throttled: frozenset[TopicPartition]
    skipped: int
    dead_lettered: int
