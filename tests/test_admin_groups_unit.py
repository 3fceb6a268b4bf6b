"""``describe_consumer_groups``' choice of request, on a fake coordinator (no broker): the
paths a single-broker test cannot reach on purpose -- a group that changes type between
ConsumerGroupDescribe and DescribeGroups (an online migration), a share group, a topic
name the broker leaves out -- and the answers measured on 4.3.1 (GROUP_ID_NOT_FOUND from
the request of the other group type)."""

from __future__ import annotations

import uuid
from collections import deque
from typing import Any

import pytest

from aiostream_kafka.admin.groups import GroupCalls
from aiostream_kafka.cluster.metadata import ClusterSnapshot, TopicMetadata
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from aiostream_kafka.structs import TopicPartition

NOT_FOUND = ec.GroupIdNotFoundError.error_code
CGD = ConsumerGroupDescribeResponse


class FakeVersions:
    def __init__(self, keys: set[int]) -> None:
        self.keys = keys

    def supports(self, api_key: int) -> bool:
        return api_key in self.keys


class FakeCoordinator:
    """A connection and a cluster at once: canned answers per request type, in order."""

    def __init__(self, with_key_69: bool = True) -> None:
        self.api_versions = FakeVersions({69} if with_key_69 else set())
        self.answers: dict[type, deque[Any]] = {
            ConsumerGroupDescribeRequest: deque(),
            DescribeGroupsRequest: deque(),
            ListGroupsRequest: deque(),
        }
        self.sent: list[str] = []
        self.snapshot = ClusterSnapshot()

    async def connection(self, node: int) -> FakeCoordinator:
        return self

    async def request(self, request: Any, **_: Any) -> Any:
        self.sent.append(type(request).__name__.removesuffix("Request"))
        return self.answers[type(request)].popleft()

    async def refresh(self, *_: Any, **__: Any) -> ClusterSnapshot:
        return self.snapshot


def calls(coordinator: FakeCoordinator) -> GroupCalls:
    config = ClientConfig(
        bootstrap_servers="127.0.0.1:9", default_api_timeout_ms=5000, retry_backoff_ms=1
    )
    return GroupCalls(coordinator, config, {"g": 1})  # type: ignore[arg-type]


def not_a_consumer_group() -> CGD:
    return CGD(groups=[CGD.DescribedGroup(error_code=NOT_FOUND, group_id="g")])


def not_a_classic_group() -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        groups=[DescribeGroupsResponse.DescribedGroup(error_code=NOT_FOUND, group_id="g")]
    )


def listing(group_type: str | None) -> ListGroupsResponse:
    groups = (
        []
        if group_type is None
        else [ListGroupsResponse.ListedGroup("g", "", "Stable", group_type)]
    )
    return ListGroupsResponse(groups=groups)


def consumer_group(topic_id: uuid.UUID, topic_name: str) -> CGD:
    owned = CGD.Assignment([CGD.TopicPartitions(topic_id, topic_name, [1, 0])])
    member = CGD.Member(
        member_id="m",
        member_epoch=7,
        client_id="c",
        client_host="/h",
        subscribed_topic_regex="",
        subscribed_topic_names=["t"],
        assignment=owned,
        target_assignment=owned,
        member_type=0,
    )
    return CGD(
        groups=[
            CGD.DescribedGroup(
                group_id="g",
                group_state="Stable",
                group_epoch=7,
                assignment_epoch=7,
                assignor_name="uniform",
                members=[member],
            )
        ]
    )


async def test_a_group_migrated_between_the_two_requests_is_described_again() -> None:
    fake = FakeCoordinator()
    fake.answers[ConsumerGroupDescribeRequest].extend(
        [not_a_consumer_group(), consumer_group(uuid.uuid4(), "t")]
    )
    fake.answers[DescribeGroupsRequest].append(not_a_classic_group())
    fake.answers[ListGroupsRequest].append(listing("consumer"))
    described = (await calls(fake).describe_consumer_groups(["g"]))["g"]
    assert fake.sent == [
        "ConsumerGroupDescribe",
        "DescribeGroups",
        "ListGroups",
        "ConsumerGroupDescribe",
    ]
    assert (described.type, described.group_epoch, described.protocol) == ("consumer", 7, "uniform")
    m = described.members[0]
    # a classic member of a consumer group (online migration), partitions sorted
    assert m.member_type == "classic" and m.subscribed_topic_regex is None
    assert m.assignment == [TopicPartition("t", 0), TopicPartition("t", 1)]


async def test_a_share_group_is_described_by_its_listing() -> None:
    fake = FakeCoordinator()
    fake.answers[ConsumerGroupDescribeRequest].append(not_a_consumer_group())
    fake.answers[DescribeGroupsRequest].append(not_a_classic_group())
    fake.answers[ListGroupsRequest].append(listing("share"))
    described = (await calls(fake).describe_consumer_groups(["g"]))["g"]
    assert (described.type, described.state, described.members) == ("share", "Stable", [])


async def test_a_group_of_no_type_is_not_found() -> None:
    fake = FakeCoordinator()
    fake.answers[ConsumerGroupDescribeRequest].append(not_a_consumer_group())
    fake.answers[DescribeGroupsRequest].append(not_a_classic_group())
    fake.answers[ListGroupsRequest].append(listing(None))
    with pytest.raises(ec.GroupIdNotFoundError):
        await calls(fake).describe_consumer_groups(["g"])


async def test_without_key_69_only_describe_groups_is_asked() -> None:
    fake = FakeCoordinator(with_key_69=False)
    fake.answers[DescribeGroupsRequest].append(not_a_classic_group())
    with pytest.raises(ec.GroupIdNotFoundError):
        await calls(fake).describe_consumer_groups(["g"])
    assert fake.sent == ["DescribeGroups"]


async def test_a_topic_the_broker_does_not_name_is_named_from_the_metadata() -> None:
    fake = FakeCoordinator()
    topic_id = uuid.uuid4()
    fake.snapshot = ClusterSnapshot(topics={"named": TopicMetadata("named", topic_id, False, {})})
    fake.answers[ConsumerGroupDescribeRequest].append(consumer_group(topic_id, ""))
    described = (await calls(fake).describe_consumer_groups(["g"]))["g"]
    assert described.members[0].target_assignment == [
        TopicPartition("named", 0),
        TopicPartition("named", 1),
    ]


async def test_unknown_group_types_are_refused_before_any_io() -> None:
    fake = FakeCoordinator()
    with pytest.raises(ValueError, match=r"\['bogus'\]"):
        await calls(fake).list_consumer_groups(types=["bogus", "consumer"])
    assert fake.sent == []
