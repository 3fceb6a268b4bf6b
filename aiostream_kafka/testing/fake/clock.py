"""The fake cluster's clock: every timeout the fake keeps (group sessions, rebalance
delays, transaction timeouts, share-group acquisition locks) and every timestamp it
stamps (commit times, transaction start times) reads it, never ``time`` or the loop
directly, so that a test can swap in a clock it advances itself.

:class:`RealClock` is the default: the running event loop's timers and the wall clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Clock", "RealClock", "Timer"]


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
