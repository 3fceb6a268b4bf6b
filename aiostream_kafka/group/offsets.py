"""``GroupOffsets``: the group's committed offsets, for one membership.

Split from the membership (:mod:`~aiostream_kafka.group.coordinator`): committing and
reading offsets need only the membership's identity (generation, member id, owned
partitions, state) and its coordinator, which :class:`Membership` names. OffsetCommit
carries the generation so that a member that left or missed a rebalance cannot commit;
OffsetFetch asks for stable offsets (KIP-447: a pending transactional commit is waited
out). Both retry coordinator moves and network errors up to ``default_api_timeout_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Protocol

from aiostream_kafka.admin.types import OffsetAndMetadata
from aiostream_kafka.cluster.cluster import Cluster
from aiostream_kafka.errors import (
    CommitFailedError,
    FencedMemberError,
    KafkaError,
    KafkaTimeoutError,
    NetworkError,
    reraisable,
)
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.requests.offsets import (
    committed_offsets,
    offset_commit_topics,
    offset_fetch_entries,
    offset_fetch_request,
    offset_fetch_uses_topic_ids,
)
from aiostream_kafka.retry import Backoff, retry_until
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.telemetry.stats import Window

_UNKNOWN_MEMBER_ID = 25
_ILLEGAL_GENERATION = 22
_REBALANCE_IN_PROGRESS = 27
_FENCED_INSTANCE_ID = 82
_FENCED_MEMBER_EPOCH = 110
_STALE_MEMBER_EPOCH = 113


class _StaleEpoch(KafkaError):
    """Internal: a commit was answered STALE_MEMBER_EPOCH for member epoch ``epoch``."""

    retriable = True

    def __init__(self, message: str, epoch: int) -> None:
        super().__init__(message)
        self.epoch = epoch


#: Errors retried after looking the coordinator up again.
_COORDINATOR_TROUBLE = (
    NetworkError,
    KafkaTimeoutError,
    ec.NotCoordinatorError,
    ec.CoordinatorNotAvailableError,
    ec.CoordinatorLoadInProgressError,
)


class Membership(Protocol):
    """What committing needs of the membership (the group coordinator)."""

    member_id: str
    owned: frozenset[TopicPartition]

    @property
    def generation(self) -> int:
        """The classic generation, or the KIP-848 member epoch."""

    def final_error(self) -> KafkaError | None:
        """The error that ended the membership for good (fenced, failed), if any."""

    async def coordinator_node(self) -> int: ...

    def coordinator_lost(self, why: object) -> None: ...

    def request_rejoin(self, reason: str) -> None: ...

    async def epoch_moved(self, stale: int, timeout_s: float) -> None:
        """Wait until the member epoch is no longer ``stale`` (KIP-848: a commit answered
        STALE_MEMBER_EPOCH goes again with the epoch the next heartbeat brings)."""


class GroupOffsets:
    """Commit and read group ``config.group_id``'s offsets as ``member``."""

    def __init__(self, cluster: Cluster, config: GroupConfig, member: Membership) -> None:
        self.cluster = cluster
        self.config = config
        self._member = member
        # Milliseconds each successful commit took, for the pushed client metrics (KIP-714).
        self.commit_latency = Window()
        self.commits = 0

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit ``offsets`` (the next offset to consume of each partition) for the group.

        Raises:
            CommitFailedError: a partition is not owned by this member (revoked or lost),
                or the group moved to a new generation; nothing is committed then.
            FencedMemberError: this static member was fenced.
            KafkaTimeoutError: the coordinator did not accept it within
                ``default_api_timeout_ms``.
        """
        if not offsets:
            return
        final = self._member.final_error()
        if final is not None:
            raise reraisable(final)
        self._check_owned(offsets)
        limit_ms = self.config.default_api_timeout_ms
        deadline = time.monotonic() + limit_ms / 1000

        async def lost(error: Exception) -> None:
            if isinstance(error, _StaleEpoch):
                # KIP-848: the epoch moved on; the heartbeat brings the new one (librdkafka
                # drops such a commit: here it goes again, if the partitions are still ours).
                await self._member.epoch_moved(error.epoch, max(0.0, deadline - time.monotonic()))
                return
            self._member.coordinator_lost(error)  # look it up again

        started = time.monotonic()
        await retry_until(
            f"group {self.config.group_id!r}: commit",
            lambda: self._commit_once(offsets),
            deadline=deadline,
            limit=f"{limit_ms} ms",
            backoff=Backoff.of(self.config),
            retriable=lambda error: isinstance(error, (*_COORDINATOR_TROUBLE, _StaleEpoch)),
            between=lost,
        )
        self.commits += 1
        self.commit_latency.record((time.monotonic() - started) * 1000)

    def _check_owned(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        not_owned = sorted(tp for tp in offsets if tp not in self._member.owned)
        if not_owned:
            raise CommitFailedError(
                f"group {self.config.group_id!r}: cannot commit offsets of {not_owned}: this "
                "member does not own them (they were revoked or lost in a rebalance)"
            )

    async def _commit_once(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        self._check_owned(offsets)  # again: a retry may come after a rebalance
        node = await self._member.coordinator_node()
        conn = await self.cluster.connection(node)
        version = conn.version_for(OffsetCommitRequest)
        topic_names = {tp.topic for tp in offsets}
        snapshot = self.cluster.snapshot
        if version >= 10 and any(t not in snapshot.topics for t in topic_names):
            snapshot = await self.cluster.refresh(topic_names)
        topics = offset_commit_topics(offsets, version, snapshot)
        epoch = self._member.generation
        request = OffsetCommitRequest(
            group_id=self.config.group_id,
            generation_id_or_member_epoch=epoch,
            member_id=self._member.member_id,
            group_instance_id=self.config.group_instance_id,
            topics=topics,
        )
        response = await conn.request(request, version=version)
        assert isinstance(response, OffsetCommitResponse)
        for answered in response.topics:
            name = getattr(answered, "name", None) or snapshot.topic_name(answered.topic_id) or "?"
            for p in answered.partitions:
                code = p.error_code
                if code == 0:
                    continue
                where = f"{name}[{p.partition_index}]"
                if code == _STALE_MEMBER_EPOCH:
                    raise _StaleEpoch(
                        f"group {self.config.group_id!r}: commit of {where} with member epoch "
                        f"{epoch} refused (STALE_MEMBER_EPOCH)",
                        epoch,
                    )
                if code in (
                    _UNKNOWN_MEMBER_ID,
                    _ILLEGAL_GENERATION,
                    _REBALANCE_IN_PROGRESS,
                    _FENCED_MEMBER_EPOCH,
                ):
                    if code != _REBALANCE_IN_PROGRESS:
                        self._member.request_rejoin(f"commit: {ec.ERRORS_BY_CODE[code].name}")
                    raise CommitFailedError(
                        f"group {self.config.group_id!r}: commit of {where} refused "
                        f"({ec.ERRORS_BY_CODE[code].name}): the group is rebalancing or this "
                        "member left it; the partition's new owner continues from the last "
                        "committed offset"
                    )
                if code == _FENCED_INSTANCE_ID:
                    raise FencedMemberError(f"group {self.config.group_id!r}: fenced")
                raise broker_error(code, f"group {self.config.group_id!r}: commit of {where}")

    async def committed(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Return the group's committed offset of each partition (None: nothing committed).

        Waits out UNSTABLE_OFFSET_COMMIT (a transactional commit pending) and coordinator
        moves, up to ``default_api_timeout_ms``.
        """
        parts = sorted(set(partitions))
        if not parts:
            return {}
        limit_ms = self.config.default_api_timeout_ms

        async def between(error: Exception) -> None:
            if not isinstance(error, ec.UnstableOffsetCommitError):
                self._member.coordinator_lost(error)  # look it up again

        # A steady wait (retry_backoff_ms, jittered): a pending transactional commit is
        # usually over within milliseconds.
        steady = self.config.retry_backoff_ms / 1000
        return await retry_until(
            f"group {self.config.group_id!r}: committed offsets",
            lambda: self._committed_once(parts),
            deadline=time.monotonic() + limit_ms / 1000,
            limit=f"{limit_ms} ms",
            backoff=Backoff(steady, steady),
            retriable=lambda error: isinstance(
                error, (*_COORDINATOR_TROUBLE, ec.UnstableOffsetCommitError)
            ),
            between=between,
        )

    async def _committed_once(
        self, parts: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        node = await self._member.coordinator_node()
        conn = await self.cluster.connection(node)
        version = conn.version_for(OffsetFetchRequest)
        snapshot = self.cluster.snapshot
        if offset_fetch_uses_topic_ids(version) and any(
            tp.topic not in snapshot.topics for tp in parts
        ):
            snapshot = await self.cluster.refresh({tp.topic for tp in parts})
        group_id = self.config.group_id
        request = offset_fetch_request(group_id, parts, version=version, snapshot=snapshot)
        response = await conn.request(request, version=version)
        assert isinstance(response, OffsetFetchResponse)
        entries = offset_fetch_entries(response, version=version, group_id=group_id)
        found, errors = committed_offsets(entries, snapshot, group_id)
        for error in errors.values():
            raise error
        result: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(parts)
        result.update(found)
        return result
