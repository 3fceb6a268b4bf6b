"""FastAPI integration: the supervisor of :mod:`aiostream_kafka.supervisor` on a FastAPI app.

::

    from fastapi import Depends, FastAPI
    from aiostream_kafka import Consumer, Producer, ShareRecord
    from aiostream_kafka.fastapi import KafkaIntegration

    kafka = KafkaIntegration(bootstrap_servers="127.0.0.1:9092")

    @kafka.consumer(["orders"], group_id="orders-view")
    async def keep_view(consumer: Consumer) -> None:
        async for record in consumer.committing(consumer.stream()):
            ...

    @kafka.share_consumer(["jobs"], group_id="workers", concurrency=8, max_failures=3)
    async def work(record: ShareRecord) -> None:   # returns: accepted; raises: released
        ...

    app = FastAPI(lifespan=kafka.lifespan)
    app.include_router(kafka.health_router())  # GET /health/live, /health/ready

    @app.post("/orders", status_code=202)
    async def create(body: Order, producer: Producer = Depends(kafka.producer)) -> dict[str, int]:
        meta = await producer.send("orders", body.model_dump_json().encode())
        return {"partition": meta.partition, "offset": meta.offset}

:class:`KafkaIntegration` is a :class:`~aiostream_kafka.supervisor.KafkaSupervisor` (which
needs no framework) with what FastAPI needs on top: the lifespan, the producer as a
dependency (503 when not running) and the health router.

Startup: the producer starts, then each consumer starts, subscribes and gets its handler
run in a background task that the integration owns. A handler that raises is logged with
its traceback, its consumer is closed (leaving the group, so other replicas take its
partitions) and both health endpoints answer 503 naming it; it is not restarted. A share
consumer (``@kafka.share_consumer``) starts, subscribes and runs its record handler
through :meth:`ShareConsumer.process` the same way, and fails the same way.

Shutdown, in order: stop handing out the producer (the dependency answers 503) and report
not ready → drain every consumer (:meth:`Consumer.drain`: what is fetched is handed out
and committed, the group is left, the handler's iterators end) and await its handler
(cancelled after ``handler_grace_s`` if it does not return); close every share consumer
(no more records handed out, the running handlers get ``handler_grace_s``, then are
cancelled; what is not finished is released) → flush and close the producer
(``producer_close_timeout_s``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Collection
from contextlib import AbstractAsyncContextManager
from typing import Any

try:
    from fastapi import APIRouter, HTTPException
    from fastapi.responses import JSONResponse
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "aiostream_kafka.fastapi needs FastAPI: pip install 'aiostream-kafka[fastapi]'"
    ) from exc

from aiostream_kafka.producer import Producer
from aiostream_kafka.supervisor import (
    ConsumerHandler,
    ConsumerStatus,
    HealthReport,
    KafkaSupervisor,
    RecordHandler,
    ShareRecordHandler,
)

__all__ = [
    "ConsumerHandler",
    "ConsumerStatus",
    "HealthReport",
    "KafkaIntegration",
    "RecordHandler",
    "ShareRecordHandler",
]


class KafkaIntegration(KafkaSupervisor):
    """One :class:`Producer` and any number of supervised consumers for a FastAPI app: a
    :class:`~aiostream_kafka.supervisor.KafkaSupervisor` (same arguments, same lifecycle)
    with FastAPI's lifespan, dependency and health router."""

    label = "Kafka integration"
    log = logging.getLogger(__name__)

    def lifespan(self, app: Any) -> AbstractAsyncContextManager[None]:
        """The app's lifespan: ``FastAPI(lifespan=kafka.lifespan)``. See :meth:`run`."""
        return self._lifespan(app)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Any) -> AsyncIterator[None]:
        async with self.run(app):
            yield

    # -- dependencies --------------------------------------------------------------------

    async def producer(self) -> Producer:
        """The FastAPI dependency giving the running producer:
        ``producer: Producer = Depends(kafka.producer)``.

        Returns:
            the shared :class:`Producer` (do not close it).

        Raises:
            HTTPException: 503 before startup completed and once shutdown began.
        """
        try:
            return self.get_producer()
        except RuntimeError as exc:
            raise HTTPException(
                status_code=503, detail=str(exc), headers={"Retry-After": "1"}
            ) from None

    # -- health --------------------------------------------------------------------------

    def health_router(
        self, prefix: str = "/health", tags: Collection[str] = ("health",)
    ) -> APIRouter:
        """An :class:`~fastapi.APIRouter` with ``GET {prefix}/live`` and
        ``GET {prefix}/ready``: 200 with ``{"status": "ok", ...}`` when healthy, 503 with
        ``{"status": "unavailable", "reasons": [...], ...}`` otherwise (see
        :meth:`liveness`, :meth:`readiness`). Include it with ``app.include_router``.

        Returns:
            the router.
        """
        router = APIRouter(prefix=prefix, tags=list(tags))
        responses: dict[int | str, dict[str, Any]] = {
            503: {"description": "unhealthy; the body lists the reasons"}
        }

        @router.get("/live", responses=responses, summary="Liveness of the Kafka clients")
        async def live() -> JSONResponse:
            return _respond(self.liveness())

        @router.get("/ready", responses=responses, summary="Readiness of the Kafka clients")
        async def ready() -> JSONResponse:
            return _respond(self.readiness())

        return router


def _respond(report: HealthReport) -> JSONResponse:
    return JSONResponse(report.as_dict(), status_code=200 if report.ok else 503)
