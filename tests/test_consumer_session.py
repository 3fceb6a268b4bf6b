"""KIP-227 fetch sessions, sans-IO: what each request carries as demand changes, and how
responses and failures move the session (the broker-facing behaviour is covered by
``test_consumer.py``)."""

from __future__ import annotations

import uuid

from aiostream_kafka.consumer.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    FINAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSession,
    SessionPartition,
)
from aiostream_kafka.protocol.messages.fetch import FetchRequest
from aiostream_kafka.structs import TopicPartition

TOPIC_ID = uuid.UUID(int=7)
OTHER_ID = uuid.UUID(int=8)


def part(
    p: int, offset: int, *, epoch: int = 0, topic_id: uuid.UUID = TOPIC_ID
) -> SessionPartition:
    return SessionPartition(TopicPartition("t", p), topic_id, offset, epoch, 1024)


def roundtrip(request: FetchRequest, version: int) -> FetchRequest:
    """Encode and decode with the generated codec, as the broker would read it."""
    encoded = request.encode(version)
    decoded, end = FetchRequest.decode_from(memoryview(encoded), 0, version)
    assert end == len(encoded)
    return decoded


def test_a_session_starts_full_then_sends_only_what_changed() -> None:
    session = FetchSession(1)
    wanted = [part(0, 0), part(1, 0), part(2, 0)]
    plan = session.plan(wanted, 18)
    assert plan.full and plan.session_id == 0 and plan.epoch == 0
    assert [p.tp.partition for p in plan.send] == [0, 1, 2] and not plan.forget
    session.on_response(plan, 0, 4242)
    assert (session.session_id, session.epoch) == (4242, 1)

    # Partition 0 got data (its offset moved), 1 and 2 did not: only 0 is sent.
    plan = session.plan([part(0, 10), part(1, 0), part(2, 0)], 18)
    assert not plan.full and (plan.session_id, plan.epoch) == (4242, 1)
    assert [(p.tp.partition, p.fetch_offset) for p in plan.send] == [(0, 10)]
    session.on_response(plan, 0, 4242)
    assert session.epoch == 2

    # Partition 1's queue is full: it leaves the session; 2's leader epoch changed.
    plan = session.plan([part(0, 10), part(2, 0, epoch=3)], 18)
    assert [p.tp.partition for p in plan.forget] == [1]
    assert [(p.tp.partition, p.leader_epoch) for p in plan.send] == [(2, 3)]
    request = roundtrip(
        session.request(
            plan, 18, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1, rack_id=""
        ),
        18,
    )
    assert (request.session_id, request.session_epoch) == (4242, 2)
    assert request.isolation_level == 1
    assert [(t.topic_id, [p.partition for p in t.partitions]) for t in request.topics] == [
        (TOPIC_ID, [2])
    ]
    assert [(f.topic_id, f.partitions) for f in request.forgotten_topics_data] == [(TOPIC_ID, [1])]
    session.on_response(plan, 0, 4242)
    assert set(session.partitions) == {TopicPartition("t", 0), TopicPartition("t", 2)}

    # Nothing changed: an incremental request with no partitions at all.
    plan = session.plan([part(0, 10), part(2, 0, epoch=3)], 18)
    assert not plan.send and not plan.forget and plan.epoch == 3


def test_topic_names_before_v13_and_a_recreated_topic_rejoins_under_its_new_id() -> None:
    session = FetchSession(1)
    plan = session.plan([part(0, 5)], 12)
    request = roundtrip(
        session.request(
            plan, 12, max_wait_ms=0, min_bytes=1, max_bytes=100, isolation_level=0, rack_id="r1"
        ),
        12,
    )
    assert [t.topic for t in request.topics] == ["t"] and request.rack_id == "r1"
    session.on_response(plan, 0, 9)
    plan = session.plan([], 12)
    request = roundtrip(
        session.request(
            plan, 12, max_wait_ms=0, min_bytes=1, max_bytes=100, isolation_level=0, rack_id=""
        ),
        12,
    )
    assert [(f.topic, f.partitions) for f in request.forgotten_topics_data] == [("t", [0])]

    session = FetchSession(1)
    plan = session.plan([part(0, 5)], 18)
    session.on_response(plan, 0, 9)
    plan = session.plan([part(0, 0, topic_id=OTHER_ID)], 18)
    assert [p.topic_id for p in plan.forget] == [TOPIC_ID]
    assert [p.topic_id for p in plan.send] == [OTHER_ID]
    assert plan.topic_names == {OTHER_ID: "t", TOPIC_ID: "t"}


def test_session_errors_and_lost_requests_start_over() -> None:
    session = FetchSession(1)
    plan = session.plan([part(0, 0)], 18)
    session.on_response(plan, 0, 77)
    # A wrong epoch: close the session (keep its id, epoch 0) and send everything.
    plan = session.plan([part(0, 1)], 18)
    session.on_response(plan, INVALID_FETCH_SESSION_EPOCH, 0)
    assert (session.session_id, session.epoch, session.partitions) == (77, 0, {})
    assert session.resets == 1
    plan = session.plan([part(0, 1)], 18)
    assert plan.full and plan.session_id == 77 and plan.epoch == 0
    session.on_response(plan, 0, 78)
    assert (session.session_id, session.epoch) == (78, 1)
    # The broker forgot it: start with no id at all.
    plan = session.plan([part(0, 1)], 18)
    session.on_response(plan, FETCH_SESSION_ID_NOT_FOUND, 0)
    assert (session.session_id, session.epoch) == (0, 0)
    # A request without an answer: the epoch is unknown, so close and reopen.
    plan = session.plan([part(0, 1)], 18)
    session.on_response(plan, 0, 79)
    session.on_failure()
    assert (session.session_id, session.epoch) == (79, 0)
    # No session cached by the broker: every request stays full.
    session = FetchSession(1)
    plan = session.plan([part(0, 0)], 18)
    session.on_response(plan, 0, 0)
    assert session.plan([part(0, 0)], 18).full


def test_sessionless_before_v7_and_the_closing_request() -> None:
    session = FetchSession(1)
    plan = session.plan([part(0, 0)], 6)
    assert plan.full and (plan.session_id, plan.epoch) == (0, FINAL_EPOCH)
    session.on_response(plan, 0, 0)
    assert session.plan([part(0, 3)], 6).full
    assert session.close_request(18) is None  # nothing open

    session = FetchSession(1)
    plan = session.plan([part(0, 0)], 18)
    session.on_response(plan, 0, 5)
    closing = session.close_request(18)
    assert closing is not None
    assert (closing.session_id, closing.session_epoch, closing.topics) == (5, FINAL_EPOCH, [])
    assert (session.session_id, session.epoch) == (0, 0)


def test_the_epoch_wraps_to_one() -> None:
    session = FetchSession(1)
    plan = session.plan([part(0, 0)], 18)
    session.on_response(plan, 0, 5)
    session.epoch = 2**31 - 1
    plan = session.plan([part(0, 0)], 18)
    session.on_response(plan, 0, 5)
    assert session.epoch == 1
