"""OpenTelemetry, natively: spans and metrics of the messaging semantic conventions.

| module | responsibility |
|---|---|
| ``semconv.py``   | the attribute and metric names, the ``OTEL_SEMCONV_STABILITY_OPT_IN`` switch |
| ``telemetry.py`` | :func:`telemetry_for` (whether a client emits), one client's tracer and the |
|                  | shared instruments, header propagation, attribute sets |
| ``producer.py``  | send spans and metrics (traced ``enqueue``/``enqueue_batch`` per producer) |
| ``consumer.py``  | receive, process and commit spans, consumed messages, the lag gauge |

``opentelemetry-api`` is optional (the ``opentelemetry`` extra): nothing here imports it
until a client starts with ``opentelemetry=True`` (the default), and a client whose
providers have no SDK behind them emits nothing and pays nothing per record.
"""

from aiostream_kafka.otel.telemetry import Telemetry, telemetry_for

__all__ = ["Telemetry", "telemetry_for"]
