"""Sans-IO pieces of the share consumer: which fetched records were acquired (and with
what delivery count), and acknowledgements as the wire's batches.

A ShareFetch answer carries whole record batches (``records``) and, apart, the offset
ranges this member acquired (``acquired_records``: first, last, delivery count). Only the
records inside those ranges are this member's to hand out; the rest of a batch belongs to
other members or is already done. An acquired offset with no record to hand out (a control
record of a transaction, an offset compacted away) is acknowledged as a GAP so that the
broker can complete the range.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from aiostream_kafka.structs import Record, ShareRecord, TopicPartition

__all__ = [
    "GAP_TYPE",
    "AckBatch",
    "Demand",
    "PendingAcks",
    "ack_batches",
    "acquired_records",
]

#: The wire's acknowledge type for offsets inside an acquired range that hold no record to
#: hand out (control records, compacted-away offsets): acknowledged so the range completes.
GAP_TYPE = 0

#: (first offset, last offset, acknowledge types: one for the whole range)
AckBatch = tuple[int, int, list[int]]


def acquired_records(
    records: Sequence[Record], ranges: Iterable[tuple[int, int, int]], lock_deadline: float = 0.0
) -> tuple[list[ShareRecord], list[int]]:
    """The records of ``records`` inside the acquired ``ranges`` ((first, last, delivery
    count), inclusive) as :class:`ShareRecord` (with ``lock_deadline``), in offset order,
    and the acquired offsets that have no record (gaps). ``records`` are in offset order
    (a fetch's batches)."""
    by_offset = {r.offset: r for r in records}
    out: list[ShareRecord] = []
    gaps: list[int] = []
    for first, last, count in sorted(ranges):
        if last - first > len(by_offset) + 1_000_000:
            raise ValueError(f"acquired range {first}-{last} is implausibly large")
        for offset in range(first, last + 1):
            r = by_offset.get(offset)
            if r is None:
                gaps.append(offset)
                continue
            out.append(
                ShareRecord(
                    r.topic, r.partition, r.offset, r.timestamp_ms, r.timestamp_type, r.key,
                    r.value, r.headers, r.leader_epoch, count, lock_deadline,
                )
            )  # fmt: skip
    return out, gaps


def ack_batches(acks: Mapping[int, int]) -> list[AckBatch]:
    """``acks`` (offset -> acknowledge type) as batches: each run of consecutive offsets
    with one type becomes one batch with a single type (the wire's short form)."""
    out: list[AckBatch] = []
    for offset in sorted(acks):
        kind = acks[offset]
        if out and out[-1][1] == offset - 1 and out[-1][2][0] == kind:
            first, _, kinds = out[-1]
            out[-1] = (first, offset, kinds)
        else:
            out.append((offset, offset, [kind]))
    return out


class PendingAcks:
    """Acknowledgements not sent yet, by the broker whose share session acquired the
    records (acknowledgements go to that session) and partition. A later type for an
    offset replaces an earlier one."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._by_node: dict[int, dict[TopicPartition, dict[int, int]]] = {}
        self._since: dict[int, float] = {}  # when the oldest waiting for a node came
        self._clock = clock

    def add(self, node: int, tp: TopicPartition, offset: int, kind: int) -> None:
        """Note ``kind`` for ``offset`` of ``tp``, acquired through ``node``'s session."""
        parts = self._by_node.get(node)
        if parts is None:
            parts = self._by_node[node] = {}
            self._since[node] = self._clock()
        offsets = parts.get(tp)
        if offsets is None:
            offsets = parts[tp] = {}
        offsets[offset] = kind

    def nodes(self) -> set[int]:
        """The brokers with acknowledgements waiting."""
        return {n for n, parts in self._by_node.items() if any(parts.values())}

    def partitions(self, node: int) -> set[TopicPartition]:
        """The partitions with acknowledgements waiting for ``node``."""
        return {tp for tp, acks in self._by_node.get(node, {}).items() if acks}

    def waiting_since(self, node: int) -> float | None:
        """When the oldest acknowledgement waiting for ``node`` came (the clock's time),
        or None."""
        return self._since.get(node) if node in self._by_node else None

    def take(self, node: int) -> dict[TopicPartition, dict[int, int]]:
        """Remove and return what waits for ``node``."""
        self._since.pop(node, None)
        taken = self._by_node.pop(node, {})
        return {tp: acks for tp, acks in taken.items() if acks}

    def __len__(self) -> int:
        return sum(len(a) for parts in self._by_node.values() for a in parts.values())


class Demand:
    """How many records to keep acquired and not handed out yet: what the application
    takes in a quarter of the lock duration, between 1 and ``maximum``.

    Every record held waiting is a lock another member could be serving, and a record
    that waits longer than its lock is delivered again (its delivery count spent). So the
    target follows the application: it doubles whenever the application found nothing
    to take although the last fetch brought all it asked for (the application, not the
    supply, is the faster; not on its first record), and after a window of ``window_s`` in which
    records were always waiting it becomes the measured take rate times a quarter of the
    lock duration. Sans-IO: the caller passes the loop's time.
    """

    def __init__(self, maximum: int, *, initial: int = 32, window_s: float = 1.0) -> None:
        self.maximum = maximum
        self.target = max(1, min(maximum, initial))
        self.window_s = window_s
        self._start: float | None = None
        self._taken = 0
        self._starved = False
        self._first = True
        self._supply_full = False  # the last fetch brought all it asked for

    def fetched(self, asked: int, got: int) -> None:
        """A fetch asked for ``asked`` records and acquired ``got``."""
        self._supply_full = got >= asked

    def took(self, now: float, *, waited: bool, lock_s: float) -> None:
        """The application took one record at ``now``; ``waited``: it found none held
        and waited for the fetch. ``lock_s``: the group's lock duration."""
        if waited and not self._first:
            self._starved = True
            if self._supply_full:
                self.target = min(self.maximum, self.target * 2)
        self._first = False
        self._taken += 1
        if self._start is None:
            self._start = now
            return
        elapsed = now - self._start
        if elapsed < self.window_s:
            return
        if not self._starved:
            rate = self._taken / elapsed
            self.target = max(1, min(self.maximum, math.ceil(rate * lock_s / 4)))
        self._start, self._taken, self._starved = now, 0, False

    def room(self, held: int) -> int:
        """Records to ask for now, given ``held`` (buffered plus asked in flight): the
        rest of the target once at most half of it is held (no trickle of one-record
        fetches), else 0."""
        if held * 2 > self.target:
            return 0
        return self.target - held
