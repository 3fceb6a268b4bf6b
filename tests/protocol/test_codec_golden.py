"""Golden bytes written by hand from the Kafka protocol guide, and codec semantics.

Each expected byte string below was composed field by field from the schema and the
wire rules (int16/int32 lengths in classic versions; unsigned-varint ``length + 1`` and a
tagged-field section in flexible versions), not produced by the code under test.
"""

from __future__ import annotations

import uuid

import pytest

from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError
from aiostream_kafka.protocol.headers import decode_request, decode_response, encode_request
from aiostream_kafka.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatResponse,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    EndTxnMarker,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    RequestHeader,
    ResponseHeader,
)

ZERO = uuid.UUID(int=0)


def h(text: str) -> bytes:
    """Bytes from hex with spaces and ``'ascii'`` runs: ``h("00 01 'ab'")``."""
    out = bytearray()
    for token in text.split():
        if token.startswith("'"):
            out += token.strip("'").encode()
        else:
            out += bytes.fromhex(token)
    return bytes(out)


def test_api_versions_request_v3_frame() -> None:
    request = ApiVersionsRequest(
        client_software_name="aiostream-kafka", client_software_version="0.1.0"
    )
    body = h("10 'aiostream-kafka' 06 '0.1.0' 00")
    assert request.encode(3) == body
    frame = encode_request(request, 3, correlation_id=1, client_id="cli")
    header = h("0012 0003 00000001 0003 'cli' 00")  # header v2: client id stays int16-sized
    assert frame == (len(header) + len(body)).to_bytes(4, "big") + header + body
    decoded_header, decoded = decode_request(frame[4:])
    assert decoded_header == RequestHeader(18, 3, 1, "cli")
    assert decoded == request


def test_api_versions_request_v0_to_v2_have_no_body() -> None:
    for version in (0, 1, 2):
        assert ApiVersionsRequest().encode(version) == b""
    frame = encode_request(ApiVersionsRequest(), 0, correlation_id=9, client_id=None)
    assert frame == h("0000000a 0012 0000 00000009 ffff")  # header v1, null client id


def test_metadata_request_v12_one_topic() -> None:
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=ZERO, name="orders")],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    expected = h(
        "02"  # compact array: 1 topic
        " 00000000000000000000000000000000"  # topic id
        " 07 'orders'"  # compact nullable string
        " 00"  # topic: no tagged fields
        " 01"  # allow_auto_topic_creation
        " 00"  # include_topic_authorized_operations
        " 00"  # no tagged fields
    )
    assert request.encode(12) == expected
    assert MetadataRequest.decode(expected, 12) == request


def test_metadata_request_v0_all_topics_is_an_empty_array() -> None:
    assert MetadataRequest(topics=[]).encode(0) == h("00000000")
    assert MetadataRequest(topics=None).encode(1) == h("ffffffff")  # null: all topics
    with pytest.raises(ValueError, match="not nullable"):
        MetadataRequest(topics=None).encode(0)


def test_response_header_v1_keeps_an_unknown_tagged_field() -> None:
    raw = h("0000002a 01 05 02 abcd")
    header = ResponseHeader.decode(raw, 1)
    assert header.correlation_id == 42
    assert header.unknown_tagged_fields == {5: b"\xab\xcd"}
    assert header.encode(1) == raw
    assert ResponseHeader(42).encode(1) == h("0000002a 00")
    assert ResponseHeader(42).encode(0) == h("0000002a")


def test_produce_request_v3_classic_encoding() -> None:
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"abc")],
            )
        ],
    )
    expected = h(
        "ffff ffff 00007530"  # null transactional id, acks -1, timeout 30000
        " 00000001 0006 'orders'"  # one topic
        " 00000001 00000000 00000003 'abc'"  # one partition with 3 bytes of records
    )
    assert request.encode(3) == expected
    decoded = ProduceRequest.decode(expected, 3)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)  # records stay raw, without a copy
    assert bytes(records) == b"abc"
    assert decoded == request


FETCH_V12 = h(
    "00000000 0000 00000007"  # throttle_time_ms, error_code, session_id
    " 02 07 'orders'"  # one topic
    " 02"  # one partition
    " 00000000 0000"  # partition 0, no error
    " 000000000000000a 000000000000000a 0000000000000000"  # hw, lso, log start
    " 00"  # aborted_transactions: null
    " ffffffff"  # preferred_read_replica -1
    " 04 'abc'"  # records
    " 01 01 09 00000001 00000005 00"  # tag 1 (current_leader): leader 1, epoch 5
    " 00"  # topic: no tagged fields
    " 00"  # response: no tagged fields
)


def test_fetch_response_v12_known_tagged_field() -> None:
    partition = FetchResponse.PartitionData(
        partition_index=0,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"abc",
        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
    )
    response = FetchResponse(
        session_id=7,
        responses=[FetchResponse.FetchableTopicResponse(topic="orders", partitions=[partition])],
    )
    assert response.encode(12) == FETCH_V12
    decoded = FetchResponse.decode(FETCH_V12, 12)
    assert decoded == response
    # The tagged structs left out of the bytes decode to their defaults.
    assert decoded.responses[0].partitions[0].diverging_epoch == FetchResponse.EpochEndOffset()
    assert decoded.responses[0].partitions[0].snapshot_id.end_offset == -1


def test_known_and_unknown_tags_are_written_in_order() -> None:
    partition = FetchResponse.PartitionData(
        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
        unknown_tagged_fields={7: b"\x01", 3: b""},
    )
    encoded = partition.encode(12)
    assert encoded.endswith(h("03 01 09 00000001 00000005 00 03 00 07 01 01"))
    assert FetchResponse.PartitionData.decode(encoded, 12) == partition
    clash = FetchResponse.PartitionData(
        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
        unknown_tagged_fields={1: b"\x00"},
    )
    with pytest.raises(ValueError, match="tag 1"):
        clash.encode(12)


def test_tagged_field_with_a_wrong_size_is_refused() -> None:
    bad = FETCH_V12.replace(h("01 01 09 00000001"), h("01 01 08 00000001"))
    with pytest.raises(ProtocolError):
        FetchResponse.decode(bad, 12)


def test_default_tagged_fields_are_not_written() -> None:
    request = FetchRequest(cluster_id=None, replica_id=-1, max_wait_ms=500)
    plain = request.encode(12)
    assert plain.endswith(h("00"))  # no tagged fields at all
    with_cluster = FetchRequest(cluster_id="c1", replica_id=-1, max_wait_ms=500).encode(12)
    assert with_cluster.endswith(h("01 00 03 03 'c1'"))  # tag 0, size 3, compact "c1"
    assert FetchRequest.decode(with_cluster, 12).cluster_id == "c1"


def test_non_ignorable_field_missing_from_the_version_raises() -> None:
    request = MetadataRequest(topics=[], include_cluster_authorized_operations=True)
    assert MetadataRequest.decode(request.encode(10), 10) == request  # v8-10 carry it
    with pytest.raises(UnsupportedVersionError, match="include_cluster_authorized_operations"):
        request.encode(12)
    with pytest.raises(UnsupportedVersionError, match="allow_auto_topic_creation"):
        MetadataRequest(topics=[], allow_auto_topic_creation=False).encode(3)


def test_ignorable_field_missing_from_the_version_is_dropped() -> None:
    topic = MetadataRequest.MetadataRequestTopic(topic_id=uuid.uuid4(), name="t")
    encoded = MetadataRequest(topics=[topic]).encode(9)  # TopicId exists from v10
    assert MetadataRequest.decode(encoded, 9).topics == [
        MetadataRequest.MetadataRequestTopic(name="t")
    ]
    by_id = ProduceRequest.TopicProduceData(name="orders", topic_id=uuid.uuid4())
    produce = ProduceRequest(acks=1, topic_data=[by_id]).encode(13)  # Name is 0-12
    assert ProduceRequest.decode(produce, 13).topic_data[0].name == ""


def test_unknown_tagged_fields_need_a_flexible_version() -> None:
    request = MetadataRequest(topics=[], unknown_tagged_fields={9: b"x"})
    assert MetadataRequest.decode(request.encode(9), 9) == request
    with pytest.raises(UnsupportedVersionError, match="not flexible"):
        request.encode(8)


def test_unknown_version() -> None:
    with pytest.raises(UnsupportedVersionError, match="ProduceRequest has no version 2"):
        ProduceRequest().encode(2)
    with pytest.raises(UnsupportedVersionError):
        ProduceRequest.decode(b"", 14)
    with pytest.raises(UnsupportedVersionError):
        encode_request(ProduceRequest(), 2, 1, "c")


def test_values_that_do_not_fit_raise_value_error() -> None:
    with pytest.raises(ValueError, match="ProduceRequest v3"):
        ProduceRequest(acks=1 << 20).encode(3)
    with pytest.raises(ValueError, match="32767"):
        ApiVersionsRequest(client_software_name="x" * 40000).encode(3)


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(ProtocolError, match="trailing"):
        ResponseHeader.decode(h("0000002a 00"), 0)


def test_api_versions_response_uses_header_v0_even_when_flexible() -> None:
    response = ApiVersionsResponse(
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, min_version=3, max_version=13)],
    )
    body = h(
        "0000"  # error_code
        " 02 0000 0003 000d 00"  # one api key: produce 3-13, no tags
        " 00000000"  # throttle_time_ms
        " 00"  # no tagged fields
    )
    assert response.encode(3) == body
    frame = h("00000005") + body  # response header v0: just the correlation id
    correlation_id, decoded = decode_response(18, 3, frame)
    assert correlation_id == 5
    assert decoded == response


def test_api_versions_unsupported_version_reply_is_read_as_v0() -> None:
    # KIP-511: a broker that does not know ApiVersions v4 answers with a v0 body and
    # error 35 (UNSUPPORTED_VERSION), listing its ranges.
    body = h("0023 00000001 0012 0000 0003")
    correlation_id, decoded = decode_response(18, 4, h("00000001") + body)
    assert correlation_id == 1
    assert isinstance(decoded, ApiVersionsResponse)
    assert decoded.error_code == 35
    assert decoded.api_keys == [ApiVersionsResponse.ApiVersion(18, 0, 3)]


def test_consumer_protocol_subscription_v3() -> None:
    subscription = ConsumerProtocolSubscription(
        topics=["a"], user_data=None, owned_partitions=[], generation_id=4, rack_id="r1"
    )
    expected = h("00000001 0001 'a' ffffffff 00000000 00000004 0002 'r1'")
    assert subscription.encode(3) == expected
    assert ConsumerProtocolSubscription.decode(expected, 3) == subscription
    # GenerationId and RackId are ignorable: version 0 drops them.
    assert subscription.encode(0) == h("00000001 0001 'a' ffffffff")


def test_data_message_with_version_prefix() -> None:
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition("t", [0, 2])],
        user_data=b"u",
    )
    raw = assignment.encode_versioned(1)
    assert raw == h("0001 00000001 0001 't' 00000002 00000000 00000002 00000001 'u'")
    assert ConsumerProtocolAssignment.decode_versioned(raw) == (assignment, 1)
    # A newer version is read with the newest known layout; its extra bytes are ignored.
    newer = h("0009") + raw[2:] + h("deadbeef")
    decoded, version = ConsumerProtocolAssignment.decode_versioned(newer)
    assert (decoded, version) == (assignment, 9)
    with pytest.raises(ProtocolError):
        ConsumerProtocolAssignment.decode_versioned(h("ffff"))
    with pytest.raises(ProtocolError):
        ConsumerProtocolAssignment.decode_versioned(raw + b"\x00")
    marker = EndTxnMarker(coordinator_epoch=7).encode_versioned(0)
    assert marker == h("0000 00000007")


def test_nullable_struct_has_an_int8_marker() -> None:
    # KIP-893: ConsumerGroupHeartbeatResponse.Assignment is a nullable struct.
    head = h("00000000 0000 00 00 00000001 00001388")  # throttle, error, 2 null strings,
    # member epoch 1, heartbeat interval 5000
    empty = ConsumerGroupHeartbeatResponse(member_epoch=1, heartbeat_interval_ms=5000)
    assert empty.assignment is None
    assert empty.encode(0) == head + h("ff 00")
    topic_id = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    full = ConsumerGroupHeartbeatResponse(
        member_epoch=1,
        heartbeat_interval_ms=5000,
        assignment=ConsumerGroupHeartbeatResponse.Assignment(
            topic_partitions=[ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id, [0, 1])]
        ),
    )
    expected = head + h(
        "01"  # present
        " 02 0102030405060708090a0b0c0d0e0f10 03 00000000 00000001 00"  # one topic
        " 00"  # assignment: no tagged fields
        " 00"  # response: no tagged fields
    )
    assert full.encode(0) == expected
    assert ConsumerGroupHeartbeatResponse.decode(expected, 0) == full


def test_unknown_tagged_fields_survive_at_every_level() -> None:
    raw = h(
        "00000000"  # throttle_time_ms
        " 01"  # no brokers
        " 02 'c'"  # cluster id
        " 00000001"  # controller id
        " 02"  # one topic
        " 0000 02 't' 00000000000000000000000000000000 00"  # error, name, id, internal
        " 01"  # no partitions
        " 80000000"  # topic authorized operations
        " 01 0a 01 ff"  # topic: unknown tag 10 = ff
        " 02 02 00 0c 02 abcd"  # response: unknown tags 2 (empty) and 12 = abcd
    )
    response = MetadataResponse.decode(raw, 12)
    assert response.topics[0].unknown_tagged_fields == {10: b"\xff"}
    assert response.unknown_tagged_fields == {2: b"", 12: b"\xab\xcd"}
    assert response.encode(12) == raw
