"""What a batch completes for a record of ``Producer.enqueue_nowait()``: no future.

A batch keeps, per record, the object its outcome goes to (``ProducerBatch.futures``):
an :class:`asyncio.Future` for ``enqueue``/``send``, None for a batch call's record, or
one of these two, which answer the same three calls a batch makes of a future
(``done()``, ``set_result()``, ``set_exception()``):

* :class:`Delivery`: a record given an ``on_delivery`` callback; the batch's completion
  calls it (on the loop, at once) with ``(metadata, None)`` or ``(None, error)``;
* :class:`Unwatched`: one object per producer, shared by every record sent without a
  callback, so such a record costs no object at all: a success builds nothing (it says it
  is done already, so the completion skips it), a failure is counted and logged, and
  ``flush()``/``close()`` raise
  :class:`~aiostream_kafka.errors.RecordsNotDeliveredError` for what it counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiostream_kafka.errors import RecordsNotDeliveredError

__all__ = ["Delivery", "DeliveryCallback", "Unwatched"]

log = logging.getLogger("aiostream_kafka.producer")

#: ``on_delivery(metadata, error)``: one of the two is None.
DeliveryCallback = Callable[[Any, BaseException | None], object]

_LOG_EVERY = 10_000  # after the first failure, one ERROR line per this many


class Delivery:
    """A record's ``on_delivery`` callback, called once with its outcome."""

    __slots__ = ("callback", "fired")

    def __init__(self, callback: DeliveryCallback) -> None:
        self.callback = callback
        self.fired = False

    def done(self) -> bool:
        return self.fired

    def cancelled(self) -> bool:
        return False

    def set_result(self, metadata: Any) -> None:
        self._fire(metadata, None)

    def set_exception(self, error: BaseException) -> None:
        self._fire(None, error)

    def _fire(self, metadata: Any, error: BaseException | None) -> None:
        if self.fired:
            return
        self.fired = True
        try:
            self.callback(metadata, error)
        except Exception:  # the sender must go on: the callback's bug is logged
            log.exception("an on_delivery callback raised (ignored)")


class Unwatched:
    """The outcome sink of a producer's records sent with no callback (see the module
    docstring); ``failed`` and ``first_error`` since the last :meth:`take`."""

    __slots__ = ("failed", "first_error", "total_failed")

    def __init__(self) -> None:
        self.failed = 0
        self.first_error: BaseException | None = None
        self.total_failed = 0

    def done(self) -> bool:
        # True: a batch's completion skips it (no metadata is built for a success nobody
        # asked about); ProducerBatch.fail() reports failures to it explicitly.
        return True

    def cancelled(self) -> bool:
        return False

    def set_result(self, metadata: Any) -> None:
        pass

    def set_exception(self, error: BaseException) -> None:
        if self.failed == 0:
            self.first_error = error
        self.failed += 1
        self.total_failed += 1
        if self.total_failed == 1 or self.total_failed % _LOG_EVERY == 0:
            log.error("a record given to enqueue_nowait() without on_delivery failed "
                      "(%d so far): %r", self.total_failed, error)  # fmt: skip

    def take(self) -> RecordsNotDeliveredError | None:
        """The failures since the last call as one error (None: none), and reset."""
        if self.failed == 0 or self.first_error is None:
            return None
        error = RecordsNotDeliveredError(self.failed, self.first_error)
        self.failed = 0
        self.first_error = None
        return error
