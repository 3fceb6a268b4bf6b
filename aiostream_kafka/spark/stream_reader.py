"""The streaming reader: micro-batches of offset ranges, admission control and
``Trigger.AvailableNow``.

Driver-side calls (``initialOffset``, ``latestOffset``, ``partitions``) run in one
long-lived Python worker; their Kafka look-ups share one Admin kept open between the calls
in a private event loop (:class:`~.reader.AdminSession`: bounded lifetime, closed by
``stop()`` or when the worker exits). ``read()`` runs on executors (see :mod:`.reader`).

Partition changes, as the built-in source handles them:

* a partition that appears after the query started is read from its earliest offset;
* a partition that disappears (topic deleted) is data loss;
* a partition whose offset went backwards (topic deleted and re-created) is data loss;
  the new partition is read from its earliest offset.

Data loss fails the query (``failOnDataLoss=true``, the default) or is logged and skipped.

``commitOffsetsToGroup``: the end offsets of each micro-batch Spark has committed are
committed to a consumer group (:attr:`~.options.SourceOptions.commit_group`) from outside
it (``Admin.alter_consumer_group_offsets``), so that Kafka's lag tools see the query's
progress. Spark says a batch is committed in two ways, and both are used: ``commit(end)``
(which Spark calls only when it plans the *next* batch: an idle stream would never report
its last batch) and ``latestOffset(start)``, whose ``start`` is the end of the last batch
Spark committed to the checkpoint's commit log (Spark plans a batch only after the one
before it is committed; the ``start`` of a new query's first call is its initial offset,
which is not committed). The group's offsets are never read back: the checkpoint is the
source of truth. A failed commit is logged (WARNING) and the next call commits the newest
end again; it never fails the query.
"""

from __future__ import annotations

import logging
import time
import weakref
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
from .reader import AdminSession, KafkaInputPartition, read_partition

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
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

    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in on Spark versions without admission control."""

        def __init__(self, min_rows: int) -> None:
            self.min_rows = min_rows

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in on Spark versions without Trigger.AvailableNow for Python sources."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Record the target offsets."""


__all__ = ["KafkaStreamReader"]

log = logging.getLogger(__name__)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads of the selected partitions.

    Offsets are ``{"topic": {"partition": next_offset}}`` in canonical order (see
    :func:`~aiostream_kafka.spark.offsets.to_json`).
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._available_now: Offsets | None = None
        # When minOffsetsPerTrigger last let a trigger through (time.monotonic() seconds);
        # None: never, so the first trigger of a query runs at once, as in the JVM source.
        self._last_trigger: float | None = None
        self._latest: Offsets = {}  # the latest offsets the last latestOffset() saw
        # commitOffsetsToGroup: what the group holds (as far as this reader knows), and
        # the initial offsets of a new query (not a committed batch's end).
        self._group_committed: Offsets | None = None
        self._initial: list[Offsets] = []
        # The driver-side calls' Admin (opened on the first call, never in executors).
        self._admin = AdminSession(opts)
        weakref.finalize(self, self._admin.close)

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

        offsets = self._admin.run(resolve)
        log.info("initial offsets %s", to_json(offsets))
        self._initial.append(offsets)
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        """The limit the options set, as the JVM source's: ``ReadMaxRows`` with
        ``maxOffsetsPerTrigger``, ``ReadMinRows`` with only ``minOffsetsPerTrigger``, else
        ``ReadAllAvailable``. With both, ``ReadMaxRows``: PySpark has no composite limit
        (the JVM's ``CompositeReadLimit``), so the minimum then comes from the options.
        ``maxTriggerDelay`` always does (PySpark's ``ReadMinRows`` has no delay)."""
        opts = self.opts
        if opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.min_offsets_per_trigger is not None:
            return ReadMinRows(opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: the latest offsets now. Later calls of :meth:`latestOffset`
        never go beyond it (partitions appearing later are not read by this run)."""
        opts = self.opts

        async def latest(admin: Admin) -> Offsets:
            tps = await current_partitions(admin, opts)
            return await list_offsets(admin, tps, OffsetSpec.latest(), opts.kafka.isolation_level)

        self._available_now = self._admin.run(latest)
        log.info("Trigger.AvailableNow target %s", to_json(self._available_now))

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: the latest offsets (or the AvailableNow
        target), admitted by ``limit`` (see :meth:`admit`). Returns ``start`` itself when
        there is nothing new or the batch is held back.

        Raises:
            KafkaError: the cluster could not be asked.
        """
        opts = self.opts
        begin = from_json(start)
        if start is not None and begin not in self._initial:
            self._commit_to_group(begin)  # the end of the batch Spark committed last
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

        latest, new_earliest = self._admin.run(plan)
        self._latest = latest
        end = self.admit(begin, latest, new_earliest, limit, time.monotonic())
        if end is None:
            return start if start is not None else to_json(begin)
        return to_json(end)

    def admit(
        self,
        begin: Offsets,
        latest: Offsets,
        new_earliest: Offsets,
        limit: ReadLimit | None,
        now: float,
    ) -> Offsets | None:
        """Admission control, as the JVM source's ``latestOffset``: the end offsets of the
        next micro-batch from ``begin`` towards ``latest``, or None to hold it back.

        * ``ReadAllAvailable`` (``Trigger.Once``, or no option set): ``latest``.
        * A minimum (``ReadMinRows``, or ``minOffsetsPerTrigger`` beside ``ReadMaxRows``):
          held back while fewer new offsets than that are there (a partition not in
          ``begin`` counts from offset 0, as in the JVM) and less than
          ``maxTriggerDelay`` passed since the last trigger it let through; when the delay
          is over, the trigger goes through (and restarts the delay) even with nothing new.
          Not applied under ``Trigger.AvailableNow``: the run goes to its fixed target (so
          does the JVM source's, checked side by side).
        * A maximum (``ReadMaxRows``): at most that many offsets, shared among partitions
          in proportion to their backlog (new partitions from their earliest offset).

        ``limit`` None (Spark 4.0/4.1 call ``latestOffset()`` without one): the options.

        Args:
            begin: the start offsets of the batch (from the checkpoint).
            latest: the latest offsets, or the AvailableNow target.
            new_earliest: the earliest offsets of the partitions of ``latest`` that are
                not in ``begin``.
            limit: the read limit Spark passed.
            now: ``time.monotonic()``.
        """
        opts = self.opts
        if isinstance(limit, ReadAllAvailable):
            return dict(latest)
        min_rows: int | None = opts.min_offsets_per_trigger
        max_rows: int | None = opts.max_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows, max_rows = limit.min_rows, None
        elif isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        if min_rows is not None and self._available_now is None:
            delay_over = (
                self._last_trigger is None
                or (now - self._last_trigger) * 1000 >= opts.max_trigger_delay_ms
            )
            if not delay_over:
                new = sum(end - begin.get(tp, 0) for tp, end in latest.items())
                if new < min_rows:
                    log.debug("%d new offsets < minOffsetsPerTrigger %d; waiting", new, min_rows)
                    return None
            self._last_trigger = now
        if max_rows is None:
            return dict(latest)
        from_here = {**new_earliest, **{tp: o for tp, o in begin.items() if tp in latest}}
        # Deleted or shrunk partitions are dealt with in partitions(); here they only must
        # not count as backlog.
        for tp, offset in list(from_here.items()):
            if latest[tp] < offset:
                from_here[tp] = latest[tp]
        return rate_limit(from_here, latest, int(max_rows))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The latest offsets the last :meth:`latestOffset` saw (shown as the source's
        ``latestOffset`` in the query progress), as the JVM source reports them; None
        before the first call or with no partitions."""
        return to_json(self._latest) if self._latest else None

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

            earliest = self._admin.run(lookup)
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
        """Spark committed the micro-batch that ended at ``end``: with
        ``commitOffsetsToGroup``, commit ``end`` to the group (see the module doc). Returns
        None; raises nothing (a failed commit is logged and tried again later). Without
        the option nothing is done: progress lives in Spark's checkpoint."""
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, end: Offsets) -> None:
        """Commit ``end`` to the ``commitOffsetsToGroup`` group unless it holds it already
        (as far as this reader knows); log a failure as a WARNING and return."""
        group = self.opts.commit_group
        if group is None or not end or end == self._group_committed:
            return

        def alter(admin: Admin) -> Any:
            return admin.alter_consumer_group_offsets(group, end)

        try:
            self._admin.run(alter)
        except Exception as exc:  # never fails the query; the next batch tries again
            log.warning(
                "commitOffsetsToGroup: could not commit %s to consumer group %r (%s: %s); "
                "the next micro-batch commits again (the query goes on: its progress is in "
                "the checkpoint)",
                to_json(end),
                group,
                type(exc).__name__,
                exc,
            )
            return
        if self._group_committed is None:
            log.info("commitOffsetsToGroup: committing to consumer group %r", group)
        self._group_committed = dict(end)

    def stop(self) -> None:
        """Close the driver-side Admin (Spark was not seen to call this: the Admin is also
        closed when the reader is collected or the worker exits, and its lifetime is
        bounded)."""
        self._admin.close()

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches (see :func:`~.reader.read_partition`)."""
        return read_partition(self.opts, partition)
