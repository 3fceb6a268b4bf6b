"""``Consumer``: backpressured async streams of the records of assigned partitions.

::

    async with Consumer(bootstrap_servers="localhost:9092") as consumer:
        consumer.assign([TopicPartition("orders", 0), TopicPartition("orders", 1)])
        async for record in consumer.stream():
            ...

Fetching is driven by demand: a partition is fetched only while its prefetch queue has
room (``max_prefetch_batches`` chunks, all partitions together ``max_prefetch_bytes``), so
a consumer that stops iterating stops fetching, and a partition whose iterator is slow
(``partitioned_stream``) or paused stops only itself. See ``engine.py`` for the parts.

With a ``group_id``, :meth:`Consumer.subscribe` joins a consumer group instead
(``group.py``): partitions come and go with rebalances, and :meth:`Consumer.commit`,
``enable_auto_commit`` or :meth:`Consumer.committing` store the group's progress.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Collection, Iterable, Mapping, Sequence
from types import TracebackType

from aiostream_kafka import _args, habits
from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.concurrency import DEFAULT_CLOSE_TIMEOUT_S, shared_task, shielded
from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.otel.consumer import ConsumerTelemetry, lag_rows
from aiostream_kafka.otel.telemetry import telemetry_for
from aiostream_kafka.protocol.error_codes import UnknownTopicOrPartitionError
from aiostream_kafka.structs import ConsumerGroupMetadata, Record, TopicPartition
from aiostream_kafka.telemetry.clients import start_consumer_push
from aiostream_kafka.telemetry.push import TelemetryPusher

from ._generated import ConsumerConstructor
from .config import GroupOptions
from .engine import FetchEngine
from .errors import ConsumerStateError
from .group import (
    Callback,
    ConsumerGroup,
    ConsumerHealth,
    broker_errors,
    group_config,
)
from .iterators import BatchStream, PartitionedStream, RecordStream, batch_stream, record_stream
from .positions import EARLIEST, LATEST, OffsetAndTimestamp, lookup_offsets
from .prefetch import FetchMetrics
from .processing.runner import ON_ERROR, DeadLetterSender, Handler, ProcessRun
from .processing.scheduler import Ordering, ProcessScheduler

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

# What drain() gives the iterators to hand out what is already fetched, by default.
_DRAIN_TIMEOUT_S = 30.0

_NEEDS_GROUP = "needs a group_id: offsets and subscriptions belong to a consumer group"


class Consumer(ConsumerConstructor):
    """A Kafka consumer: of the partitions given to :meth:`assign`, or, with a
    ``group_id``, of those its consumer group assigns to it (:meth:`subscribe`).

    Use as ``async with Consumer(bootstrap_servers=..., ...) as consumer``, or with
    aiokafka's habit ``Consumer("orders", "payments", bootstrap_servers=..., group_id=...)``
    (subscribes on start). Every option is a keyword parameter of the constructor, whose
    docstring says what each does; see also docs/configuration.md. Iterate it with
    :meth:`stream` (or ``async for record in consumer``), :meth:`batches` or
    :meth:`partitioned_stream`.

    Raises:
        ConfigError: an invalid or unknown option (before any network I/O).
    """

    def _setup(self, group_options: GroupOptions) -> None:
        """The rest of ``__init__`` (generated: :class:`ConsumerConstructor`), run last."""
        group_id = self.config.group_id
        changed = group_options.changed()
        if changed and group_id is None:
            raise ConfigError(f"{changed} {_NEEDS_GROUP}")
        self._group_settings = None
        if group_id is not None:
            group, assignors, interval = group_config(
                group_id,
                group_options,
                self.client_config.metadata_max_age_ms,
                self.client_config.default_api_timeout_ms,
            )
            if self.config.client_rack:
                # KIP-881: rack-aware assignors see each member's rack in its subscription.
                group = dataclasses.replace(group, rack_id=self.config.client_rack)
            self._group_settings = (group, assignors, interval)
        self._cluster = Cluster(self.client_config)
        self._engine = FetchEngine(self._cluster, self.client_config, self.config)
        self._group: ConsumerGroup | None = None
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self._processing: ProcessRun | None = None  # the process() running
        self._telemetry: ConsumerTelemetry | None = None  # set by start() when it emits
        self._metrics_push: TelemetryPusher | None = None  # KIP-714 (enable_metrics_push)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the cluster metadata and start the background tasks; with topics given to
        the constructor, subscribe to them (with a ``group_id``) or assign all their
        partitions (without one).

        Raises:
            KafkaTimeoutError: no bootstrap broker answered within ``default_api_timeout_ms``.
            UnknownTopicOrPartitionError: without a ``group_id``, a topic given to the
                constructor does not exist.
        """
        await self._cluster.bootstrap()
        self._engine.start()
        if self._group_settings is not None:
            config, assignors, interval = self._group_settings
            self._group = ConsumerGroup(
                self._cluster,
                self._engine,
                config,
                assignors,
                auto_commit=self.config.enable_auto_commit,
                auto_commit_interval_ms=interval,
            )
        self._instrument()
        self._metrics_push = self._start_metrics_push()
        if self._topics:
            if self._group is not None:
                self.subscribe(self._topics)
            else:
                await self._assign_topics(self._topics)

    def _instrument(self) -> None:
        """OpenTelemetry, when this consumer emits (decided now, once): receive spans per
        chunk taken, process spans in :meth:`process` and :meth:`committing`, commit
        spans, the lag gauge (:mod:`aiostream_kafka.otel.consumer`)."""
        cc = self.client_config
        group = self._group
        telemetry = telemetry_for(
            cc.opentelemetry,
            cc.tracer_provider,
            cc.meter_provider,
            client_id=cc.client_id,
            group=group.coordinator.config.group_id if group is not None else None,
        )
        if telemetry is None:
            return
        ct = self._telemetry = ConsumerTelemetry(telemetry)
        engine = self._engine
        engine.buffer.observer = ct.received
        read_committed = self.config.isolation_level == "read_committed"
        ct.report_lag(self, lambda: lag_rows(list(engine.partitions.values()), read_committed))
        if group is not None:
            offsets = group.coordinator.offsets
            offsets.commit = ct.wrap_commit(offsets.commit)  # type: ignore[method-assign,assignment]

    async def _assign_topics(self, topics: Sequence[str]) -> None:
        """Assign every partition of ``topics`` (topics given to a consumer without a
        ``group_id``, as aiokafka does)."""
        snapshot = await self._cluster.refresh(topics)
        partitions = []
        for topic in topics:
            meta = snapshot.topics.get(topic)
            if meta is None or meta.error_code != 0 or not meta.partitions:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} given to Consumer() does not exist (a consumer without a "
                    "group_id assigns every partition of its topics when it starts)"
                )
            partitions += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        self.assign(partitions)

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- Kafka's close(timeout)
        """Commit what is pending (``enable_auto_commit``, or staged by
        :meth:`committing`), leave the group, stop fetching, end every iterator and close
        the fetch sessions and connections. Idempotent; concurrent calls share one close.

        ``timeout`` (seconds; ``None``: the default, 30 s, as the Producer's and the
        Admin's close) bounds the graceful part (the final commit, LeaveGroup, closing
        fetch sessions); what is left is then stopped and every
        connection aborted, so close returns in about ``timeout`` even against a broker
        that stopped reading. Cancelling the caller (``asyncio.timeout``, ``task.cancel()``,
        a failing TaskGroup sibling) does not cut the cleanup short: it runs to its end
        first, then the :class:`asyncio.CancelledError` is re-raised.
        """
        if self._close_task is None:
            limit = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
            self._closed = True
            if self._telemetry is not None:
                self._telemetry.stop_lag(self)
            self._close_task = shared_task(self._close(limit), name="closing the consumer")
        # _close bounds itself (its graceful part by ``timeout``, the rest by the
        # connections' own flush limit).
        await shielded(self._close_task, timeout=None, what="closing the consumer")

    async def _close(self, timeout: float) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                if self._group is not None:
                    # Final commit and LeaveGroup; records held by committing() loops
                    # are waited for up to half the time.
                    await self._group.close(hand_back_s=timeout / 2)
                await self._engine.close()  # stops the fetchers, closes fetch sessions
        except TimeoutError:
            log.warning("consumer close: the final commit, LeaveGroup and fetch-session "
                        "close did not finish within %.1f s; stopping now", timeout)  # fmt: skip
        except KafkaError as exc:
            log.warning("consumer close: %s", exc)
        finally:
            try:
                if self._group is not None:
                    await self._group.stop()
                await self._engine.stop()
            finally:
                if self._metrics_push is not None:  # the terminating push, bounded
                    await self._metrics_push.stop()
                await self._cluster.close()

    def _start_metrics_push(self) -> TelemetryPusher | None:
        group = self._group
        buffer = self._engine.buffer
        return start_consumer_push(
            self._cluster,
            buffer.metrics,
            buffer.fetch_latency,
            group_id=self.config.group_id,
            group_instance_id=None if group is None else group.coordinator.config.group_instance_id,
            client_rack=self.config.client_rack,
            assigned_partitions=None if group is None else lambda: len(self._engine.partitions),
            commits=None if group is None else lambda: group.coordinator.offsets,
        )

    async def stop(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 -- as close()
        """:meth:`close` under aiokafka's name: the same call, same ``timeout``; returns
        once the consumer is closed."""
        await self.close(timeout)

    async def __aenter__(self) -> Consumer:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- assignment --------------------------------------------------------------------------

    def assign(
        self, partitions: Iterable[TopicPartition] | TopicPartition, *more: TopicPartition
    ) -> None:
        """Consume exactly ``partitions`` from now on (replacing any earlier assignment):
        one collection of them (``assign([tp0, tp1])``) or the partitions as separate
        arguments (``assign(tp0, tp1)``), as :meth:`pause` and :meth:`resume` take them.

        Newly assigned partitions start per ``auto_offset_reset`` unless sought first;
        partitions no longer assigned drop their buffered records and their
        ``partitioned_stream`` iterators end. A topic or partition that does not exist
        makes the iterators raise ``UnknownTopicOrPartitionError`` (a
        :class:`~aiostream_kafka.consumer.errors.TopicDeletedError`) once it has been
        missing from the metadata for ``missing_topic_timeout_ms``.

        Raises:
            ValueError: an entry is not a ``TopicPartition``.
            TypeError: a ``str``, or a collection mixed with separate partitions.
        """
        wanted = _args.partitions((partitions, *more), "assign")
        if self._group is not None and self._group.subscribed:
            raise ConsumerStateError("assign() cannot be mixed with subscribe()")
        self._engine.assign(wanted)

    def unassign(self) -> None:
        """Revoke every partition."""
        self._engine.assign(())

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now."""
        return set(self._engine.partitions)

    def subscription(self) -> frozenset[str]:
        """The topics subscribed to (aiokafka's ``subscription()``, which returns a
        frozenset too): those given to :meth:`subscribe`, or with a ``pattern`` the
        existing topics it matches now. Empty without a subscription: before
        :meth:`subscribe` (topics given to the constructor are subscribed by
        :meth:`start`), with partitions given to :meth:`assign`, or without a
        ``group_id``. For the partitions owned now, see :meth:`assignment`."""
        if self._group is None or not self._group.subscribed:
            return frozenset()
        return self._group.coordinator.subscription

    def subscribe(
        self,
        topics: Collection[str] = (),
        *,
        pattern: str | None = None,
        on_assigned: Callback | None = None,
        on_revoked: Callback | None = None,
        on_lost: Callback | None = None,
    ) -> None:
        """Join the consumer group and consume the partitions it assigns to this member:
        of ``topics``, or of every topic matching the regular expression ``pattern``
        (topics created later are picked up within ``metadata_max_age_ms``).

        Membership runs in the background: heartbeats in their own task, so slow
        processing never costs the member its partitions. The async callbacks get the
        partitions that changed and are awaited before the rebalance goes on:
        ``on_revoked`` after the partitions' pending commits were flushed and their
        iterators ended; ``on_lost`` when the membership expired (nothing is committed).
        Calling it again changes the subscription; :meth:`subscription` returns it.

        ``topics`` is a collection of topic names: ``subscribe(["orders"])``. A bare
        ``str`` raises ``TypeError`` rather than being taken as a collection of one-letter
        topics (a ``str`` is iterable) or guessed to be one topic: every call here that
        takes a collection of names or partitions refuses a ``str`` the same way.

        Raises:
            TypeError: ``topics`` is a ``str`` (the message names ``subscribe(["orders"])``).
            ConfigError: no ``group_id``, or neither/both of ``topics`` and ``pattern``.
            ConsumerStateError: not started, or partitions were assigned by hand.
        """
        _args.names(topics, "subscribe")
        if self._group_settings is None:
            raise ConfigError(f"subscribe() {_NEEDS_GROUP}")
        if self._group is None:
            raise ConsumerStateError("subscribe() needs a started consumer (async with)")
        if self._engine.partitions and not self._group.subscribed:
            raise ConsumerStateError("subscribe() cannot be mixed with assign()")
        self._group.subscribe(topics, pattern, on_assigned, on_revoked, on_lost)
        self._engine.subscribed = True

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit the group's progress: ``offsets`` (the next offset to read, per
        partition), or by default the position after the last record handed out of every
        partition this member owns.

        Raises:
            ConfigError: no ``group_id``.
            CommitFailedError: a partition is no longer owned by this member (revoked in a
                rebalance, or the membership expired); nothing was committed.
            KafkaTimeoutError: the coordinator did not accept it in time.
        """
        group = self._require_group("commit()")
        if offsets is None:
            offsets = group.delivered_offsets()
        await group.commit(offsets)

    async def committing(
        self,
        records: AsyncIterable[Record],
        *,
        every: int = 1000,
        within_s: float = 5.0,
    ) -> AsyncIterator[Record]:
        """Pass ``records`` through and commit what was processed, asynchronously, every
        ``every`` records or ``within_s`` seconds, whichever comes first (fs2-kafka's
        ``commitBatchWithin``).

        A record counts as processed when the loop asks for the next one. Commits run in
        the background, one at a time and in order, so they never hold up the stream and
        a later commit never lands before an earlier one; what is still pending when a
        partition is revoked is committed before it goes. A revocation waits (up to half
        the rebalance timeout, ``max_poll_interval_ms``) for the loop to finish the record
        of a revoked partition it holds, so that one is committed too: with members that
        leave gracefully, no record is processed twice. ``async for record in
        consumer.committing(consumer.stream()): ...``

        Raises:
            ConfigError: no ``group_id``, or ``every``/``within_s`` not positive.
        """
        group = self._require_group("committing()")
        if every <= 0 or within_s <= 0:
            raise ConfigError(f"every and within_s must be positive, got {every}, {within_s}")
        since = 0
        deadline = time.monotonic() + within_s
        # The record handed out and not processed yet: what a revocation waits for.
        hand = group.hand()
        if self._telemetry is not None:
            records = self._telemetry.around_each(records)
        try:
            async for record in records:
                tp = TopicPartition(record.topic, record.partition)
                hand.tp, hand.task = tp, asyncio.current_task()
                yield record
                group.stage(tp, record.offset + 1)
                group.handed_back(hand)
                since += 1
                if since >= every or time.monotonic() >= deadline:
                    group.request_commit()
                    since = 0
                    deadline = time.monotonic() + within_s
        finally:
            group.drop_hand(hand)
            if since:
                group.request_commit()

    async def process(
        self,
        handler: Handler,
        *,
        concurrency: int = 64,
        ordering: Ordering = "key",
        every: int = 1000,
        within_s: float = 5.0,
        handler_timeout_s: float | None = None,
        on_error: str = "raise",
        retries: int = 0,
        retry_backoff_s: float = 0.1,
        dead_letter_topic: str | None = None,
        dead_letter_producer: DeadLetterSender | None = None,
    ) -> None:
        """Run ``await handler(record)`` for the records of :meth:`stream`, up to
        ``concurrency`` at once, until the consumer is closed (or drained); returns then.

        ``ordering``: ``"key"`` (the default): records of one key of a topic run one
        after another in offset order, different keys side by side; records with a null
        key go one after another per partition. ``"partition"``: one record at a time
        per partition. ``"none"``: any record may run beside any other.

        With a group (:meth:`subscribe`), commits never skip a record: per partition the
        committed offset is the first record whose handler has not finished, and the
        offsets finished beyond it are kept in the commit's metadata, so a consumer of the
        group started after a restart skips them. Commits run in the background every
        ``every`` finished records or ``within_s`` seconds, before a partition is revoked
        (the revocation waits, up to half the rebalance timeout ``max_poll_interval_ms``,
        for the partition's running handlers; one still running then is cancelled and its
        record not committed) and when ``process()`` stops. Without a group nothing is
        committed.

        Memory stays bounded: records taken whose handler cannot start yet (behind a busy
        key or partition) wait, ``4 * concurrency`` of them at most while every handler
        runs (then no more are taken and the bounded prefetch pauses fetching); while
        handler slots are free, what waits is blocked, so the partitions it belongs to
        stop being fetched (throttled; :meth:`paused` lists them) and the others go on,
        up to ``8 * concurrency`` waiting. :meth:`health` shows the run
        (:attr:`ConsumerHealth.processing`); a handler running longer than
        ``max_poll_interval_ms`` makes the member leave its group as a stuck
        ``async for`` does (its partitions go to another member; the handler is cancelled
        and its record not committed), and it joins again once handlers run anew.

        ``handler_timeout_s`` (None: no limit): a handler running longer is cancelled and
        counts as failed with :class:`TimeoutError`.

        Failures: a handler that raises is run again ``retries`` times (default 0), after
        ``retry_backoff_s`` doubling up to 5 s (its key's later records wait meanwhile);
        then ``on_error`` decides. ``"raise"`` (the default): ``process()`` stops: no more
        records start, the running handlers are waited for (as long as a revocation
        would), what finished is committed (never past the failed record in its
        partition), then the handler's exception is raised; records taken and not
        finished are handed out again (to a later ``process()`` of this consumer, which
        skips those finished beyond them, or from the commit to the group's next
        owner). ``"skip"``: logged at ERROR with its traceback, the record counts as
        done (committed past). ``"dead_letter"``: the
        record is sent with ``dead_letter_producer`` (a started
        :class:`~aiostream_kafka.Producer`) to ``dead_letter_topic``, key and value as the
        handler got them, its headers plus ``dlq.error.type``, ``dlq.error.message``,
        ``dlq.source.topic``, ``dlq.source.partition``, ``dlq.source.offset`` and
        ``dlq.attempts``; once acknowledged it counts as done; if the send fails,
        ``process()`` stops and raises that error as with ``"raise"``.
        Cancelling ``process()`` cancels the running handlers, commits what finished,
        hands out again what was taken and not finished (as after ``"raise"``) and
        re-raises :class:`asyncio.CancelledError`.

        Raises:
            ConfigError: an unknown ``on_error`` or ``ordering``; ``"dead_letter"``
                without ``dead_letter_topic`` and ``dead_letter_producer``;
                ``enable_auto_commit`` (it commits what was handed out, past running
                handlers); ``concurrency``/``every``/``within_s`` not positive,
                ``retries`` < 0.
            ConsumerStateError: not started, or a ``process()`` of this consumer runs.
            Exception: what the handler raised (or :class:`TimeoutError`).
            KafkaError: as :meth:`stream` raises (the consumer failed).
        """
        if on_error not in ON_ERROR:
            raise ConfigError(
                f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, got {on_error!r}"
            )
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries must be an int >= 0, got {retries!r}")
        if retry_backoff_s < 0:
            raise ConfigError(f"retry_backoff_s must be >= 0, got {retry_backoff_s}")
        if on_error == "dead_letter" and (not dead_letter_topic or dead_letter_producer is None):
            raise ConfigError(
                'on_error="dead_letter" needs dead_letter_topic (a topic name) and '
                "dead_letter_producer (a started Producer)"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if ordering not in ("key", "partition", "none"):
            raise ConfigError(f'ordering must be "key", "partition" or "none", got {ordering!r}')
        if every <= 0 or within_s <= 0:
            raise ConfigError(f"every and within_s must be positive, got {every}, {within_s}")
        if handler_timeout_s is not None and handler_timeout_s <= 0:
            raise ConfigError(f"handler_timeout_s must be positive, got {handler_timeout_s}")
        if self.config.enable_auto_commit:
            raise ConfigError(
                "process() commits what its handlers finished: enable_auto_commit would "
                "commit records handed out to handlers still running; set it False"
            )
        if self._processing is not None:
            raise ConsumerStateError("process() is already running on this consumer")
        self._engine.check_usable()
        group = self._group if self._group is not None and self._group.subscribed else None
        if self._group_settings is not None:
            stop_wait_s = self._group_settings[0].rebalance_timeout_ms / 2000
        else:
            stop_wait_s = DEFAULT_CLOSE_TIMEOUT_S / 2
        if self._telemetry is not None:
            handler = self._telemetry.wrap_handler(handler)
        run = ProcessRun(
            self.stream(),
            handler,
            ProcessScheduler(ordering, concurrency),
            group,
            every=every,
            within_s=within_s,
            handler_timeout_s=handler_timeout_s,
            max_waiting=4 * concurrency,
            stop_wait_s=stop_wait_s,
            commit_timeout_s=self.client_config.default_api_timeout_ms / 1000,
            on_error=on_error,
            retries=retries,
            retry_backoff_s=retry_backoff_s,
            dead_letter_topic=dead_letter_topic,
            dead_letter_producer=dead_letter_producer,
            fetch=self._engine,
        )
        self._processing = run
        try:
            await run.run()
        finally:
            self._processing = None

    def health(self) -> ConsumerHealth:
        """The consumer's state for a liveness probe (see :class:`ConsumerHealth`): group
        state (or ``"assigned"``), the last successful heartbeat, the last Fetch response
        and the last one that made progress, owned vs fetched partitions, how long the
        application has not asked for records, the error that stopped it and the problem
        that keeps it from consuming, if any; with a :meth:`process` running, its
        handlers in flight, records waiting, oldest handler and commit gaps."""
        run = self._processing
        processing = None if run is None else run.health()
        if self._group is not None:
            return dataclasses.replace(self._group.health(), processing=processing)
        engine = self._engine
        metrics = engine.buffer.metrics
        return ConsumerHealth(
            processing=processing,
            state="closed" if self._closed else "assigned",
            last_heartbeat_at=None,
            last_fetch_at=metrics.last_fetch_at or None,
            error=engine.fatal,
            assignment=frozenset(engine.partitions),
            fetching=frozenset(tp for tp, ps in engine.partitions.items() if ps.assigned),
            last_progress_at=metrics.last_progress_at or None,
            broker_errors=broker_errors(engine),
        )

    async def drain(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 -- as close(timeout)
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Stop gracefully: stop fetching, let the iterators hand out what is already
        fetched (up to ``timeout`` seconds, default 30), commit, leave the group, and
        close (with :meth:`close`'s default timeout).

        ``timeout_s`` is the old name of ``timeout``, still accepted (an alias: seconds
        are spelled ``timeout`` on every call that waits; see the Consumer reference).
        The iterators end when it closes the consumer.

        Raises:
            TypeError: both ``timeout`` and ``timeout_s`` given.
        """
        if timeout is not None and timeout_s is not None:
            raise TypeError("drain() got both timeout and timeout_s (its old name)")
        limit = timeout if timeout is not None else timeout_s
        self._engine.stop_fetching()
        deadline = time.monotonic() + (_DRAIN_TIMEOUT_S if limit is None else limit)
        # The iterators hand out at their own pace; poll until they have emptied the queues.
        while time.monotonic() < deadline and self._engine.has_undelivered():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if self._group is not None and self._group.subscribed:
            try:
                await self._group.flush_staged()
                if self.config.enable_auto_commit:
                    await self.commit()
            except Exception as exc:  # a drain goes on to close regardless
                log.warning("drain: final commit failed: %s", exc)
        await self.close()

    def _require_group(self, what: str) -> ConsumerGroup:
        if self._group_settings is None:
            raise ConfigError(f"{what} {_NEEDS_GROUP}")
        if self._group is None:
            raise ConsumerStateError(f"{what} needs a started consumer (async with)")
        return self._group

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's identity in its group, for
        :meth:`Producer.send_offsets_to_transaction` (KIP-447): the group id, the current
        generation and member id (from the last JoinGroup; -1 and ``""`` before the first
        assignment; with ``group_protocol="consumer"`` the member epoch, which the broker
        checks the same way) and ``group_instance_id``. Take it right before sending the
        offsets: the coordinator refuses a stale generation, which is what keeps a member
        that lost its partitions from committing them.

        Raises:
            ConfigError: the consumer has no ``group_id``.
            ConsumerStateError: the consumer is not started.
        """
        coordinator = self._require_group("group_metadata()").coordinator
        return ConsumerGroupMetadata(
            group_id=coordinator.config.group_id,
            generation_id=coordinator.generation,
            member_id=coordinator.member_id,
            group_instance_id=coordinator.config.group_instance_id,
        )

    @property
    def group(self) -> ConsumerGroup | None:
        """The group membership (None without ``group_id`` or before start)."""
        return self._group

    # -- iterators ---------------------------------------------------------------------------

    def stream(self) -> RecordStream:
        """An async iterator of records of every assigned, unpaused partition.

        Records of one partition come in offset order, each once; partitions take turns a
        fetched chunk at a time. It ends when the consumer closes. While the assigned
        partitions have nothing new it waits (``health()`` shows the fetches going on:
        ``last_fetch_at`` advances); with nothing assigned and nothing subscribed its first
        step raises :class:`~aiostream_kafka.errors.NothingToConsumeError` instead.
        Iterators of ``stream()`` and ``batches()`` may run together (each record goes to
        one of them) but not with ``partitioned_stream()``.

        Raises (from iteration):
            KafkaError: an error of a partition, raised after the records before it:
                ``CorruptRecordError`` (a batch failed its CRC; names topic, partition,
                offset), ``OffsetOutOfRangeError`` or ``NoOffsetForPartitionError`` (with
                ``auto_offset_reset="none"``), ``UnknownTopicOrPartitionError`` (a topic
                missing or deleted), ``RecordDeserializationError``; or the error that
                stopped the consumer's background tasks.
            ConsumerStateError: not started, or mixed with ``partitioned_stream()``.
            NothingToConsumeError: nothing assigned and nothing subscribed when iteration
                begins.
        """
        return record_stream(self._engine)

    def __aiter__(self) -> RecordStream:
        """``async for record in consumer``: the same as ``consumer.stream()`` (aiokafka's
        habit); returns a new :class:`RecordStream`."""
        return record_stream(self._engine)

    def batches(self) -> BatchStream:
        """An async iterator of lists of records: each list is what one Fetch returned for
        one partition (in offset order). Otherwise as :meth:`stream`."""
        return batch_stream(self._engine)

    def partitioned_stream(self) -> PartitionedStream:
        """An async iterator of ``(TopicPartition, PartitionRecords)``: one per assigned
        partition, now and as more are assigned. Each ``PartitionRecords`` is an async
        iterator of that partition's records with its own prefetch queue, so a partition
        nobody reads stops only its own fetching; it ends when the partition is revoked.

        Raises:
            ConsumerStateError: not started, or mixed with ``stream()``/``batches()``.
            NothingToConsumeError: (from iteration) nothing assigned and nothing subscribed
                when iteration begins.
        """
        return PartitionedStream(self._engine)

    # -- positions ---------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record of ``partition`` handed out; records of it
        already fetched are dropped.

        Raises:
            ConsumerStateError: the partition is not assigned.
            ValueError: ``offset`` is negative.
        """
        self._engine.seek(partition, offset)

    async def seek_to_beginning(
        self, *partitions: TopicPartition | Iterable[TopicPartition]
    ) -> None:
        """Seek ``partitions`` (all assigned ones if none given) to their first offset:
        the partitions as separate arguments or one collection of them.

        Raises:
            ConsumerStateError: a partition is not assigned.
            KafkaTimeoutError: the offsets could not be looked up within
                ``default_api_timeout_ms``.
        """
        await self._seek_to(_args.partitions(partitions, "seek_to_beginning"), EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Seek ``partitions`` (all assigned ones if none given) to their end: the high
        watermark, or with ``read_committed`` the last stable offset. The partitions as
        separate arguments or one collection of them.

        Raises:
            ConsumerStateError: a partition is not assigned.
            KafkaTimeoutError: the offsets could not be looked up in time.
        """
        await self._seek_to(_args.partitions(partitions, "seek_to_end"), LATEST)

    async def _seek_to(self, partitions: Sequence[TopicPartition], timestamp: int) -> None:
        tps = list(partitions) or list(self._engine.partitions)
        for tp in tps:
            self._engine.state(tp)
        found = await self._lookup({tp: timestamp for tp in tps})
        for tp, result in found.items():
            if tp in self._engine.partitions:
                self._engine.seek(tp, result.offset, result.leader_epoch)

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose record timestamp is at or after the
        given time (ms since the epoch), or None if there is none. Any partition of an
        existing topic may be asked about, assigned or not.

        Raises:
            ValueError: a negative timestamp.
            UnknownTopicOrPartitionError: a topic or partition does not exist.
            KafkaTimeoutError: not answered within ``default_api_timeout_ms``.
        """
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be an int >= 0, got {ts!r}")
        found = await self._lookup(dict(timestamps))
        return {tp: (r if r.offset >= 0 else None) for tp, r in found.items()}

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition] | TopicPartition, *more: TopicPartition
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start): one collection of
        partitions or the partitions as separate arguments.

        Raises:
            UnknownTopicOrPartitionError, KafkaTimeoutError: as :meth:`offsets_for_times`.
        """
        tps = _args.partitions((partitions, *more), "beginning_offsets")
        found = await self._lookup({tp: EARLIEST for tp in tps})
        return {tp: r.offset for tp, r in found.items()}

    async def end_offsets(
        self, partitions: Iterable[TopicPartition] | TopicPartition, *more: TopicPartition
    ) -> dict[TopicPartition, int]:
        """The end of each partition: the high watermark, or with ``read_committed`` the
        last stable offset. One collection of partitions or the partitions as separate
        arguments.

        Raises:
            UnknownTopicOrPartitionError, KafkaTimeoutError: as :meth:`offsets_for_times`.
        """
        tps = _args.partitions((partitions, *more), "end_offsets")
        found = await self._lookup({tp: LATEST for tp in tps})
        return {tp: r.offset for tp, r in found.items()}

    async def _lookup(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        if not specs:
            return {}
        self._engine.check_usable()
        client = self.client_config
        try:
            return await lookup_offsets(
                self._cluster,
                specs,
                isolation_level=self.config.isolation,
                timeout_ms=client.default_api_timeout_ms,
                request_timeout_ms=client.request_timeout_ms,
                retry_backoff_ms=client.retry_backoff_ms,
                retry_backoff_max_ms=client.retry_backoff_max_ms,
            )
        finally:
            assigned = {tp.topic for tp in self._engine.partitions}
            self._cluster.untrack({tp.topic for tp in specs} - assigned)

    def position(self, partition: TopicPartition) -> int | None:
        """The offset of the next record of ``partition`` to hand out (the offset after the
        last one handed out), or None while its starting offset is being looked up.

        Raises:
            ConsumerStateError: the partition is not assigned.
        """
        return self._engine.state(partition).delivered_position()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as of its last fetch (None before one).

        Raises:
            ConsumerStateError: the partition is not assigned.
        """
        hw = self._engine.state(partition).high_watermark
        return hw if hw >= 0 else None

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        """The partition's last stable offset as of its last fetch (None before one).

        Raises:
            ConsumerStateError: the partition is not assigned.
        """
        lso = self._engine.state(partition).last_stable_offset
        return lso if lso >= 0 else None

    # -- flow control ------------------------------------------------------------------------

    def pause(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Stop fetching and handing out records of ``partitions`` (the partitions as
        separate arguments, ``pause(tp0, tp1)``, or one collection of them,
        ``pause([tp0, tp1])``, as :meth:`assign` takes them); records already fetched are
        kept for :meth:`resume` (never fetched twice).

        Raises:
            ConsumerStateError: a partition is not assigned.
            TypeError: a ``str``, or a collection mixed with separate partitions.
        """
        self._engine.pause(_args.partitions(partitions, "pause"))

    def resume(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Undo :meth:`pause` for ``partitions`` (taken as :meth:`pause` takes them).

        Raises:
            ConsumerStateError: a partition is not assigned.
            TypeError: a ``str``, or a collection mixed with separate partitions.
        """
        self._engine.resume(_args.partitions(partitions, "resume"))

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions that are paused."""
        return {tp for tp, ps in self._engine.partitions.items() if ps.paused}

    # -- diagnostics -------------------------------------------------------------------------

    def metrics(self) -> FetchMetrics:
        """The live fetch counters and prefetch gauges (see :class:`FetchMetrics`)."""
        return self._engine.buffer.metrics

    @property
    def cluster(self) -> Cluster:
        """The metadata cache and connection pool (for diagnostics)."""
        return self._cluster


habits.install(Consumer)  # aiokafka names raise, naming ours (aiostream_kafka.habits)
