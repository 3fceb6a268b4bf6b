"""The batch API's results and bookkeeping: :meth:`Producer.send_batch` and
:meth:`Producer.enqueue_batch`.

One call appends many records and gets *one* completion for all of them, not a future
per record. The records of a call land in one or more :class:`ProducerBatch` es (several
per partition when the call is larger than ``batch_size``, one or more partitions); the
run of a call's records inside one producer batch is a *segment*. A producer batch carries
its segments next to its per-record futures (``None`` for a call's records), and resolves
each segment once when it is acknowledged or fails; the call's completion resolves when
appending has ended and every one of its segments is resolved.

Partial failure: each segment succeeds or fails as a whole (it is part of one record
batch, which the broker writes or refuses as a whole). The completion collects the
acknowledged segments (:class:`BatchRun`) and the failed ones (:class:`BatchFailure`),
each naming the call's record indexes it holds, and fails with
:class:`BatchDeliveryError` when any record was not acknowledged, so that a caller can
retry exactly those records.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from aiostream_kafka.errors import KafkaError

log = logging.getLogger(__name__)

__all__ = ["BatchDeliveryError", "BatchFailure", "BatchMetadata", "BatchRun"]


class BatchRun(NamedTuple):
    """Records of one batch call acknowledged together: the call's records ``indexes``
    (positions in the call's ``values``, in offset order) were written to ``partition``
    at offsets ``offset``, ``offset + 1``, ... (``offset`` is -1 with ``acks=0``).
    ``log_append_time_ms`` is the broker's timestamp for topics with
    ``message.timestamp.type=LogAppendTime``, else -1 (the records keep their own)."""

    partition: int
    offset: int
    indexes: Sequence[int]
    log_append_time_ms: int


class BatchFailure(NamedTuple):
    """Records of one batch call that were not acknowledged, and why: the call's records
    ``indexes`` (positions in its ``values``), meant for ``partition`` (None: never
    appended to a partition's batch, e.g. the call ran out of buffer memory first)."""

    partition: int | None
    indexes: Sequence[int]
    error: BaseException


class BatchMetadata:
    """What :meth:`Producer.send_batch` returns: every record of the call acknowledged.

    Attributes:
        topic: the topic.
        record_count: records acknowledged (all of the call's records).
        runs: one :class:`BatchRun` per acknowledged run of records (a partition's batch),
            in the order the broker acknowledged them.
    """

    __slots__ = ("record_count", "runs", "topic")

    def __init__(self, topic: str, record_count: int, runs: list[BatchRun]) -> None:
        self.topic = topic
        self.record_count = record_count
        self.runs = runs

    def __repr__(self) -> str:
        partitions = sorted({run.partition for run in self.runs})
        return (
            f"BatchMetadata(topic={self.topic!r}, record_count={self.record_count}, "
            f"runs={len(self.runs)}, partitions={partitions})"
        )

    def offsets(self) -> dict[int, tuple[int, int]]:
        """``{index: (partition, offset)}`` for every acknowledged record (one dict entry
        per record: meant for tests and small calls)."""
        out: dict[int, tuple[int, int]] = {}
        for run in self.runs:
            offset = run.offset
            for step, index in enumerate(run.indexes):
                out[index] = (run.partition, offset + step if offset >= 0 else -1)
        return out


def _ranges(indexes: Iterable[int]) -> list[range]:
    """Sorted ``indexes`` (no duplicates) as the fewest ranges."""
    out: list[range] = []
    start = last = None
    for i in indexes:
        if last is not None and i == last + 1:
            last = i
            continue
        if start is not None and last is not None:
            out.append(range(start, last + 1))
        start = last = i
    if start is not None and last is not None:
        out.append(range(start, last + 1))
    return out


def _show_ranges(ranges: Sequence[range], limit: int = 8) -> str:
    shown = [f"{r.start}" if len(r) == 1 else f"{r.start}-{r.stop - 1}" for r in ranges[:limit]]
    if len(ranges) > limit:
        shown.append(f"... ({len(ranges) - limit} more ranges)")
    return ", ".join(shown)


class BatchDeliveryError(KafkaError):
    """Some records of a :meth:`Producer.send_batch` call were not acknowledged.

    Raised only once every record of the call has an outcome: the records not listed in
    :attr:`failures` were acknowledged (:attr:`delivered`), so retrying
    :attr:`failed_indexes` -- and only those -- completes the call. A record that failed
    with a timeout may still have been written (as for :meth:`Producer.send`).

    Attributes:
        topic: the topic.
        total: records in the call.
        failures: one :class:`BatchFailure` per failed run of records (its partition, the
            call's indexes, the error), in the order they failed.
        failed_count: records not acknowledged.
        first_error: the error of the first failure (also this exception's ``__cause__``).
        delivered: :class:`BatchMetadata` of the records that were acknowledged.
        retriable: whether every failure's error is retriable (the same call, restricted
            to :attr:`failed_indexes`, may succeed).
    """

    def __init__(
        self, topic: str, total: int, failures: list[BatchFailure], delivered: BatchMetadata
    ) -> None:
        self.topic = topic
        self.total = total
        self.failures = failures
        self.delivered = delivered
        self.failed_count = sum(len(f.indexes) for f in failures)
        self.first_error = failures[0].error
        self.retriable = all(getattr(f.error, "retriable", False) for f in failures)
        kinds = sorted({type(f.error).__name__ for f in failures})
        super().__init__(
            f"{self.failed_count} of {total} record(s) for topic {topic!r} were not "
            f"acknowledged (indexes {_show_ranges(self.failed_ranges)}); "
            f"first error: {type(self.first_error).__name__}: {self.first_error}"
            + (f" (errors: {', '.join(kinds)})" if len(kinds) > 1 else "")
        )
        self.__cause__ = self.first_error

    @property
    def failed_indexes(self) -> list[int]:
        """The call's indexes of the records not acknowledged, sorted."""
        return sorted(itertools.chain.from_iterable(f.indexes for f in self.failures))

    @property
    def failed_ranges(self) -> list[range]:
        """:attr:`failed_indexes` as sorted ranges of consecutive indexes."""
        return _ranges(self.failed_indexes)


class Segment:
    """A run of one call's records in one producer batch: ``count`` records from position
    ``start`` of the batch, which are the call's records ``indexes``."""

    __slots__ = ("completion", "count", "indexes", "resolved", "start")

    def __init__(
        self, completion: BatchCompletion, start: int, count: int, indexes: Sequence[int]
    ) -> None:
        self.completion = completion
        self.start = start
        self.count = count
        self.indexes = indexes
        self.resolved = False

    def split(self, at: int) -> tuple[Segment | None, Segment | None]:
        """This segment's parts before and after position ``at`` of its batch (for a batch
        split in two at ``at``); the part after is re-based on the second half."""
        end = self.start + self.count
        if end <= at:
            return self, None
        if self.start >= at:
            return None, Segment(self.completion, self.start - at, self.count, self.indexes)
        first = at - self.start
        completion = self.completion
        completion.pending += 1  # one segment became two
        return (
            Segment(completion, self.start, first, self.indexes[:first]),
            Segment(completion, 0, self.count - first, self.indexes[first:]),
        )


class SegmentHolder(Protocol):
    """What a batch call needs of a producer batch (the accumulator's ``ProducerBatch``):
    the list of the calls' segments it holds (None: only single records)."""

    groups: list[Segment] | None


class BatchCompletion:
    """One batch call's outcome: resolves :attr:`future` once appending ended
    (:meth:`seal`) and every segment is resolved."""

    __slots__ = (
        "acknowledged",
        "appended",
        "batches",
        "failures",
        "future",
        "pending",
        "runs",
        "sealed",
        "topic",
        "total",
    )

    def __init__(self, topic: str, total: int, loop: asyncio.AbstractEventLoop) -> None:
        self.topic = topic
        self.total = total
        self.future: asyncio.Future[BatchMetadata] = loop.create_future()
        self.pending = 0  # segments appended and not yet resolved
        self.appended = 0  # records appended to batches
        self.batches = 0  # new batches it opened (it yields to the loop every few)
        self.acknowledged = 0
        self.runs: list[BatchRun] = []
        self.failures: list[BatchFailure] = []
        self.sealed = False

    def attach(self, batch: SegmentHolder, start: int, count: int, indexes: Sequence[int]) -> None:
        """Record that ``batch`` holds ``count`` of the call's records from its position
        ``start``: the call's records ``indexes``."""
        segment = Segment(self, start, count, indexes)
        groups = batch.groups
        if groups is None:
            batch.groups = [segment]
        else:
            groups.append(segment)
        self.pending += 1
        self.appended += count

    def delivered(
        self, segment: Segment, partition: int, base_offset: int, log_append_time_ms: int
    ) -> None:
        if segment.resolved:
            return
        segment.resolved = True
        offset = base_offset + segment.start if base_offset >= 0 else -1
        self.runs.append(BatchRun(partition, offset, segment.indexes, log_append_time_ms))
        self.acknowledged += segment.count
        self.pending -= 1
        if not self.pending and self.sealed:
            self._finish()

    def failed(self, segment: Segment, partition: int, error: BaseException) -> None:
        if segment.resolved:
            return
        segment.resolved = True
        self.failures.append(BatchFailure(partition, segment.indexes, error))
        self.pending -= 1
        if not self.pending and self.sealed:
            self._finish()

    def seal(self, not_appended: Sequence[int] = (), error: BaseException | None = None) -> None:
        """Appending ended; ``not_appended`` records failed to be appended with ``error``."""
        if not_appended and error is not None:
            self.failures.append(BatchFailure(None, not_appended, error))
        self.sealed = True
        if not self.pending:
            self._finish()

    def abandon(self) -> None:
        """The caller is gone (cancelled while appending): nobody will see the outcome,
        so it is logged when known."""
        self.future.cancel()

    def _finish(self) -> None:
        future = self.future
        delivered = BatchMetadata(self.topic, self.acknowledged, self.runs)
        if future.done():  # cancelled: the caller left; log what became of its records
            self._log_outcome()
            return
        if self.failures:
            future.set_exception(
                BatchDeliveryError(self.topic, self.total, self.failures, delivered)
            )
        else:
            future.set_result(delivered)

    def _log_outcome(self) -> None:
        appended, total = self.appended, self.total
        what = (
            f"batch call to topic {self.topic!r} was cancelled after appending {appended} of "
            f"its {total} record(s)"
        )
        failed = [f for f in self.failures if f.partition is not None]
        if not failed:
            log.info("%s; all %d were acknowledged", what, appended)
            return
        count = sum(len(f.indexes) for f in failed)
        ranges = _ranges(sorted(itertools.chain.from_iterable(f.indexes for f in failed)))
        error = failed[0].error
        log.warning(
            "%s; %d of them were not acknowledged (indexes %s); first error: %s: %s",
            what,
            count,
            _show_ranges(ranges),
            type(error).__name__,
            error,
        )
