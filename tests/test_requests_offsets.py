"""Unit tests of the sans-IO request logic (``aiostream_kafka/requests/``), no broker:
ListOffsets split by leader (leaderless partitions named), its request per version and
its answer read into the one result type; OffsetFetch built in each version's shape and
its answer read whatever the shape (topic ids named, per-partition errors); the one
mapping of a broker's error code. Then the three users on fakes of the cluster: the
Admin client, the consumer's offset look-up and the group's committed offsets."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from typing import Any

import pytest

import aiostream_kafka
from aiostream_kafka.admin.client import AdminCalls
from aiostream_kafka.admin.types import ListOffsetsResult, OffsetAndMetadata, OffsetAndTimestamp
from aiostream_kafka.cluster.metadata import (
    BrokerMetadata,
    ClusterSnapshot,
    PartitionMetadata,
    TopicMetadata,
)
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer.positions import lookup_offsets
from aiostream_kafka.errors import KafkaError, UnsupportedVersionError
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.offsets import GroupOffsets
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.base import Message, Request
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiostream_kafka.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from aiostream_kafka.requests.errors import broker_error
from aiostream_kafka.requests.offsets import (
    CommittedOffset,
    by_leader,
    committed_offsets,
    list_offsets_request,
    list_offsets_results,
    offset_fetch_entries,
    offset_fetch_request,
    offset_fetch_uses_topic_ids,
)
from aiostream_kafka.structs import TopicPartition as TP

ORDERS_ID = uuid.UUID(int=7)
PAYMENTS_ID = uuid.UUID(int=8)
ZERO_ID = uuid.UUID(int=0)


def _partition(topic: str, p: int, leader: int, epoch: int = 5) -> PartitionMetadata:
    return PartitionMetadata(topic, p, leader, epoch, (leader,), (leader,))


def snapshot() -> ClusterSnapshot:
    """Brokers 1 and 2; ``orders`` 0-3 (0 and 2 on broker 1, 1 on broker 2, 3 led by
    broker 9, which the metadata does not list), ``payments`` 0 on broker 2 and 1 without
    a leader."""
    brokers = {n: BrokerMetadata(n, "localhost", 9090 + n) for n in (1, 2)}
    orders = {
        0: _partition("orders", 0, 1, epoch=4),
        1: _partition("orders", 1, 2),
        2: _partition("orders", 2, 1),
        3: _partition("orders", 3, 9),
    }
    payments = {0: _partition("payments", 0, 2, epoch=11), 1: _partition("payments", 1, -1)}
    topics = {
        "orders": TopicMetadata("orders", ORDERS_ID, False, orders),
        "payments": TopicMetadata("payments", PAYMENTS_ID, False, payments),
    }
    return ClusterSnapshot(brokers=brokers, topics=topics, fetched_at=1e18)


def roundtrip(message: Message, version: int) -> Any:
    """``message`` encoded at ``version`` and decoded back: what the other side reads."""
    return type(message).decode(message.encode(version), version)


# -- ListOffsets: by leader --------------------------------------------------------------


def test_by_leader_groups_in_the_order_given_and_names_the_leaderless() -> None:
    asked = [
        TP("orders", 2),
        TP("payments", 0),
        TP("orders", 0),
        TP("orders", 1),
        TP("orders", 3),  # led by a broker the metadata does not list
        TP("payments", 1),  # no leader
        TP("orders", 9),  # no such partition
        TP("unknown", 0),  # no such topic
    ]
    groups, leaderless = by_leader(snapshot(), asked)
    assert groups == {
        1: [TP("orders", 2), TP("orders", 0)],
        2: [TP("payments", 0), TP("orders", 1)],
    }
    assert leaderless == [TP("orders", 3), TP("payments", 1), TP("orders", 9), TP("unknown", 0)]


def test_by_leader_of_nothing_is_nothing() -> None:
    assert by_leader(snapshot(), []) == ({}, [])


# -- ListOffsets: the request -------------------------------------------------------------


def test_list_offsets_request_carries_timestamps_epochs_and_isolation() -> None:
    timestamps = {TP("orders", 0): -2, TP("payments", 0): -1, TP("orders", 2): 1_700_000_000_000}
    request = list_offsets_request(snapshot(), timestamps, isolation_level=1, timeout_ms=1234)
    assert (request.replica_id, request.isolation_level, request.timeout_ms) == (-1, 1, 1234)
    asked = {
        (t.name, p.partition_index): (p.timestamp, p.current_leader_epoch)
        for t in request.topics
        for p in t.partitions
    }
    assert asked == {
        ("orders", 0): (-2, 4),
        ("orders", 2): (1_700_000_000_000, 5),
        ("payments", 0): (-1, 11),
    }
    assert [t.name for t in request.topics] == ["orders", "payments"]  # one entry per topic


def test_read_committed_cannot_be_asked_of_a_v1_broker() -> None:
    request = list_offsets_request(
        snapshot(), {TP("orders", 0): -1}, isolation_level=1, timeout_ms=1
    )
    with pytest.raises(UnsupportedVersionError, match="isolation_level"):
        request.encode(1)


def test_list_offsets_request_of_a_partition_the_metadata_lacks_has_no_epoch() -> None:
    request = list_offsets_request(snapshot(), {TP("gone", 0): -1}, isolation_level=0, timeout_ms=1)
    assert request.topics[0].partitions[0].current_leader_epoch == -1


@pytest.mark.parametrize("version", range(ListOffsetsRequest.MIN_VERSION, 12))
def test_list_offsets_request_encodes_at_every_version(version: int) -> None:
    timestamps = {TP("orders", 0): -3, TP("orders", 1): 42}
    level = 1 if version >= 2 else 0  # v1 cannot say read_committed (below)
    request = list_offsets_request(snapshot(), timestamps, isolation_level=level, timeout_ms=500)
    read = roundtrip(request, version)
    parts = read.topics[0].partitions
    assert [(p.partition_index, p.timestamp) for p in parts] == [(0, -3), (1, 42)]
    assert read.isolation_level == level
    # Fields a version lacks are not sent: the broker reads their defaults.
    assert [p.current_leader_epoch for p in parts] == ([4, 5] if version >= 4 else [-1, -1])
    assert read.timeout_ms == (500 if version >= 10 else 0)


# -- ListOffsets: the answer ----------------------------------------------------------------


def _list_offsets_response(*partitions: tuple[str, int, int, int, int, int]) -> ListOffsetsResponse:
    """(topic, partition, error code, offset, timestamp, leader epoch) each."""
    by_topic: dict[str, list[ListOffsetsResponse.ListOffsetsPartitionResponse]] = {}
    for topic, p, code, offset, ts, epoch in partitions:
        by_topic.setdefault(topic, []).append(
            ListOffsetsResponse.ListOffsetsPartitionResponse(
                partition_index=p, error_code=code, offset=offset, timestamp=ts, leader_epoch=epoch
            )
        )
    return ListOffsetsResponse(
        topics=[
            ListOffsetsResponse.ListOffsetsTopicResponse(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    )


def test_list_offsets_results_give_one_type_and_typed_per_partition_errors() -> None:
    response = _list_offsets_response(
        ("orders", 0, 0, 120, 1_700_000_000_000, 4),
        ("orders", 1, 0, -1, -1, -1),  # no record at or after the timestamp
        ("orders", 2, 6, -1, -1, -1),  # NOT_LEADER_OR_FOLLOWER
        ("payments", 0, 3, -1, -1, -1),  # UNKNOWN_TOPIC_OR_PARTITION
    )
    results = list_offsets_results(response)
    assert results[TP("orders", 0)] == OffsetAndTimestamp(120, 1_700_000_000_000, 4)
    assert results[TP("orders", 1)] == OffsetAndTimestamp(-1, -1, None)
    not_leader = results[TP("orders", 2)]
    assert isinstance(not_leader, ec.NotLeaderOrFollowerError) and not_leader.retriable
    assert str(not_leader).startswith("ListOffsets for orders[2]: NOT_LEADER_OR_FOLLOWER: ")
    unknown = results[TP("payments", 0)]
    assert isinstance(unknown, ec.UnknownTopicOrPartitionError)
    assert list(results) == [TP("orders", 0), TP("orders", 1), TP("orders", 2), TP("payments", 0)]


def test_the_admin_and_the_consumer_result_types_are_one_class() -> None:
    assert ListOffsetsResult is OffsetAndTimestamp
    assert aiostream_kafka.ListOffsetsResult is aiostream_kafka.OffsetAndTimestamp
    assert aiostream_kafka.consumer.OffsetAndTimestamp is OffsetAndTimestamp
    result = OffsetAndTimestamp(5, 1000, None)
    offset, timestamp_ms, epoch = result  # still a tuple, as the consumer's was
    assert (offset, timestamp_ms, epoch) == (result.offset, result.timestamp_ms, None)


# -- OffsetFetch: the request ----------------------------------------------------------------


PARTS = [TP("orders", 2), TP("orders", 0), TP("payments", 1), TP("new-topic", 0)]


@pytest.mark.parametrize("version", range(OffsetFetchRequest.MIN_VERSION, 8))
def test_offset_fetch_single_group_form_before_v8(version: int) -> None:
    request = offset_fetch_request("g", PARTS, version=version, snapshot=snapshot())
    read = roundtrip(request, version)
    assert read.group_id == "g"
    assert [(t.name, t.partition_indexes) for t in read.topics] == [
        ("orders", [0, 2]),  # topics in the order given, partitions sorted
        ("payments", [1]),
        ("new-topic", [0]),
    ]
    assert read.require_stable is (version >= 7)


@pytest.mark.parametrize("version", range(8, OffsetFetchRequest.MAX_VERSION + 1))
def test_offset_fetch_batched_form_from_v8_with_topic_ids(version: int) -> None:
    request = offset_fetch_request("g", PARTS, version=version, snapshot=snapshot())
    read = roundtrip(request, version)
    (group,) = read.groups
    assert group.group_id == "g" and read.require_stable is True
    topics = [(t.name, t.partition_indexes) for t in group.topics]
    ids = [t.topic_id for t in group.topics]
    if version >= 10:  # by id: a topic the metadata lacks gets the zero id
        assert ids == [ORDERS_ID, PAYMENTS_ID, ZERO_ID]
        assert [ps for _, ps in topics] == [[0, 2], [1], [0]]
    else:
        assert topics == [("orders", [0, 2]), ("payments", [1]), ("new-topic", [0])]
    assert offset_fetch_uses_topic_ids(version) is (version >= 10)


@pytest.mark.parametrize("version", [2, 7, 8, 10])
def test_offset_fetch_of_every_committed_partition(version: int) -> None:
    read = roundtrip(offset_fetch_request("g", None, version=version, snapshot=snapshot()), version)
    assert (read.groups[0].topics if version >= 8 else read.topics) is None


def test_offset_fetch_of_every_partition_needs_v2() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"group 'g' \(broker 3\).*up to v1"):
        offset_fetch_request("g", None, version=1, snapshot=snapshot(), coordinator=3)


# -- OffsetFetch: the answer ------------------------------------------------------------------


def _v7_response(error_code: int = 0) -> OffsetFetchResponse:
    P = OffsetFetchResponse.OffsetFetchResponsePartition
    return OffsetFetchResponse(
        error_code=error_code,
        topics=[
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name="orders",
                partitions=[
                    P(
                        partition_index=0,
                        committed_offset=10,
                        committed_leader_epoch=3,
                        metadata="m",
                    ),
                    P(partition_index=1, committed_offset=-1, committed_leader_epoch=-1),
                    P(partition_index=2, committed_offset=7, committed_leader_epoch=-1),
                ],
            )
        ],
    )


def _v10_response(group_error: int = 0) -> OffsetFetchResponse:
    P = OffsetFetchResponse.OffsetFetchResponsePartitions
    T = OffsetFetchResponse.OffsetFetchResponseTopics
    return OffsetFetchResponse(
        groups=[
            OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id="g",
                error_code=group_error,
                topics=[
                    T(topic_id=ORDERS_ID, partitions=[P(partition_index=0, committed_offset=3)]),
                    T(topic_id=uuid.UUID(int=99), partitions=[P(partition_index=0)]),  # deleted
                    T(
                        topic_id=PAYMENTS_ID,
                        partitions=[
                            P(partition_index=1, committed_offset=-1, error_code=88),
                        ],
                    ),
                ],
            )
        ]
    )


def test_offset_fetch_answer_before_v8() -> None:
    entries = offset_fetch_entries(roundtrip(_v7_response(), 7), version=7, group_id="g")
    assert entries[0] == CommittedOffset("orders", None, 0, 10, 3, "m", 0)
    found, errors = committed_offsets(entries, snapshot(), "g")
    assert found == {
        TP("orders", 0): OffsetAndMetadata(10, "m", 3),
        TP("orders", 2): OffsetAndMetadata(7, "", None),  # epoch -1: none
    }  # partition 1: nothing committed, left out
    assert errors == {}


def test_offset_fetch_answer_by_topic_id_with_a_per_partition_error() -> None:
    entries = offset_fetch_entries(roundtrip(_v10_response(), 10), version=10, group_id="g")
    assert [e.topic for e in entries] == [None, None, None]  # named by id only
    found, errors = committed_offsets(entries, snapshot(), "g")
    assert found == {TP("orders", 0): OffsetAndMetadata(3, "", None)}  # id 99: unknown
    (error,) = errors.values()
    assert list(errors) == [TP("payments", 1)]
    assert isinstance(error, ec.UnstableOffsetCommitError) and error.retriable
    assert str(error).startswith(
        "group 'g': committed offset of payments[1]: UNSTABLE_OFFSET_COMMIT"
    )


@pytest.mark.parametrize(
    ("version", "response"), [(7, _v7_response(error_code=16)), (10, _v10_response(group_error=16))]
)
def test_offset_fetch_group_error_raises_typed(version: int, response: OffsetFetchResponse) -> None:
    with pytest.raises(ec.NotCoordinatorError, match=r"^group 'g': NOT_COORDINATOR: "):
        offset_fetch_entries(roundtrip(response, version), version=version, group_id="g")


# -- the one error mapping -------------------------------------------------------------------


def test_broker_error_is_typed_and_says_what_it_concerns() -> None:
    error = broker_error(36, "topic 'orders'")
    assert type(error) is ec.TopicAlreadyExistsError and not error.retriable
    assert (
        str(error) == f"topic 'orders': TOPIC_ALREADY_EXISTS: {ec.ERRORS_BY_CODE[36].description}"
    )
    told = broker_error(40, "incremental_alter_configs TOPIC 't'", "no such config x")
    assert str(told) == "incremental_alter_configs TOPIC 't': INVALID_CONFIG: no such config x"
    assert isinstance(broker_error(10, "producing to t-0"), ec.RecordTooLargeError)
    unknown = broker_error(31_999, "somewhere")
    assert isinstance(unknown, ec.UnrecognizedBrokerError) and unknown.error_code == 31_999
    assert str(unknown) == "somewhere: error 31999"


def test_the_producer_the_admin_and_the_group_share_the_one_mapping() -> None:
    import aiostream_kafka.admin.client as admin_client
    import aiostream_kafka.admin.plumbing as plumbing
    import aiostream_kafka.group.coordinator as coordinator
    import aiostream_kafka.group.offsets as group_offsets
    import aiostream_kafka.producer.errors as producer_errors
    import aiostream_kafka.producer.sender as sender
    import aiostream_kafka.producer.transactions as transactions

    for module in (
        admin_client,
        plumbing,
        coordinator,
        group_offsets,
        producer_errors,
        sender,
        transactions,
    ):
        assert module.broker_error is broker_error, module.__name__


# -- the users, on fakes of the cluster ------------------------------------------------------


class FakeConnection:
    def __init__(self, cluster: FakeCluster, version: int) -> None:
        self.cluster = cluster
        self.version = version

    def version_for(self, request_type: type[Request]) -> int:
        return self.version

    async def request(self, request: Request, *, version: int | None = None) -> Any:
        assert version == self.version
        return self.cluster.answer(None, roundtrip(request, self.version))


class FakeCluster:
    """The cluster as its callers see it: a snapshot, refreshes, and ``answer`` for what
    each broker says to a request (already encoded and decoded at ``version``)."""

    def __init__(self, answer: Any, version: int = 10) -> None:
        self.snapshot = snapshot()
        self.answer = answer
        self.version = version
        self.refreshes = 0

    def track(self, topics: Collection[str]) -> None:
        pass

    def untrack(self, topics: Collection[str]) -> None:
        pass

    async def ensure_fresh(self, topics: Collection[str] = ()) -> ClusterSnapshot:
        return self.snapshot

    async def refresh(
        self, topics: Collection[str] | None = None, *, all_topics: bool = False
    ) -> ClusterSnapshot:
        self.refreshes += 1
        return self.snapshot

    async def send(self, node: int, request: Request, *, timeout_ms: float | None = None) -> Any:
        return self.answer(node, roundtrip(request, self.version))

    async def connection(self, node: int) -> FakeConnection:
        return FakeConnection(self, self.version)

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        return 1


def list_offsets_broker(
    offsets: Mapping[TP, int], flaky: dict[TP, int] | None = None
) -> tuple[Any, list[tuple[int, list[TP]]]]:
    """A ListOffsets answerer: ``offsets[tp]`` for each partition asked (first
    ``flaky[tp]`` times NOT_LEADER_OR_FOLLOWER), and the (broker, partitions) asked."""
    asked: list[tuple[int, list[TP]]] = []
    flaky = dict(flaky or {})

    def answer(node: int, request: ListOffsetsRequest) -> ListOffsetsResponse:
        tps = [TP(t.name, p.partition_index) for t in request.topics for p in t.partitions]
        asked.append((node, tps))
        rows = []
        for tp in tps:
            if flaky.get(tp, 0) > 0:
                flaky[tp] -= 1
                rows.append((tp.topic, tp.partition, 6, -1, -1, -1))
            else:
                rows.append((tp.topic, tp.partition, 0, offsets[tp], 1000, 5))
        return _list_offsets_response(*rows)

    return answer, asked


async def test_admin_list_offsets_asks_each_leader_once_and_retries_a_partition_error() -> None:
    offsets = {TP("orders", 0): 10, TP("orders", 1): 11, TP("payments", 0): 20}
    answer, asked = list_offsets_broker(offsets, flaky={TP("orders", 1): 1})
    cluster = FakeCluster(answer)
    config = ClientConfig("localhost:9092", retry_backoff_ms=1, retry_backoff_max_ms=2)
    calls = AdminCalls(cluster, config, {})  # type: ignore[arg-type]
    specs = {tp: aiostream_kafka.OffsetSpec.latest() for tp in offsets}
    results = await calls.list_offsets(specs)
    assert results == {tp: ListOffsetsResult(o, 1000, 5) for tp, o in offsets.items()}
    first = sorted(asked[:2])
    assert first == [(1, [TP("orders", 0)]), (2, [TP("orders", 1), TP("payments", 0)])]
    assert asked[2:] == [(2, [TP("orders", 1)])]  # only the failed partition again


async def test_admin_list_offsets_of_a_missing_partition_raises_at_once() -> None:
    cluster = FakeCluster(lambda node, request: pytest.fail("nothing to ask"))
    calls = AdminCalls(cluster, ClientConfig("localhost:9092"), {})  # type: ignore[arg-type]
    with pytest.raises(ec.UnknownTopicOrPartitionError, match="partition 9 of topic 'orders'"):
        await calls.list_offsets({TP("orders", 9): aiostream_kafka.OffsetSpec.earliest()})


async def test_consumer_lookup_uses_the_same_split_and_result_type() -> None:
    offsets = {TP("orders", 0): 10, TP("orders", 2): 12, TP("payments", 0): 20}
    answer, asked = list_offsets_broker(offsets)
    found = await lookup_offsets(
        FakeCluster(answer),  # type: ignore[arg-type]
        dict.fromkeys(offsets, -1),
        isolation_level=0,
        timeout_ms=1000,
        request_timeout_ms=1000,
        retry_backoff_ms=1,
        retry_backoff_max_ms=2,
    )
    assert found == {tp: OffsetAndTimestamp(o, 1000, 5) for tp, o in offsets.items()}
    assert sorted(asked) == [(1, [TP("orders", 0), TP("orders", 2)]), (2, [TP("payments", 0)])]


class Member:
    generation = 1
    member_id = "m"
    owned: frozenset[TP] = frozenset()

    def final_error(self) -> KafkaError | None:
        return None

    async def coordinator_node(self) -> int:
        return 1

    def coordinator_lost(self, why: object) -> None:
        pass

    def request_rejoin(self, reason: str) -> None:
        pass


@pytest.mark.parametrize("version", [7, 10])
async def test_group_committed_offsets_through_the_shared_request(version: int) -> None:
    seen: list[OffsetFetchRequest] = []

    def answer(node: None, request: OffsetFetchRequest) -> OffsetFetchResponse:
        seen.append(request)
        return _v7_response() if version < 8 else _v10_response()

    cluster = FakeCluster(answer, version=version)
    offsets = GroupOffsets(cluster, GroupConfig("g"), Member())  # type: ignore[arg-type]
    if version < 8:
        got = await offsets.committed([TP("orders", 2), TP("orders", 0), TP("orders", 1)])
        assert got == {
            TP("orders", 0): OffsetAndMetadata(10, "m", 3),
            TP("orders", 1): None,
            TP("orders", 2): OffsetAndMetadata(7, "", None),
        }
        assert [(t.name, t.partition_indexes) for t in seen[0].topics or []] == [
            ("orders", [0, 1, 2])
        ]
    else:
        # payments[1] answers UNSTABLE_OFFSET_COMMIT every time: waited out, then the
        # timeout names it.
        offsets.config = GroupConfig("g", default_api_timeout_ms=50, retry_backoff_ms=5)
        with pytest.raises(aiostream_kafka.KafkaTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
            await offsets.committed([TP("orders", 0), TP("payments", 1)])
        assert [t.topic_id for t in seen[0].groups[0].topics or []] == [ORDERS_ID, PAYMENTS_ID]
