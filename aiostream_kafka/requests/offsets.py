"""ListOffsets by partition leader and OffsetFetch for a group, sans-IO.

One place for what the Admin client (``list_offsets``, ``list_consumer_group_offsets``),
the consumer (offset resets and look-ups, ``consumer/positions.py``) and the group
(committed offsets on assignment, ``group/offsets.py``) ask the brokers about offsets:

* **ListOffsets** goes to each partition's leader: :func:`by_leader` splits partitions by
  leader (and names those without a usable one), :func:`list_offsets_request` builds one
  broker's request (the isolation level, a timestamp per partition: -2 earliest, -1
  latest, -3 max timestamp, or a time in ms; the current leader epoch from the metadata,
  KIP-320), and :func:`list_offsets_results` reads its answer into one
  :class:`~aiostream_kafka.admin.types.OffsetAndTimestamp` or the broker's typed error per
  partition.
* **OffsetFetch** goes to the group coordinator: :func:`offset_fetch_request` builds it in
  the version's shape (the batched form of KIP-709 from v8, topic ids from v10, stable
  offsets, KIP-447, from v7), :func:`offset_fetch_entries` reads the answer whatever its
  shape, and :func:`committed_offsets` names the partitions (by topic id from v10) and
  splits committed offsets from per-partition errors.
* **OffsetCommit** (a member's commit, ``group/offsets.py``, and a commit from outside the
  group, ``Admin.alter_consumer_group_offsets``): :func:`offset_commit_topics` builds the
  topics of the request in the version's shape (names, or topic ids from v10).

No I/O here: the callers send (the connection picks the version), retry, refresh metadata
and gather per broker.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from aiostream_kafka.admin.types import OffsetAndMetadata, OffsetAndTimestamp
from aiostream_kafka.cluster.metadata import ClusterSnapshot
from aiostream_kafka.errors import KafkaError, UnsupportedVersionError
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_commit import OffsetCommitRequest
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.structs import TopicPartition

__all__ = [
    "CONSUMER_REPLICA_ID",
    "ISOLATION_LEVELS",
    "CommittedOffset",
    "by_leader",
    "committed_offsets",
    "list_offsets_request",
    "list_offsets_results",
    "offset_commit_topics",
    "offset_fetch_entries",
    "offset_fetch_request",
    "offset_fetch_uses_topic_ids",
]

#: OffsetCommit names topics by id from v10 (KIP-848).
_COMMIT_TOPIC_IDS_MIN_VERSION = 10

#: ``isolation_level`` names and their wire values.
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
#: The replica id of a client (not a follower broker) in ListOffsets.
CONSUMER_REPLICA_ID = -1

#: OffsetFetch: every committed partition (no topic list) from v2, the batched
#: (KIP-709) form from v8, topics named by id from v10, ``require_stable`` from v7.
_ALL_PARTITIONS_MIN_VERSION = 2
_BATCHED_MIN_VERSION = 8
_TOPIC_IDS_MIN_VERSION = 10
_REQUIRE_STABLE_MIN_VERSION = 7
_ZERO_UUID = uuid.UUID(int=0)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[TopicPartition]]:
    """``partitions`` by topic, topics and partitions in the order given."""
    grouped: dict[str, list[TopicPartition]] = defaultdict(list)
    for tp in partitions:
        grouped[tp.topic].append(tp)
    return grouped


# -- ListOffsets ----------------------------------------------------------------------------


def by_leader(
    snapshot: ClusterSnapshot, partitions: Iterable[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """Split ``partitions`` by the broker leading each in ``snapshot``.

    Returns ``(by leader node id, leaderless)``, both in the order given. Leaderless are
    the partitions of an unknown topic, unknown partitions, those without a leader (-1)
    and those led by a broker the snapshot does not list: the caller decides what each
    means (retry after a refresh, or an error). Raises nothing.
    """
    groups: dict[int, list[TopicPartition]] = defaultdict(list)
    leaderless = []
    for tp in partitions:
        meta = snapshot.partition(tp)
        if meta is None or meta.leader < 0 or meta.leader not in snapshot.brokers:
            leaderless.append(tp)
        else:
            groups[meta.leader].append(tp)
    return dict(groups), leaderless


def list_offsets_request(
    snapshot: ClusterSnapshot,
    timestamps: Mapping[TopicPartition, int],
    *,
    isolation_level: int,
    timeout_ms: int,
) -> ListOffsetsRequest:
    """One broker's ListOffsets for ``timestamps`` (per partition: -2 earliest, -1 latest,
    -3 max timestamp, or a time in ms), as a client (replica id -1), with
    ``isolation_level`` (0 read_uncommitted, 1 read_committed: "latest" is then the last
    stable offset) and each partition's current leader epoch from ``snapshot`` (-1 when
    unknown; KIP-320 fences a stale leader). ``timeout_ms`` bounds the broker's reads from
    tiered storage (v10+). Returns the request; the version is the connection's choice."""
    return ListOffsetsRequest(
        replica_id=CONSUMER_REPLICA_ID,
        isolation_level=isolation_level,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=tp.partition,
                        current_leader_epoch=_leader_epoch(snapshot, tp),
                        timestamp=timestamps[tp],
                    )
                    for tp in tps
                ],
            )
            for topic, tps in _by_topic(timestamps).items()
        ],
        timeout_ms=timeout_ms,
    )


def _leader_epoch(snapshot: ClusterSnapshot, tp: TopicPartition) -> int:
    meta = snapshot.partition(tp)
    return -1 if meta is None else meta.leader_epoch


def list_offsets_results(
    response: ListOffsetsResponse,
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError]:
    """What a ListOffsets answer says of each partition in it: an
    :class:`~aiostream_kafka.admin.types.OffsetAndTimestamp` (its leader epoch None when
    the broker gives none), or the broker's error as its typed exception (not raised; the
    message names the partition). Raises nothing."""
    out: dict[TopicPartition, OffsetAndTimestamp | KafkaError] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.error_code:
                out[tp] = broker_error(p.error_code, f"ListOffsets for {tp.topic}[{tp.partition}]")
            else:
                epoch = p.leader_epoch if p.leader_epoch >= 0 else None
                out[tp] = OffsetAndTimestamp(p.offset, p.timestamp, epoch)
    return out


# -- OffsetFetch ----------------------------------------------------------------------------


def offset_fetch_uses_topic_ids(version: int) -> bool:
    """Whether OffsetFetch ``version`` names topics by id (v10+): the caller then needs
    fresh metadata of the topics it asks about, and to name the answer's topics."""
    return version >= _TOPIC_IDS_MIN_VERSION


def offset_fetch_request(
    group_id: str,
    partitions: Iterable[TopicPartition] | None,
    *,
    version: int,
    snapshot: ClusterSnapshot,
    coordinator: int | None = None,
) -> OffsetFetchRequest:
    """OffsetFetch of ``group_id``'s committed offsets of ``partitions`` (None: of every
    partition the group committed), in the shape of ``version``: the batched form of
    KIP-709 from v8 (topic ids from ``snapshot``, the zero id for a topic it does not
    know: v10+ asks by id), the single-group form before; stable offsets (KIP-447: a
    pending transactional commit answers UNSTABLE_OFFSET_COMMIT) from v7. Topics in the
    order given, each topic's partitions sorted.

    Raises:
        UnsupportedVersionError: every partition asked for (``partitions`` None) of a
            coordinator (broker ``coordinator``, named in the message) speaking only v1.
    """
    by_topic = None if partitions is None else _by_topic(partitions)
    if version >= _BATCHED_MIN_VERSION:
        topics = None
        if by_topic is not None:
            topics = [
                OffsetFetchRequest.OffsetFetchRequestTopics(
                    name=t,
                    topic_id=snapshot.topics[t].topic_id if t in snapshot.topics else _ZERO_UUID,
                    partition_indexes=sorted(tp.partition for tp in tps),
                )
                for t, tps in by_topic.items()
            ]
        return OffsetFetchRequest(
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=topics)],
            require_stable=True,
        )
    if by_topic is None and version < _ALL_PARTITIONS_MIN_VERSION:
        broker = "" if coordinator is None else f" (broker {coordinator})"
        raise UnsupportedVersionError(
            f"the coordinator of group {group_id!r}{broker} speaks OffsetFetch up to "
            f"v{version}, which cannot ask for every committed partition (v2+, Kafka "
            "0.10.2); pass the partitions"
        )
    return OffsetFetchRequest(
        group_id=group_id,
        topics=None
        if by_topic is None
        else [
            OffsetFetchRequest.OffsetFetchRequestTopic(
                name=t, partition_indexes=sorted(tp.partition for tp in tps)
            )
            for t, tps in by_topic.items()
        ],
        require_stable=version >= _REQUIRE_STABLE_MIN_VERSION,
    )


class CommittedOffset(NamedTuple):
    """One partition of an OffsetFetch answer, whatever the version's shape. ``topic`` is
    None when the answer names the topic by id only (v10+); ``offset`` -1: nothing
    committed; ``error_code`` 0: no error."""

    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


def offset_fetch_entries(
    response: OffsetFetchResponse, *, version: int, group_id: str
) -> list[CommittedOffset]:
    """Every partition of ``group_id``'s OffsetFetch answer (sent at ``version``), in the
    answer's order.

    Raises:
        KafkaError: the group's own error (e.g. ``NotCoordinatorError``,
            ``CoordinatorLoadInProgressError``, ``GroupAuthorizationFailedError``), typed,
            the message naming the group.
    """
    if version >= _BATCHED_MIN_VERSION:
        group = response.groups[0]
        if group.error_code:
            raise broker_error(group.error_code, f"group {group_id!r}")
        return [
            CommittedOffset(
                t.name or None,
                t.topic_id,
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch,
                p.metadata,
                p.error_code,
            )
            for t in group.topics
            for p in t.partitions
        ]
    if response.error_code:
        raise broker_error(response.error_code, f"group {group_id!r}")
    return [
        CommittedOffset(
            t.name or None,
            None,
            p.partition_index,
            p.committed_offset,
            p.committed_leader_epoch,
            p.metadata,
            p.error_code,
        )
        for t in response.topics
        for p in t.partitions
    ]


def committed_offsets(
    entries: Iterable[CommittedOffset], snapshot: ClusterSnapshot, group_id: str
) -> tuple[dict[TopicPartition, OffsetAndMetadata], dict[TopicPartition, KafkaError]]:
    """The committed offset of each partition of ``entries`` (those with nothing committed
    left out), and each partition's error as its typed exception (not raised), in the
    entries' order. A topic named by id only is named from ``snapshot``; one it does not
    know (deleted since the commit) is left out. Raises nothing."""
    found: dict[TopicPartition, OffsetAndMetadata] = {}
    errors: dict[TopicPartition, KafkaError] = {}
    for entry in entries:
        name = entry.topic
        if name is None and entry.topic_id is not None:
            name = snapshot.topic_name(entry.topic_id)
        if name is None:
            continue
        tp = TopicPartition(name, entry.partition)
        if entry.error_code:
            errors[tp] = broker_error(
                entry.error_code,
                f"group {group_id!r}: committed offset of {name}[{entry.partition}]",
            )
        elif entry.offset >= 0:
            found[tp] = OffsetAndMetadata(
                entry.offset,
                entry.metadata,
                entry.leader_epoch if entry.leader_epoch >= 0 else None,
            )
    return found, errors


def offset_commit_topics(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    version: int,
    snapshot: ClusterSnapshot,
) -> list[OffsetCommitRequest.OffsetCommitRequestTopic]:
    """The topics of an OffsetCommit of ``offsets`` at ``version``: by name, or from v10 by
    topic id (a topic ``snapshot`` does not know gets no id: the broker answers
    UNKNOWN_TOPIC_ID for it). Partitions in offset-map order within each topic."""
    by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
    for tp, om in offsets.items():
        by_topic.setdefault(tp.topic, []).append((tp.partition, om))
    by_id = version >= _COMMIT_TOPIC_IDS_MIN_VERSION
    topics = []
    for topic, parts in by_topic.items():
        partitions = [
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p,
                committed_offset=om.offset,
                committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                committed_metadata=om.metadata,
            )
            for p, om in parts
        ]
        if by_id:
            meta = snapshot.topics.get(topic)
            topic_id = meta.topic_id if meta is not None else None
            topics.append(
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    topic_id=topic_id,  # type: ignore[arg-type]
                    partitions=partitions,
                )
            )
        else:
            topics.append(
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=partitions)
            )
    return topics
