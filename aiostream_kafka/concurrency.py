"""Structured-concurrency helpers: who owns a task, and cleanup that outlives a cancel.

This is the one module of the library that creates tasks and gathers awaitables
(``tests/test_layers.py`` greps every other module for ``create_task``, ``ensure_future``
and ``gather``). Two rules hold everywhere in the client, and these helpers are the only
place they are written down as code:

* **Every background task has an owner that awaits it.** A client (or a part of one: a
  connection, a group member, the sender) holds a :class:`TaskScope`; every task it runs
  is spawned into that scope with its crash policy stated at the spawn (:class:`Crash`),
  and one bounded :meth:`TaskScope.aclose` stops them all: cancel, wait (bounded),
  retrieve every result so that asyncio never logs "Task exception was never retrieved".
  Concurrent requests that belong to one call run under :func:`gather_all` (the first
  failure cancels the siblings and waits for them, as ``asyncio.TaskGroup`` does) or
  :func:`gather_settled` (every outcome returned).
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

Why a scope of our own and not ``asyncio.TaskGroup`` / anyio's task group for a client's
background tasks: both are lexical (entered and left in one task, around one block) and
cancel the task that entered them when a child fails. A client's life is not a block of
the caller's task: ``start()`` and ``close()`` are separate calls, often from different
tasks (a FastAPI lifespan, a test fixture), and a bug in a heartbeat must end the
*client*, surfacing to its callers and iterators, not cancel whichever application task
happened to call ``start()``. :class:`TaskScope` keeps the task group's guarantees (every
child is owned, awaited on close, its error seen) with the crash policy made explicit.
Within one call, where the lexical shape fits, :func:`gather_all` is ``asyncio.TaskGroup``.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Literal, TypeVar, overload

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


def mark_retrieved(future: asyncio.Future[Any]) -> None:
    """Mark ``future``'s outcome as retrieved, silently (a done callback for a future whose
    error reaches the application another way: awaited by a caller who may have given up,
    or reported by the call that abandoned it), so that asyncio never logs it as lost."""
    if not future.cancelled():
        future.exception()


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


class Crash(enum.Enum):
    """What a task's unexpected error (an ``Exception`` that ends its body) does; stated at
    each :meth:`TaskScope.spawn`."""

    #: The owner fails: the scope's ``on_fail`` gets the error (it records it, wakes the
    #: iterators and callers that then raise it). For the tasks a client cannot run
    #: without (the poll scheduler, the sender, a group's heartbeat).
    FAIL_OWNER = "fail the owner"
    #: Logged at ERROR and run again after a back-off (``RESTART_MIN_S`` doubling up to
    #: ``RESTART_MAX_S``; back to the minimum after a run of ``RESTART_RESET_S``), until
    #: the scope closes. For tasks whose work stays valid when one run breaks.
    RESTART = "restart"
    #: Logged at ERROR and the task ends; the owner goes on. For one task among many
    #: alike whose failure concerns only itself (one connection served by a test proxy).
    LOG = "log"
    #: The error is the result of the task, awaited by the caller that spawned it (a
    #: request handed on, a one-shot job): the scope only marks it retrieved (logging an
    #: error that is not a ``KafkaError``, which a caller may never have awaited).
    AWAITED = "awaited"


RESTART_MIN_S = 0.1
RESTART_MAX_S = 5.0
RESTART_RESET_S = 60.0

Body = Callable[[], Awaitable[T]] | Coroutine[Any, Any, T]


class ScopeClosedError(RuntimeError):
    """A task was spawned into a :class:`TaskScope` that is closed (a bug in the owner)."""


class TaskScope:
    """The background tasks of one owner (a client or a part of one), and their policy.

    ``owner`` names the owner in log lines; ``on_fail`` is called (and awaited when it
    returns an awaitable) with the error of a :attr:`Crash.FAIL_OWNER` task, inside that
    task, once per crash. Also usable as ``async with TaskScope(...)`` around a block whose
    tasks must not outlive it.
    """

    def __init__(
        self,
        owner: str,
        on_fail: Callable[[Exception], Awaitable[None] | None] | None = None,
    ) -> None:
        self.owner = owner
        self._on_fail = on_fail
        self._tasks: set[asyncio.Task[Any]] = set()
        # The policy of each task that runs its coroutine directly (see spawn).
        self._policies: dict[asyncio.Task[Any], Crash] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` began: the scope spawns nothing more."""
        return self._closed

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks running now."""
        return frozenset(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    @overload
    def spawn(
        self, body: Body[T], *, name: str, crash: Literal[Crash.AWAITED]
    ) -> asyncio.Task[T]: ...

    @overload
    def spawn(
        self,
        body: Body[T],
        *,
        name: str,
        crash: Literal[Crash.FAIL_OWNER, Crash.RESTART, Crash.LOG],
    ) -> asyncio.Task[T | None]: ...

    def spawn(self, body: Body[T], *, name: str, crash: Crash) -> asyncio.Task[Any]:
        """Run ``body`` (a coroutine, or a function making one: needed for
        :attr:`Crash.RESTART`) as a task of this scope under the policy ``crash``.

        Returns the task (await it for its result where the policy is
        :attr:`Crash.AWAITED`).

        Raises:
            ScopeClosedError: the scope is closed.
        """
        if self._closed:
            if asyncio.iscoroutine(body):
                body.close()
            raise ScopeClosedError(f"{self.owner} is closed: cannot start {name}")
        if crash is Crash.RESTART and asyncio.iscoroutine(body):
            body.close()
            raise TypeError("Crash.RESTART needs a function that makes the coroutine")
        if asyncio.iscoroutine(body) and crash is not Crash.RESTART:
            # The common case (a request, a one-shot job) runs the coroutine itself, with
            # no wrapping frame: the policy is applied when it ends (_ended). A produce
            # request's task costs ~3 us less per request this way.
            direct = asyncio.create_task(body, name=name)
            self._tasks.add(direct)
            self._policies[direct] = crash
            direct.add_done_callback(self._ended)
            return direct
        task = asyncio.create_task(self._run(body, name, crash), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """A task running its coroutine directly ended: apply its policy to an error."""
        self._tasks.discard(task)
        crash = self._policies.pop(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if crash is Crash.AWAITED or not isinstance(exc, Exception):
            retrieve(task)
        elif crash is Crash.LOG:
            log.error("%s: %s failed", self.owner, task.get_name(), exc_info=exc)
        else:
            log.error("%s: %s failed; %s stops", self.owner, task.get_name(), self.owner,
                      exc_info=exc)  # fmt: skip
            if self._on_fail is not None:
                outcome = self._on_fail(exc)
                if outcome is not None:  # an async on_fail: run it as a task of the scope
                    if self._closed:
                        if asyncio.iscoroutine(outcome):
                            outcome.close()
                    else:
                        self.spawn(_awaited(outcome), name=f"{task.get_name()}: on_fail",
                                   crash=Crash.AWAITED)  # fmt: skip

    async def _run(self, body: Body[T], name: str, crash: Crash) -> T | None:
        loop = asyncio.get_running_loop()
        delay = RESTART_MIN_S
        while True:
            started = loop.time()
            try:
                aw = body if asyncio.iscoroutine(body) else body()
                return await aw
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if crash is Crash.AWAITED:
                    raise
                if crash is Crash.RESTART and not self._closed:
                    if loop.time() - started >= RESTART_RESET_S:
                        delay = RESTART_MIN_S
                    log.error(
                        "%s: %s failed; restarting it in %.1f s", self.owner, name, delay,
                        exc_info=exc,
                    )  # fmt: skip
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RESTART_MAX_S)
                    continue
                if crash is Crash.LOG:
                    log.error("%s: %s failed", self.owner, name, exc_info=exc)
                    return None
                log.error("%s: %s failed; %s stops", self.owner, name, self.owner, exc_info=exc)
                if self._on_fail is not None:
                    outcome = self._on_fail(exc)
                    if outcome is not None:
                        await outcome
                return None

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        retrieve(task)

    async def aclose(self, *, grace_s: float = CANCEL_GRACE_S) -> None:
        """Cancel every task of the scope and wait for them, at most ``grace_s``
        (:func:`stop_tasks`); the scope spawns nothing more. Idempotent. A cancelled
        caller still waits, then :class:`asyncio.CancelledError` is re-raised."""
        self._closed = True
        while self._tasks:  # a task stopping may not spawn (closed), but loop to be sure
            await stop_tasks(list(self._tasks), grace_s=grace_s)
            self._tasks = {t for t in self._tasks if not t.done()}
            if self._tasks:
                break  # stuck tasks were logged by stop_tasks; their results are retrieved

    async def __aenter__(self) -> TaskScope:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first: BaseException = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


async def gather_all(*aws: Awaitable[T]) -> list[T]:
    """Run ``aws`` concurrently and return their results in order.

    The first one to fail cancels the others and, once they have all finished, its error
    is raised (the plain exception, not an exception group). A cancelled caller cancels
    them all, waits for them and re-raises. Nothing is left running either way.
    """
    if not aws:
        return []
    failure: BaseException | None = None
    tasks: list[asyncio.Task[T]] = []
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_awaited(aw)) for aw in aws]
    except BaseExceptionGroup as errors:
        failure = _first_error(errors)
    if failure is not None:
        raise failure
    return [t.result() for t in tasks]


async def gather_settled(*aws: Awaitable[T]) -> list[T | Exception]:
    """Run ``aws`` concurrently until every one has finished; return each result or the
    ``Exception`` it raised, in order (``gather(return_exceptions=True)``, except that a
    cancelled caller cancels them all and waits for them before re-raising)."""
    return await gather_all(*(_settled(aw) for aw in aws))


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


async def _settled(aw: Awaitable[T]) -> T | Exception:
    try:
        return await aw
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return exc


def shared_task(aw: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
    """A task that several callers await (e.g. one close shared by concurrent ``close()``
    calls, each waiting through :func:`shielded`): its outcome is marked retrieved when it
    ends, so that no caller having given up leaves an error unretrieved."""
    task = asyncio.create_task(aw, name=name)
    task.add_done_callback(retrieve)
    return task
