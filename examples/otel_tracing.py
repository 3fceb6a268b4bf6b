"""One trace across two services: OpenTelemetry spans and metrics, natively.

Two services run in this script, each with its own OpenTelemetry SDK (a ``TracerProvider``
and a ``MeterProvider`` whose resource says ``service.name``), given to its clients with
``tracer_provider=`` and ``meter_provider=``; no instrumentation package:

* **orders** handles ``POST /orders`` requests (an application span of its own, kind
  SERVER; no web framework here) and sends each order with a ``Producer``: the send
  span is a child of the request's span, and its context travels in the record's
  ``traceparent`` header.
* **billing** consumes the orders with ``Consumer.process()``. The client starts a
  ``process`` span per record, a child of the order's send span, current in the handler:
  the handler's own ``charge card`` span and the invoice it sends to a second topic are
  its children. One trace id runs from the request to the invoice.

The spans go to in-memory exporters and the metrics to in-memory readers (sampled every
``--sample-ms`` during the run). At the end the script prints the first orders' traces as
trees; ``--export FILE`` writes every span and metric sample as JSON (what
``tools/render_otel.py`` draws the docs' pictures from); ``--console`` also prints each
span with the SDK's ``ConsoleSpanExporter``.

    python examples/otel_tracing.py                    # embedded broker
    python examples/otel_tracing.py --bootstrap-servers 127.0.0.1:9092 --console
    python examples/otel_tracing.py --export run.json

Needs ``opentelemetry-sdk`` (``pip install 'aiostream-kafka[opentelemetry]'
opentelemetry-sdk``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _local_kafka import ensure_topic, kafka
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from aiostream_kafka import Consumer, Producer, Record
from aiostream_kafka.serde import json_deserializer, json_serializer


class Service:
    """One service's OpenTelemetry SDK: spans and metrics kept in memory."""

    def __init__(self, name: str, console: bool) -> None:
        self.name = name
        resource = Resource.create({SERVICE_NAME: name})
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        if console:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[self.metrics])
        self.tracer: Tracer = self.tracer_provider.get_tracer(f"example.{name}")

    @property
    def options(self) -> dict[str, Any]:
        """What its clients are given."""
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def sample(self, t_s: float) -> list[dict[str, Any]]:
        """The metrics' values now (cumulative sums, the last gauge values, histograms)."""
        rows: list[dict[str, Any]] = []
        data = self.metrics.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        row: dict[str, Any] = {
                            "t_s": round(t_s, 4),
                            "service": self.name,
                            "name": metric.name,
                            "attributes": dict(point.attributes or {}),
                        }
                        if isinstance(point, HistogramDataPoint):
                            row["count"] = point.count
                            row["sum"] = point.sum
                            row["bounds"] = list(point.explicit_bounds)
                            row["buckets"] = list(point.bucket_counts)
                            row["min"], row["max"] = point.min, point.max
                        elif isinstance(point, NumberDataPoint):
                            row["value"] = point.value
                        rows.append(row)
        return rows

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


# -- the orders service -------------------------------------------------------------------


async def take_orders(
    orders: Service, producer: Producer, topic: str, count: int, clients: int, pause_s: float
) -> None:
    """Handle ``count`` order requests from ``clients`` clients at once, each request
    sending its order to ``topic``."""
    async with asyncio.TaskGroup() as requests:
        for first in range(clients):
            requests.create_task(
                client_requests(orders, producer, topic, range(first, count, clients), pause_s)
            )


async def client_requests(
    orders: Service, producer: Producer, topic: str, numbers: range, pause_s: float
) -> None:
    """One client's requests, one after another."""
    for n in numbers:
        customer = f"customer-{n % 7}"
        order = {"id": f"order-{n}", "customer": customer, "amount": 10 + n % 90}
        with orders.tracer.start_as_current_span(
            "POST /orders",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": "/orders"},
        ) as request:
            with orders.tracer.start_as_current_span("validate order"):
                await asyncio.sleep(0.001)  # e.g. a look-up of the customer
            metadata = await producer.send(topic, order, key=customer.encode())
            request.set_attribute("http.response.status_code", 202)
            request.set_attribute("order.offset", metadata.offset)
        await asyncio.sleep(pause_s)


# -- the billing service ------------------------------------------------------------------


class Billing:
    """The handler ``Consumer.process()`` runs for each order: charge, then invoice."""

    def __init__(self, billing: Service, producer: Producer, topic: str, expected: int) -> None:
        self.tracer = billing.tracer
        self.producer = producer
        self.topic = topic
        self.expected = expected
        self.invoiced = 0
        self.all_invoiced = asyncio.Event()

    async def handle(self, record: Record) -> None:
        order = record.value
        number = int(order["id"].rsplit("-", 1)[1])
        # The process span (the client's) is current here: this span is its child.
        with self.tracer.start_as_current_span("charge card") as charge:
            charge.set_attribute("order.id", order["id"])
            await asyncio.sleep(0.02 + 0.01 * (number % 4))  # the payment provider
        # And so is this send span: a child of the process span, in the same trace.
        invoice = {"order": order["id"], "customer": order["customer"], "amount": order["amount"]}
        await self.producer.send(self.topic, invoice, key=record.key)
        self.invoiced += 1
        if self.invoiced >= self.expected:
            self.all_invoiced.set()


# -- the run ------------------------------------------------------------------------------


async def sample_metrics(
    services: Sequence[Service], t0_ns: int, every_s: float, into: list[dict[str, Any]]
) -> None:
    """Sample the metrics of ``services`` every ``every_s`` until cancelled."""
    while True:
        t_s = (time.time_ns() - t0_ns) / 1e9
        for service in services:
            into.extend(service.sample(t_s))
        await asyncio.sleep(every_s)


async def run(args: argparse.Namespace, orders: Service, billing: Service) -> dict[str, Any]:
    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        # A cluster given may have run this before: fresh topic names there.
        suffix = f"-{uuid.uuid4().hex[:8]}" if args.bootstrap_servers else ""
        orders_topic, invoices_topic = f"orders{suffix}", f"invoices{suffix}"
        await ensure_topic(bootstrap_servers, orders_topic, partitions=2)
        await ensure_topic(bootstrap_servers, invoices_topic, partitions=2)
        samples: list[dict[str, Any]] = []
        async with (
            Producer(
                bootstrap_servers, value_serializer=json_serializer(), **orders.options
            ) as orders_producer,
            Producer(
                bootstrap_servers, value_serializer=json_serializer(), **billing.options
            ) as billing_producer,
            Consumer(
                bootstrap_servers,
                group_id=f"billing-{uuid.uuid4().hex[:8]}",
                auto_offset_reset="earliest",
                value_deserializer=json_deserializer(),
                **billing.options,
            ) as consumer,
        ):
            billing_handler = Billing(billing, billing_producer, invoices_topic, args.orders)
            assigned = asyncio.Event()

            async def on_assigned(partitions: object) -> None:
                assigned.set()

            consumer.subscribe([orders_topic], on_assigned=on_assigned)
            processing = asyncio.create_task(
                consumer.process(billing_handler.handle, concurrency=args.concurrency, within_s=0.2)
            )
            async with asyncio.timeout(60):
                await assigned.wait()  # the group's first assignment
            t0_ns = time.time_ns()
            sampler = asyncio.create_task(
                sample_metrics((orders, billing), t0_ns, args.sample_ms / 1000, samples)
            )
            try:
                async with asyncio.timeout(120):
                    await take_orders(
                        orders, orders_producer, orders_topic, args.orders, args.clients,
                        args.pause_ms / 1000,
                    )  # fmt: skip
                    await billing_handler.all_invoiced.wait()
                    await asyncio.sleep(0.3)  # the lag gauge at rest, a commit
            finally:
                sampler.cancel()
                try:
                    await sampler
                except asyncio.CancelledError:
                    if not sampler.cancelled():
                        raise
                await consumer.close()  # process() returns: its handlers have finished
                await processing
        t_end = (time.time_ns() - t0_ns) / 1e9
        for service in (orders, billing):
            samples.extend(service.sample(t_end))
    spans = [*orders.spans.get_finished_spans(), *billing.spans.get_finished_spans()]
    return {
        "t0_ns": t0_ns,
        "topics": {"orders": orders_topic, "invoices": invoices_topic},
        "orders": args.orders,
        "invoiced": billing_handler.invoiced,
        "spans": [span_row(s) for s in sorted(spans, key=lambda s: s.start_time or 0)],
        "metrics": samples,
    }


def span_row(span: ReadableSpan) -> dict[str, Any]:
    """A span as JSON: ids in hex, times in ns since the epoch."""
    context = span.get_span_context()
    assert context is not None
    return {
        "service": span.resource.attributes.get(SERVICE_NAME),
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
    }


def print_trace(spans: list[dict[str, Any]], trace_id: str) -> None:
    """The spans of one trace as a tree, with their start and length in ms."""
    members = [s for s in spans if s["trace_id"] == trace_id]
    t0 = min(s["start_ns"] for s in members)
    children: dict[str | None, list[dict[str, Any]]] = {}
    ids = {s["span_id"] for s in members}
    for s in members:
        children.setdefault(s["parent_id"] if s["parent_id"] in ids else None, []).append(s)
    print(f"trace {trace_id}")

    def show(parent: str | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s["start_ns"]):
            label = "  " * depth + s["name"]
            start_ms = (s["start_ns"] - t0) / 1e6
            length_ms = (s["end_ns"] - s["start_ns"]) / 1e6
            print(
                f"  {label:<34} {s['kind']:<9} {s['service']:<8} "
                f"+{start_ms:7.1f} ms {length_ms:7.1f} ms"
            )
            show(s["span_id"], depth + 1)

    show(None, 0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--orders", type=int, default=40, help="orders to take")
    parser.add_argument("--clients", type=int, default=4, help="clients sending orders at once")
    parser.add_argument("--pause-ms", type=float, default=5, help="between a client's orders")
    parser.add_argument("--concurrency", type=int, default=2, help="billing's handlers at once")
    parser.add_argument("--sample-ms", type=float, default=50, help="metric sampling period")
    parser.add_argument("--traces", type=int, default=2, help="traces to print as trees")
    parser.add_argument("--console", action="store_true", help="also ConsoleSpanExporter")
    parser.add_argument("--export", type=Path, help="write the spans and metrics as JSON")
    args = parser.parse_args()

    orders, billing = Service("orders", args.console), Service("billing", args.console)
    try:
        result = asyncio.run(run(args, orders, billing))
    finally:
        orders.shutdown()
        billing.shutdown()
    spans = result["spans"]
    requests = [s for s in spans if s["name"] == "POST /orders"]
    for request in requests[: args.traces]:
        print_trace(spans, request["trace_id"])
    by_name: dict[str, int] = {}
    for s in spans:
        by_name[f"{s['service']}: {s['name']}"] = by_name.get(f"{s['service']}: {s['name']}", 0) + 1
    print("spans: " + ", ".join(f"{name} x{n}" for name, n in sorted(by_name.items())))
    print(f"took {result['orders']} orders, sent {result['invoiced']} invoices")
    if args.export:
        args.export.write_text(json.dumps(result, indent=1))
        points = len(result["metrics"])
        print(f"wrote {len(spans)} spans and {points} metric points to {args.export}")
    return 0 if result["invoiced"] == result["orders"] else 1


if __name__ == "__main__":
    sys.exit(main())
