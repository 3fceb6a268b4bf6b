"""The Admin client's share group calls on a fake coordinator (no broker): how the answers
are read where a single-broker run does not reach -- partitions without state (start offset
-1) left out, epochs and lag the broker does not give as None, a partition's error raised
naming it, a topic name the broker leaves out taken from the metadata, a retriable error
retried -- and what each request carries."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

import pytest

from aiostream_kafka.admin.share_groups import ShareGroupCalls
from aiostream_kafka.admin.types import ListOffsetsResult, OffsetSpec, SharePartitionOffsetInfo
from aiostream_kafka.cluster.metadata import ClusterSnapshot, TopicMetadata
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from aiostream_kafka.protocol.messages.share_group_describe import ShareGroupDescribeResponse
from aiostream_kafka.structs import TopicPartition

R = DescribeShareGroupOffsetsResponse
SGD = ShareGroupDescribeResponse


class FakeCluster:
    """Canned answers in order, and the requests sent."""

    def __init__(self, *answers: Any) -> None:
        self.answers = deque(answers)
        self.sent: list[tuple[int | None, Any]] = []
        self.snapshot = ClusterSnapshot()

    async def send(self, node: int | None, request: Any, **_: Any) -> Any:
        self.sent.append((node, request))
        return self.answers.popleft()

    async def refresh(self, *_: Any, **__: Any) -> ClusterSnapshot:
        return self.snapshot


def calls(cluster: FakeCluster) -> ShareGroupCalls:
    config = ClientConfig(
        bootstrap_servers="127.0.0.1:9", default_api_timeout_ms=5000, retry_backoff_ms=1
    )
    return ShareGroupCalls(cluster, config, {"g": 3})  # type: ignore[arg-type]


def offsets_answer(*partitions: R.DescribeShareGroupOffsetsResponsePartition) -> R:
    return R(
        groups=[
            R.DescribeShareGroupOffsetsResponseGroup(
                group_id="g",
                topics=[
                    R.DescribeShareGroupOffsetsResponseTopic(
                        topic_name="t", topic_id=uuid.uuid4(), partitions=list(partitions)
                    )
                ],
            )
        ]
    )


def partition(index: int, start: int, epoch: int = 0, lag: int = -1, error: int = 0) -> Any:
    return R.DescribeShareGroupOffsetsResponsePartition(
        partition_index=index, start_offset=start, leader_epoch=epoch, lag=lag, error_code=error
    )


async def test_offsets_leave_out_partitions_without_state_and_map_unknowns_to_none() -> None:
    cluster = FakeCluster(
        offsets_answer(partition(1, 7, epoch=-1), partition(0, 4, 2, 6), partition(2, -1))
    )
    found = await calls(cluster).list_share_group_offsets(
        "g", [TopicPartition("t", 2), TopicPartition("t", 0), TopicPartition("t", 1)]
    )
    assert found == {
        TopicPartition("t", 0): SharePartitionOffsetInfo(4, 2, 6),
        TopicPartition("t", 1): SharePartitionOffsetInfo(7, None, None),
    }
    node, request = cluster.sent[0]
    assert node == 3 and isinstance(request, DescribeShareGroupOffsetsRequest)
    (group,) = request.groups
    assert group.group_id == "g"
    assert group.topics is not None
    assert [(t.topic_name, t.partitions) for t in group.topics] == [("t", [0, 1, 2])]


async def test_offsets_of_every_partition_ask_with_null_topics() -> None:
    cluster = FakeCluster(offsets_answer())
    assert await calls(cluster).list_share_group_offsets("g") == {}
    assert cluster.sent[0][1].groups[0].topics is None


async def test_a_partition_error_is_raised_naming_the_partition() -> None:
    unknown = ec.UnknownTopicOrPartitionError.error_code
    cluster = FakeCluster(offsets_answer(partition(0, 4), partition(1, -1, error=unknown)))
    with pytest.raises(ec.UnknownTopicOrPartitionError, match=r"share group 'g' .*1"):
        await calls(cluster).list_share_group_offsets("g")


async def test_group_errors_retriable_retried_final_raised() -> None:
    not_found = R(
        groups=[
            R.DescribeShareGroupOffsetsResponseGroup(
                group_id="g", error_code=ec.GroupIdNotFoundError.error_code
            )
        ]
    )
    loading = R(
        groups=[
            R.DescribeShareGroupOffsetsResponseGroup(
                group_id="g", error_code=ec.CoordinatorLoadInProgressError.error_code
            )
        ]
    )
    cluster = FakeCluster(loading, offsets_answer(partition(0, 1)))
    assert await calls(cluster).list_share_group_offsets("g") == {
        TopicPartition("t", 0): SharePartitionOffsetInfo(1, 0, None)
    }
    assert len(cluster.sent) == 2
    with pytest.raises(ec.GroupIdNotFoundError, match="share group 'g'"):
        await calls(FakeCluster(not_found)).list_share_group_offsets("g")


async def test_describe_takes_a_missing_topic_name_from_the_metadata() -> None:
    topic_id = uuid.uuid4()
    cluster = FakeCluster(
        SGD(
            groups=[
                SGD.DescribedGroup(
                    group_id="g",
                    group_state="Stable",
                    group_epoch=2,
                    assignment_epoch=2,
                    assignor_name="simple",
                    members=[
                        SGD.Member(
                            member_id="m",
                            rack_id=None,
                            member_epoch=2,
                            client_id="c",
                            client_host="/127.0.0.1",
                            subscribed_topic_names=["t"],
                            assignment=SGD.Assignment(
                                topic_partitions=[
                                    SGD.TopicPartitions(
                                        topic_id=topic_id, topic_name="", partitions=[1, 0]
                                    )
                                ]
                            ),
                        )
                    ],
                )
            ]
        )
    )
    cluster.snapshot = ClusterSnapshot(
        topics={"t": TopicMetadata(name="t", topic_id=topic_id, is_internal=False, partitions={})}
    )
    d = (await calls(cluster).describe_share_groups(["g"]))["g"]
    assert (d.state, d.coordinator, d.group_epoch, d.assignor) == ("Stable", 3, 2, "simple")
    (m,) = d.members
    assert m.rack is None
    assert m.assignment == [TopicPartition("t", 0), TopicPartition("t", 1)]


async def test_alter_sends_partitions_by_topic_and_raises_the_top_level_error() -> None:
    ok = AlterShareGroupOffsetsResponse()
    non_empty = AlterShareGroupOffsetsResponse(error_code=ec.NonEmptyGroupError.error_code)
    cluster = FakeCluster(ok, non_empty)
    c = calls(cluster)
    await c.alter_share_group_offsets(
        "g", {TopicPartition("b", 1): 5, TopicPartition("a", 0): 2, TopicPartition("b", 0): 0}
    )
    request = cluster.sent[0][1]
    assert isinstance(request, AlterShareGroupOffsetsRequest)
    assert [
        (t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
        for t in request.topics
    ] == [("a", [(0, 2)]), ("b", [(0, 0), (1, 5)])]
    with pytest.raises(ec.NonEmptyGroupError, match="share group 'g'"):
        await c.alter_share_group_offsets("g", {TopicPartition("a", 0): 2})


async def test_delete_raises_a_topic_error_naming_the_topic() -> None:
    D = DeleteShareGroupOffsetsResponse
    cluster = FakeCluster(
        D(
            responses=[
                D.DeleteShareGroupOffsetsResponseTopic(topic_name="a"),
                D.DeleteShareGroupOffsetsResponseTopic(
                    topic_name="b", error_code=ec.UnknownTopicOrPartitionError.error_code
                ),
            ]
        )
    )
    with pytest.raises(ec.UnknownTopicOrPartitionError, match="topic 'b'"):
        await calls(cluster).delete_share_group_offsets("g", ["b", "a"])
    assert [t.topic_name for t in cluster.sent[0][1].topics] == ["a", "b"]


async def test_lag_is_the_brokers_else_the_high_watermark_less_the_start() -> None:
    cluster = FakeCluster(offsets_answer(partition(0, 0, lag=6), partition(1, 4)))
    c = calls(cluster)
    asked: list[dict[TopicPartition, OffsetSpec]] = []

    async def list_offsets(specs: dict[TopicPartition, OffsetSpec]) -> Any:
        asked.append(specs)
        return {tp: ListOffsetsResult(10, -1, None) for tp in specs}

    c.list_offsets = list_offsets  # type: ignore[assignment,method-assign]
    assert await c.share_group_lag("g") == {TopicPartition("t", 0): 6, TopicPartition("t", 1): 6}
    assert asked == [{TopicPartition("t", 1): OffsetSpec.latest()}]
