"""The otel scenario's worker side (issue 31, item 4): what OpenTelemetry costs a client.

Each run sets up one *mode* in its fresh worker process before the client starts, then
runs the ordinary ``produce`` / ``consume`` scenario of its adapter:

* ``off``: ours with ``opentelemetry=False``; aiokafka as it is (no instrumentor);
* ``nosdk``: ``opentelemetry-api`` importable and no SDK configured (the default a user
  has): ours with its defaults; aiokafka with ``AIOKafkaInstrumentor().instrument()``
  (opentelemetry-instrumentation-aiokafka) applied;
* ``sdk``: as ``nosdk``, and an SDK configured globally first: a ``TracerProvider`` with a
  ``BatchSpanProcessor`` (its defaults) to a ``SpanExporter`` of ours, and a
  ``MeterProvider`` with a ``PeriodicExportingMetricReader`` (every :data:`METRIC_EXPORT_MS`)
  to a ``MetricExporter`` of ours (both made by :func:`_exporters`, which imports the SDK).
  Both exporters count what they get and drop it, so the run pays the
  SDK's whole path (spans made, ended, queued, exported on its thread; metrics recorded,
  collected) but no I/O.

The result gains ``otel`` (the mode), ``hooked`` (whether ours' :func:`telemetry_for`
decides to emit in this process: False for ``off`` and ``nosdk``), and the spans and
metric data points the exporters received (after the providers' shutdown, which flushes).

opentelemetry-instrumentation-aiokafka is not in the venv: its 0.66b1 pins
opentelemetry-semantic-conventions 0.66b1 and through it opentelemetry-api 1.45.1, while
the dev extra's opentelemetry-sdk 1.45.2 needs api 1.45.2. It is installed without its
dependencies into :data:`CONTRIB_DIR` (``BENCH_OTEL_CONTRIB`` overrides it) and put on
``sys.path`` by the aiokafka worker of this scenario only::

    pip install --no-deps --target ~/.cache/aiostream_kafka/bench-otel-contrib \\
        opentelemetry-instrumentation-aiokafka==0.66b1 opentelemetry-instrumentation==0.66b1
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.clients.common import Unsupported

MODES = ("off", "nosdk", "sdk")
#: What each mode means for each client (the report's labels).
LABELS = {
    "ours": {
        "off": "opentelemetry=False",
        "nosdk": "API, no SDK",
        "sdk": "SDK",
    },
    "aiokafka": {
        "off": "not instrumented",
        "nosdk": "instrumented, no SDK",
        "sdk": "instrumented, SDK",
    },
}
CONTRIB_VERSION = "0.66b1"
CONTRIB_DIR = Path(
    os.environ.get("BENCH_OTEL_CONTRIB", "~/.cache/aiostream_kafka/bench-otel-contrib")
).expanduser()
METRIC_EXPORT_MS = 1000


def describe(client: str, mode: str) -> dict[str, Any]:
    """The mode's setup, for the report's settings."""
    out: dict[str, Any] = {"mode": mode, "meaning": LABELS[client][mode]}
    if mode == "sdk":
        out["sdk"] = (
            "TracerProvider + BatchSpanProcessor(defaults) -> an exporter dropping spans; "
            f"MeterProvider + PeriodicExportingMetricReader({METRIC_EXPORT_MS} ms) -> an "
            "exporter dropping metrics"
        )
    if client == "aiokafka" and mode != "off":
        out["instrumentation"] = (
            f"opentelemetry-instrumentation-aiokafka {CONTRIB_VERSION}: "
            "AIOKafkaInstrumentor().instrument() before the producer is made"
        )
    return out


def _exporters() -> tuple[Any, Any]:
    """(span exporter, metric exporter): each counts and drops (no I/O)."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class _DropSpans(SpanExporter):
        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    class _DropMetrics(MetricExporter):
        def __init__(self) -> None:
            super().__init__()
            self.exports = 0
            self.points = 0

        def export(
            self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            self.exports += 1
            for rm in metrics_data.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        self.points += len(metric.data.data_points)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            pass

    return _DropSpans(), _DropMetrics()


def _instrument_aiokafka() -> None:
    if CONTRIB_DIR.is_dir() and str(CONTRIB_DIR) not in sys.path:
        sys.path.append(str(CONTRIB_DIR))
    try:
        from opentelemetry.instrumentation.aiokafka import (  # type: ignore[import-not-found]
            AIOKafkaInstrumentor,
        )
    except ImportError as exc:
        raise Unsupported(
            f"opentelemetry-instrumentation-aiokafka is not importable ({exc}); install it "
            f"with pip install --no-deps --target {CONTRIB_DIR} "
            f"opentelemetry-instrumentation-aiokafka=={CONTRIB_VERSION} "
            f"opentelemetry-instrumentation=={CONTRIB_VERSION}"
        ) from None
    AIOKafkaInstrumentor().instrument()
    import aiokafka

    if not hasattr(aiokafka.AIOKafkaProducer.send, "__wrapped__"):
        raise RuntimeError("AIOKafkaInstrumentor did not wrap AIOKafkaProducer.send")


def run_mode(
    client: str, spec: dict[str, Any], run: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Set up ``spec["otel"]`` for ``client`` in this process, ``run()`` the scenario, and
    add what the mode did to its result."""
    mode = spec["otel"]
    if mode not in MODES:
        raise ValueError(f"unknown otel mode {mode!r}")
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        raise Unsupported("opentelemetry-api is not importable") from None
    tracer_provider = meter_provider = None
    spans = exports = None
    if mode == "sdk":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        spans, exports = _exporters()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(spans))
        reader = PeriodicExportingMetricReader(exports, export_interval_millis=METRIC_EXPORT_MS)
        meter_provider = MeterProvider(metric_readers=[reader])
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    if client == "aiokafka" and mode != "off":
        _instrument_aiokafka()
    hooked = None
    if client in ("ours", "ours_pure"):
        from aiostream_kafka.otel import telemetry_for

        hooked = telemetry_for(mode != "off", None, None, client_id="bench") is not None
        if hooked != (mode == "sdk"):
            raise RuntimeError(f"otel mode {mode}: telemetry_for decided hooked={hooked}")
    result = run()
    result.update(otel=mode, hooked=hooked)
    if tracer_provider is not None and meter_provider is not None:
        started = time.perf_counter()
        tracer_provider.shutdown()  # flushes the batch processor's queue
        meter_provider.shutdown()  # a last collection and export
        result["shutdown_s"] = time.perf_counter() - started
        result["spans"] = spans.spans
        # the warm-up records are sent (and traced) in the same process
        result["spans_per_record"] = spans.spans / (result["records"] + spec.get("warmup", 0))
        result["metric_exports"] = exports.exports
        result["metric_points"] = exports.points
    return result
