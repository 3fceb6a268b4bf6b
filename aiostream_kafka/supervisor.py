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
naming it; it is not restarted. A share consumer (:meth:`KafkaSupervisor.share_consumer`:
a share group's records, each handled by a record handler through
:meth:`ShareConsumer.process`) is started, subscribed, run and failed the same way.

Shutdown, in order: stop handing out the producer and report not ready → drain every
consumer (:meth:`Consumer.drain`: what is fetched is handed out and committed, the group
is left, the handler's iterators end) and await its handler (cancelled after
``handler_grace_s`` if it does not return); close every share consumer (no more records
handed out; the running handlers get ``handler_grace_s`` to finish, then are cancelled;
every record acquired and not finished is released) → flush and close the producer
(``producer_close_timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Self, Unpack, cast

from aiostream_kafka import _args
from aiostream_kafka.concurrency import Crash, TaskScope, gather_all, gather_settled, stop_tasks
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.options import ClientOptions, ConsumerOptions, ProducerOptions
from aiostream_kafka.producer import Producer
from aiostream_kafka.share import ShareConsumer
from aiostream_kafka.structs import Record, ShareRecord

__all__ = [
    "ConsumerHandler",
    "ConsumerStatus",
    "HealthReport",
    "KafkaSupervisor",
    "RecordHandler",
    "ShareRecordHandler",
]

log = logging.getLogger(__name__)

ConsumerHandler = Callable[[Consumer], Awaitable[None]]
"""A consumer handler: gets the started, subscribed :class:`Consumer` and iterates it."""

RecordHandler = Callable[[Record], Awaitable[None]]
"""A record handler: awaited once per record, in order."""

ShareRecordHandler = Callable[[ShareRecord], Awaitable[object]]
"""A share-group record handler: awaited once per record handed out, several at once
(``concurrency``); returning accepts the record, raising releases (or rejects) it."""


@dataclass(frozen=True, slots=True)
class ConsumerStatus:
    """One supervised consumer as the health endpoints report it.

    ``kind`` is ``"consumer"`` (a :class:`Consumer`) or ``"share consumer"`` (a
    :class:`~aiostream_kafka.ShareConsumer`). ``state`` is the consumer's
    :class:`~aiostream_kafka.consumer.group.ConsumerHealth` state (``"stable"``,
    ``"rebalancing"``, ``"unjoined"``, ``"assigned"``, ``"fenced"``, ``"failed"``,
    ``"closed"``), a share consumer's ``"running"`` or ``"closed"``, or ``"not started"``;
    ``running`` tells whether its handler task is alive; ``error`` is why it is unhealthy
    (None when healthy); ``partitions`` how many partitions it is assigned (a share
    consumer's are shared with the other members); ``last_heartbeat_age_s`` is None for a
    share consumer.
    """

    name: str
    state: str
    running: bool
    healthy: bool
    error: str | None
    partitions: int
    last_heartbeat_age_s: float | None
    kind: str = "consumer"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields."""
        return {
            "name": self.name,
            "kind": self.kind,
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


@dataclass(frozen=True, slots=True)
class _ShareConsumerSpec:
    name: str
    topics: tuple[str, ...]
    group_id: str
    concurrency: int
    max_failures: int | None
    options: Mapping[str, Any]
    handler: ShareRecordHandler


class _Supervised:
    """A started client and the task running its handler (owned by the supervisor): what
    every kind of supervised consumer shares (the crash policy, the status, the stop).
    A kind says how its handler runs (:meth:`_work`), how healthy its client is
    (:meth:`_health`) and how it winds down (:meth:`_wind_down`)."""

    kind = "consumer"

    def __init__(self, name: str, supervisor: KafkaSupervisor) -> None:
        self.name = name
        self.supervisor = supervisor
        self.task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None
        self.returned = False

    # -- what each kind defines --------------------------------------------------------

    async def _work(self) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    def _health(self) -> tuple[str, str | None, int, float | None]:
        """(state, why unhealthy or None, partitions, last heartbeat time or None)."""
        raise NotImplementedError

    async def _wind_down(
        self, task: asyncio.Task[None], drain_timeout_s: float, grace_s: float
    ) -> None:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------

    def start(self) -> None:
        # _supervise handles the handler's crash itself (recorded, reported as 503, not
        # restarted): the task only ends with CancelledError or nothing.
        self.task = self.supervisor._scope.spawn(
            self._supervise(),
            name=f"aiostream-kafka {self.kind} {self.name}",
            crash=Crash.AWAITED,
        )

    async def _supervise(self) -> None:
        name = self.name
        try:
            await self._work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failure = exc
            self.supervisor.log.error(
                "%s %r: handler crashed; it is not restarted and the health "
                "endpoints now answer 503",
                self.kind,
                name,
                exc_info=exc,
            )
            try:
                await self._close()  # leave the group: the partitions move on
            except Exception as close_exc:
                self.supervisor.log.warning(
                    "%s %r: close after the crash failed: %r", self.kind, name, close_exc
                )
        else:
            self.returned = True
            if self.supervisor.state in ("starting", "running"):
                self.supervisor.log.warning(
                    "%s %r: handler returned while the app runs; the health endpoints "
                    "now answer 503",
                    self.kind,
                    name,
                )

    def status(self, now: float) -> ConsumerStatus:
        task = self.task
        running = task is not None and not task.done() and self.failure is None
        if task is None:
            state, unhealthy, partitions, heartbeat = "not started", None, 0, None
        else:
            state, unhealthy, partitions, heartbeat = self._health()
        error: str | None = None
        if self.failure is not None:
            error = f"handler crashed: {self.failure!r}"
        elif task is not None and task.done():
            error = "handler cancelled" if task.cancelled() else "handler returned"
        elif unhealthy is not None:
            error = unhealthy
        return ConsumerStatus(
            name=self.name,
            state=state,
            running=running,
            healthy=error is None,
            error=error,
            partitions=partitions,
            last_heartbeat_age_s=None if heartbeat is None else round(now - heartbeat, 3),
            kind=self.kind,
        )

    async def stop(self, drain_timeout_s: float, grace_s: float) -> None:
        """Wind the client down (its kind's way) and await the handler (cancelling it
        after ``grace_s``). Logs failures; raises only ``CancelledError``."""
        task = self.task
        try:
            if task is not None and not task.done():
                await self._wind_down(task, drain_timeout_s, grace_s)
        finally:
            if task is not None:
                await stop_tasks([task])  # cancels it if still running, and awaits it
            try:
                await self._close()  # idempotent
            except Exception as exc:
                self.supervisor.log.warning("%s %r: close failed: %r", self.kind, self.name, exc)

    async def _await_handler(self, task: asyncio.Task[None], grace_s: float, after: str) -> None:
        """Wait up to ``grace_s`` for the handler's task; cancel it (and wait) after that."""
        done, _ = await asyncio.wait({task}, timeout=grace_s)
        if not done:
            self.supervisor.log.warning(
                "%s %r: handler still running %.1f s after the %s; cancelling it",
                self.kind,
                self.name,
                grace_s,
                after,
            )
            await stop_tasks([task])


class _RunningConsumer(_Supervised):
    """A started :class:`Consumer` and its handler."""

    def __init__(
        self, spec: _ConsumerSpec, consumer: Consumer, supervisor: KafkaSupervisor
    ) -> None:
        super().__init__(spec.name, supervisor)
        self.spec = spec
        self.consumer = consumer

    async def _work(self) -> None:
        await self.spec.handler(self.consumer)

    async def _close(self) -> None:
        await self.consumer.close()

    def _health(self) -> tuple[str, str | None, int, float | None]:
        health = self.consumer.health()
        unhealthy: str | None = None
        if not health.healthy:
            unhealthy = f"consumer {health.state}" + (
                f": {health.error!r}" if health.error is not None else f": {health.reason}"
            )
        return health.state, unhealthy, len(health.assignment), health.last_heartbeat_at

    async def _wind_down(
        self, task: asyncio.Task[None], drain_timeout_s: float, grace_s: float
    ) -> None:
        try:
            await self.consumer.drain(timeout=drain_timeout_s)
        except Exception as exc:
            self.supervisor.log.warning("consumer %r: drain failed: %r", self.name, exc)
        # The drain closed the consumer, so the handler's iterators have ended.
        await self._await_handler(task, grace_s, "drain")


class _RunningShareConsumer(_Supervised):
    """A started :class:`ShareConsumer` whose handler runs through
    :meth:`ShareConsumer.process`."""

    kind = "share consumer"

    def __init__(
        self, spec: _ShareConsumerSpec, consumer: ShareConsumer, supervisor: KafkaSupervisor
    ) -> None:
        super().__init__(spec.name, supervisor)
        self.spec = spec
        self.consumer = consumer
        self.closing = False

    async def _work(self) -> None:
        spec = self.spec
        await self.consumer.process(
            spec.handler, concurrency=spec.concurrency, max_failures=spec.max_failures
        )

    async def _close(self) -> None:
        self.closing = True
        await self.consumer.close()

    def _health(self) -> tuple[str, str | None, int, float | None]:
        task = self.task
        if self.closing or self.failure is not None or (task is not None and task.done()):
            state = "closed"
        else:
            state = "running"
        return state, None, len(self.consumer.assignment), None

    async def _wind_down(
        self, task: asyncio.Task[None], drain_timeout_s: float, grace_s: float
    ) -> None:
        # close() stops handing out records (process() then waits for the handlers
        # running), waits for those handlers, then releases what was acquired and not
        # finished and leaves the group. Handlers still running after ``grace_s`` are
        # cancelled: their records are released too, within the same close.
        self.closing = True
        outcomes = await gather_settled(
            self.consumer.close(timeout=drain_timeout_s + grace_s),
            self._await_handler(task, grace_s, "close began"),
        )
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                self.supervisor.log.warning(
                    "share consumer %r: close failed: %r", self.name, outcome
                )


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
        self._client_options: dict[str, Any] = common  # what share consumers get
        self.producer_options: dict[str, Any] = {**common, **(producer_options or {})}
        self.consumer_options: dict[str, Any] = {**common, **(consumer_options or {})}
        self.drain_timeout_s = drain_timeout_s
        self.handler_grace_s = handler_grace_s
        self.producer_close_timeout_s = producer_close_timeout_s
        # Validate the options now.
        Producer(bootstrap_servers=self.bootstrap_servers, **self.producer_options)
        self._specs: list[_ConsumerSpec | _ShareConsumerSpec] = []
        self._state = "new"
        self._producer: Producer | None = None
        self._accepting = False
        self._running: list[_Supervised] = []
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
        concurrency: int | None = None,
        ordering: str = "key",
        **options: Unpack[ConsumerOptions],
    ) -> Callable[[ConsumerHandler], ConsumerHandler]:
        """Decorate ``async def handler(consumer: Consumer) -> None`` to run it, for the
        app's lifetime, with a started :class:`Consumer` of its own. With ``concurrency``
        the handler is a record handler instead (``async def handler(record: Record)``)
        run through :meth:`Consumer.process` with that ``concurrency`` and ``ordering``:
        :meth:`record_consumer` with ``concurrency`` (``topics`` and ``group_id`` needed).

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
        if concurrency is not None:
            if not topic_list or group_id is None or pattern is not None:
                raise ConfigError(
                    "concurrency= runs a record handler through Consumer.process(): give "
                    "topics and a group_id (no pattern)"
                )
            runs_records = self.record_consumer(
                topic_list, group_id=group_id, name=name, concurrency=concurrency,
                ordering=ordering, **options,
            )  # fmt: skip
            return cast("Callable[[ConsumerHandler], ConsumerHandler]", runs_records)
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
        concurrency: int | None = None,
        ordering: str = "key",
        on_error: str = "raise",
        retries: int = 0,
        **options: Unpack[ConsumerOptions],
    ) -> Callable[[RecordHandler], RecordHandler]:
        """Decorate ``async def handler(record: Record) -> None`` to call it for every
        record of ``topics`` in the consumer group ``group_id``: one at a time, or with
        ``concurrency`` up to that many at once through :meth:`Consumer.process`
        (``ordering`` "key", "partition" or "none"; ``on_error`` "raise" or "skip" after
        ``retries`` more attempts; commits never skip a record).

        Progress is committed in the background every ``commit_every`` records or
        ``commit_within_s`` seconds (:meth:`Consumer.committing`, or ``process()``'s
        commits): a record counts as processed once its handler returned
        (at-least-once). A handler that raises (with ``on_error="raise"``) stops this
        consumer (see the module docs). Returns the handler unchanged.

        Raises:
            ConfigError: as for :meth:`consumer`, non-positive commit settings, or
                ``concurrency``/``ordering``/``on_error``/``retries`` not valid.
            RuntimeError: the integration has already started.
        """
        if commit_every <= 0 or commit_within_s <= 0:
            raise ConfigError("commit_every and commit_within_s must be positive")
        if concurrency is not None:
            if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
                raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
            if ordering not in ("key", "partition", "none"):
                raise ConfigError(
                    f'ordering must be "key", "partition" or "none", got {ordering!r}'
                )
            if on_error not in ("raise", "skip"):
                raise ConfigError(
                    f'on_error must be "raise" or "skip" here, got {on_error!r} (a dead-letter '
                    "topic needs a Producer: call Consumer.process() in a consumer() handler)"
                )
            if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
                raise ConfigError(f"retries must be an int >= 0, got {retries!r}")

        def decorate(handler: RecordHandler) -> RecordHandler:
            async def run(consumer: Consumer) -> None:
                if concurrency is not None:
                    await consumer.process(
                        handler, concurrency=concurrency, ordering=ordering,  # type: ignore[arg-type]
                        every=commit_every, within_s=commit_within_s, on_error=on_error,
                        retries=retries,
                    )  # fmt: skip
                    return
                records: AsyncIterable[Record] = consumer.committing(
                    consumer.stream(), every=commit_every, within_s=commit_within_s
                )
                async for record in records:
                    await handler(record)

            label = name or str(getattr(handler, "__name__", "consumer"))
            self.consumer(topics, group_id=group_id, name=label, **options)(run)
            return handler

        return decorate

    def share_consumer(
        self,
        topics: Collection[str],
        *,
        group_id: str,
        concurrency: int = 1,
        max_failures: int | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Callable[[ShareRecordHandler], ShareRecordHandler]:
        """Decorate ``async def handler(record: ShareRecord) -> None`` to run it, for the
        app's lifetime, on the records of ``topics`` in the share group ``group_id``
        (KIP-932, Kafka 4.2+: Kafka as a job queue), through
        :meth:`ShareConsumer.process`: up to ``concurrency`` records at once; a handler
        that returns accepts its record, one that raises releases it (it is delivered
        again, to any member) or, once its ``delivery_count`` has reached
        ``max_failures``, rejects it. ``options`` are further
        :class:`~aiostream_kafka.ShareConsumer` options (``acknowledgement_mode``,
        ``max_prefetch_records``, ``auto_renew_locks``, deserializers...) over the
        supervisor's ``client_options`` (``consumer_options`` are not used: they are
        :class:`Consumer` options).

        Supervised as the consumer handlers are: a :class:`ShareConsumer` that fails is
        closed, logged and reported by the health probes, not restarted. On shutdown
        it is closed: no more records are handed out, the handlers running get
        ``handler_grace_s`` to finish (then they are cancelled), and every record
        acquired and not finished is released (delivered again, to another member). Returns
        the handler unchanged.

        Raises:
            ConfigError: no topic, an empty ``group_id``, ``concurrency`` < 1,
                ``max_failures`` < 1, a name already taken, or an invalid share consumer
                option.
            TypeError: ``topics`` is a bare str.
            RuntimeError: the supervisor has already started.
        """
        topic_list = tuple(_args.names(topics, "share_consumer"))
        if not topic_list:
            raise ConfigError("share_consumer() needs at least one topic")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if max_failures is not None and (
            isinstance(max_failures, bool) or not isinstance(max_failures, int) or max_failures < 1
        ):
            raise ConfigError(f"max_failures must be an int >= 1 or None, got {max_failures!r}")
        merged: dict[str, Any] = {**self._client_options, **options}
        ShareConsumer(bootstrap_servers=self.bootstrap_servers, group_id=group_id, **merged)

        def decorate(handler: ShareRecordHandler) -> ShareRecordHandler:
            self._add(
                _ShareConsumerSpec(
                    name=name or str(getattr(handler, "__name__", "share_consumer")),
                    topics=topic_list,
                    group_id=group_id,
                    concurrency=concurrency,
                    max_failures=max_failures,
                    options=merged,
                    handler=handler,
                )
            )
            return handler

        return decorate

    def _add(self, spec: _ConsumerSpec | _ShareConsumerSpec) -> None:
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
                if isinstance(spec, _ShareConsumerSpec):
                    await self._start_share_consumer(spec)
                else:
                    await self._start_consumer(spec)
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

    async def _start_consumer(self, spec: _ConsumerSpec) -> None:
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

    async def _start_share_consumer(self, spec: _ShareConsumerSpec) -> None:
        consumer = ShareConsumer(
            bootstrap_servers=self.bootstrap_servers, group_id=spec.group_id, **spec.options
        )
        running = _RunningShareConsumer(spec, consumer, self)
        self._running.append(running)  # from now on the shutdown closes it
        await consumer.start()
        consumer.subscribe(spec.topics)
        running.start()

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
            if isinstance(running, _RunningConsumer) and running.name == name:
                return running.consumer
        raise KeyError(name)

    def get_share_consumer(self, name: str) -> ShareConsumer:
        """The share consumer of the share-consumer handler ``name`` in the current (or
        last) run.

        Raises:
            KeyError: no share consumer of that name has started.
        """
        for running in self._running:
            if isinstance(running, _RunningShareConsumer) and running.name == name:
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
            reasons = [f"{s.kind} {s.name!r}: {s.error}" for s in statuses if s.error is not None]
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
