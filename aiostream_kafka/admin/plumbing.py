"""What every area of the Admin client shares: the cluster, the settings, the group
coordinators found so far, and the one retry loop of its calls.

``Admin`` (``admin/client.py``) is the public face; its calls live one module per area
(``topics``, ``offsets``, ``configs``, ``groups``), as classes over :class:`AdminCore`
composed into one object the ``Admin`` holds.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import TypeVar

from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import KafkaError, KafkaTimeoutError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.retry import Backoff, retry_until

__all__ = ["GROUP_KEY_TYPE", "AdminCore", "Retry", "broker_error"]

T = TypeVar("T")

#: FindCoordinator's key type of a consumer group.
GROUP_KEY_TYPE = 0


class Retry(Exception):
    """Raised inside an attempt to ask :meth:`AdminCore.with_retries` for another one."""

    def __init__(self, cause: KafkaError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class AdminCore:
    """The Admin client's shared state and plumbing: retries until the deadline, the first
    of several errors raised, and the coordinator of each group looked up once."""

    def __init__(
        self, cluster: Cluster, config: ClientConfig, coordinators: dict[str, int]
    ) -> None:
        self.cluster = cluster
        self.config = config
        #: group id -> coordinator node id (the ``Admin``'s own dict, shared)
        self.coordinators = coordinators

    def timeout_ms(self, timeout_ms: int | None) -> int:
        """``timeout_ms``, or ``default_api_timeout_ms`` when None."""
        return self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms

    async def with_retries(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        timeout_ms: int | None = None,
        topics: Collection[str] = (),
    ) -> T:
        """Run ``attempt`` until it succeeds, retrying retriable errors with back-off until
        the timeout; refresh metadata (of ``topics`` too) between attempts. The timeout
        bounds the whole call, the attempt in progress and its metadata refresh included.

        Returns what ``attempt`` returns. Raises its non-retriable error, or
        ``KafkaTimeoutError`` naming ``what`` and the last error."""
        limit_ms = self.timeout_ms(timeout_ms)

        async def unwrapped() -> T:
            try:
                return await attempt()
            except Retry as retry:
                # A retriable error the attempt reports: the timeout names it.
                raise retry.cause from retry.cause.__cause__

        async def between(error: Exception) -> None:
            if isinstance(error, ec.NotCoordinatorError | ec.CoordinatorNotAvailableError):
                self.coordinators.clear()  # the coordinator moved: look it up again
            with contextlib.suppress(KafkaTimeoutError):
                await self.cluster.refresh(topics)  # else the next attempt reports it

        return await retry_until(
            what,
            unwrapped,
            deadline=time.monotonic() + limit_ms / 1000,
            limit=f"{limit_ms} ms",
            backoff=Backoff.of(self.config),
            between=between,
        )

    @staticmethod
    def raise_first(
        errors: dict[str, KafkaError], final: tuple[type[KafkaError], ...] = ()
    ) -> None:
        """Raise for ``errors``: :class:`Retry` if any is retriable (and not of a ``final``
        type), else the first, naming the others. Returns only when ``errors`` is empty."""
        if not errors:
            return
        for error in errors.values():
            if isinstance(error, final):
                error.retriable = False
        retriable = {k: v for k, v in errors.items() if v.retriable}
        if retriable:
            first = next(iter(retriable.values()))
            raise Retry(first)
        first = next(iter(errors.values()))
        if len(errors) > 1:
            others = "; ".join(f"{k}: {type(v).__name__}" for k, v in list(errors.items())[1:])
            raise type(first)(f"{first} (also failed: {others})")
        raise first

    async def find_coordinator(self, group_id: str) -> int:
        """The node id of the coordinator of ``group_id`` (cached until it moves)."""
        cached = self.coordinators.get(group_id)
        if cached is not None:
            return cached

        async def attempt() -> int:
            return await self.cluster.find_coordinator(group_id, GROUP_KEY_TYPE)

        node = await self.with_retries("find_coordinator", attempt)
        self.coordinators[group_id] = node
        return node

    async def topic_names(
        self, topics: Iterable[tuple[uuid.UUID, str | None]]
    ) -> dict[uuid.UUID, str]:
        """Names by topic id of ``(topic_id, name or None)`` pairs, as a group description
        gives them: the name the broker sent, else the cluster metadata's (refreshed once
        when an id is not in it). A topic deleted since is left out."""
        names: dict[uuid.UUID, str] = {}
        unnamed: set[uuid.UUID] = set()
        for topic_id, name in topics:
            if name:
                names[topic_id] = name
            else:
                unnamed.add(topic_id)
        unnamed -= names.keys()
        if unnamed:
            snapshot = self.cluster.snapshot
            if any(snapshot.topic_name(i) is None for i in unnamed):
                snapshot = await self.cluster.refresh(all_topics=True)
            for topic_id in unnamed:
                found = snapshot.topic_name(topic_id)
                if found is not None:
                    names[topic_id] = found
        return names
