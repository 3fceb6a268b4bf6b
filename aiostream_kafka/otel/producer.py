"""A producer's spans and metrics.

:func:`instrument_producer` runs once, at ``start()``, only when the producer emits
(:func:`.telemetry.telemetry_for`). It replaces, on that producer object only, ``enqueue``,
``enqueue_nowait`` and ``enqueue_batch`` with traced versions that call the class's own:
``send`` and ``send_batch`` go through them, and a producer that emits nothing keeps the class's
methods untouched, so its per-record path pays nothing.

Per record (``enqueue``/``send``): a ``send {topic}`` span (kind PRODUCER: no create span
exists) from the call to the broker's acknowledgement, with the partition, offset and
leader's address set then, or ended with ``error.type`` and status ERROR; its context
injected into the record's headers (W3C ``traceparent``, unless the caller set one);
``messaging.client.sent.messages`` +1 (summed over an event-loop iteration before it is
added: :class:`_SentCounts`) and ``messaging.client.operation.duration`` at the outcome.
Per ``enqueue_batch``/``send_batch`` call: one span with ``messaging.batch.message_count``,
the same context in every record's headers, and the metrics counting its records.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from aiostream_kafka.otel import semconv
from aiostream_kafka.otel.telemetry import HeaderList, Telemetry, error_type

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from aiostream_kafka.cluster.cluster import Cluster
    from aiostream_kafka.structs import RecordMetadata

__all__ = ["instrument_producer"]


def instrument_producer(producer: Any, telemetry: Telemetry) -> None:
    """Trace and count the sends of ``producer`` (a started
    :class:`~aiostream_kafka.Producer`: not imported here, which sits below the clients;
    see the module docstring)."""
    cls = type(producer)
    enqueue = cls.enqueue
    enqueue_batch = cls.enqueue_batch
    cluster = producer.cluster
    tel = telemetry
    sent = _SentCounts(tel)

    async def traced_enqueue(
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeaderList | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        attrs = tel.attributes("send", "send", topic)
        tel.set_key(attrs, key)
        span = tel.start_span(f"send {topic}", "PRODUCER", attrs)
        if span is not None:
            headers = tel.inject(span, headers)
        started = time.perf_counter()
        try:
            future: asyncio.Future[RecordMetadata] = await enqueue(
                producer, topic, value, key, headers, partition, timestamp_ms
            )
        except BaseException as exc:
            _outcome(tel, sent, cluster, span, attrs, started, 1, None, exc)
            raise
        future.add_done_callback(partial(_record_done, tel, sent, cluster, span, attrs, started))
        return future

    async def traced_enqueue_batch(
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        *,
        headers: Sequence[HeaderList | None] | None = None,
        partition: int | None = None,
        timestamps_ms: int | Sequence[int] | None = None,
    ) -> asyncio.Future[Any]:
        count = len(values)
        attrs = tel.attributes("send", "send", topic, partition)
        attrs[semconv.BATCH_COUNT] = count
        span = tel.start_span(f"send {topic}", "PRODUCER", attrs)
        if span is not None:
            carried = tel.inject(span, None)
            if headers is None:
                headers = [carried] * count
            else:
                headers = [tel.inject(span, h) for h in headers]
        started = time.perf_counter()
        try:
            future: asyncio.Future[Any] = await enqueue_batch(
                producer, topic, values, keys, headers=headers, partition=partition,
                timestamps_ms=timestamps_ms,
            )  # fmt: skip
        except BaseException as exc:
            _outcome(tel, sent, cluster, span, attrs, started, count, None, exc)
            raise
        done = partial(_batch_done, tel, sent, cluster, span, attrs, started, count)
        future.add_done_callback(done)
        return future

    enqueue_nowait = cls.enqueue_nowait
    unwatched = producer._unwatched

    def traced_enqueue_nowait(
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeaderList | None = None,
        partition: int | None = None,
        on_delivery: Any = None,
    ) -> None:
        attrs = tel.attributes("send", "send", topic)
        tel.set_key(attrs, key)
        span = tel.start_span(f"send {topic}", "PRODUCER", attrs)
        if span is not None:
            headers = tel.inject(span, headers)
        started = time.perf_counter()

        def delivered(metadata: Any, error: BaseException | None) -> None:
            where = (
                None if metadata is None else (metadata.topic, metadata.partition, metadata.offset)
            )
            _outcome(tel, sent, cluster, span, attrs, started, 1, where, error)
            if on_delivery is not None:
                on_delivery(metadata, error)
            elif error is not None:
                unwatched.set_exception(error)  # counted and reported as without tracing

        try:
            enqueue_nowait(producer, topic, value, key, headers, partition, delivered)
        except BaseException as exc:
            _outcome(tel, sent, cluster, span, attrs, started, 1, None, exc)
            raise

    # Instance attributes shadow the class's methods for this producer only.
    producer.enqueue_nowait = traced_enqueue_nowait
    producer.enqueue = traced_enqueue
    producer.enqueue_batch = traced_enqueue_batch
    producer._fast = False  # its inline fast path would skip the traced enqueue


def _record_done(
    tel: Telemetry,
    sent: _SentCounts,
    cluster: Cluster,
    span: Span | None,
    attrs: dict[str, Any],
    started: float,
    future: asyncio.Future[RecordMetadata],
) -> None:
    if future.cancelled():
        _outcome(tel, sent, cluster, span, attrs, started, 1, None, _Cancelled())
        return
    error = future.exception()
    if error is not None:
        _outcome(tel, sent, cluster, span, attrs, started, 1, None, error)
        return
    md = future.result()
    _outcome(tel, sent, cluster, span, attrs, started, 1, (md.topic, md.partition, md.offset), None)


def _batch_done(
    tel: Telemetry,
    sent: _SentCounts,
    cluster: Cluster,
    span: Span | None,
    attrs: dict[str, Any],
    started: float,
    count: int,
    future: asyncio.Future[Any],
) -> None:
    if future.cancelled():
        error: BaseException | None = _Cancelled()
    else:
        error = future.exception()
    _outcome(tel, sent, cluster, span, attrs, started, count, None, error)


class _Cancelled(Exception):
    """Stands for a cancelled future in ``error.type`` (``"cancelled"`` is reported)."""


class _SentCounts:
    """``messaging.client.sent.messages``, added once per event-loop iteration per set of
    attributes rather than once per record: the records of a produce batch are
    acknowledged together, and each ``Counter.add`` of the SDK costs as much as a span's
    attributes (~7 µs). The sums exported are the same; a point lags by one iteration."""

    __slots__ = ("_counts", "_scheduled", "_tel")

    def __init__(self, tel: Telemetry) -> None:
        self._tel = tel
        self._counts: dict[tuple[Any, ...], tuple[dict[str, Any], int]] = {}
        self._scheduled = False

    def add(self, count: int, point: dict[str, Any]) -> None:
        key = tuple(point.values())
        found = self._counts.get(key)
        self._counts[key] = (point, count if found is None else found[1] + count)
        if not self._scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on a loop (a done callback run by hand): add now
                self.flush()
                return
            self._scheduled = True
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        counts, self._counts = self._counts, {}
        instruments = self._tel.instruments
        if instruments is not None:
            for point, count in counts.values():
                instruments.sent.add(count, point)


def _outcome(
    tel: Telemetry,
    sent: _SentCounts,
    cluster: Cluster,
    span: Span | None,
    attrs: dict[str, Any],
    started: float,
    count: int,
    where: tuple[str, int, int] | None,
    error: BaseException | None,
) -> None:
    """End the send span and record the metrics of ``count`` records' outcome."""
    point = {k: v for k, v in attrs.items() if not k.endswith("message.key")}
    point.pop(semconv.BATCH_COUNT, None)
    if error is not None:
        kind = "cancelled" if isinstance(error, _Cancelled) else error_type(error)
        point[semconv.ERROR_TYPE] = kind
        if span is not None:
            if isinstance(error, _Cancelled):
                span.set_attribute(semconv.ERROR_TYPE, kind)
            else:
                tel.fail_span(span, error)
    elif where is not None:
        topic, partition, offset = where
        point[semconv.PARTITION] = str(partition)
        if span is not None:
            found: dict[str, Any] = {semconv.PARTITION: str(partition)}
            if offset >= 0:
                tel.set_offset(found, offset)
            address = _leader_address(cluster, topic, partition)
            if address is not None:
                found[semconv.SERVER_ADDRESS] = address[0]
                found[semconv.SERVER_PORT] = address[1]
            span.set_attributes(found)  # one call: the SDK takes its lock once
    if span is not None:
        span.end()
    instruments = tel.instruments
    if instruments is not None:
        sent.add(count, point)
        instruments.operation_duration.record(time.perf_counter() - started, point)


def _leader_address(cluster: Cluster, topic: str, partition: int) -> tuple[str, int] | None:
    snapshot = cluster.snapshot
    meta = snapshot.topics.get(topic)
    if meta is None:
        return None
    pm = meta.partitions.get(partition)
    if pm is None:
        return None
    broker = snapshot.brokers.get(pm.leader)
    return None if broker is None else (broker.host, broker.port)
