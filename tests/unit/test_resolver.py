"""The offset resolver against a fake engine and a fake cluster answering ListOffsets and
OffsetForLeaderEpoch (tests/fakes.py): resets to earliest/latest, ``auto_offset_reset=
"none"``, answers that come after a seek, broker and partition errors, KIP-320 validation
after a leader change, and topics that disappear."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fakes import FakeCluster, FakeEngine, snapshot, topic_id

from aiostream_kafka.cluster.metadata import TopicMetadata
from aiostream_kafka.consumer.errors import (
    LogTruncationError,
    NoOffsetForPartitionError,
    TopicDeletedError,
)
from aiostream_kafka.consumer.partition import PendingError
from aiostream_kafka.consumer.positions import OffsetResolver
from aiostream_kafka.errors import KafkaError, NetworkError
from aiostream_kafka.protocol.base import Request
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from aiostream_kafka.structs import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def list_offsets(
    offsets: dict[int, int], errors: dict[int, int] | None = None
) -> Callable[[Request], ListOffsetsResponse]:
    """A ListOffsets handler: per timestamp asked (-2 earliest, -1 latest) an offset; an
    error code per partition instead when ``errors`` names it."""

    def answer(request: Request) -> ListOffsetsResponse:
        assert isinstance(request, ListOffsetsRequest)
        return ListOffsetsResponse(
            topics=[
                ListOffsetsResponse.ListOffsetsTopicResponse(
                    name=topic.name,
                    partitions=[
                        ListOffsetsResponse.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=(errors or {}).get(p.partition_index, 0),
                            timestamp=-1,
                            offset=offsets[p.timestamp],
                            leader_epoch=0,
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    return answer


def epoch_end(
    end_offset: int, leader_epoch: int = 1, error: int = 0
) -> Callable[[Request], OffsetForLeaderEpochResponse]:
    def answer(request: Request) -> OffsetForLeaderEpochResponse:
        assert isinstance(request, OffsetForLeaderEpochRequest)
        return OffsetForLeaderEpochResponse(
            topics=[
                OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                    topic=topic.topic,
                    partitions=[
                        OffsetForLeaderEpochResponse.EpochEndOffset(
                            error_code=error,
                            partition=p.partition,
                            leader_epoch=leader_epoch,
                            end_offset=end_offset,
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    return answer


def rig(
    leaders: dict[TopicPartition, int], handlers: dict[type[Request], object], **config: object
) -> tuple[FakeEngine, OffsetResolver]:
    cluster = FakeCluster(
        snapshot(leaders, fetched_at=time.monotonic()),
        handlers,  # type: ignore[arg-type]
    )
    engine = FakeEngine(cluster, **config)  # type: ignore[arg-type]
    resolver = OffsetResolver(engine)  # type: ignore[arg-type]
    return engine, resolver


def queued_error(engine: FakeEngine, tp: TopicPartition) -> PendingError:
    (item,) = engine.partitions[tp].queue
    assert isinstance(item, PendingError)
    return item


async def test_a_partition_without_a_position_is_reset_via_its_leader() -> None:
    engine, resolver = rig(
        {T0: 1, T1: 2}, {ListOffsetsRequest: list_offsets({-2: 5, -1: 42})}, isolation=1
    )
    engine.add(T0, position=None, reset="earliest")
    engine.add(T1, position=None, reset="latest")
    assert await resolver._step() == 0.0  # look again at once: results may unblock more
    assert engine.partitions[T0].fetch_position == 5
    assert engine.partitions[T1].fetch_position == 42
    asked = {node: r for node, r in engine.cluster.sent}
    assert set(asked) == {1, 2}  # one request per leader
    assert isinstance(asked[1], ListOffsetsRequest) and asked[1].isolation_level == 1
    assert engine.buffer.metrics.position_resets == 2
    assert engine.scheduler.wakes >= 1
    delay = await resolver._step()  # nothing left but the metadata_max_age_ms refresh
    assert delay is not None and delay > 250 and len(engine.cluster.sent) == 2


async def test_auto_offset_reset_none_queues_the_error_and_asks_nobody() -> None:
    engine, resolver = rig({T0: 1}, {})
    engine.add(T0, position=None, reset="none")
    await resolver._step()
    assert isinstance(queued_error(engine, T0).error, NoOffsetForPartitionError)
    assert engine.partitions[T0].blocked and engine.cluster.sent == []


async def test_an_answer_to_a_request_older_than_a_seek_is_dropped() -> None:
    engine: FakeEngine

    def seek_meanwhile(request: Request) -> ListOffsetsResponse:
        # The application seeks while the request is out.
        engine.reposition(engine.partitions[T0], 77, None)
        return list_offsets({-2: 5, -1: 9})(request)

    engine, resolver = rig({T0: 1}, {ListOffsetsRequest: seek_meanwhile})
    engine.add(T0, position=None, reset="earliest")
    await resolver._step()
    assert engine.partitions[T0].fetch_position == 77  # the seek wins
    assert [c[0] for c in engine.calls] == ["reposition"]


async def test_a_broker_that_fails_is_tried_again_after_a_back_off() -> None:
    failures = [NetworkError("connection lost")]

    def flaky(request: Request) -> ListOffsetsResponse:
        if failures:
            raise failures.pop()
        return list_offsets({-2: 3, -1: 3})(request)

    engine, resolver = rig({T0: 1}, {ListOffsetsRequest: flaky})
    ps = engine.add(T0, position=None, reset="earliest")
    await resolver._step()
    assert ps.fetch_position is None and ps.retry_at > time.monotonic()
    assert resolver._metadata_wanted  # the leader may have moved
    delay = await resolver._step()  # refreshes metadata, then waits for the back-off
    assert engine.cluster.refreshes == 1 and delay is not None and 0 < delay <= 0.01
    ps.retry_at = 0.0
    await resolver._step()
    assert ps.fetch_position == 3


async def test_partition_errors_retry_when_retriable_and_are_queued_otherwise() -> None:
    engine, resolver = rig(
        {T0: 1, T1: 1},
        {ListOffsetsRequest: list_offsets({-2: 0, -1: 0}, errors={0: 6, 1: 73})},
    )
    p0 = engine.add(T0, position=None, reset="earliest")
    p1 = engine.add(T1, position=None, reset="earliest")
    await resolver._step()
    assert p0.fetch_position is None and p0.retry_at > 0 and not p0.queue  # NOT_LEADER
    error = queued_error(engine, T1)  # 73 (RECORD_LIST_TOO_LARGE): not retriable
    assert error.retry and isinstance(error.error, KafkaError)
    assert p1.fetch_position is None


async def test_a_leader_without_a_known_broker_waits_for_metadata() -> None:
    engine, resolver = rig({T0: -1}, {})
    ps = engine.add(T0, position=None, reset="earliest")
    await resolver._step()
    assert engine.cluster.sent == [] and ps.retry_at > 0 and resolver._metadata_wanted


async def test_a_new_leader_epoch_validates_the_position_and_detects_truncation() -> None:
    engine, resolver = rig({T0: 1}, {OffsetForLeaderEpochRequest: epoch_end(80, leader_epoch=0)})
    ps = engine.add(T0, position=100, epoch=0)
    ps.fetch_epoch = 0
    engine.cluster.snapshot = snapshot({T0: 1}, epochs={T0: 1}, fetched_at=time.monotonic())
    await resolver._step()  # sees the new epoch: validating, fetching waits
    assert ps.leader_epoch == 1
    assert engine.calls == [("reposition", T0, 80)]  # the new leader's log ends at 80
    assert engine.buffer.metrics.log_truncations == 1 and not ps.validating


async def test_truncation_with_auto_offset_reset_none_is_an_error() -> None:
    engine, resolver = rig(
        {T0: 1},
        {OffsetForLeaderEpochRequest: epoch_end(80, leader_epoch=0)},
        auto_offset_reset="none",
    )
    ps = engine.add(T0, position=100, epoch=0)
    ps.fetch_epoch = 0
    engine.cluster.snapshot = snapshot({T0: 1}, epochs={T0: 1}, fetched_at=time.monotonic())
    await resolver._step()
    error = queued_error(engine, T0).error
    assert isinstance(error, LogTruncationError) and ps.fetch_position == 100


async def test_a_position_within_the_new_leaders_log_is_kept() -> None:
    engine, resolver = rig({T0: 1}, {OffsetForLeaderEpochRequest: epoch_end(150)})
    ps = engine.add(T0, position=100, epoch=0)
    ps.fetch_epoch = 0
    engine.cluster.snapshot = snapshot({T0: 1}, epochs={T0: 1}, fetched_at=time.monotonic())
    await resolver._step()
    assert not ps.validating and ps.fetch_position == 100 and engine.calls == []
    assert engine.buffer.metrics.position_validations == 1


@pytest.mark.parametrize("how", ["deleted", "recreated"])
async def test_a_topic_that_goes_away_fails_its_partitions(how: str) -> None:
    engine, resolver = rig({T0: 1}, {}, missing_topic_timeout_ms=0)
    ps = engine.add(T0, position=0)
    if how == "deleted":
        engine.cluster.snapshot = snapshot({}, fetched_at=time.monotonic())
        engine.cluster.snapshot.topics["t"] = TopicMetadata("t", topic_id("t"), False, {}, 3)
    else:
        ps.topic_id = topic_id("t-before")  # the topic id it was consumed under
    await resolver._step()
    ((what, tp, error),) = engine.calls
    assert what == "fail" and tp == T0 and isinstance(error, TopicDeletedError)
    assert ps.failed and ps.blocked
