"""One way to retry: a deadline, jittered exponential back-off, and a timeout that names
the last error.

Why one primitive: the clients retried in seven hand-written loops (admin calls, the
transaction coordinator, group commits and offset reads, the group membership, the
producer's wait for a topic and its producer id), which differed in what they did not
mean to differ in: whether they jittered, whether the attempt in progress counted against
the deadline, which errors they retried and how their timeouts read. The policy lives
here once; what is particular to a call stays at the call, in two hooks:

* ``retriable(error)`` -- classify: is this error worth another attempt? The default,
  :func:`is_retriable`, says yes to a :class:`NetworkError`, a :class:`KafkaTimeoutError`
  and any :class:`KafkaError` marked ``retriable``.
* ``between(error)`` -- act between attempts (forget a coordinator that moved, refresh the
  metadata, log, note a problem for ``health()``); it runs under the same deadline, may
  raise to stop retrying, and may return a wait of its own instead of the next back-off.

:class:`Backoff` is the wait alone (initial ``retry_backoff_ms``, doubling up to
``retry_backoff_max_ms``, each wait jittered by +-20% as Kafka's Java clients do, KIP-580,
so that clients that failed together do not retry together). Loops that are not
retry-until-success -- a state machine that goes round for as long as its owner runs --
use it directly.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiostream_kafka.errors import KafkaError, KafkaTimeoutError, NetworkError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Each wait is the back-off times a factor drawn uniformly from [1 - JITTER, 1 + JITTER].
JITTER = 0.2


class BackoffOptions(Protocol):
    """The two options a :class:`Backoff` is made of (every client's config has them)."""

    @property
    def retry_backoff_ms(self) -> float: ...

    @property
    def retry_backoff_max_ms(self) -> float: ...


class Backoff:
    """Jittered exponential back-off: ``initial_s``, doubling after each wait up to
    ``max_s``; each wait is drawn within +-``jitter`` of that and never exceeds ``max_s``.

    ``rng`` (a :class:`random.Random`) makes the jitter reproducible in tests.
    """

    __slots__ = ("_next", "_uniform", "initial_s", "jitter", "max_s")

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        *,
        jitter: float = JITTER,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_s = max(initial_s, 0.0)
        self.max_s = max(max_s, self.initial_s)
        self.jitter = jitter
        self._next = self.initial_s
        self._uniform: Callable[[float, float], float] = (
            random.uniform if rng is None else rng.uniform
        )

    @classmethod
    def of(cls, options: BackoffOptions, *, rng: random.Random | None = None) -> Backoff:
        """The back-off of a client: ``retry_backoff_ms`` doubling up to
        ``retry_backoff_max_ms``."""
        return cls(options.retry_backoff_ms / 1000, options.retry_backoff_max_ms / 1000, rng=rng)

    def next_delay(self) -> float:
        """Return the next wait in seconds (jittered) and double the one after it."""
        base = self._next
        self._next = min(base * 2, self.max_s)
        return self.jittered(base)

    def jittered(self, delay_s: float) -> float:
        """Return ``delay_s`` with the jitter applied, capped at ``max_s``."""
        return min(delay_s * self._uniform(1 - self.jitter, 1 + self.jitter), self.max_s)

    def reset(self) -> None:
        """Start over at ``initial_s`` (after a success)."""
        self._next = self.initial_s


def is_retriable(error: BaseException) -> bool:
    """The default classification: a connection that failed or was lost, a request that
    timed out, or a broker error Kafka marks retriable."""
    if isinstance(error, NetworkError | KafkaTimeoutError):
        return True
    return isinstance(error, KafkaError) and error.retriable


async def retry_until(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    deadline: float | None,
    backoff: Backoff,
    limit: str | None = None,
    retriable: Callable[[Exception], bool] = is_retriable,
    between: Callable[[Exception], Awaitable[float | None]] | None = None,
    give_up: Callable[[KafkaTimeoutError], Exception] | None = None,
) -> T:
    """Run ``attempt()`` until it returns, and return what it returned.

    After an error that ``retriable`` accepts, ``between(error)`` runs (if given), then
    the call waits ``backoff.next_delay()`` (or, jittered, the wait ``between`` returned)
    and tries again. ``deadline`` (a :func:`time.monotonic` value; ``None``: none) bounds
    everything: the attempt in progress and ``between`` are cut when it passes, and a wait
    that would end past it ends at it, with no attempt after. ``what`` and ``limit``
    (e.g. ``"60000 ms"``, ``"max_block_ms=60000"``) name the call and its limit in the
    timeout's message.

    Raises:
        KafkaTimeoutError: the deadline passed; its message names ``what``, ``limit`` and
            the last retriable error, which is also its ``__cause__``. With ``give_up``,
            what ``give_up(that timeout)`` returns is raised instead (caused by it): for
            a call whose documented error at its deadline is another.
        Exception: the first error ``retriable`` refuses, at once (also what ``between``
            raises). Cancellation propagates: nothing is retried or waited after it.
    """
    last: Exception | None = None
    when = None if deadline is None else _on_loop_clock(deadline)
    while True:
        wait: float | None = None
        scope = asyncio.timeout_at(when)
        try:
            async with scope:
                try:
                    return await attempt()
                except Exception as exc:
                    if not retriable(exc):
                        raise
                    last = exc
                    if between is not None:
                        wait = await between(exc)
        except TimeoutError:
            if not scope.expired():
                raise  # not ours: the attempt's own
        if scope.expired():
            raise _deadline_passed(what, limit, last, give_up)
        delay = backoff.next_delay() if wait is None else backoff.jittered(wait)
        if deadline is not None and time.monotonic() + delay >= deadline:
            # No attempt can start before the deadline: the call gives up at it (its
            # timeout says "within" the limit), not a back-off earlier.
            await asyncio.sleep(max(deadline - time.monotonic(), 0.0))
            raise _deadline_passed(what, limit, last, give_up)
        log.debug("%s: %s: %s; retrying in %.0f ms", what, type(last).__name__, last,
                  delay * 1000)  # fmt: skip
        await asyncio.sleep(delay)


def _deadline_passed(
    what: str,
    limit: str | None,
    last: Exception | None,
    give_up: Callable[[KafkaTimeoutError], Exception] | None,
) -> Exception:
    """The error to raise at the deadline, chained to ``last``."""
    cause = (
        f"last error: {type(last).__name__}: {last}"
        if last is not None
        else "the first attempt had not finished"
    )
    timeout = KafkaTimeoutError(f"{what} did not succeed within {limit or 'its deadline'}; {cause}")
    timeout.__cause__ = last
    if give_up is None:
        return timeout
    error = give_up(timeout)
    error.__cause__ = timeout
    return error


def _on_loop_clock(deadline: float) -> float:
    """``deadline`` (a :func:`time.monotonic` value) on the running loop's clock."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())
