"""Fetch sessions (KIP-227) on the fake broker, sans-IO.

A session remembers, per partition, what the client asked for (fetch offset, partition
max bytes) and what the broker last told it (high watermark, last stable offset, log
start offset). An incremental request names only partitions that changed or were
forgotten; an incremental response carries only partitions with records, with a changed
offset, or with an error.

The request's ``(session_id, session_epoch)``:

* ``(0, -1)``: no session, a full fetch of the request's partitions;
* ``(0, 0)`` or ``(id, 0)``: a new session (an old one named is dropped) with the
  request's partitions, answered in full with its id;
* ``(id, -1)``: the session is closed; a full fetch without session;
* ``(id, n)``: incremental, ``n`` must be the session's next epoch
  (``INVALID_FETCH_SESSION_EPOCH`` otherwise; ``FETCH_SESSION_ID_NOT_FOUND`` for an
  unknown id).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from uuid import UUID

__all__ = ["FINAL_EPOCH", "FetchSession", "FetchSessionCache", "SessionPartition", "TopicRef"]

#: The epoch of a request that closes its session (or asks for none).
FINAL_EPOCH = -1
#: Sessions a broker keeps (the least recently used is evicted).
MAX_SESSIONS = 1000

#: A topic as a request names it: by name (Fetch < v13) or by id (v13+).
TopicRef = str | UUID


@dataclass(slots=True)
class SessionPartition:
    """One partition of a fetch: the request's part and the last values answered."""

    topic: TopicRef
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1


class FetchSession:
    """One client's session on one broker."""

    __slots__ = ("next_epoch", "partitions", "session_id")

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id
        self.next_epoch = 1
        self.partitions: OrderedDict[tuple[TopicRef, int], SessionPartition] = OrderedDict()

    def update(self, partitions: list[SessionPartition]) -> None:
        """Add or update the partitions a request names (keeping what was answered)."""
        for p in partitions:
            key = (p.topic, p.partition)
            known = self.partitions.get(key)
            if known is None:
                self.partitions[key] = p
            else:
                known.fetch_offset = p.fetch_offset
                known.max_bytes = p.max_bytes
                known.current_leader_epoch = p.current_leader_epoch

    def forget(self, keys: list[tuple[TopicRef, int]]) -> None:
        """Drop the partitions a request lists as forgotten."""
        for key in keys:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """The sessions of one broker, bounded (least recently used evicted)."""

    def __init__(self, capacity: int = MAX_SESSIONS) -> None:
        self.capacity = capacity
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._next_id = 1
        #: Incremental fetches served (for tests).
        self.incremental_fetches = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> FetchSession:
        """A new session with a fresh id."""
        while len(self._sessions) >= self.capacity:
            self._sessions.popitem(last=False)
        session_id = self._next_id
        self._next_id = self._next_id + 1 if self._next_id < 2**31 - 1 else 1
        session = FetchSession(session_id)
        self._sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        """The session with this id, marked recently used, or None."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        """Forget a session (closed by its client)."""
        self._sessions.pop(session_id, None)

    def clear(self) -> None:
        """Forget every session (the broker restarted)."""
        self._sessions.clear()
