"""The producer's per-record path when compiled: ``enqueue_nowait`` and ``enqueue`` up to
the batch, as native code.

:class:`Appender` takes a record of ``bytes`` (a ``bytes`` key or none, no headers, no
serializers) straight to its batch: the keyless one to its topic's sticky batch, a keyed
one (or one given a partition) to the open batch of its partition, which it remembers per
topic and partition (:class:`_Route`) so that neither a ``TopicPartition`` nor a tuple is
built per record. The record joins the batch's ``pending`` records
(:meth:`~aiostream_kafka.producer.accumulator.ProducerBatch.take`), encoded a batch at a
time. Anything else -- a new sticky partition, a batch to open for ``enqueue`` (it yields
to the loop then), a topic without metadata, records held for their topic, a closed or
transactional producer outside a transaction -- goes to the ``Producer``'s own
(interpreted) path, which is the whole behaviour; this module only makes its common case
cheaper. Interpreted (the pure build) it is not used: ``Producer`` keeps its inline
keyless path there, cheaper than a call into this module.

The CreateTime stamp (:class:`StampClock`) is read once per short run of records rather
than per record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiostream_kafka.producer.accumulator import PLAIN_OVERHEAD, Accumulator, ProducerBatch
from aiostream_kafka.producer.delivery import Delivery, Unwatched
from aiostream_kafka.producer.partitioner import murmur2
from aiostream_kafka.protocol.records import HEADER_SIZE
from aiostream_kafka.structs import TopicPartition

__all__ = ["COMPILED", "Appender", "StampClock"]

# Whether this module runs compiled (mypyc: see aiostream_kafka._native).
COMPILED: Final[bool] = not __file__.endswith(".py")

#: At most this many records share one reading of the clock.
REUSE_MAX: Final = 16
#: A run of records sharing a reading that took longer than this (ns) stops the sharing
#: until runs are fast again.
_SLOW_RUN_NS: Final = 250_000

_time_ns = time.time_ns


class StampClock:
    """CreateTime stamps (ms since the epoch) for records appended in quick succession.

    A reading of ``time.time_ns()`` is reused for at most ``reuse`` following records and
    never past the current turn of the event loop (the first reading of a turn schedules
    its expiry with ``call_soon``: a caller that awaits between records gets a fresh stamp
    for each). ``reuse`` starts at 0, doubles (up to :data:`REUSE_MAX`) while a run of
    records sharing a reading takes under 1/8 ms, and drops to 0 after a run over 1/4 ms.
    So at a steady pace a stamp is at most about 1/8 ms (and never 1 ms) older than its
    record; a caller that stalls the loop between two appends of one turn (blocking
    work, which asyncio forbids anyway) can see a stamp older by that stall for at most
    the next :data:`REUSE_MAX` records. Java's and librdkafka's producers read the clock
    per record; this costs ~80 ns per record less here (interpreted or not, the call is
    the cost).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ms = 0
        self.left = 0  # records that may still share ``ms``
        self.reuse = 0
        self.read_ns = 0
        self.armed = False  # an expiry is scheduled for this turn

    def now_ms(self) -> int:
        """The stamp of a record appended now."""
        left = self.left
        if left > 0:
            self.left = left - 1
            return self.ms
        return self._read()

    def _read(self) -> int:
        ns = _time_ns()
        if self.armed:  # the last reading was in this turn: adapt to the run's pace
            run = ns - self.read_ns
            if run > _SLOW_RUN_NS:
                self.reuse = 0
            elif run < _SLOW_RUN_NS // 2:
                self.reuse = min(REUSE_MAX, self.reuse * 2 + 1)
        else:
            self.armed = True
            self.loop.call_soon(self._expire)
        self.read_ns = ns
        ms = ns // 1_000_000
        self.ms = ms
        self.left = self.reuse
        return ms

    def _expire(self) -> None:
        self.left = 0
        self.armed = False


class _Route:
    """What the compiled path remembers of a topic: its partition count (of the metadata
    snapshot it was made from) and the open batch of each partition it appended to."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.open: list[ProducerBatch | None] = [None] * count


class Appender:
    """The compiled per-record path of one ``Producer`` (see the module docstring).

    ``sticky`` and ``held`` are the producer's own dicts (the keyless records' batch per
    topic, the records held for their topic's metadata), shared; ``open`` and ``fast``
    mirror the producer's flags of the same meaning; ``slow_nowait`` and ``slow_enqueue``
    are the producer's ``enqueue_nowait`` and ``enqueue`` paths for what this one does not
    take.
    """

    def __init__(
        self,
        accumulator: Accumulator,
        cluster: Any,
        sticky: dict[str, Any],
        held: dict[str, Any],
        unwatched: Unwatched,
        batch_size: int,
        loop: asyncio.AbstractEventLoop,
        slow_nowait: Callable[..., None],
        slow_enqueue: Callable[..., Awaitable[asyncio.Future[Any]]],
    ) -> None:
        self.accumulator = accumulator
        self.cluster = cluster
        self.sticky = sticky
        self.held = held
        self.unwatched = unwatched
        # A record of at most this many bytes (key and value) fits an empty batch, and so
        # every size limit (the producer's ``_fast`` bound).
        self.max_size = batch_size - HEADER_SIZE - PLAIN_OVERHEAD - 1
        self.loop = loop
        self.slow_nowait = slow_nowait
        self.slow_enqueue = slow_enqueue
        self.clock = StampClock(loop)
        self.routes: dict[str, _Route] = {}
        self.snapshot: object = None
        self.open = False
        self.fast = False

    def forget(self, topic: str) -> None:
        """Drop what is remembered of ``topic`` (no longer produced to)."""
        self.routes.pop(topic, None)

    def enqueue_nowait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: Any = None,
        on_delivery: Any = None,
    ) -> None:
        """``Producer.enqueue_nowait`` (the producer's attribute when compiled): returns
        None, raises what it raises."""
        if self.open and self.fast and headers is None and type(value) is bytes:
            outcome: object = self.unwatched if on_delivery is None else Delivery(on_delivery)
            if key is None and partition is None:
                batch: ProducerBatch | None = self.sticky.get(topic)
                if batch is not None and batch.take(None, value, self.clock.now_ms(), outcome):
                    return
            elif (key is None or type(key) is bytes) and not (self.held and topic in self.held):
                if self._keyed(topic, key, partition, value, outcome, True):
                    return
        self.slow_nowait(topic, value, key, headers, partition, on_delivery)

    async def enqueue(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Any = None,
        partition: Any = None,
        timestamp_ms: Any = None,
    ) -> asyncio.Future[Any]:
        """``Producer.enqueue`` (the producer's attribute when compiled): a compiled
        coroutine, so a record this path takes costs no interpreted frame; the others go to
        the producer's own path. Returns and raises what ``Producer.enqueue`` does."""
        future = self.enqueue_now(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:
            return future
        return await self.slow_enqueue(topic, value, key, headers, partition, timestamp_ms)

    def enqueue_now(
        self, topic: str, value: Any, key: Any, headers: Any, partition: Any, timestamp_ms: Any
    ) -> asyncio.Future[Any] | None:
        """``Producer.enqueue`` without awaiting: the record's future, or None (nothing
        done) when the producer's own path must take the record."""
        if (
            self.open
            and self.fast
            and headers is None
            and timestamp_ms is None
            and type(value) is bytes
        ):
            future: asyncio.Future[Any] = asyncio.Future(loop=self.loop)
            if key is None and partition is None:
                batch: ProducerBatch | None = self.sticky.get(topic)
                if batch is not None and batch.take(None, value, self.clock.now_ms(), future):
                    return future
            elif key is None or type(key) is bytes:
                if self._keyed(topic, key, partition, value, future, False):
                    return future
        return None

    def _route(self, topic: str) -> _Route | None:
        """The route of ``topic`` in the current metadata (None: not usable now)."""
        snapshot = self.cluster.snapshot
        if snapshot is not self.snapshot:
            self.routes.clear()  # partition counts may have changed
            self.snapshot = snapshot
        route = self.routes.get(topic)
        if route is None:
            meta = snapshot.topics.get(topic)
            if meta is None or meta.error_code or not meta.partitions:
                return None
            route = self.routes[topic] = _Route(len(meta.partitions))
        return route

    def _keyed(
        self,
        topic: str,
        key: bytes | None,
        partition: object,
        value: bytes,
        outcome: object,
        may_open: bool,
    ) -> bool:
        """Append a keyed record, or one given its partition, to its partition's open
        batch (or, ``may_open``, to a new one when memory allows); False when nothing was
        done."""
        route = self._route(topic)
        if route is None:
            return False
        count = route.count
        if partition is None:
            if key is None:
                return False
            p = (murmur2(key) & 0x7FFFFFFF) % count
        elif type(partition) is int:
            p = partition
            if p < 0 or p >= count:
                return False
        else:
            return False
        timestamp_ms = self.clock.now_ms()
        batch = route.open[p]
        if batch is not None and batch.take(key, value, timestamp_ms, outcome):
            return True
        acc = self.accumulator
        tp = TopicPartition(topic, p)
        batch = acc.open_batch(tp)
        if batch is not None:
            if batch.take(key, value, timestamp_ms, outcome):
                route.open[p] = batch
                return True
            batch.closed = True  # full: the sender may take it now
            acc.wakeup.set()
        if not may_open or len(value) + (0 if key is None else len(key)) > self.max_size:
            return False
        batch = acc.append_new_nowait(tp, key, value, None, timestamp_ms, outcome)
        if batch is None:
            return False
        route.open[p] = batch
        return True
