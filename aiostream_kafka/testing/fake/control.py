"""Fault injection and inspection of a fake cluster: ``cluster.control``.

Examples::

    cluster.control.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)
    cluster.control.delay("Fetch", 0.5)          # every Fetch answer, until clear()
    cluster.control.delay("Produce", 2.0, count=1)  # the next one only
    cluster.control.drop_connections(node_id=1)
    cluster.control.move_leader("orders", 0)
    await cluster.control.stop_broker(2)
    [r.api_name for r in cluster.control.requests()]
    cluster.control.records("orders", 0)
    cluster.control.advance_time(45)             # with FakeCluster(clock=ManualClock())

Every call is safe from any thread: when the cluster runs in its own thread
(``start_blocking()``), the change is made on the cluster's loop and the call returns
once it is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol.error_codes import ERRORS_BY_NAME
from aiostream_kafka.protocol.messages import API_NAMES
from aiostream_kafka.structs import Record
from aiostream_kafka.testing.fake.clock import ManualClock
from aiostream_kafka.testing.fake.server import BrokerServer
from aiostream_kafka.testing.fake.state import (
    ClusterState,
    DelayRule,
    FailRule,
    RequestLogEntry,
)

__all__ = ["Control", "api_key_of", "error_code_of"]

T = TypeVar("T")
_API_KEYS_BY_NAME = {name.lower(): key for key, name in API_NAMES.items()}


class ClusterHandle(Protocol):
    """What :class:`Control` uses of its cluster."""

    @property
    def state(self) -> ClusterState: ...
    @property
    def servers(self) -> dict[int, BrokerServer]: ...
    @property
    def sasl_servers(self) -> dict[int, BrokerServer]: ...
    def call(self, fn: Callable[[], T]) -> T: ...
    async def stop_broker(self, node_id: int, timeout: float = ...) -> None: ...  # noqa: ASYNC109
    async def start_broker(self, node_id: int) -> None: ...


def api_key_of(api: int | str) -> int:
    """The API key of ``api``: a key, or a name such as ``"Produce"`` (any case).

    Raises ``ValueError`` for an unknown name or key.
    """
    if isinstance(api, int):
        if api not in API_NAMES:
            raise ValueError(f"unknown API key {api}")
        return api
    try:
        return _API_KEYS_BY_NAME[api.replace("_", "").lower()]
    except KeyError:
        raise ValueError(f"unknown API {api!r}") from None


def error_code_of(error: int | str | type[KafkaError]) -> int:
    """The error code of ``error``: a code, a Kafka name (``"NOT_LEADER_OR_FOLLOWER"``)
    or an error class of :mod:`aiostream_kafka.protocol.error_codes`.

    Raises ``ValueError`` for an unknown name.
    """
    if isinstance(error, int):
        return error
    if isinstance(error, str):
        try:
            return ERRORS_BY_NAME[error.upper()].code
        except KeyError:
            raise ValueError(f"unknown error {error!r}") from None
    if error.error_code is None:
        raise ValueError(f"{error.__name__} has no Kafka error code")
    return error.error_code


class Control:
    """The control API of one fake cluster (see the module docstring)."""

    def __init__(self, cluster: ClusterHandle) -> None:
        self._cluster = cluster

    def fail_next(
        self,
        api: int | str,
        error: int | str | type[KafkaError],
        count: int = 1,
        *,
        node_id: int | None = None,
    ) -> None:
        """Answer the next ``count`` requests of ``api`` (to ``node_id``, or to any broker)
        with ``error`` instead of serving them.

        Raises ``ValueError`` for an unknown API or error.
        """
        key = api_key_of(api)
        rule = FailRule(error_code_of(error), count, node_id)
        self._cluster.call(lambda: self._cluster.state.hooks.fail.setdefault(key, []).append(rule))

    def delay(self, api: int | str, seconds: float, count: int | None = None) -> None:
        """Hold the responses of ``api`` for ``seconds`` before sending them: the next
        ``count`` of them, or every one (``count=None``) until :meth:`clear`. The request
        is served before the wait (a Produce is written): a client that gives up on the
        answer and retries sends a duplicate.

        Raises ``ValueError`` for an unknown API.
        """
        key = api_key_of(api)
        rule = DelayRule(seconds, count)
        self._cluster.call(lambda: self._cluster.state.hooks.delay.setdefault(key, []).append(rule))

    def clear(self) -> None:
        """Drop every failure and delay set."""

        def apply() -> None:
            self._cluster.state.hooks.fail.clear()
            self._cluster.state.hooks.delay.clear()

        self._cluster.call(apply)

    def drop_connections(self, node_id: int | None = None) -> int:
        """Reset the open client connections of one broker (or all); return how many."""

        def apply() -> int:
            targets = []
            for servers in (self._cluster.servers, self._cluster.sasl_servers):
                if node_id is None:
                    targets += list(servers.values())
                elif node_id in servers:
                    targets.append(servers[node_id])
            return sum(server.drop_connections() for server in targets)

        return self._cluster.call(apply)

    def move_leader(self, topic: str, partition: int, node_id: int | None = None) -> int:
        """Make ``node_id`` (default: another alive broker) the leader of a partition and
        bump its leader epoch; return the new leader. Clients learn it from
        ``NOT_LEADER_OR_FOLLOWER`` answers and the next Metadata.

        Raises ``KeyError`` for an unknown partition, ``ValueError`` when no such broker
        is alive.
        """
        return self._cluster.call(
            lambda: self._cluster.state.move_leader(topic, partition, node_id)
        )

    async def stop_broker(self, node_id: int) -> None:
        """Stop a broker: its listener closes, its connections drop, its partitions get
        other leaders where one is alive."""
        await self._cluster.stop_broker(node_id)

    async def start_broker(self, node_id: int) -> None:
        """Start a stopped broker again, on the same port."""
        await self._cluster.start_broker(node_id)

    def expire_member(self, group_id: str, member_id: str) -> None:
        """Remove a group member (classic, KIP-848 or share group) as if its session timed
        out: the group rebalances; a share member's acquired records become available.

        Raises ``KeyError`` for an unknown group or member.
        """

        def expire() -> None:
            state = self._cluster.state
            if group_id in state.consumer_groups.groups:
                state.consumer_groups.expire_member(group_id, member_id)
            elif group_id in state.share_groups.groups:
                state.share_groups.expire_member(group_id, member_id)
            else:
                state.groups.expire_member(group_id, member_id)

        self._cluster.call(expire)

    def abort_transaction(self, transactional_id: str) -> bool:
        """Abort the open transaction of ``transactional_id`` as the coordinator does when
        it times out (the epoch is bumped: the producer's next write is refused). Return
        whether one was open.

        Raises ``KeyError`` for an unknown transactional id.
        """
        return self._cluster.call(lambda: self._cluster.state.transactions.abort(transactional_id))

    def advance_time(self, seconds: float) -> int:
        """Move the cluster's :class:`~.clock.ManualClock` ``seconds`` forward, running
        on the cluster's loop the timers that fall due (sessions, rebalance and
        transaction timeouts), in due order; return how many ran. When it returns, what
        they did is done (members removed, transactions aborted and their markers
        written); clients learn it from their next requests.

        Raises ``RuntimeError`` if the cluster runs on another clock (the real one by
        default: start it with ``FakeCluster(clock=ManualClock())``), ``ValueError`` for
        a negative amount, and what a timer's callback raises.
        """
        clock = self._cluster.state.clock
        if not isinstance(clock, ManualClock):
            raise RuntimeError(
                "the fake cluster's time is not manual: use FakeCluster(clock=ManualClock())"
            )
        return self._cluster.call(lambda: clock.advance(seconds))

    def requests(self, api: int | str | None = None) -> list[RequestLogEntry]:
        """The requests received (the last 10,000), oldest first; only those of ``api``
        when given."""
        key = api_key_of(api) if api is not None else None
        entries = self._cluster.call(lambda: list(self._cluster.state.hooks.log))
        return [e for e in entries if key is None or e.api_key == key]

    def clear_requests(self) -> None:
        """Empty the request log."""
        self._cluster.call(self._cluster.state.hooks.log.clear)

    def records(self, topic: str, partition: int) -> list[Record]:
        """The records of a partition, decoded (control batches left out).

        Raises ``KeyError`` for an unknown partition.
        """
        return self._cluster.call(
            lambda: self._cluster.state.require_partition(topic, partition).log.records()
        )

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """``(log start offset, high watermark)`` of a partition.

        Raises ``KeyError`` for an unknown partition.
        """

        def read() -> tuple[int, int]:
            log = self._cluster.state.require_partition(topic, partition).log
            return log.log_start_offset, log.high_watermark

        return self._cluster.call(read)
