"""A framework-free supervisor: one producer and supervised consumers tied to an app's life.

Usable from any asyncio app (FastAPI through :mod:`aiostream_kafka.fastapi`, Starlette,
aiohttp, a plain ``asyncio.run``)::

    from aiostream_kafka import Consumer
    from aiostream_kafka.supervisor import KafkaSupervisor

    kafka = KafkaSupervisor(bootstrap_servers="127.0.0.1:9092")

    @kafka.consumer(["orders"], group_id="orders-view")
    async def keep_view(consumer: Consumer) -> None:
        async for record in consumer.committing(consumer.stream()):
            ...

    async def main() -> None:
        async with kafka.run():                  # aiohttp: in a cleanup_ctx
            producer = kafka.get_producer()
            ...                                  # serve; kafka.readiness() for probes

Startup: the producer starts, then each consumer starts, subscribes and gets its handler
run in a background task that the supervisor owns. A handler that raises is logged with
its traceback, its consumer is closed (leaving the group, so other replicas take its
partitions) and :meth:`KafkaSupervisor.liveness` / :meth:`KafkaSupervisor.readiness` fail
naming it; it is not restarted.

Shutdown, in order: stop handing out the producer and report not ready → drain every
consumer (:meth:`Consumer.drain`: what is fetched is handed out and committed, the group
is left, the handler's iterators end) and await its handler (cancelled after
``handler_grace_s`` if it does not return) → flush and close the producer
(``producer_close_timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Self, Unpack

from aiostream_kafka.concurrency import Crash, TaskScope, gather_all, stop_tasks
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.options import ClientOptions, ConsumerOptions, ProducerOptions
from aiostream_kafka.producer import Producer
from aiostream_kafka.structs import Record

__all__ = [
    "ConsumerHandler",
    "ConsumerStatus",
    "HealthReport",
    "KafkaSupervisor",
    "RecordHandler",
]

log = logging.getLogger(__name__)

ConsumerHandler = Callable[[Consumer], Awaitable[None]]
"""A consumer handler: gets the started, subscribed :class:`Consumer` and iterates it."""

RecordHandler = Callable[[Record], Awaitable[None]]
"""A record handler: awaited once per record, in order."""


@dataclass(frozen=True, slots=True)
class ConsumerStatus:
    """One supervised consumer as the health endpoints report it.

    ``state`` is the consumer's :class:`~aiostream_kafka.consumer.group.ConsumerHealth`
    state (``"stable"``, ``"rebalancing"``, ``"unjoined"``, ``"assigned"``, ``"fenced"``,
    ``"failed"``, ``"closed"``) or ``"not started"``; ``running`` tells whether its handler
    task is alive; ``error`` is why it is unhealthy (None when healthy).
    """

    name: str
    state: str
    running: bool
    healthy: bool
    error: str | None
    partitions: int
    last_heartbeat_age_s: float | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields."""
        return {
            "name": self.name,
            "state": self.state,
            "running": self.running,
            "healthy": self.healthy,
            "error": self.error,
            "partitions": self.partitions,
            "last_heartbeat_age_s": self.last_heartbeat_age_s,
        }


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The answer of a probe: ``ok`` (no ``reasons``), the reasons otherwise, and the
    status of every consumer."""

    ok: bool
    state: str
    reasons: tuple[str, ...]
    consumers: tuple[ConsumerStatus, ...]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``status`` (``"ok"`` or ``"unavailable"``), ``state``,
        ``reasons`` and ``consumers``."""
        return {
            "status": "ok" if self.ok else "unavailable",
            "state": self.state,
            "reasons": list(self.reasons),
            "consumers": [c.as_dict() for c in self.consumers],
        }


@dataclass(frozen=True, slots=True)
class _ConsumerSpec:
    name: str
    topics: tuple[str, ...]
    pattern: str | None
    group_id: str | None
    options: Mapping[str, Any]
    handler: ConsumerHandler


@dataclass(slots=True)
class _RunningConsumer:
    """A started consumer and the task running its handler (owned by the supervisor)."""

    spec: _ConsumerSpec
    consumer: Consumer
    supervisor: KafkaSupervisor
    task: asyncio.Task[None] | None = None
    failure: BaseException | None = None
    returned: bool = False

    def start(self) -> None:
        # _supervise handles the handler's crash itself (recorded, reported as 503, not
        # restarted): the task only ends with CancelledError or nothing.
        self.task = self.supervisor._scope.spawn(
            self._supervise(),
            name=f"aiostream-kafka consumer {self.spec.name}",
            crash=Crash.AWAITED,
        )

    async def _supervise(self) -> None:
        name = self.spec.name
        try:
            await self.spec.handler(self.consumer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = exc
            self.supervisor.log.error(
                "consumer %r: handler crashed; it is not restarted and the health "
                "endpoints now answer 503",
                name,
                exc_info=exc,
            )
            try:
                await self.consumer.close()  # leave the group: the partitions move on
            except Exception as close_exc:
                self.supervisor.log.warning(
                    "consumer %r: close after the crash failed: %r", name, close_exc
                )
        else:
            self.returned = True
            if self.supervisor.state in ("starting", "running"):
                self.supervisor.log.warning(
                    "consumer %r: handler returned while the app runs; the health endpoints "
                    "now answer 503",
                    name,
                )

    def status(self, now: float) -> ConsumerStatus:
        task = self.task
        running = task is not None and not task.done() and self.failure is None
        health = self.consumer.health() if task is not None else None
        error: str | None = None
        if self.failure is not None:
            error = f"handler crashed: {self.failure!r}"
        elif task is not None and task.done():
            error = "handler cancelled" if task.cancelled() else "handler returned"
        elif health is not None and not health.healthy:
            error = f"consumer {health.state}" + (
                f": {health.error!r}" if health.error is not None else f": {health.reason}"
            )
        heartbeat = health.last_heartbeat_at if health is not None else None
        return ConsumerStatus(
            name=self.spec.name,
            state=health.state if health is not None else "not started",
            running=running,
            healthy=error is None,
            error=error,
            partitions=len(health.assignment) if health is not None else 0,
            last_heartbeat_age_s=None if heartbeat is None else round(now - heartbeat, 3),
        )

    async def stop(self, drain_timeout_s: float, grace_s: float) -> None:
        """Drain the consumer and await the handler (cancelling it after ``grace_s``).
        Logs failures; raises only ``CancelledError``."""
        name = self.spec.name
        task = self.task
        try:
            if task is not None and not task.done():
                try:
                    await self.consumer.drain(timeout=drain_timeout_s)
                except Exception as exc:
                    self.supervisor.log.warning("consumer %r: drain failed: %r", name, exc)
                # The drain closed the consumer, so the handler's iterators have ended.
                done, _ = await asyncio.wait({task}, timeout=grace_s)
                if not done:
                    self.supervisor.log.warning(
                        "consumer %r: handler still running %.1f s after the drain; cancelling it",
                        name,
                        grace_s,
                    )
        finally:
            if task is not None:
                await stop_tasks([task])  # cancels it if still running, and awaits it
            try:
                await self.consumer.close()  # idempotent
            except Exception as exc:
                self.supervisor.log.warning("consumer %r: close failed: %r", name, exc)


class KafkaSupervisor:
    """One :class:`Producer` and any number of supervised consumers, for any asyncio app.

    Args:
        bootstrap_servers: the Kafka cluster, as for :class:`Producer`.
        client_options: options every client gets, producer and consumers alike: how to
            reach the cluster (``security_protocol``, ``ssl_cafile``, ``sasl_mechanism``,
            ``sasl_plain_username``, ``sasl_plain_password``,
            ``sasl_oauth_token_provider``...), ``client_id``, timeouts. The producer's and
            the consumers' own options override them.
        producer_options: keyword options of :class:`Producer` (``acks``, ``linger_ms``,
            ``value_serializer``...).
        consumer_options: keyword options of :class:`Consumer` shared by every consumer
            (each consumer's own options override them).

        The three mappings are typed (:class:`~aiostream_kafka.options.ClientOptions`,
        :class:`~aiostream_kafka.options.ProducerOptions`,
        :class:`~aiostream_kafka.options.ConsumerOptions`, generated from the config
        classes), so a type checker flags a misspelled key; at run time an unknown key
        raises ``ConfigError`` naming the closest option, as the clients do.
        drain_timeout_s: how long each consumer's drain may hand out fetched records on
            shutdown.
        handler_grace_s: how long a handler may take to return after its consumer was
            drained, before it is cancelled.
        producer_close_timeout_s: how long closing the producer may take to deliver what
            is buffered; records not acknowledged by then fail with
            :class:`~aiostream_kafka.ProducerClosedError`.

    Raises:
        ConfigError: an invalid or unknown producer option (checked here, before any I/O).
    """

    #: How log lines and health reasons name it.
    label = "Kafka supervisor"
    #: Where it logs (the FastAPI integration logs as ``aiostream_kafka.fastapi``).
    log = log

    def __init__(
        self,
        bootstrap_servers: str | Collection[str],
        *,
        client_options: ClientOptions | None = None,
        producer_options: ProducerOptions | None = None,
        consumer_options: ConsumerOptions | None = None,
        drain_timeout_s: float = 30.0,
        handler_grace_s: float = 10.0,
        producer_close_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = (
            bootstrap_servers if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
        )
        common = dict(client_options or {})
        self.producer_options: dict[str, Any] = {**common, **(producer_options or {})}
        self.consumer_options: dict[str, Any] = {**common, **(consumer_options or {})}
        self.drain_timeout_s = drain_timeout_s
        self.handler_grace_s = handler_grace_s
        self.producer_close_timeout_s = producer_close_timeout_s
        # Validate the options now.
        Producer(bootstrap_servers=self.bootstrap_servers, **self.producer_options)
        self._specs: list[_ConsumerSpec] = []
        self._state = "new"
        self._producer: Producer | None = None
        self._accepting = False
        self._running: list[_RunningConsumer] = []
        # The handlers' tasks (one per consumer), from startup to shutdown.
        self._scope = TaskScope(self.label)

    # -- declaring consumers -------------------------------------------------------------

    def consumer(
        self,
        topics: Collection[str] = (),
        *,
        group_id: str | None = None,
        pattern: str | None = None,
        name: str | None = None,
        **options: Unpack[ConsumerOptions],
    ) -> Callable[[ConsumerHandler], ConsumerHandler]:
        """Decorate ``async def handler(consumer: Consumer) -> None`` to run it, for the
        app's lifetime, with a started :class:`Consumer` of its own.

        With ``topics`` or ``pattern`` the consumer has subscribed (``group_id`` needed)
        before the handler starts; with neither, the handler assigns or subscribes itself.
        The handler iterates the consumer (``stream()``, ``batches()``,
        ``partitioned_stream()``, ``committing(...)``) until the iterators end on shutdown.
        ``options`` are further :class:`Consumer` options. Returns the handler unchanged.

        Raises:
            ConfigError: topics or a pattern without a ``group_id``, both topics and a
                pattern, a name already taken, or an invalid consumer option.
            RuntimeError: the integration has already started.
        """
        topic_list = (topics,) if isinstance(topics, str) else tuple(topics)
        if (topic_list or pattern is not None) and group_id is None:
            raise ConfigError("subscribing to topics or a pattern needs a group_id")
        if topic_list and pattern is not None:
            raise ConfigError("give topics or a pattern, not both")
        merged: dict[str, Any] = {**self.consumer_options, **options}
        Consumer(bootstrap_servers=self.bootstrap_servers, group_id=group_id, **merged)  # validate

        def decorate(handler: ConsumerHandler) -> ConsumerHandler:
            self._add(
                _ConsumerSpec(
                    name=name or str(getattr(handler, "__name__", "consumer")),
                    topics=topic_list,
                    pattern=pattern,
                    group_id=group_id,
                    options=merged,
                    handler=handler,
                )
            )
            return handler

        return decorate

    def record_consumer(
        self,
        topics: Collection[str],
        *,
        group_id: str,
        commit_every: int = 1000,
        commit_within_s: float = 5.0,
        name: str | None = None,
        **options: Unpack[ConsumerOptions],
    ) -> Callable[[RecordHandler], RecordHandler]:
        """Decorate ``async def handler(record: Record) -> None`` to call it for every
        record of ``topics`` in the consumer group ``group_id``, one at a time.

        Progress is committed in the background every ``commit_every`` records or
        ``commit_within_s`` seconds (:meth:`Consumer.committing`): a record counts as
        processed once its handler returned (at-least-once). A handler that raises stops
        this consumer (see the module docs). Returns the handler unchanged.

        Raises:
            ConfigError: as for :meth:`consumer`, or non-positive commit settings.
            RuntimeError: the integration has already started.
        """
        if commit_every <= 0 or commit_within_s <= 0:
            raise ConfigError("commit_every and commit_within_s must be positive")

        def decorate(handler: RecordHandler) -> RecordHandler:
            async def run(consumer: Consumer) -> None:
                records: AsyncIterable[Record] = consumer.committing(
                    consumer.stream(), every=commit_every, within_s=commit_within_s
                )
                async for record in records:
                    await handler(record)

            label = name or str(getattr(handler, "__name__", "consumer"))
            self.consumer(topics, group_id=group_id, name=label, **options)(run)
            return handler

        return decorate

    def _add(self, spec: _ConsumerSpec) -> None:
        if self._state not in ("new", "stopped"):
            raise RuntimeError("consumers must be declared before the app starts")
        if any(s.name == spec.name for s in self._specs):
            raise ConfigError(f"a consumer named {spec.name!r} exists already; pass name=...")
        self._specs.append(spec)

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``"new"``, ``"starting"``, ``"running"``, ``"stopping"`` or ``"stopped"``."""
        return self._state

    @contextlib.asynccontextmanager
    async def run(self, app: Any = None) -> AsyncIterator[Self]:
        """Start the producer and the consumers; on exit shut them down in order (see the
        module docs). For composing with other lifespans::

            @contextlib.asynccontextmanager
            async def lifespan(app: FastAPI) -> AsyncIterator[None]:
                async with kafka.run(app), database.connect():
                    yield

        Yields the supervisor. ``app`` is not used (it is there for symmetry with a
        lifespan). The supervisor can run again after it stopped.

        Raises:
            RuntimeError: it is running already.
            KafkaTimeoutError: the cluster did not answer within the clients'
                ``default_api_timeout_ms`` (whatever started is shut down first).
            ConfigError: an invalid subscription.
        """
        if self._state not in ("new", "stopped"):
            raise RuntimeError(f"the {self.label} is {self._state} already")
        await self._startup()
        try:
            yield self
        finally:
            await self._shutdown()

    async def _startup(self) -> None:
        self._state = "starting"
        self._running = []
        self._scope = TaskScope(self.label)
        producer = Producer(bootstrap_servers=self.bootstrap_servers, **self.producer_options)
        self._producer = producer
        try:
            await producer.start()
            self._accepting = True
            for spec in self._specs:
                consumer = Consumer(
                    bootstrap_servers=self.bootstrap_servers, group_id=spec.group_id, **spec.options
                )
                running = _RunningConsumer(spec, consumer, self)
                self._running.append(running)  # from now on the shutdown closes it
                await consumer.start()
                if spec.topics:
                    consumer.subscribe(spec.topics)
                elif spec.pattern is not None:
                    consumer.subscribe(pattern=spec.pattern)
                running.start()
        except BaseException:
            self.log.error("the %s failed to start; shutting down what started", self.label)
            await self._shutdown()
            raise
        self._state = "running"
        self.log.info(
            "%s running: producer and %d consumer(s) on %s",
            self.label,
            len(self._running),
            self.bootstrap_servers,
        )

    async def _shutdown(self) -> None:
        self._state = "stopping"
        self._accepting = False
        try:
            await gather_all(
                *(r.stop(self.drain_timeout_s, self.handler_grace_s) for r in self._running)
            )
        finally:
            await self._scope.aclose()
            producer = self._producer
            try:
                if producer is not None:
                    await producer.close(timeout=self.producer_close_timeout_s)
            finally:
                self._state = "stopped"
                self.log.info("%s stopped", self.label)

    # -- dependencies --------------------------------------------------------------------

    def get_producer(self) -> Producer:
        """The running producer, outside of a request (e.g. in a consumer handler).

        Raises:
            RuntimeError: not started, or shutting down.
        """
        producer = self._producer
        if not self._accepting or producer is None or producer.closed:
            raise RuntimeError(f"the Kafka producer is not available ({self.label} {self._state})")
        return producer

    def get_consumer(self, name: str) -> Consumer:
        """The consumer of the handler ``name`` in the current (or last) run.

        Raises:
            KeyError: no consumer of that name has started.
        """
        for running in self._running:
            if running.spec.name == name:
                return running.consumer
        raise KeyError(name)

    # -- health --------------------------------------------------------------------------

    def _consumer_statuses(self) -> tuple[ConsumerStatus, ...]:
        now = time.time()
        return tuple(r.status(now) for r in self._running)

    def liveness(self) -> HealthReport:
        """Liveness: fails (``ok`` False) when a consumer's handler crashed or returned, or
        a consumer is fenced or failed, while the app runs. A restart would help then.

        Returns:
            a :class:`HealthReport`.
        """
        statuses = self._consumer_statuses()
        reasons: list[str] = []
        if self._state in ("starting", "running"):
            reasons = [f"consumer {s.name!r}: {s.error}" for s in statuses if s.error is not None]
        return HealthReport(not reasons, self._state, tuple(reasons), statuses)

    def readiness(self) -> HealthReport:
        """Readiness: as :meth:`liveness`, and fails too before startup completed, once
        shutdown began, or when the producer is closed or stopped on an error.

        Returns:
            a :class:`HealthReport`.
        """
        live = self.liveness()
        reasons = list(live.reasons)
        if self._state != "running":
            reasons.insert(0, f"{self.label} is {self._state}")
        elif self._producer is None or self._producer.closed:
            reasons.insert(0, "the producer is closed")
        elif self._producer.error is not None:
            reasons.insert(0, f"the producer stopped: {self._producer.error!r}")
        return HealthReport(not reasons, self._state, tuple(reasons), live.consumers)
