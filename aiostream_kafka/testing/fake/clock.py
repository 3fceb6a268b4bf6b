"""The fake cluster's clock: every timeout the fake keeps (group sessions, rebalance
delays, transaction timeouts, share-group acquisition locks) and every timestamp it
stamps (commit times, transaction start times) reads it, never ``time`` or the loop
directly, so that a test can swap in a clock it advances itself.

:class:`RealClock` is the default: the running event loop's timers and the wall clock.
:class:`ManualClock` stands still until the test advances it
(``FakeCluster(clock=ManualClock())``, ``cluster.advance_time(seconds)``): a session
timeout then passes exactly when the test says so, however slow the machine.

What stays on real time: a Fetch's long poll (``max_wait_ms``) and the response delays
of ``control.delay``. A test waits for those on its own loop; under a manual clock a
long poll that followed the clock would never end unless the test advanced time while a
client waited, so they are real waits, bounded by what the request or the test asked.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Clock", "ManualClock", "ManualTimer", "RealClock", "Timer"]


class Timer(Protocol):
    """What :meth:`Clock.call_later` returns: a pending call that can be cancelled."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """The time source of one fake cluster (runs on the cluster's loop)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and ages)."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch (for timestamps a client reads)."""
        ...

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` on the cluster's loop after ``delay_s`` seconds of
        this clock; returns a handle whose ``cancel()`` drops the call."""
        ...


class RealClock:
    """The event loop's time and timers, and the system's wall clock."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)


class ManualTimer:
    """A call scheduled on a :class:`ManualClock` (what its ``call_later`` returns)."""

    __slots__ = ("_args", "_callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        #: The clock's :meth:`~ManualClock.monotonic` time at which it is due.
        self.when = when
        self._callback = callback
        self._args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Drop the call (nothing happens if it already ran)."""
        self.cancelled = True
        self._args = ()

    def _run(self) -> None:
        self._callback(*self._args)


class ManualClock:
    """A clock that moves only when the test calls :meth:`advance`.

    ``monotonic()`` starts at 0.0; ``wall_ms()`` starts at ``start_ms`` (default: the
    system's wall clock when the clock is made) and moves with it. Timers wait for
    :meth:`advance` to pass their due time, and then run in due order (ties in the order
    they were scheduled), inside that call. A timer scheduled by a callback during an
    advance that falls due within it runs too.

    Used as ``FakeCluster(clock=ManualClock())`` and moved with
    ``cluster.advance_time(seconds)``, which runs the timers on the cluster's loop (from
    any thread). Calling :meth:`advance` directly is only safe on that loop.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        self._start_ms = time.time_ns() // 1_000_000 if start_ms is None else int(start_ms)
        self._now = 0.0
        self._due: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()
        self._advancing = False

    def monotonic(self) -> float:
        """Seconds advanced since the clock was made."""
        return self._now

    def wall_ms(self) -> int:
        """``start_ms`` plus the milliseconds advanced (rounded)."""
        return self._start_ms + round(self._now * 1000)

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> ManualTimer:
        """Run ``callback(*args)`` when the clock has been advanced ``delay_s`` seconds
        from now (a negative delay counts as 0: the next :meth:`advance`, even by 0,
        runs it); returns the :class:`ManualTimer`, whose ``cancel()`` drops it."""
        timer = ManualTimer(self._now + max(0.0, delay_s), callback, args)
        heapq.heappush(self._due, (timer.when, next(self._order), timer))
        return timer

    def pending(self) -> list[float]:
        """The due times (on :meth:`monotonic`'s scale) of the timers not yet run nor
        cancelled, earliest first."""
        return sorted(when for when, _, timer in self._due if not timer.cancelled)

    def advance(self, seconds: float) -> int:
        """Move the clock ``seconds`` forward and run the timers that fall due, in due
        order, each with the clock set to its due time; return how many ran.

        Raises ``ValueError`` for a negative or non-finite amount, ``RuntimeError`` when
        called from one of the clock's own callbacks, and what a callback raises (the
        clock then stands at that callback's due time; later timers stay pending).
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"advance by a finite amount >= 0, got {seconds}")
        if self._advancing:
            raise RuntimeError("ManualClock.advance() called from one of its own timers")
        target = self._now + seconds
        ran = 0
        self._advancing = True
        try:
            while self._due and self._due[0][0] <= target:
                when, _, timer = heapq.heappop(self._due)
                if timer.cancelled:
                    continue
                self._now = max(self._now, when)
                ran += 1
                timer._run()
            self._now = target
        finally:
            self._advancing = False
        return ran
