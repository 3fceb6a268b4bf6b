"""Offsets of the Spark data source: the canonical JSON form, range planning, rate limits,
and the driver-side look-ups (which partitions, where they start and end).

An offset, for Spark, is ``{"topic": {"partition": next_offset}}``: the position after the
last record read (ends are exclusive). Spark compares offsets as JSON *strings*, so
:func:`to_json` always builds them in one canonical order (topics, then partition keys as
strings, sorted the way ``json.dumps(sort_keys=True)`` sorts them).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from aiostream_kafka.admin import Admin, OffsetSpec
from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.protocol.error_codes import UnknownTopicOrPartitionError
from aiostream_kafka.structs import TopicPartition

from .options import EARLIEST, LATEST, OffsetBound, SourceOptions

__all__ = [
    "DataLossError",
    "OffsetRange",
    "Offsets",
    "from_json",
    "plan_batch_ranges",
    "plan_ranges",
    "rate_limit",
    "to_json",
]

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]


class DataLossError(KafkaError):
    """Records the query should have read are gone (deleted partitions, offsets that moved
    backwards, records removed by retention) and ``failOnDataLoss`` is true."""

    retriable = False


def data_loss_message(message: str) -> str:
    """``message`` with the built-in source's explanation and remedy appended."""
    return (
        f"{message}. Some data may have been lost because it is no longer available in "
        "Kafka: the data was aged out by Kafka, or the topic was deleted before all its "
        "data was processed. If you want your query to go on in such cases, set the "
        "source option 'failOnDataLoss' to 'false'."
    )


def data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise :class:`DataLossError` (``failOnDataLoss=true``) or log a warning.

    Raises:
        DataLossError: when ``fail_on_data_loss``.
    """
    if fail_on_data_loss:
        raise DataLossError(data_loss_message(message))
    log.warning("%s. Some data may have been lost; going on (failOnDataLoss=false).", message)


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The canonical Spark offset: topics sorted, partition keys as strings, sorted as
    strings (the order ``json.dumps(sort_keys=True)`` gives), so one set of offsets always
    serializes to one string."""
    by_topic: dict[str, dict[str, int]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, {})[str(tp.partition)] = int(offset)
    return {topic: dict(sorted(by_topic[topic].items())) for topic in sorted(by_topic)}


def from_json(data: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    """Parse a Spark offset (a dict, as Spark passes it back) into ``{TopicPartition: n}``.

    Raises:
        ConfigError: not an offset of this source (e.g. a checkpoint of another source).
    """
    if not data:
        return {}
    result: Offsets = {}
    try:
        for topic, parts in data.items():
            for part, offset in parts.items():
                result[TopicPartition(str(topic), int(part))] = int(offset)
    except (AttributeError, TypeError, ValueError):
        raise ConfigError(
            f"the checkpointed offset {data!r} is not an aiostream_kafka offset "
            '({"topic": {"partition": offset}}); was the checkpoint written by another source?'
        ) from None
    return result


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: what one Spark input partition reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """The number of offsets in the range (an upper bound on its records)."""
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        """The range's partition."""
        return TopicPartition(self.topic, self.partition)


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """One range per partition with something to read (in partition order), split as the
    built-in source's ``KafkaOffsetRangeCalculator.getRanges`` (Spark 4.2) splits them.
    Partitions of ``end`` missing from ``start`` are not read; ranges with
    ``end <= start`` are dropped.

    1. ``max_records_per_partition``: each range is cut into ``ceil(size / max)`` pieces.
    2. ``min_partitions``, when greater than the number of ranges so far: a range whose
       share of the total (``round(size / total * min_partitions)``, at least 1) is one
       stays whole; the other ranges share ``min_partitions`` minus the number of whole
       ones, in proportion to their sizes among themselves (at least one piece each). (The whole
       ones are picked by partition: when step 1 cut a partition, all its pieces stay
       whole as soon as one of them does.)

    A range of ``size`` offsets in ``parts`` pieces is cut as Spark cuts it: each piece
    takes ``remaining // pieces_left`` offsets, so the last ones are the larger; empty
    pieces are dropped. Rounding is half up, as Java's ``Math.round``.
    """
    ranges = [
        OffsetRange(tp.topic, tp.partition, start[tp], end[tp])
        for tp in sorted(end)
        if tp in start and end[tp] > start[tp]
    ]
    if max_records_per_partition is not None:
        ranges = [
            piece for r in ranges for piece in _split(r, -(-r.size // max_records_per_partition))
        ]
    if min_partitions is None or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    whole = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
    whole_tps = {r.tp for r in whole}
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    planned: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if r.tp in whole_tps else _part_count(r.size, split_total, split_min)
        planned.extend(_split(r, parts))
    return planned


def plan_batch_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The ranges of a batch read of the partitions of ``end``: as the built-in source's
    batch read (``getOffsetRangesFromUnresolvedOffsets``), split with :func:`plan_ranges`
    only when ``min_partitions`` exceeds the number of partitions read -- those with
    nothing to read count too -- or a range is longer than ``max_records_per_partition``;
    otherwise one range per partition with something to read. (Streams split every
    micro-batch with :func:`plan_ranges` directly, as the built-in source does.)"""
    splits = (min_partitions is not None and min_partitions > len(end)) or (
        max_records_per_partition is not None
        and any(e - start.get(tp, e) > max_records_per_partition for tp, e in end.items())
    )
    if not splits:
        return plan_ranges(start, end)
    return plan_ranges(start, end, min_partitions, max_records_per_partition)


def _part_count(size: int, total: int, parts: int) -> int:
    """``max(Math.round(size / total * parts), 1)`` in Java's arithmetic (doubles, half up)."""
    share = size / total * parts
    rounded = math.floor(share)
    if share - rounded >= 0.5:  # exact (unlike floor(share + 0.5)), as Math.round
        rounded += 1
    return max(rounded, 1)


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` pieces, each ``remaining // pieces_left`` long; empty ones dropped."""
    pieces: list[OffsetRange] = []
    remaining = r.size
    at = r.start
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        if size > 0:
            pieces.append(OffsetRange(r.topic, r.partition, at, at + size))
            at += size
    return pieces


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> Offsets:
    """Advance from ``start`` towards ``latest`` by at most about ``limit`` offsets, shared
    among partitions in proportion to their backlog; a partition with any backlog moves by
    at least one (as the built-in source's ``maxOffsetsPerTrigger``). Partitions of
    ``latest`` missing from ``start`` are taken as starting at 0 offsets of backlog...
    callers pass ``start`` with every partition of ``latest``.
    """
    sizes = {tp: max(0, end - start[tp]) for tp, end in latest.items() if tp in start}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    result: Offsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            result[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        result[tp] = min(end, start[tp] + step)
    return result


# -- driver-side look-ups (async; the readers run them in a private loop) --------------------


async def current_partitions(
    admin: Admin, opts: SourceOptions, *, must_exist: bool = False
) -> list[TopicPartition]:
    """The partitions the options select now: every partition of the subscribed topics
    (internal ones included when named), of the (non-internal) topics the pattern matches
    anywhere in their name (``re.search``, as Java's ``Matcher.find``), or the assigned
    ones.

    A subscribed topic that does not exist has no partitions yet (streams: it is read once
    created); with ``must_exist`` (batch reads) it fails, as does an assigned topic or
    partition that does not exist.

    Raises:
        UnknownTopicOrPartitionError: ``must_exist`` and a named topic or assigned
            partition does not exist.
    """
    if opts.assign is not None:
        if must_exist:
            topics = await admin.list_topics(include_internal=True)
            gone = [
                tp
                for tp in opts.assign
                if tp.topic not in topics
                or tp.partition not in {p.partition for p in topics[tp.topic].partitions}
            ]
            if gone:
                listed = ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
                raise UnknownTopicOrPartitionError(
                    f"option 'assign': partitions {listed} do not exist (the built-in source "
                    "fails with UnknownTopicOrPartitionException too); create the topic or "
                    "assign partitions that exist"
                )
        return list(opts.assign)
    if opts.subscribe is not None:
        topics = await admin.list_topics(include_internal=True)
        names = [t for t in opts.subscribe if t in topics]
        missing = sorted(set(opts.subscribe) - set(topics))
        if missing and must_exist:
            raise UnknownTopicOrPartitionError(
                f"option 'subscribe': topics {', '.join(missing)} do not exist (the built-in "
                "source fails with UnknownTopicOrPartitionException too); create them or "
                "subscribe to topics that exist"
            )
        if missing:
            log.info("subscribed topics %s do not exist (yet)", missing)
    else:
        assert opts.subscribe_pattern is not None
        topics = await admin.list_topics()
        pattern = re.compile(opts.subscribe_pattern)
        names = [t for t in topics if pattern.search(t)]
    return sorted(
        TopicPartition(name, p.partition) for name in names for p in topics[name].partitions
    )


async def list_offsets(
    admin: Admin, tps: list[TopicPartition], spec: OffsetSpec, isolation_level: str
) -> Offsets:
    """Look ``spec`` up for every partition of ``tps`` (offset -1 where no record matches a
    timestamp)."""
    if not tps:
        return {}
    found = await admin.list_offsets({tp: spec for tp in tps}, isolation_level=isolation_level)
    return {tp: found[tp].offset for tp in tps}


async def resolve_bound(
    admin: Admin,
    opts: SourceOptions,
    bound: OffsetBound,
    tps: list[TopicPartition],
    *,
    starting: bool,
) -> Offsets:
    """Turn ``bound`` into offsets of ``tps``.

    Specific offsets must name exactly ``tps`` (-2/-1 become earliest/latest); timestamps
    find the first record at or after them; where none is, a start fails
    (``startingOffsetsByTimestampStrategy=error``) or takes latest, an end takes latest.

    Raises:
        ConfigError: JSON offsets or timestamps that do not cover the read's partitions, or
            a starting timestamp no record reaches (strategy ``error``).
    """
    iso = opts.kafka.isolation_level
    option = "startingOffsets" if starting else "endingOffsets"
    if bound.kind == "earliest":
        return await list_offsets(admin, tps, OffsetSpec.earliest(), iso)
    if bound.kind == "latest":
        return await list_offsets(admin, tps, OffsetSpec.latest(), iso)
    if bound.kind == "offsets":
        _check_cover(option, set(bound.offsets), tps)
        wanted = dict(bound.offsets)
        earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
        latest = [tp for tp, o in wanted.items() if o == LATEST]
        wanted.update(await list_offsets(admin, earliest, OffsetSpec.earliest(), iso))
        wanted.update(await list_offsets(admin, latest, OffsetSpec.latest(), iso))
        return wanted
    if bound.kind == "timestamps":
        option += "ByTimestamp"
        _check_cover(option, set(bound.timestamps), tps)
        stamps = dict(bound.timestamps)
    else:
        option = "startingTimestamp" if starting else "endingTimestamp"
        stamps = {tp: bound.timestamp for tp in tps}
    result: Offsets = {}
    for tp, ts in sorted(stamps.items()):
        result.update(await list_offsets(admin, [tp], OffsetSpec.for_timestamp(ts), iso))
    unmatched = [tp for tp, o in result.items() if o < 0]
    if unmatched and starting and opts.starting_no_match == "error":
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in unmatched)
        raise ConfigError(
            f"{option}: no record at or after the given timestamp in {names}; use an earlier "
            "timestamp, or set 'startingOffsetsByTimestampStrategy' to 'latest' to start "
            "those partitions at their end"
        )
    if unmatched:
        result.update(await list_offsets(admin, unmatched, OffsetSpec.latest(), iso))
    return result


def _check_cover(option: str, given: set[TopicPartition], tps: list[TopicPartition]) -> None:
    wanted = set(tps)
    if given == wanted:
        return
    missing = sorted(wanted - given)
    extra = sorted(given - wanted)
    parts = []
    if missing:
        parts.append("missing " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
    if extra:
        parts.append(
            "not read by this query " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra)
        )
    raise ConfigError(
        f"{option} with specific offsets must name every partition the query reads and no "
        f"other ({'; '.join(parts)}). Use -2 for earliest and -1 for latest."
    )
