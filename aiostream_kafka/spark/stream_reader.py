"""The streaming reader: micro-batches of offset ranges, admission control and
``Trigger.AvailableNow``.

Driver-side calls (``initialOffset``, ``latestOffset``, ``partitions``) run in one
long-lived Python worker; each runs its Kafka look-ups in a private event loop with an
Admin opened for the call. ``read()`` runs on executors (see :mod:`.reader`).

Partition changes, as the built-in source handles them:

* a partition that appears after the query started is read from its earliest offset;
* a partition that disappears (topic deleted) is data loss;
* a partition whose offset went backwards (topic deleted and re-created) is data loss;
  the new partition is read from its earliest offset.

Data loss fails the query (``failOnDataLoss=true``, the default) or is logged and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from aiostream_kafka.admin import Admin, OffsetSpec

from .offsets import (
    Offsets,
    current_partitions,
    data_loss,
    from_json,
    list_offsets,
    plan_ranges,
    rate_limit,
    resolve_bound,
    to_json,
)
from .options import OffsetBound, SourceOptions
from .reader import KafkaInputPartition, read_partition, run_with_admin

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in on Spark versions without admission control."""

    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in on Spark versions without admission control."""

    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in on Spark versions without admission control."""

        def __init__(self, max_rows: int) -> None:
            self.max_rows = max_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without Trigger.AvailableNow for Python sources."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Record the target offsets."""


__all__ = ["KafkaStreamReader"]

log = logging.getLogger(__name__)

_LONG_MAX = 2**63 - 1


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads of the selected partitions.

    Offsets are ``{"topic": {"partition": next_offset}}`` in canonical order (see
    :func:`~aiostream_kafka.spark.offsets.to_json`).
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._available_now: Offsets | None = None
        self._last_trigger_ms: float | None = None

    # -- driver side -----------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` (default latest) resolved now.

        Raises:
            ConfigError: offsets that do not fit the partitions.
            KafkaError: the cluster could not be asked.
        """
        opts = self.opts

        async def resolve(admin: Admin) -> Offsets:
            tps = await current_partitions(admin, opts)
            bound = opts.starting or OffsetBound("latest")
            return await resolve_bound(admin, opts, bound, tps, starting=True)

        offsets = run_with_admin(opts, resolve)
        log.info("initial offsets %s", to_json(offsets))
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when a per-trigger bound is set, else
        ``ReadAllAvailable``. (With only ``minOffsetsPerTrigger``, an unbounded
        ``ReadMaxRows`` marks "apply the options" apart from ``ReadAllAvailable``.)"""
        opts = self.opts
        if opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.min_offsets_per_trigger is not None:
            return ReadMaxRows(_LONG_MAX)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the latest offsets now. Later calls of :meth:`latestOffset`
        never go beyond it (partitions appearing later are not read by this run)."""
        opts = self.opts

        async def latest(admin: Admin) -> Offsets:
            tps = await current_partitions(admin, opts)
            return await list_offsets(admin, tps, OffsetSpec.latest(), opts.kafka.isolation_level)

        self._available_now = run_with_admin(opts, latest)
        log.info("Trigger.AvailableNow target %s", to_json(self._available_now))

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: the latest offsets (or the AvailableNow
        target), limited by ``maxOffsetsPerTrigger`` (shared in proportion to each
        partition's backlog) and held back by ``minOffsetsPerTrigger`` until enough is
        there or ``maxTriggerDelay`` passed. Returns ``start`` itself when there is
        nothing new.

        Raises:
            KafkaError: the cluster could not be asked.
        """
        opts = self.opts
        begin = from_json(start)
        target = self._available_now

        async def plan(admin: Admin) -> tuple[Offsets, Offsets]:
            if target is not None:
                latest = dict(target)
            else:
                tps = await current_partitions(admin, opts)
                latest = await list_offsets(
                    admin, tps, OffsetSpec.latest(), opts.kafka.isolation_level
                )
            new = [tp for tp in latest if tp not in begin]
            earliest = await list_offsets(
                admin, new, OffsetSpec.earliest(), opts.kafka.isolation_level
            )
            return latest, earliest

        latest, new_earliest = run_with_admin(opts, plan)
        from_here = {**new_earliest, **{tp: o for tp, o in begin.items() if tp in latest}}
        # Deleted or shrunk partitions are dealt with in partitions(); here they only must
        # not count as backlog.
        for tp, offset in list(from_here.items()):
            if latest[tp] < offset:
                from_here[tp] = latest[tp]
        use_options = limit is None or not isinstance(limit, ReadAllAvailable)
        backlog = sum(max(0, latest[tp] - from_here[tp]) for tp in latest)
        now_ms = time.time() * 1000
        if self._last_trigger_ms is None:
            self._last_trigger_ms = now_ms
        if (
            use_options
            and target is None
            and opts.min_offsets_per_trigger is not None
            and backlog < opts.min_offsets_per_trigger
            and now_ms - self._last_trigger_ms < opts.max_trigger_delay_ms
        ):
            log.debug(
                "%d new offsets < minOffsetsPerTrigger %d; waiting",
                backlog,
                opts.min_offsets_per_trigger,
            )
            return start if start is not None else to_json(begin)
        end = latest
        max_rows = getattr(limit, "max_rows", None) if limit is not None else None
        if use_options and max_rows is None:
            max_rows = opts.max_offsets_per_trigger
        if use_options and max_rows is not None and max_rows < _LONG_MAX:
            end = rate_limit(from_here, latest, int(max_rows))
        result = to_json(end)
        if result != to_json(begin):
            self._last_trigger_ms = now_ms
        return result

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Not reported (it would cost a look-up per trigger)."""
        return None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The input partitions of the micro-batch ``(start, end]``, with the partition
        changes of the module doc applied.

        Raises:
            DataLossError: a partition was deleted or went backwards and
                ``failOnDataLoss`` is true.
            KafkaError: the cluster could not be asked.
        """
        opts = self.opts
        begin, until = from_json(start), from_json(end)
        fail = opts.fail_on_data_loss
        new = sorted(tp for tp in until if tp not in begin)
        earliest: Offsets = {}
        if new:

            def lookup(admin: Admin) -> Any:
                return list_offsets(admin, new, OffsetSpec.earliest(), opts.kafka.isolation_level)

            earliest = run_with_admin(opts, lookup)
            for tp in new:
                if earliest[tp] != 0:
                    data_loss(
                        f"new partition {tp.topic}-{tp.partition} starts at offset "
                        f"{earliest[tp]}, not 0: its first records were deleted before the "
                        "query could read them",
                        fail,
                    )
                log.info("new partition %s-%d, read from %d", tp.topic, tp.partition, earliest[tp])
        deleted = sorted(tp for tp in begin if tp not in until)
        if deleted:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in deleted)
            data_loss(f"partitions {names} are gone (deleted topic or partitions)", fail)
        from_offsets = {**earliest, **{tp: o for tp, o in begin.items() if tp in until}}
        for tp in sorted(until):
            if until[tp] < from_offsets[tp]:
                data_loss(
                    f"partition {tp.topic}-{tp.partition}'s offset went back from "
                    f"{from_offsets[tp]} to {until[tp]} (topic re-created?)",
                    fail,
                )
                from_offsets[tp] = until[tp]
        ranges = plan_ranges(
            from_offsets, until, opts.min_partitions, opts.max_records_per_partition
        )
        return list(KafkaInputPartition.from_ranges(ranges))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        """Nothing held between calls."""

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches (see :func:`~.reader.read_partition`)."""
        return read_partition(self.opts, partition)
