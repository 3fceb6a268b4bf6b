"""A FastAPI service on Kafka: accept orders over HTTP, serve a view built by a consumer.

* ``POST /orders`` writes the order to Kafka and answers 202 with the record's topic,
  partition and offset -- only after the broker acknowledged it, so a 202 means the
  order is durably in Kafka (acks="all").
* A consumer reads the topic into an in-memory view: ``GET /orders/{id}``,
  ``GET /orders`` (a count).
* ``GET /health/live`` and ``GET /health/ready``: 200, or 503 with the reasons.

    python examples/fastapi_app.py                              # embedded broker, port 8000
    python examples/fastapi_app.py --bootstrap-servers 127.0.0.1:9092 --port 8080
    curl -X POST localhost:8000/orders -H 'content-type: application/json' \
        -d '{"id": "o-1", "item": "book", "quantity": 2}'
    curl localhost:8000/orders/o-1

``create_app(bootstrap_servers, topic)`` builds the app without running it (for tests,
or ``uvicorn --factory``).
"""

import argparse
import asyncio
import logging
import uuid
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel, Field

from aiostream_kafka import KafkaError, Producer, Record
from aiostream_kafka.fastapi import KafkaIntegration
from aiostream_kafka.serde import json_deserializer


class Order(BaseModel):
    id: str = Field(min_length=1, max_length=100)
    item: str
    quantity: int = Field(gt=0)


class Accepted(BaseModel):
    id: str
    topic: str
    partition: int
    offset: int


def create_app(
    bootstrap_servers: str, topic: str = "orders", *, group_id: str | None = None
) -> FastAPI:
    """Build the app. The view's consumer group is new for every app instance by default:
    an in-memory view must be rebuilt from the start of the topic on every start."""
    kafka = KafkaIntegration(
        bootstrap_servers, producer_options={"linger_ms": 5}, producer_close_timeout_s=30
    )
    view: dict[str, dict[str, Any]] = {}

    @kafka.record_consumer(
        [topic],
        group_id=group_id or f"orders-view-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        value_deserializer=json_deserializer(),
    )
    async def apply_order(record: Record) -> None:
        order = record.value
        view[order["id"]] = order

    app = FastAPI(title="orders", lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())
    app.state.kafka = kafka
    app.state.view = view

    @app.post("/orders", status_code=202)
    async def create_order(
        order: Order, producer: Annotated[Producer, Depends(kafka.producer)]
    ) -> Accepted:
        value, key = order.model_dump_json().encode(), order.id.encode()
        try:
            meta = await producer.send(topic, value, key=key)
        except KafkaError as exc:  # not acknowledged (timeout, shutting down...): retry later
            raise HTTPException(503, f"order not accepted: {exc}", {"Retry-After": "1"}) from exc
        return Accepted(id=order.id, topic=meta.topic, partition=meta.partition, offset=meta.offset)

    @app.get("/orders/{order_id}")
    async def get_order(order_id: str) -> dict[str, Any]:
        if order_id not in view:
            raise HTTPException(404, f"no order {order_id!r} (yet)")
        return view[order_id]

    @app.get("/orders")
    async def count_orders() -> dict[str, int]:
        return {"count": len(view)}

    return app


async def main() -> None:
    from _local_kafka import ensure_topic, kafka

    parser = argparse.ArgumentParser(description="Orders over HTTP, through Kafka.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        await ensure_topic(bootstrap_servers, args.topic, partitions=3)
        app = create_app(bootstrap_servers, args.topic)
        server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port))
        await server.serve()  # until Ctrl-C / SIGTERM; then the lifespan shuts Kafka down
        print("server stopped", flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled
        pass
