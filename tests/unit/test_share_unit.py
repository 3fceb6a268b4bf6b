"""The share consumer's sans-IO parts and option checks (no broker): acquired ranges,
acknowledgement batches, pending acknowledgements, ShareRecord, the options."""

from __future__ import annotations

import pytest

from aiostream_kafka import (
    AcknowledgeType,
    ConfigError,
    Record,
    ShareConsumer,
    ShareRecord,
    TimestampType,
    TopicPartition,
)
from aiostream_kafka.share.acks import GAP_TYPE, Demand, PendingAcks, ack_batches, acquired_records

TP = TopicPartition("t", 0)


def _record(offset: int) -> Record:
    return Record("t", 0, offset, 1000 + offset, TimestampType.CREATE_TIME, None,
                  b"v%d" % offset, [], 0)  # fmt: skip


def test_only_records_inside_acquired_ranges_are_handed_out() -> None:
    records = [_record(o) for o in range(10, 20)]
    got, gaps = acquired_records(records, [(12, 13, 1), (16, 16, 3)])
    assert [(r.offset, r.delivery_count) for r in got] == [(12, 1), (13, 1), (16, 3)]
    assert gaps == []
    assert all(isinstance(r, ShareRecord) for r in got)
    assert got[0].value == b"v12" and got[0].topic == "t" and got[0].timestamp_ms == 1012


def test_acquired_offsets_without_a_record_are_gaps() -> None:
    records = [_record(o) for o in (5, 7)]  # 6: a control record or compacted away
    got, gaps = acquired_records(records, [(5, 8, 2)])
    assert [r.offset for r in got] == [5, 7]
    assert gaps == [6, 8]


def test_ack_batches_group_runs_of_one_type() -> None:
    acks = {1: 1, 2: 1, 3: 2, 4: 1, 6: 1, 7: 3, 8: 3}
    assert ack_batches(acks) == [
        (1, 2, [1]),
        (3, 3, [2]),
        (4, 4, [1]),
        (6, 6, [1]),
        (7, 8, [3]),
    ]
    assert ack_batches({}) == []


def test_pending_acks_by_node_and_partition() -> None:
    pending = PendingAcks()
    pending.add(1, TP, 5, int(AcknowledgeType.ACCEPT))
    pending.add(1, TP, 5, int(AcknowledgeType.RELEASE))  # a later type replaces
    pending.add(2, TopicPartition("t", 1), 9, GAP_TYPE)
    assert pending.nodes() == {1, 2} and len(pending) == 2
    assert pending.take(1) == {TP: {5: 2}}
    assert pending.nodes() == {2} and pending.take(1) == {}


def test_share_record_compares_and_shows_its_delivery_count() -> None:
    a = ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, b"k", b"v", [], 0, 1)
    b = ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, b"k", b"v", [], 0, 2)
    assert a != b and a == ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, b"k", b"v",
                                       [], 0, 1)  # fmt: skip
    assert isinstance(a, Record)
    assert "delivery_count=2" in repr(b)


def test_acknowledge_type_values_are_the_wire_ones() -> None:
    assert [int(t) for t in AcknowledgeType] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"acknowledgement_mode": "auto"}, "acknowledgement_mode"),
        ({"max_prefetch_records": 0}, "max_prefetch_records"),
        ({"max_prefetch_bytes": -1}, "max_prefetch_bytes"),
        ({"fetch_max_wait_ms": -5}, "fetch_max_wait_ms"),
        ({"group_id": ""}, "group_id"),
        ({"request_timeout_ms": 0}, "request_timeout_ms"),
        ({"max_poll_records": 10}, "max_poll_records"),
        ({"fetch_max_wait": 10}, "did you mean 'fetch_max_wait_ms'"),
    ],
)
def test_bad_options_raise_config_error_before_io(options: dict[str, object], message: str) -> None:
    kwargs: dict[str, object] = {"bootstrap_servers": "127.0.0.1:1", "group_id": "g", **options}
    with pytest.raises(ConfigError, match=message):
        ShareConsumer(**kwargs)  # type: ignore[arg-type]


async def test_unstarted_consumer_refuses_to_iterate_and_commit() -> None:
    sc = ShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g")
    with pytest.raises(Exception, match="start the share consumer"):
        async for _ in sc:
            pass
    with pytest.raises(Exception, match="start the share consumer"):
        await sc.commit()
    with pytest.raises(TypeError):
        sc.subscribe("jobs")
    await sc.close()


def test_acknowledge_refuses_a_record_not_handed_out() -> None:
    sc = ShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g",
                       acknowledgement_mode="explicit")  # fmt: skip
    rec = ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, None, b"v", [], 0, 1)
    for kind in AcknowledgeType:
        with pytest.raises(ValueError, match="not a record"):
            sc.acknowledge(rec, kind)


def test_share_record_lock_deadline_is_not_part_of_equality() -> None:
    a = ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, None, b"v", [], 0, 1, 10.0)
    b = ShareRecord("t", 0, 1, 5, TimestampType.CREATE_TIME, None, b"v", [], 0, 1)
    assert a.lock_deadline == 10.0 and b.lock_deadline == 0.0
    assert a == b
    b.lock_deadline = 12.5
    assert b.lock_deadline == 12.5


def test_demand_grows_while_the_application_waits_and_stays_within_the_maximum() -> None:
    demand = Demand(500, initial=32)
    assert demand.target == 32
    demand.took(0.0, waited=True, lock_s=30.0)  # the first record: always waited for
    assert demand.target == 32
    demand.fetched(32, 10)  # the supply was short: waiting says nothing of demand
    demand.took(0.001, waited=True, lock_s=30.0)
    assert demand.target == 32
    for i in range(10):
        demand.fetched(demand.target, demand.target)
        demand.took(0.01 + i * 0.01, waited=True, lock_s=30.0)
    assert demand.target == 500  # doubled each wait, capped


def test_demand_shrinks_to_a_quarter_lock_of_a_slow_application() -> None:
    demand = Demand(500, initial=500)
    # 10 records a second with records always waiting, 30 s locks: 75 records.
    for i in range(25):
        demand.took(i * 0.1, waited=False, lock_s=30.0)
    assert 60 <= demand.target <= 90
    # one record every 10 s: a single record held
    slow = Demand(500, initial=500)
    for i in range(4):
        slow.took(i * 10.0, waited=False, lock_s=30.0)
    assert slow.target == 1


def test_demand_room_waits_for_half_the_target_to_drain() -> None:
    demand = Demand(100, initial=100)
    assert demand.room(0) == 100
    assert demand.room(51) == 0  # no trickle of small fetches
    assert demand.room(50) == 50
    assert Demand(1, initial=1).room(0) == 1
