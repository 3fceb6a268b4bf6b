"""``BufferPool``: the producer's memory budget (``buffer_memory`` bytes).

Every open or in-flight batch holds a reservation of its capacity (``batch_size``, or more
for one record larger than that), returned when the batch is acknowledged or failed. So
the records buffered by a producer never take more than ``buffer_memory`` bytes of batch
capacity, however fast callers append.

When the budget is exhausted callers wait in FIFO order, like the Java client's
``BufferPool``: the longest waiter is served first, and a large request is not starved by
small ones overtaking it. A waiter that is cancelled or times out takes nothing, and if
memory was handed to it in the same instant it is passed on to the next waiter, so a
cancelled caller never blocks the others.
"""

from __future__ import annotations

import asyncio
import collections
import logging

from aiostream_kafka.errors import KafkaTimeoutError

log = logging.getLogger(__name__)

__all__ = ["BufferPool"]


class _Waiter:
    __slots__ = ("future", "size")

    def __init__(self, size: int, future: asyncio.Future[None]) -> None:
        self.size = size
        self.future = future


class BufferPool:
    """A byte budget of ``total`` bytes with FIFO waiting.

    Not thread-safe: used from one event loop.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self._available = total
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def available(self) -> int:
        """Bytes not reserved."""
        return self._available

    @property
    def used(self) -> int:
        """Bytes reserved (never more than :attr:`total`)."""
        return self.total - self._available

    @property
    def queued(self) -> int:
        """Callers waiting for memory."""
        return len(self._waiters)

    def try_reserve(self, size: int) -> bool:
        """Reserve ``size`` bytes now if possible without overtaking a waiter."""
        if not self._waiters and size <= self._available:
            self._available -= size
            return True
        return False

    async def reserve(self, size: int, timeout_s: float) -> None:
        """Reserve ``size`` bytes, waiting (FIFO) up to ``timeout_s`` seconds.

        Raises:
            ValueError: ``size`` exceeds the whole budget (it could never be served).
            KafkaTimeoutError: the memory did not become free in time.
        """
        if size > self.total:
            raise ValueError(f"cannot reserve {size} bytes of a {self.total}-byte budget")
        if self.try_reserve(size):
            return
        waiter = _Waiter(size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.future
        except BaseException as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                # Served in the same instant we were cancelled or timed out: give it back,
                # which passes it on to the next waiter.
                self.release(size)
            else:
                self._remove(waiter)
            if isinstance(exc, TimeoutError):
                raise KafkaTimeoutError(
                    f"waited {timeout_s * 1000:.0f} ms (max_block_ms) for {size} bytes of "
                    f"buffer_memory={self.total}; {self._available} bytes are free and "
                    f"{len(self._waiters)} caller(s) wait: records are buffered faster than "
                    "the brokers acknowledge them"
                ) from None
            raise

    def _remove(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass
        if not waiter.future.done():
            waiter.future.cancel()
        self._serve()

    def release(self, size: int) -> None:
        """Return ``size`` reserved bytes and serve waiters that now fit, in order."""
        self._available += size
        if self._available > self.total:  # a bug, not a user error: say so loudly
            log.error("buffer pool over-released: %d > %d", self._available, self.total)
            self._available = self.total
        if self._waiters:
            self._serve()

    def _serve(self) -> None:
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.future.done():  # cancelled, being removed
                waiters.popleft()
                continue
            if head.size > self._available:
                return
            waiters.popleft()
            self._available -= head.size
            head.future.set_result(None)
