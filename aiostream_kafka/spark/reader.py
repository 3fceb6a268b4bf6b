"""Reading: the input partition (one offset range), the executor-side range reader shared
by the batch and the streaming reader, the driver-side loop runner, and the batch reader.

Spark runs ``read()`` in executor Python workers without an event loop: each call uses the
worker's private loop (kept, with its connections, between the worker's reads:
:class:`WorkerClients`), drives the async :class:`~.fetch.RangeFetcher` (Fetch requests of
its own, record batches decoded straight into Arrow columns) with ``run_until_complete``
and yields the Arrow batches between those calls, never from inside the loop. The
generator's ``finally`` hands the connections back after a complete read and closes them
otherwise, also when Spark stops reading early (``limit()``).

A range ends at a *position*, not at a record offset: compaction and transaction markers
leave gaps, so the reader stops when the fetch position reaches the range's end.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from aiostream_kafka.admin import Admin
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.structs import TopicPartition

from .offsets import (
    DataLossError,
    OffsetRange,
    current_partitions,
    data_loss,
    plan_batch_ranges,
    resolve_bound,
)
from .options import OffsetBound, SourceOptions

__all__ = [
    "AdminSession",
    "KafkaBatchReader",
    "KafkaInputPartition",
    "read_partition",
    "read_range",
    "run_with_admin",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class KafkaInputPartition(InputPartition):
    """One Spark input partition: the records ``[start, end)`` of one Kafka partition."""

    def __init__(self, index: int, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(index)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"

    @classmethod
    def from_ranges(cls, ranges: list[OffsetRange]) -> list[KafkaInputPartition]:
        """Input partitions for ``ranges``, numbered in order."""
        return [cls(i, r.topic, r.partition, r.start, r.end) for i, r in enumerate(ranges)]


def run_with_admin(opts: SourceOptions, fn: Callable[[Admin], Awaitable[T]]) -> T:
    """Run ``fn(admin)`` to completion in a private event loop (driver side: Spark's
    planning calls are synchronous), with an Admin opened and closed around it.

    Raises:
        ConfigError: bad client options.
        KafkaError: from ``fn``, or no broker answered.
    """

    async def main() -> T:
        async with Admin(opts.kafka.bootstrap_servers, **opts.kafka.client_kwargs()) as admin:
            return await fn(admin)

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


#: An :class:`AdminSession` opens a new Admin once its Admin is this old (seconds)...
ADMIN_MAX_AGE_S = 600.0
#: ...or was not used for this long: well within the brokers' default
#: ``connections.max.idle.ms`` (10 minutes), after which they close idle connections.
ADMIN_MAX_IDLE_S = 120.0


class AdminSession:
    """An Admin kept open between the synchronous driver-side calls of a streaming query
    (``latestOffset``, ``partitions``...), in a private event loop of its own.

    Spark makes those calls one after another in one long-lived Python worker; opening an
    Admin for each (bootstrap connection, ApiVersions, metadata) cost a few round trips
    per call. The loop runs only during a call: between calls the Admin's connections sit
    idle. Its lifetime is bounded (``max_age_s``, and ``max_idle_s`` without a call);
    a call that fails on a reused Admin (a connection the broker closed meanwhile) is run
    once more on a new one, which is safe as the driver-side calls only look up metadata
    and offsets. :meth:`close` (from the reader's ``stop()``, or when the object is
    collected or the worker exits) closes the Admin and the loop.
    """

    def __init__(
        self,
        opts: SourceOptions,
        *,
        max_age_s: float = ADMIN_MAX_AGE_S,
        max_idle_s: float = ADMIN_MAX_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._opts = opts
        self._max_age_s = max_age_s
        self._max_idle_s = max_idle_s
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._admin: Admin | None = None
        self._opened_at = 0.0
        self._used_at = 0.0
        #: How many Admins this session opened (diagnostics, tests).
        self.opened = 0

    def run(self, fn: Callable[[Admin], Awaitable[T]]) -> T:
        """Run ``fn(admin)`` to completion on the session's Admin (opened when there is
        none, or the current one is past its age or idle time).

        Raises:
            ConfigError: bad client options.
            KafkaError: from ``fn``, or no broker answered.
        """
        now = self._clock()
        if self._admin is not None and (
            now - self._opened_at >= self._max_age_s or now - self._used_at >= self._max_idle_s
        ):
            self.close()
        reused = self._admin is not None
        try:
            return self._call(fn)
        except (ConfigError, DataLossError):
            raise  # the answer was read: the Admin is fine
        except KafkaError as exc:
            self.close()
            if not reused:
                raise
            log.info("driver-side lookup failed on a reused Admin (%s); retrying on a new one", exc)
            return self._call(fn)
        except BaseException:
            self.close()
            raise
        finally:
            self._used_at = self._clock()

    def _call(self, fn: Callable[[Admin], Awaitable[T]]) -> T:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._with_admin(fn))

    async def _with_admin(self, fn: Callable[[Admin], Awaitable[T]]) -> T:
        if self._admin is None:
            opts = self._opts.kafka
            admin = Admin(opts.bootstrap_servers, **opts.client_kwargs())
            try:
                await admin.start()
            except BaseException:
                await admin.close(timeout=0)
                raise
            self._admin, self._opened_at = admin, self._clock()
            self.opened += 1
        return await fn(self._admin)

    def close(self) -> None:
        """Close the Admin (bounded: a second per connection) and the loop; the next
        :meth:`run` opens new ones. Never raises."""
        admin, loop = self._admin, self._loop
        self._admin = self._loop = None
        if loop is None:
            return
        try:
            if admin is not None:
                loop.run_until_complete(admin.close(timeout=5))
        except Exception as exc:  # closing is best effort: the sockets go with the loop
            log.debug("closing the driver-side Admin failed: %s", exc)
        finally:
            loop.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its Admin and loop (they belong to one process)."""
        state = dict(self.__dict__)
        state.update(_loop=None, _admin=None)
        return state


#: An executor worker's kept connections are replaced when this old, or idle this long.
WORKER_CLUSTER_MAX_AGE_S = 300.0
WORKER_CLUSTER_MAX_IDLE_S = 60.0


class WorkerClients:
    """The event loop and broker connections of one executor Python worker, kept between
    its ``read()`` calls (Spark reuses a worker for task after task): a task then starts
    with a Metadata request on open connections instead of connecting, negotiating
    versions and bootstrapping again (~15-25 ms a task here). One cluster per set of
    client options, handed to one read at a time; only a read that ended normally hands
    it back (a failed or abandoned one closes it). Replaced when
    ``WORKER_CLUSTER_MAX_AGE_S`` old or idle ``WORKER_CLUSTER_MAX_IDLE_S``; everything is
    closed at the worker's exit. A forked child starts afresh."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        # options key -> (cluster, opened at, last handed back at)
        self._idle: dict[str, tuple[Cluster, float, float]] = {}
        atexit.register(self.close)

    def loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop (a new one after a fork)."""
        if os.getpid() != self._pid:  # inherited through fork: not ours to close
            self._pid, self._loop, self._idle = os.getpid(), None, {}
        if self._loop is None or self._loop.is_closed():
            self._loop, self._idle = asyncio.new_event_loop(), {}
        return self._loop

    def take(self, key: str) -> tuple[Cluster | None, float]:
        """A kept cluster for ``key`` still within its limits and when it was opened, or
        (None, now): the caller opens one."""
        now = time.monotonic()
        kept = self._idle.pop(key, None)
        if kept is None:
            return None, now
        cluster, opened, used = kept
        if now - opened >= WORKER_CLUSTER_MAX_AGE_S or now - used >= WORKER_CLUSTER_MAX_IDLE_S:
            self.discard(cluster)
            return None, now
        return cluster, opened

    def give_back(self, key: str, cluster: Cluster, opened: float) -> None:
        """Keep ``cluster`` for the next read with the same options."""
        previous = self._idle.pop(key, None)
        if previous is not None:
            self.discard(previous[0])
        self._idle[key] = (cluster, opened, time.monotonic())

    def discard(self, cluster: Cluster) -> None:
        """Close ``cluster`` now (not while the loop runs). Never raises."""
        loop = self._loop
        if loop is None or loop.is_closed() or loop.is_running():
            return
        try:
            loop.run_until_complete(cluster.close())
        except Exception as exc:  # best effort: the sockets go with the process
            log.debug("closing kept connections failed: %s", exc)

    def close(self) -> None:
        """Close every kept cluster and the loop (at exit). Never raises."""
        if os.getpid() != self._pid:
            return
        idle, self._idle = self._idle, {}
        for cluster, _, _ in idle.values():
            self.discard(cluster)
        if self._loop is not None and not self._loop.is_running():
            self._loop.close()
        self._loop = None


_WORKER = WorkerClients()


def _clients_key(opts: SourceOptions) -> str:
    """Reads with equal client options share connections (an SSL context, unpicklable
    state of its own, makes every key distinct: those are never shared)."""
    kafka = opts.kafka
    return repr((kafka.bootstrap_servers, sorted(kafka.client_kwargs().items(), key=str)))


def read_range(opts: SourceOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[part.start, part.end)`` of one partition as Arrow batches
    (at most ``maxRecordsPerArrowBatch`` records each, a bounded number of them held at a
    time: see :mod:`.fetch`), on the worker's kept connections
    (:class:`WorkerClients`).

    Raises:
        DataLossError: records of the range are gone and ``failOnDataLoss`` is true.
        KafkaTimeoutError: no progress for ``kafkaConsumer.pollTimeoutMs``.
        KafkaError: fetching failed (not retriable), or a batch is corrupt.
    """
    if part.end <= part.start:
        return
    # Imported here: the driver-side worker of a stream (which imports this module) never
    # reads, and the fetcher's imports (numpy, pyarrow.compute) cost it ~0.1-0.3 s a query.
    from .fetch import RangeFetcher

    tp = TopicPartition(part.topic, part.partition)
    loop = _WORKER.loop()
    key = _clients_key(opts)
    cluster, opened = _WORKER.take(key)
    fetcher = RangeFetcher(opts, tp, part.start, part.end, cluster=cluster)
    agen = fetcher.batches()
    finished = False
    try:
        while True:
            try:
                batch = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                finished = True
                break
            yield batch
    finally:
        try:
            if not loop.is_running():  # (a generator finalized inside another read: no)
                loop.run_until_complete(agen.aclose())
        finally:
            if finished:
                _WORKER.give_back(key, fetcher.cluster, opened)
            else:
                _WORKER.discard(fetcher.cluster)
    log.debug("read %d records of %s [%d, %d)", fetcher.read, tp, part.start, part.end)


def read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """``read()`` of both readers: the range of a :class:`KafkaInputPartition`, or nothing
    for the ``InputPartition(None)`` PySpark puts in place of an empty partition list
    (a read with no ranges: an empty topic, an empty ``assign``, equal start and end).

    Raises:
        TypeError: any other partition (not one of this source's).
        DataLossError, KafkaTimeoutError, KafkaError: see :func:`read_range`.
    """
    if isinstance(partition, KafkaInputPartition):
        return read_range(opts, partition)
    if type(partition) is InputPartition and partition.value is None:
        return iter(())
    raise TypeError(f"not an aiostream_kafka input partition: {partition!r}")


# -- batch ----------------------------------------------------------------------------------


async def plan_batch(admin: Admin, opts: SourceOptions) -> list[OffsetRange]:
    """The ranges of a batch read: the selected partitions from the starting to the
    ending offsets, checked for data loss (an end before its start), split as the
    built-in source splits a batch read (see :func:`~.offsets.plan_batch_ranges`). No ranges
    (nothing to read) is a read of no rows.

    Raises:
        UnknownTopicOrPartitionError: a subscribed or assigned topic (or an assigned
            partition) does not exist, as the built-in source fails.
        ConfigError: offsets that do not fit the partitions (see ``resolve_bound``).
        DataLossError: an end before its start with ``failOnDataLoss``.
    """
    tps = await current_partitions(admin, opts, must_exist=True)
    starting = opts.starting or OffsetBound("earliest")
    ending = opts.ending or OffsetBound("latest")
    start = await resolve_bound(admin, opts, starting, tps, starting=True)
    end = await resolve_bound(admin, opts, ending, tps, starting=False)
    for tp in tps:
        if end[tp] < start[tp]:
            data_loss(
                f"{tp.topic}-{tp.partition}: the ending offset {end[tp]} is before the "
                f"starting offset {start[tp]}",
                opts.fail_on_data_loss,
            )
    return plan_batch_ranges(start, end, opts.min_partitions, opts.max_records_per_partition)


class KafkaBatchReader(DataSourceReader):
    """The batch reader: plans the ranges on the driver, reads one per task."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        """One input partition per offset range (split per ``minPartitions``).

        Raises:
            ConfigError, DataLossError, KafkaError: see ``plan_batch``.
        """
        ranges = run_with_admin(self.opts, lambda admin: plan_batch(admin, self.opts))
        log.info("batch read of %d ranges, %d offsets", len(ranges), sum(r.size for r in ranges))
        return list(KafkaInputPartition.from_ranges(ranges))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches (see :func:`read_partition`)."""
        return read_partition(self.opts, partition)
