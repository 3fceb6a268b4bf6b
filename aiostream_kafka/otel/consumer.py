"""A consumer's (and a share consumer's) spans and metrics.

:class:`ConsumerTelemetry` exists only for a consumer that emits
(:func:`.telemetry.telemetry_for`, decided at ``start()``); the consumer's paths check one
attribute for it, once per fetched chunk or per ``process()`` call, never per record.

* **receive**: when an iterator takes a fetched chunk of a partition (``stream()``,
  ``batches()``, ``partitioned_stream()``: the moment its records reach the application),
  a ``receive {topic}`` span (kind CLIENT) with ``messaging.batch.message_count`` and the
  partition, linked to the producer contexts its records carry (``traceparent``), and
  ``messaging.client.consumed.messages`` + the chunk's count.
* **process**: around each handler of ``process()`` (its span current in the handler,
  so the handler's own spans and the records it sends are its children) and each record's
  turn in a ``committing()`` loop (from the record handed out to the loop asking for the
  next), a ``process {topic}`` span (kind CONSUMER) whose parent is the record's producer
  context (a single message), with its partition, offset and key;
  ``messaging.process.duration``.
* **commit** (settle): each OffsetCommit of the group, a ``commit`` span (kind CLIENT,
  ``commit {topic}`` when one topic) and ``messaging.client.operation.duration``.
* **acknowledge** (settle, share consumers): each request that carries acknowledgements
  (a ShareAcknowledge, or a ShareFetch they ride on), an ``acknowledge {topic}`` span (kind
  CLIENT, ``acknowledge`` when several topics) from the request to its answer, with
  ``messaging.batch.message_count`` (the records acknowledged, renewals not counted), the
  count of each type (``aiostream_kafka.acknowledge.accept`` / ``.release`` / ``.reject`` /
  ``.renew``) and ``error.type`` when the request failed or a partition refused them;
  ``messaging.client.operation.duration`` for a ShareAcknowledge only (one riding on a
  ShareFetch is answered when the fetch is, after its wait for records).
* the gauge ``aiostream_kafka.consumer.lag``: per fetched partition, the records after the
  position.
"""

from __future__ import annotations

import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

from aiostream_kafka.otel import semconv
from aiostream_kafka.otel.telemetry import LagSource, Telemetry, error_type

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from aiostream_kafka.structs import TopicPartition

__all__ = ["ConsumerTelemetry", "Settling"]

R = TypeVar("R")


class ConsumerTelemetry:
    """One consumer's spans and metrics (see the module docstring)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.tel = telemetry

    # -- receive -----------------------------------------------------------------------------

    def received(self, tp: TopicPartition, records: Sequence[Any]) -> None:
        """An iterator took ``records`` (one fetched chunk of ``tp``) for the application."""
        if not records:
            return
        tel = self.tel
        attrs = tel.attributes("receive", "receive", tp.topic, tp.partition)
        if tel.tracer is not None:
            span_attrs = dict(attrs)
            span_attrs[semconv.BATCH_COUNT] = len(records)
            span = tel.start_span(
                f"receive {tp.topic}", "CLIENT", span_attrs, links=tel.links(records)
            )
            if span is not None:
                span.end()
        if tel.instruments is not None:
            tel.instruments.consumed.add(len(records), attrs)

    # -- process -----------------------------------------------------------------------------

    def _start_process(self, record: Any) -> tuple[Span | None, dict[str, Any]]:
        tel = self.tel
        attrs = tel.attributes("process", "process", record.topic, record.partition)
        span = None
        if tel.tracer is not None:
            span_attrs = dict(attrs)
            tel.set_offset(span_attrs, record.offset)
            tel.set_key(span_attrs, record.key)
            parent = tel.extract(record.headers) if record.headers else None
            span = tel.start_span(f"process {record.topic}", "CONSUMER", span_attrs, parent=parent)
        return span, attrs

    def _end_process(
        self,
        span: Span | None,
        attrs: dict[str, Any],
        started: float,
        error: BaseException | None,
    ) -> None:
        tel = self.tel
        if error is not None:
            attrs[semconv.ERROR_TYPE] = error_type(error)
            tel.fail_span(span, error)
        if span is not None:
            span.end()
        if tel.instruments is not None:
            tel.instruments.process_duration.record(time.perf_counter() - started, attrs)

    def wrap_handler(
        self, handler: Callable[[R], Awaitable[object]]
    ) -> Callable[[R], Awaitable[object]]:
        """``handler`` run inside a process span (current in the handler's task)."""
        tel = self.tel

        async def traced(record: R) -> object:
            span, attrs = self._start_process(record)
            token = tel.use_span(span) if span is not None else None
            started = time.perf_counter()
            try:
                result = await handler(record)
            except BaseException as exc:
                if token is not None:
                    tel.unuse(token)
                    token = None
                self._end_process(span, attrs, started, exc)
                raise
            if token is not None:
                tel.unuse(token)
            self._end_process(span, attrs, started, None)
            return result

        return traced

    async def around_each(self, records: AsyncIterable[R]) -> AsyncIterator[R]:
        """Pass ``records`` through with a process span per record, from its hand-out
        to the loop asking for the next one (not current in the loop's body: a generator
        cannot set the caller's context). A loop that ends on a record ends its span
        without an error (the generator cannot tell ``break`` from a raised error)."""
        async for record in records:
            span, attrs = self._start_process(record)
            started = time.perf_counter()
            try:
                yield record
            finally:
                self._end_process(span, attrs, started, None)

    # -- commit ------------------------------------------------------------------------------

    def wrap_commit(
        self, commit: Callable[[Mapping[TopicPartition, Any]], Awaitable[None]]
    ) -> Callable[[Mapping[TopicPartition, Any]], Awaitable[None]]:
        """``commit`` (the group's OffsetCommit) inside a settle span, timed."""
        tel = self.tel

        async def traced(offsets: Mapping[TopicPartition, Any]) -> None:
            topics = {tp.topic for tp in offsets}
            topic = next(iter(topics)) if len(topics) == 1 else None
            attrs = tel.attributes("commit", "settle", topic)
            span = tel.start_span(f"commit {topic}" if topic else "commit", "CLIENT", attrs)
            started = time.perf_counter()
            try:
                await commit(offsets)
            except BaseException as exc:
                attrs[semconv.ERROR_TYPE] = error_type(exc)
                tel.fail_span(span, exc)
                raise
            finally:
                if span is not None:
                    span.end()
                if tel.instruments is not None:
                    tel.instruments.operation_duration.record(time.perf_counter() - started, attrs)

        return traced

    # -- acknowledge (share consumers) -------------------------------------------------------

    def settling(
        self, acks: Mapping[TopicPartition, Mapping[int, int]], *, timed: bool
    ) -> Settling:
        """The settle span of a request carrying ``acks`` ({partition: {offset: type}}, the
        wire's acknowledge type values), started now; ``timed``: also record its duration."""
        tel = self.tel
        topics = {tp.topic for tp in acks}
        topic = next(iter(topics)) if len(topics) == 1 else None
        attrs = tel.attributes("acknowledge", "settle", topic)
        span = None
        if tel.tracer is not None:
            counts = [0, 0, 0, 0, 0]
            for offsets in acks.values():
                for kind in offsets.values():
                    if 0 < kind < len(counts):
                        counts[kind] += 1
            span_attrs = dict(attrs)
            span_attrs[semconv.BATCH_COUNT] = counts[1] + counts[2] + counts[3]
            for kind, name in enumerate(_ACK_NAMES):
                if name and counts[kind]:
                    span_attrs[f"aiostream_kafka.acknowledge.{name}"] = counts[kind]
            span = tel.start_span(
                f"acknowledge {topic}" if topic else "acknowledge", "CLIENT", span_attrs
            )
        return Settling(tel, span, attrs, timed)

    # -- lag ---------------------------------------------------------------------------------

    def report_lag(self, owner: object, source: LagSource) -> None:
        if self.tel.instruments is not None:
            base = self.tel.attributes("receive", "receive", None)
            self.tel.instruments.add_lag_source(owner, source, base)

    def stop_lag(self, owner: object) -> None:
        if self.tel.instruments is not None:
            self.tel.instruments.remove_lag_source(owner)


_ACK_NAMES = ("", "accept", "release", "reject", "renew")  # by the wire's type value


class Settling:
    """One acknowledging request's span and duration (:meth:`ConsumerTelemetry.settling`)."""

    __slots__ = ("_attrs", "_span", "_started", "_tel", "_timed")

    def __init__(
        self, tel: Telemetry, span: Span | None, attrs: dict[str, Any], timed: bool
    ) -> None:
        self._tel = tel
        self._span = span
        self._attrs = attrs
        self._timed = timed
        self._started = time.perf_counter()

    def end(self, error: BaseException | None = None, *, refused: int = 0) -> None:
        """The answer came (``refused``: partitions it refused, ``error`` the first
        refusal) or the request failed (``error``)."""
        tel = self._tel
        span = self._span
        if error is not None:
            self._attrs[semconv.ERROR_TYPE] = error_type(error)
            tel.fail_span(span, error)
        if span is not None:
            if refused:
                span.set_attribute("aiostream_kafka.acknowledge.refused_partitions", refused)
            span.end()
        if self._timed and tel.instruments is not None:
            tel.instruments.operation_duration.record(
                time.perf_counter() - self._started, self._attrs
            )


def lag_rows(partitions: Iterable[Any], read_committed: bool) -> list[tuple[str, int, int]]:
    """(topic, partition, lag) of each fetched partition with a known end and position."""
    rows = []
    for ps in partitions:
        end = ps.last_stable_offset if read_committed else ps.high_watermark
        position = ps.delivered_position()
        if end is not None and end >= 0 and position is not None:
            rows.append((ps.tp.topic, ps.tp.partition, max(end - position, 0)))
    return rows
