"""Structured-concurrency helpers: who owns a task, and cleanup that outlives a cancel.

Two rules hold everywhere in the client, and these helpers are the only place they are
written down as code:

* **Every background task has an owner that awaits it.** An owner stops its tasks with
  :func:`stop_tasks`: cancel, wait (bounded), retrieve every result so that asyncio never
  logs "Task exception was never retrieved".
* **Cleanup that must run runs, even when the caller is cancelled.** A final commit, a
  LeaveGroup, failing the futures of pending records and aborting sockets are what keep a
  cancelled consumer from freezing its partitions for ``session_timeout_ms``.
  :func:`shielded` runs such cleanup to its end (bounded by a timeout) and re-raises the
  caller's cancellation afterwards.

CPU-heavy work (compressing or inflating a large record batch) leaves the event loop
through :func:`run_in_worker`: anyio's ``to_thread`` with a capacity limiter of our own per
event loop, so the client never holds more than ``WORKER_THREADS`` of the threads it shares
with the application, and a cancelled caller returns at once (the thread's result is
dropped: the work only reads its input).

Why not ``anyio.CancelScope(shield=True)``: under asyncio, anyio shields a task from anyio's
own scopes, but the cancellations users actually send -- ``asyncio.timeout``,
``wait_for``, ``task.cancel()``, a failing ``asyncio.TaskGroup`` sibling -- are native
``Task.cancel()`` calls that reach through it. And not the usual hand-written pattern
("cancel, suppress CancelledError, then re-raise if ``current_task().cancelling()``"):
``cancelling()`` stays non-zero while an *outer* ``asyncio.timeout`` is unwinding, so that
pattern mistakes the expired timeout for a fresh cancel and skips the rest of the cleanup
(the bug of issue 15). Here the helper notes the cancellations it actually absorbed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from aiostream_kafka.errors import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

# What close(timeout=None) of the Producer, the Consumer and the Admin gives its graceful
# part (final commit, LeaveGroup, delivering what is buffered) by default: one finite bound
# for the three, Kafka's Java consumer's (the Java producer waits without one).
DEFAULT_CLOSE_TIMEOUT_S = 30.0

# How long a task gets to finish after being cancelled before it is given up on (and
# logged): our tasks handle cancellation at once; this only bounds a bug.
CANCEL_GRACE_S = 5.0

# Worker threads the client's CPU-heavy jobs may occupy at once, per event loop.
WORKER_THREADS = 2

_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


async def run_in_worker(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``func(*args, **kwargs)`` in a worker thread, at most ``WORKER_THREADS`` at a
    time per event loop. Cancelled, it returns at once and the result is dropped when the
    thread ends (``func`` must not need cleanup)."""
    loop = asyncio.get_running_loop()
    limiter = _LIMITERS.get(loop)
    if limiter is None:
        limiter = _LIMITERS[loop] = anyio.CapacityLimiter(WORKER_THREADS)
    call = functools.partial(func, *args, **kwargs)
    return await anyio.to_thread.run_sync(call, limiter=limiter, abandon_on_cancel=True)


async def _wait_absorbing(
    tasks: set[asyncio.Future[Any]],
    timeout: float | None,  # noqa: ASYNC109 -- absorbs cancels
) -> tuple[asyncio.CancelledError | None, set[asyncio.Future[Any]]]:
    """Wait until every task is done or ``timeout`` passes, holding back cancellations of
    the caller. Return (the caller's cancellation, to be re-raised by the caller once its
    cleanup is over -- None if it was not cancelled; the tasks not done)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    cancel: asyncio.CancelledError | None = None
    pending = {t for t in tasks if not t.done()}
    while pending:
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            break
        try:
            _, pending = await asyncio.wait(pending, timeout=remaining)
        except asyncio.CancelledError as exc:
            cancel = exc  # re-raised by every caller (stop_tasks, shielded) after cleanup
    return cancel, pending


def retrieve(task: asyncio.Future[Any], what: str | None = None) -> BaseException | None:
    """Mark ``task``'s outcome as retrieved and log its error (a Kafka error quietly: its
    owner saw it already). Returns the error. Usable as a done callback."""
    if what is None:
        what = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
    if task.cancelled():
        return None
    exc = task.exception()
    if isinstance(exc, KafkaError):
        log.debug("%s ended with %r", what, exc)
    elif exc is not None:
        log.error("%s failed", what, exc_info=exc)
    return exc


async def stop_tasks(
    tasks: Iterable[asyncio.Future[Any] | None], *, grace_s: float = CANCEL_GRACE_S
) -> None:
    """Cancel ``tasks`` and wait for all of them to finish, at most ``grace_s``.

    Errors they end with (other than cancellation) are logged, never left unretrieved.
    If the caller is cancelled while waiting, the wait still completes, then the
    :class:`asyncio.CancelledError` is re-raised.
    """
    owned = {t for t in tasks if t is not None}
    for task in owned:
        task.cancel()
    cancel, stuck = await _wait_absorbing(set(owned), grace_s)
    for task in owned - stuck:
        retrieve(task)
    for task in stuck:
        log.error("%r did not stop within %.1f s of being cancelled", task, grace_s)
        task.add_done_callback(retrieve)
    if cancel is not None:
        raise cancel


async def shielded(aw: Awaitable[T], *, timeout: float | None, what: str) -> T | None:  # noqa: ASYNC109
    """Run ``aw`` to completion even if the caller is cancelled, for at most ``timeout``
    seconds (None: no bound of its own).

    Returns its result, or None when it ran out of time (it is then cancelled, and a
    warning names ``what``). Its exception is raised, unless the caller was cancelled:
    then the exception is logged and :class:`asyncio.CancelledError` is re-raised once
    the cleanup is over.
    """
    task: asyncio.Future[T] = asyncio.ensure_future(aw)
    cancel, pending = await _wait_absorbing({task}, timeout)
    if pending:
        log.warning("%s did not finish within %.1f s; giving up on it", what, timeout or 0.0)
        task.cancel()
        more, _ = await _wait_absorbing({task}, CANCEL_GRACE_S)
        cancel = cancel or more
        if not task.done():
            task.add_done_callback(retrieve)
    if task.done():
        if cancel is not None:
            retrieve(task, what)
        elif not task.cancelled():
            exc = task.exception()
            if exc is not None:
                raise exc
            return task.result()
    if cancel is not None:
        raise cancel
    return None
