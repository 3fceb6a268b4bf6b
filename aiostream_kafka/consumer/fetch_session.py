"""Incremental fetch sessions (KIP-227), sans-IO: what to put in the next Fetch to a broker.

A session lets a broker remember the partitions a client fetches, and at what offset, so
that each request carries only what changed and each response only partitions with news.
Its state here is what the broker holds: the partitions last agreed with their fetch
offset, current leader epoch, size limit and topic id.

Session id and epoch in a request mean (KIP-227):

====== ======= ===============================================================
id     epoch   meaning
====== ======= ===============================================================
0      -1      full fetch, no session (Fetch v4-v6 have no sessions at all)
0      0       full fetch; the broker creates a session if it can
ID     0       close session ID, full fetch, create a new session
ID     N > 0   incremental fetch in session ID, the N-th since it was created
ID     -1      close session ID (sent when the consumer closes)
====== ======= ===============================================================

The consumer builds every request from the partitions that have demand right now, so a
partition whose prefetch queue is full, or that is paused, or that moved to another leader,
*leaves* the session (it is listed in ``forgotten_topics_data``) and rejoins (is sent
again) once it has room: the broker never reads data nobody asked for. A partition whose
fetch offset did not move since the last request is left out of an incremental request:
the broker still fetches it, from the offset it remembers.

The state advances only on a response without a top-level error. A lost request leaves
the epoch unknown, so the next request closes the session and opens a new one; the
session errors FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH and
FETCH_SESSION_TOPIC_ID_ERROR reset it the same way. Since Fetch v13 partitions are named by
topic id (KIP-516); a topic re-created under a new id leaves the session under its old id
and joins under the new one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from aiostream_kafka.protocol.messages.fetch import FetchRequest
from aiostream_kafka.structs import TopicPartition

__all__ = ["FetchPlan", "FetchSession", "SessionPartition"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
_MAX_EPOCH = 2**31 - 1

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
FETCH_SESSION_TOPIC_ID_ERROR = 106
SESSION_ERRORS = frozenset(
    {FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR}
)

#: First Fetch version with sessions (KIP-227) and with topic ids (KIP-516).
SESSION_MIN_VERSION = 7
TOPIC_ID_MIN_VERSION = 13


@dataclass(frozen=True, slots=True)
class SessionPartition:
    """One partition as a Fetch request states it (and, once agreed, the session holds it)."""

    tp: TopicPartition
    topic_id: uuid.UUID
    fetch_offset: int
    leader_epoch: int
    max_bytes: int


@dataclass(slots=True)
class FetchPlan:
    """What one request carries, and the session state it establishes when answered."""

    session_id: int
    epoch: int
    full: bool
    send: list[SessionPartition]
    forget: list[SessionPartition]
    wanted: dict[TopicPartition, SessionPartition]
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)

    @property
    def incremental(self) -> bool:
        """Whether this is an incremental request of an existing session."""
        return not self.full


class FetchSession:
    """The fetch session with one broker. Not thread-safe; owned by that broker's fetcher,
    which has at most one Fetch in flight (a session's requests are strictly ordered)."""

    __slots__ = ("epoch", "node_id", "partitions", "resets", "session_id", "uses_topic_ids")

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.uses_topic_ids: bool | None = None
        self.resets = 0

    def __repr__(self) -> str:
        return (
            f"<FetchSession broker {self.node_id} id={self.session_id} epoch={self.epoch} "
            f"partitions={len(self.partitions)}>"
        )

    def plan(self, wanted: list[SessionPartition], version: int) -> FetchPlan:
        """The next request for ``wanted`` (the partitions with demand, in priority order)."""
        by_tp = {p.tp: p for p in wanted}
        names = {p.topic_id: p.tp.topic for p in wanted}
        if version < SESSION_MIN_VERSION:
            return FetchPlan(NO_SESSION, FINAL_EPOCH, True, list(wanted), [], by_tp, names)
        uses_ids = version >= TOPIC_ID_MIN_VERSION
        if self.uses_topic_ids is not None and self.uses_topic_ids != uses_ids:
            # Names and ids must not mix within a session (FETCH_SESSION_TOPIC_ID_ERROR).
            self.reset(close_existing=True)
        self.uses_topic_ids = uses_ids
        if self.epoch == INITIAL_EPOCH:
            return FetchPlan(self.session_id, INITIAL_EPOCH, True, list(wanted), [], by_tp, names)
        send: list[SessionPartition] = []
        forget: list[SessionPartition] = []
        for tp, held in self.partitions.items():
            now = by_tp.get(tp)
            if now is None or (uses_ids and now.topic_id != held.topic_id):
                forget.append(held)
                names.setdefault(held.topic_id, tp.topic)
        for p in wanted:
            if self.partitions.get(p.tp) != p:
                send.append(p)
        return FetchPlan(self.session_id, self.epoch, False, send, forget, by_tp, names)

    def request(
        self,
        plan: FetchPlan,
        version: int,
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        rack_id: str,
    ) -> FetchRequest:
        """Encode ``plan`` as a FetchRequest of ``version``; partitions are grouped by topic
        in the order given (the broker fills the response in request order)."""
        uses_ids = version >= TOPIC_ID_MIN_VERSION
        topics: dict[str, FetchRequest.FetchTopic] = {}
        for p in plan.send:
            topic = topics.get(p.tp.topic)
            if topic is None:
                topic = topics[p.tp.topic] = FetchRequest.FetchTopic(
                    topic="" if uses_ids else p.tp.topic, topic_id=p.topic_id, partitions=[]
                )
            topic.partitions.append(
                FetchRequest.FetchPartition(
                    partition=p.tp.partition,
                    current_leader_epoch=p.leader_epoch,
                    fetch_offset=p.fetch_offset,
                    partition_max_bytes=p.max_bytes,
                )
            )
        forgotten: dict[str, FetchRequest.ForgottenTopic] = {}
        for p in plan.forget:
            key = str(p.topic_id) if uses_ids else p.tp.topic
            entry = forgotten.get(key)
            if entry is None:
                entry = forgotten[key] = FetchRequest.ForgottenTopic(
                    topic="" if uses_ids else p.tp.topic, topic_id=p.topic_id, partitions=[]
                )
            entry.partitions.append(p.tp.partition)
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=list(topics.values()),
            forgotten_topics_data=list(forgotten.values()),
            rack_id=rack_id,
        )

    def on_response(self, plan: FetchPlan, error_code: int, session_id: int) -> None:
        """Advance after a response; ``error_code`` is its top-level error."""
        if plan.epoch == FINAL_EPOCH and plan.session_id == NO_SESSION:
            return  # sessionless
        if error_code == FETCH_SESSION_ID_NOT_FOUND:
            self.reset(close_existing=False)
            return
        if error_code != 0:
            self.reset(close_existing=True)
            return
        self.partitions = dict(plan.wanted)
        if session_id == NO_SESSION:
            # Full request: the broker made no session (its cache may be full). Incremental
            # request: the broker ended the session. Either way, start over.
            self.session_id = NO_SESSION
            self.epoch = INITIAL_EPOCH
            self.partitions = {}
            return
        if plan.full:
            self.session_id = session_id
            self.epoch = 1
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1

    def on_failure(self) -> None:
        """The request got no answer: the broker may or may not have applied it."""
        self.reset(close_existing=True)

    def reset(self, *, close_existing: bool) -> None:
        """Make the next request full; with ``close_existing`` it also closes the current
        session on the broker (id kept, epoch 0)."""
        if self.session_id != NO_SESSION or self.epoch != INITIAL_EPOCH:
            self.resets += 1
        if not close_existing:
            self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self.partitions = {}

    def close_request(self, version: int) -> FetchRequest | None:
        """A request closing the session on the broker (epoch -1), or None if none is open."""
        if self.session_id == NO_SESSION or version < SESSION_MIN_VERSION:
            return None
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=1,
            session_id=self.session_id,
            session_epoch=FINAL_EPOCH,
        )
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self.partitions = {}
        return request
