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

from collections.abc import Iterable, Mapping, Sequence

from aiostream_kafka.structs import Record, ShareRecord, TopicPartition

__all__ = ["GAP_TYPE", "AckBatch", "PendingAcks", "ack_batches", "acquired_records"]

#: The wire's acknowledge type for offsets inside an acquired range that hold no record to
#: hand out (control records, compacted-away offsets): acknowledged so the range completes.
GAP_TYPE = 0

#: (first offset, last offset, acknowledge types: one for the whole range)
AckBatch = tuple[int, int, list[int]]


def acquired_records(
    records: Sequence[Record], ranges: Iterable[tuple[int, int, int]]
) -> tuple[list[ShareRecord], list[int]]:
    """The records of ``records`` inside the acquired ``ranges`` ((first, last, delivery
    count), inclusive) as :class:`ShareRecord`, in offset order, and the acquired offsets
    that have no record (gaps). ``records`` are in offset order (a fetch's batches)."""
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
                    r.value, r.headers, r.leader_epoch, count,
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

    def __init__(self) -> None:
        self._by_node: dict[int, dict[TopicPartition, dict[int, int]]] = {}

    def add(self, node: int, tp: TopicPartition, offset: int, kind: int) -> None:
        """Note ``kind`` for ``offset`` of ``tp``, acquired through ``node``'s session."""
        self._by_node.setdefault(node, {}).setdefault(tp, {})[offset] = kind

    def nodes(self) -> set[int]:
        """The brokers with acknowledgements waiting."""
        return {n for n, parts in self._by_node.items() if any(parts.values())}

    def partitions(self, node: int) -> set[TopicPartition]:
        """The partitions with acknowledgements waiting for ``node``."""
        return {tp for tp, acks in self._by_node.get(node, {}).items() if acks}

    def take(self, node: int) -> dict[TopicPartition, dict[int, int]]:
        """Remove and return what waits for ``node``."""
        taken = self._by_node.pop(node, {})
        return {tp: acks for tp, acks in taken.items() if acks}

    def __len__(self) -> int:
        return sum(len(a) for parts in self._by_node.values() for a in parts.values())
