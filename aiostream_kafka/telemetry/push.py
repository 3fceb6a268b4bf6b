"""``TelemetryPusher``: KIP-714 client metrics pushed to a broker.

One task per client (``enable_metrics_push``, on by default as in Java). It asks a broker
for the client's metrics subscription (``GetTelemetrySubscriptions``, API key 71: the
client instance id is the zero UUID the first time, then the one the broker assigned)
and, while the subscription requests metrics, pushes them (``PushTelemetry``, key 72)
every ``PushIntervalMs`` as an OTLP ``MetricsData`` (compressed with the first codec of
``AcceptedCompressionTypes`` this installation has), the first push after a random
0.5-1.5 x the interval so that clients started together spread out. With no
subscription (an empty ``RequestedMetrics``) it asks again once per ``PushIntervalMs``
(the broker's default 5 minutes) and logs nothing above DEBUG. A broker that does not
offer the API (its ApiVersions lack key 71: the broker has no client-telemetry plugin)
or answers UNSUPPORTED_VERSION ends the task. :meth:`TelemetryPusher.stop` sends a last
push with ``Terminating=true`` (bounded by a short deadline) when metrics were being
pushed.

Error handling follows the KIP: UNKNOWN_SUBSCRIPTION_ID and UNSUPPORTED_COMPRESSION_TYPE
fetch the subscription again at once; TELEMETRY_TOO_LARGE and THROTTLING_QUOTA_EXCEEDED
skip to the next interval; INVALID_REQUEST, INVALID_RECORD and UNSUPPORTED_VERSION end
the pushing (logged once); other errors and a lost connection fetch the subscription
again (from any broker) after a back-off.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aiostream_kafka._version import __version__
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.concurrency import Crash, TaskScope, stop_tasks
from aiostream_kafka.errors import KafkaError
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.protocol import compression
from aiostream_kafka.protocol.compression import CompressionType
from aiostream_kafka.protocol.error_codes import ERRORS_BY_NAME
from aiostream_kafka.protocol.messages.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from aiostream_kafka.protocol.messages.push_telemetry import (
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from aiostream_kafka.protocol.primitives import ZERO_UUID
from aiostream_kafka.telemetry.client_metrics import MetricsCollector, Sample
from aiostream_kafka.telemetry.otlp import (
    DataPoint,
    MetricKind,
    MetricPoint,
    Temporality,
    encode_metrics_data,
)

__all__ = ["SOFTWARE_NAME", "Subscription", "TelemetryPusher"]

log = logging.getLogger(__name__)

#: ``client_software_name`` (as in ApiVersions, KIP-511).
SOFTWARE_NAME = "aiostream-kafka"
#: The broker's default ``interval.ms`` (5 minutes): how long to wait when it gave none.
DEFAULT_INTERVAL_MS = 300_000
#: Back-off before asking again after an error or a lost broker.
RETRY_S = 30.0
#: The deadline of the terminating push at close.
TERMINATING_PUSH_S = 1.0


def _code(name: str) -> int:
    return ERRORS_BY_NAME[name].code


_UNSUPPORTED_VERSION = _code("UNSUPPORTED_VERSION")
_REFETCH_NOW = frozenset(
    _code(n) for n in ("UNKNOWN_SUBSCRIPTION_ID", "UNSUPPORTED_COMPRESSION_TYPE")
)
_NEXT_INTERVAL = frozenset(_code(n) for n in ("TELEMETRY_TOO_LARGE", "THROTTLING_QUOTA_EXCEEDED"))
_FATAL = frozenset(_code(n) for n in ("INVALID_REQUEST", "INVALID_RECORD", "UNSUPPORTED_VERSION"))


class _Next(enum.Enum):
    PUSH = "push again after the interval"
    REFETCH = "fetch the subscription again"
    STOP = "stop pushing"


@dataclass(frozen=True, slots=True)
class Subscription:
    """A GetTelemetrySubscriptions answer, as the pusher uses it."""

    subscription_id: int
    accepted_compression_types: tuple[int, ...]
    push_interval_ms: int
    telemetry_max_bytes: int
    delta_temporality: bool
    requested_metrics: tuple[str, ...]

    @property
    def wants_any(self) -> bool:
        """True when some metric is requested (an empty list requests none)."""
        return bool(self.requested_metrics)

    def wants(self, name: str) -> bool:
        """Whether metric ``name`` is requested: a prefix match of any entry; an empty
        string matches every metric."""
        return any(name.startswith(prefix) for prefix in self.requested_metrics)


@dataclass(slots=True)
class PushStats:
    """What the pusher did (for tests and diagnostics)."""

    subscription_requests: int = 0
    pushes: int = 0
    terminating_pushes: int = 0
    #: The last push's OTLP bytes before and after compression, and the codec used.
    last_payload_bytes: int = 0
    last_push_bytes: int = 0
    last_compression: int = 0
    #: The error codes of refused pushes, in order.
    push_errors: list[int] = field(default_factory=list)
    #: Why the task ended (None while it runs or was only cancelled).
    stopped: str | None = None


class TelemetryPusher:
    """Pushes one client's metrics (``collector``) to the brokers of ``cluster``.

    ``resource`` becomes the OTLP resource's attributes (client id, software name and
    version, group or transactional id...). Start with :meth:`start`, end with
    :meth:`stop` before the cluster is closed.
    """

    def __init__(
        self,
        cluster: Cluster,
        collector: MetricsCollector,
        resource: Mapping[str, str],
        *,
        what: str,
    ) -> None:
        self.cluster = cluster
        self.collector = collector
        self.resource = dict(resource)
        self.what = what
        self.client_instance_id: uuid.UUID = ZERO_UUID
        self.subscription: Subscription | None = None
        self.stats = PushStats()
        self._task: asyncio.Task[None | None] | None = None
        self._own_scope: TaskScope | None = None
        self._request_timeout_ms = cluster.config.request_timeout_ms
        # Cumulative sums' start, and the values pushed last (delta temporality).
        self._started_ns = time.time_ns()
        self._last_push_ns = self._started_ns
        self._last_sums: dict[tuple[str, tuple[tuple[str, str], ...]], int | float] = {}
        self._conn: BrokerConnection | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, scope: TaskScope | None = None) -> None:
        """Start the pushing task in ``scope`` (the client's; None: a scope of its own).

        Raises:
            ScopeClosedError: ``scope`` is closed.
        """
        if self._task is not None:
            return
        if scope is None:
            scope = self._own_scope = TaskScope(f"{self.what} metrics push")
        self._task = scope.spawn(
            self._run(), name=f"aiostream-kafka {self.what} metrics push", crash=Crash.LOG
        )

    async def stop(self, timeout_s: float = TERMINATING_PUSH_S) -> None:
        """Stop the task; when metrics were being pushed, send the terminating push
        (``Terminating=true``), waiting for it at most ``timeout_s``. Never raises a
        broker's or the network's error; a cancelled caller gets the
        :class:`asyncio.CancelledError` once the task is stopped."""
        task, self._task = self._task, None
        if task is None:
            return
        await stop_tasks([task])
        if self._own_scope is not None:
            await self._own_scope.aclose()
        subscription = self.subscription
        if subscription is None or not subscription.wants_any or self.stats.stopped:
            return
        try:
            async with asyncio.timeout(timeout_s):
                conn = await self._connection()
                await self._push(conn, subscription, terminating=True)
        except (KafkaError, TimeoutError) as exc:
            log.debug("%s: the terminating metrics push failed: %r", self.what, exc)

    # -- the task ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            conn, subscription = await self._subscribe()
            if subscription is None:
                return
            if not subscription.wants_any:
                # Nothing requested: ask again after the interval, one request each time.
                await asyncio.sleep(subscription.push_interval_ms / 1000)
                continue
            # KIP-714: the first push after 0.5-1.5 x the interval, then every interval.
            delay = subscription.push_interval_ms / 1000 * random.uniform(0.5, 1.5)
            while True:
                await asyncio.sleep(delay)
                delay = subscription.push_interval_ms / 1000
                try:
                    outcome = await self._push(conn, subscription, terminating=False)
                except KafkaError as exc:
                    log.debug("%s: metrics push failed (%r); asking again", self.what, exc)
                    await asyncio.sleep(min(RETRY_S, delay))
                    outcome = _Next.REFETCH
                if outcome is _Next.STOP:
                    return
                if outcome is _Next.REFETCH:
                    break

    async def _connection(self) -> BrokerConnection:
        """A connection to a broker: the one used last while open, else any."""
        conn = self._conn
        if conn is None or conn.closed:
            async with asyncio.timeout(self._request_timeout_ms / 1000):
                conn = self._conn = await self.cluster.any_connection()
        return conn

    async def _subscribe(self) -> tuple[BrokerConnection, Subscription | None]:
        """Ask a broker for the subscription until one answers; None: stop pushing."""
        while True:
            try:
                conn = await self._connection()
                table = conn.api_versions
                if table is not None and not table.supports(
                    GetTelemetrySubscriptionsRequest.API_KEY
                ):
                    self._stop(f"{conn.description} does not offer GetTelemetrySubscriptions")
                    return conn, None
                self.stats.subscription_requests += 1
                response = await conn.request(
                    GetTelemetrySubscriptionsRequest(client_instance_id=self.client_instance_id)
                )
                assert isinstance(response, GetTelemetrySubscriptionsResponse)
            except (KafkaError, TimeoutError) as exc:
                log.debug("%s: GetTelemetrySubscriptions failed (%r)", self.what, exc)
                self._conn = None
                await asyncio.sleep(RETRY_S)
                continue
            if response.error_code == _UNSUPPORTED_VERSION:
                self._stop(f"{conn.description} answered UNSUPPORTED_VERSION")
                return conn, None
            if response.error_code:
                log.debug("%s: GetTelemetrySubscriptions error %d", self.what, response.error_code)
                await asyncio.sleep(RETRY_S)
                continue
            if response.client_instance_id != ZERO_UUID:
                self.client_instance_id = response.client_instance_id
            interval = response.push_interval_ms
            subscription = Subscription(
                subscription_id=response.subscription_id,
                accepted_compression_types=tuple(response.accepted_compression_types),
                push_interval_ms=interval if interval > 0 else DEFAULT_INTERVAL_MS,
                telemetry_max_bytes=response.telemetry_max_bytes,
                delta_temporality=response.delta_temporality,
                requested_metrics=tuple(response.requested_metrics),
            )
            if subscription != self.subscription:
                log.debug("%s: metrics subscription %r", self.what, subscription)
            self.subscription = subscription
            return conn, subscription

    def _stop(self, why: str) -> None:
        self.stats.stopped = why
        log.debug("%s: not pushing metrics: %s", self.what, why)

    # -- one push ----------------------------------------------------------------------------

    async def _push(
        self, conn: BrokerConnection, subscription: Subscription, *, terminating: bool
    ) -> _Next:
        now_ns = time.time_ns()
        samples = [s for s in self.collector.collect() if subscription.wants(s.name)]
        metrics = self._metrics(samples, subscription.delta_temporality, now_ns)
        payload = encode_metrics_data(
            self.resource, metrics, scope_name=SOFTWARE_NAME, scope_version=__version__
        )
        codec, data = _compress(payload, subscription.accepted_compression_types)
        stats = self.stats
        stats.last_payload_bytes = len(payload)
        stats.last_push_bytes = len(data)
        stats.last_compression = int(codec)
        if subscription.telemetry_max_bytes and len(data) > subscription.telemetry_max_bytes:
            log.debug("%s: %d bytes of metrics exceed TelemetryMaxBytes %d; not pushed",
                      self.what, len(data), subscription.telemetry_max_bytes)  # fmt: skip
            return _Next.PUSH
        self._last_push_ns = now_ns
        if terminating:
            stats.terminating_pushes += 1
        else:
            stats.pushes += 1
        response = await conn.request(
            PushTelemetryRequest(
                client_instance_id=self.client_instance_id,
                subscription_id=subscription.subscription_id,
                terminating=terminating,
                compression_type=int(codec),
                metrics=data,
            )
        )
        assert isinstance(response, PushTelemetryResponse)
        code = response.error_code
        if not code:
            return _Next.PUSH
        stats.push_errors.append(code)
        if code in _REFETCH_NOW:
            log.debug("%s: PushTelemetry error %d: fetching the subscription", self.what, code)
            return _Next.REFETCH
        if code in _NEXT_INTERVAL:
            log.debug("%s: PushTelemetry error %d: next interval", self.what, code)
            return _Next.PUSH
        if code in _FATAL:
            stats.stopped = f"PushTelemetry error {code}"
            log.warning("%s: the broker refused the pushed metrics (error %d); not pushing "
                        "metrics any more", self.what, code)  # fmt: skip
            return _Next.STOP
        log.debug("%s: PushTelemetry error %d: fetching the subscription", self.what, code)
        return _Next.REFETCH

    def _metrics(self, samples: Sequence[Sample], delta: bool, now_ns: int) -> list[MetricPoint]:
        """Samples as OTLP metrics, one per name (its attribute sets as points); sums
        cumulative from the pusher's start, or deltas since the last push."""
        grouped: dict[str, list[Sample]] = {}
        for sample in samples:
            grouped.setdefault(sample.name, []).append(sample)
        out: list[MetricPoint] = []
        for name, group in grouped.items():
            first = group[0]
            points: list[DataPoint] = []
            for sample in group:
                attributes = dict(sample.attributes)
                if sample.kind is MetricKind.SUM:
                    key = (name, tuple(sorted(attributes.items())))
                    value = sample.value
                    if delta:
                        previous = self._last_sums.get(key, 0)
                        self._last_sums[key] = value
                        value = value - previous
                        start = self._last_push_ns
                    else:
                        start = self._started_ns
                    points.append(DataPoint(value, now_ns, start, attributes))
                else:
                    points.append(DataPoint(sample.value, now_ns, 0, attributes))
            out.append(
                MetricPoint(
                    name,
                    first.kind,
                    points,
                    description=first.description,
                    unit=first.unit,
                    temporality=Temporality.DELTA if delta else Temporality.CUMULATIVE,
                )
            )
        return out


def _compress(payload: bytes, accepted: Sequence[int]) -> tuple[CompressionType, bytes]:
    """``payload`` compressed with the first of the broker's ``accepted`` codecs that this
    installation has (none: uncompressed)."""
    for code in accepted:
        try:
            codec = CompressionType(code)
        except ValueError:
            continue
        if codec is CompressionType.NONE:
            break
        if compression.is_available(codec):
            return codec, compression.compress(codec, payload)
    return CompressionType.NONE, payload
