"""One client's OpenTelemetry instruments: its tracer, the messaging metrics, the record
header propagation, and the attribute sets of the messaging conventions.

:func:`telemetry_for` decides, once when a client starts, whether the client emits
anything: ``opentelemetry=False``, ``opentelemetry-api`` not importable, or no SDK behind
the providers (the API's proxy or no-op providers) give None, and then nothing of this
module runs on any per-record path (the clients check one attribute, or nothing: see
:mod:`.producer` and :mod:`.consumer`). Tracing and metrics are decided separately (an
SDK tracer provider with no meter provider emits spans only).

The instruments are made once per meter provider (the SDK refuses a second observable
gauge of one name, and its synchronous instruments are shared anyway), so any number of
clients share them; the consumer-lag gauge reads every live consumer registered with it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from aiostream_kafka._version import __version__
from aiostream_kafka.otel import semconv
from aiostream_kafka.otel.semconv import Names, names_for

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Counter, Histogram, Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["Instruments", "LagSource", "Telemetry", "telemetry_for"]

log = logging.getLogger(__name__)

SCOPE = "aiostream_kafka"
TRACEPARENT = "traceparent"
MAX_LINKS = 128  # the SDK's default span link limit: more would be dropped anyway

HeaderList = Sequence[tuple[str, bytes | None]]
#: Yields (topic, partition, lag) for the consumer-lag gauge.
LagSource = Callable[[], Iterable[tuple[str, int, int]]]


def _noop_provider(provider: object) -> bool:
    """The API's stand-ins (no SDK configured): the proxies before an SDK is set, and
    the explicit no-op providers."""
    return type(provider).__name__ in (
        "ProxyTracerProvider",
        "NoOpTracerProvider",
        "_ProxyMeterProvider",
        "NoOpMeterProvider",
    )


def telemetry_for(
    enabled: bool,
    tracer_provider: TracerProvider | None,
    meter_provider: MeterProvider | None,
    *,
    client_id: str,
    group: str | None = None,
) -> Telemetry | None:
    """The client's :class:`Telemetry`, or None when it emits nothing (see the module
    docstring). The global providers are read now: configure the SDK before the client
    starts."""
    if not enabled:
        return None
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return None
    tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    tracer = None
    if not _noop_provider(tp):
        tracer = tp.get_tracer(SCOPE, __version__, schema_url=semconv.SCHEMA_URL)
    instruments = None if _noop_provider(mp) else Instruments.of(mp)
    if tracer is None and instruments is None:
        return None
    return Telemetry(tracer, instruments, names_for(), client_id, group)


class Instruments:
    """The messaging metrics of one meter provider (made once, shared by its clients)."""

    _by_provider: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, meter: Meter) -> None:
        buckets = semconv.DURATION_BUCKETS_S
        self.operation_duration: Histogram = meter.create_histogram(
            semconv.OPERATION_DURATION,
            unit="s",
            description="Duration of a messaging operation initiated by a producer or "
            "consumer client (send: until the broker acknowledged; commit).",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.process_duration: Histogram = meter.create_histogram(
            semconv.PROCESS_DURATION,
            unit="s",
            description="Duration of processing operation (a handler of process(), the "
            "body of a committing() loop).",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.sent: Counter = meter.create_counter(
            semconv.SENT_MESSAGES,
            unit="{message}",
            description="Number of messages producer attempted to send to the broker.",
        )
        self.consumed: Counter = meter.create_counter(
            semconv.CONSUMED_MESSAGES,
            unit="{message}",
            description="Number of messages that were delivered to the application.",
        )
        self._lag_sources: weakref.WeakKeyDictionary[Any, tuple[LagSource, dict[str, Any]]] = (
            weakref.WeakKeyDictionary()
        )
        meter.create_observable_gauge(
            semconv.CONSUMER_LAG,
            callbacks=[self._observe_lag],
            unit="{message}",
            description="Records of a partition after the consumer's position (high "
            "watermark, or last stable offset under read_committed, minus the position).",
        )

    @classmethod
    def of(cls, provider: MeterProvider) -> Instruments:
        with cls._lock:
            found = cls._by_provider.get(provider)
            if found is None:
                meter = provider.get_meter(SCOPE, __version__, schema_url=semconv.SCHEMA_URL)
                found = cls._by_provider[provider] = cls(meter)
            return found

    def add_lag_source(self, owner: object, source: LagSource, attrs: dict[str, Any]) -> None:
        """Report ``source``'s partitions in the lag gauge while ``owner`` lives (or until
        :meth:`remove_lag_source`)."""
        self._lag_sources[owner] = (source, attrs)

    def remove_lag_source(self, owner: object) -> None:
        self._lag_sources.pop(owner, None)

    def _observe_lag(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for source, base in list(self._lag_sources.values()):
            try:
                rows = list(source())
            except Exception:  # a consumer closing meanwhile: skip it this time
                log.debug("consumer lag gauge: a source failed", exc_info=True)
                continue
            for topic, partition, lag in rows:
                attrs = dict(base)
                attrs[semconv.DESTINATION] = topic
                attrs[semconv.PARTITION] = str(partition)
                yield Observation(lag, attrs)


class Telemetry:
    """What one client emits with (see the module docstring): ``tracer`` (None: no
    spans), ``instruments`` (None: no metrics), the attribute names in force, and the
    client's id and consumer group."""

    def __init__(
        self,
        tracer: Tracer | None,
        instruments: Instruments | None,
        names: Names,
        client_id: str,
        group: str | None,
    ) -> None:
        from opentelemetry import context, propagate, trace

        self.tracer = tracer
        self.instruments = instruments
        self.names = names
        self.client_id = client_id
        self.group = group
        self._context = context
        self._propagate = propagate
        self._trace = trace
        self._kind = trace.SpanKind
        self._status_error = trace.Status(trace.StatusCode.ERROR)

    # -- attributes -------------------------------------------------------------------------

    def attributes(
        self, operation: str, operation_type: str, topic: str | None, partition: int | None = None
    ) -> dict[str, Any]:
        """The attributes every span and metric point of ``operation`` carries."""
        attrs: dict[str, Any] = dict.fromkeys(self.names.system, "kafka")
        attrs[semconv.OPERATION_NAME] = operation
        attrs[semconv.OPERATION_TYPE] = operation_type
        if topic is not None:
            attrs[semconv.DESTINATION] = topic
        if partition is not None:
            attrs[semconv.PARTITION] = str(partition)
        if self.group is not None:
            attrs[semconv.CONSUMER_GROUP] = self.group
        return attrs

    def set_key(self, attrs: dict[str, Any], key: object) -> None:
        """The record key, where it has a canonical string form (a str, or UTF-8 bytes)."""
        if key is None:
            return
        if isinstance(key, (bytes, bytearray, memoryview)):
            try:
                text = bytes(key).decode()
            except UnicodeDecodeError:
                return
        elif isinstance(key, str):
            text = key
        else:
            return
        for name in self.names.key:
            attrs[name] = text

    def set_offset(self, attrs: dict[str, Any] | Span, offset: int) -> None:
        for name in self.names.offset:
            if isinstance(attrs, dict):
                attrs[name] = offset
            else:
                attrs.set_attribute(name, offset)

    # -- spans ------------------------------------------------------------------------------

    def start_span(
        self,
        name: str,
        kind: str,
        attrs: dict[str, Any],
        *,
        parent: Context | None = None,
        links: Sequence[Any] = (),
    ) -> Span | None:
        tracer = self.tracer
        if tracer is None:
            return None
        return tracer.start_span(
            name,
            context=parent,
            kind=getattr(self._kind, kind),
            attributes=attrs,
            links=links or None,
        )

    def fail_span(self, span: Span | None, error: BaseException) -> None:
        if span is None:
            return
        span.set_attribute(semconv.ERROR_TYPE, error_type(error))
        span.record_exception(error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)[:512]))

    def use_span(self, span: Span) -> object:
        """Make ``span`` the current one in this task; returns the token for :meth:`unuse`."""
        return self._context.attach(self._trace.set_span_in_context(span))

    def unuse(self, token: object) -> None:
        detach: Callable[[Any], None] = self._context.detach
        detach(token)

    # -- propagation ------------------------------------------------------------------------

    def inject(self, span: Span, headers: HeaderList | None) -> list[tuple[str, bytes | None]]:
        """``headers`` plus the propagation headers (W3C ``traceparent`` and whatever the
        global propagator adds) of ``span``'s context; a header the caller set already is
        kept, not replaced."""
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
        out = list(headers) if headers else []
        if out:
            have = {h[0].lower() for h in out}
            return out + [(k, v.encode()) for k, v in carrier.items() if k.lower() not in have]
        return [(k, v.encode()) for k, v in carrier.items()]

    def extract(self, headers: HeaderList) -> Context | None:
        """The context the record's headers carry (None: no ``traceparent``)."""
        if not headers:
            return None
        carrier: dict[str, str] = {}
        for name, value in headers:
            if value is not None:
                try:
                    carrier[name.lower()] = bytes(value).decode()
                except UnicodeDecodeError:
                    continue
        if TRACEPARENT not in carrier:
            return None
        return self._propagate.extract(carrier)

    def link_to(self, context: Context | None) -> Any | None:
        """A span link to the span ``context`` names (None: none, or not valid)."""
        if context is None:
            return None
        span_context = self._trace.get_current_span(context).get_span_context()
        if not span_context.is_valid:
            return None
        return self._trace.Link(span_context)

    def links(self, records: Iterable[Any]) -> list[Any]:
        """Links to the producer contexts of ``records`` (at most :data:`MAX_LINKS`)."""
        out = []
        for record in records:
            headers = record.headers
            if headers:
                link = self.link_to(self.extract(headers))
                if link is not None:
                    out.append(link)
                    if len(out) >= MAX_LINKS:
                        break
        return out


def error_type(error: BaseException) -> str:
    """``error.type``: the exception's class name (low-cardinality, as the conventions
    ask); ``"cancelled"`` for a cancellation."""
    if type(error).__name__ == "CancelledError":
        return "cancelled"
    return type(error).__qualname__
