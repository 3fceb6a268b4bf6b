"""``ProcessScheduler``, the sans-IO core of ``process()``: ordering per key / partition /
none, the concurrency bound, commits that never pass an unfinished record, the metadata
bound, revoke and restore. Model-checked with hypothesis, plus plain examples."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_kafka.consumer.processing import (
    MAX_METADATA_BYTES,
    ProcessScheduler,
    decode_completed,
    encode_completed,
    fits,
)
from aiostream_kafka.consumer.processing.scheduler import Ordering
from aiostream_kafka.structs import Record, TimestampType, TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def rec(partition: int, offset: int, key: bytes | None = None, topic: str = "t") -> Record:
    return Record(topic, partition, offset, 0, TimestampType.CREATE_TIME, key, b"", [], None)


def ids(records: list[Record]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def start_all(s: ProcessScheduler) -> list[Record]:
    out = []
    while (r := s.next_ready()) is not None:
        assert isinstance(r, Record)
        out.append(r)
    return out


# -- plain examples -----------------------------------------------------------------------


def test_keys_run_in_parallel_within_a_partition_and_in_order_per_key() -> None:
    s = ProcessScheduler("key", concurrency=10)
    s.offer([rec(0, 0, b"a"), rec(0, 1, b"b"), rec(0, 2, b"a"), rec(0, 3, b"c")])
    first = start_all(s)
    assert ids(first) == [(0, 0), (0, 1), (0, 3)]  # a@2 waits for a@0
    assert s.waiting(TP0) == 1 and s.running == 3
    s.done(first[1])  # b@1
    assert s.committable(TP0) == 0 and s.completed_beyond(TP0) == {1}
    assert s.next_ready() is None
    s.done(first[0])  # a@0
    assert s.committable(TP0) == 2 and s.completed_beyond(TP0) == frozenset()
    assert ids(start_all(s)) == [(0, 2)]


def test_null_keys_go_by_partition() -> None:
    s = ProcessScheduler("key", concurrency=10)
    s.offer([rec(0, 0), rec(0, 1), rec(1, 0), rec(0, 2, b"k")])
    assert ids(start_all(s)) == [(0, 0), (1, 0), (0, 2)]


def test_partition_ordering_runs_one_record_per_partition() -> None:
    s = ProcessScheduler("partition", concurrency=10)
    s.offer([rec(0, 0, b"a"), rec(0, 1, b"b"), rec(1, 5, b"a")])
    started = start_all(s)
    assert ids(started) == [(0, 0), (1, 5)]
    s.done(started[0])
    assert ids(start_all(s)) == [(0, 1)]


def test_no_ordering_runs_anything_up_to_the_concurrency() -> None:
    s = ProcessScheduler("none", concurrency=3)
    s.offer([rec(0, o, b"a") for o in range(5)])
    started = start_all(s)
    assert ids(started) == [(0, 0), (0, 1), (0, 2)]
    s.done(started[2])
    assert ids(start_all(s)) == [(0, 3)]
    assert s.committable(TP0) == 0 and s.completed_beyond(TP0) == {2}


def test_committable_follows_offset_gaps() -> None:
    s = ProcessScheduler("none", concurrency=10)
    assert s.committable(TP0) is None
    s.offer([rec(0, 5), rec(0, 7), rec(0, 10)])  # 6, 8, 9: control records or compacted
    a, b, c = start_all(s)
    s.done(b)
    assert s.committable(TP0) == 5
    s.done(a)
    assert s.committable(TP0) == 10
    s.done(c)
    assert s.committable(TP0) == 11


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="ordering"):
        ProcessScheduler("offset", 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        ProcessScheduler("key", 0)
    s = ProcessScheduler("key", 4)
    s.offer([rec(0, 3)])
    with pytest.raises(ValueError, match="offered after"):
        s.offer([rec(0, 3)])
    r = s.next_ready()
    assert r is not None
    s.done(r)
    with pytest.raises(ValueError, match="not running"):
        s.done(r)
    with pytest.raises(ValueError, match="not running"):
        s.done(rec(0, 99))


def test_revoke_drops_waiting_records_and_returns_the_running_ones() -> None:
    s = ProcessScheduler("key", concurrency=10)
    # key a: p0@0, then p1@0 (another partition), then p0@1
    s.offer([rec(0, 0, b"a"), rec(0, 1, b"b"), rec(0, 2, b"a")])
    s.offer([rec(1, 0, b"a"), rec(1, 1, b"c")])
    started = start_all(s)
    assert ids(started) == [(0, 0), (0, 1), (1, 1)]
    running = s.revoke([TP0])
    assert sorted(ids(running)) == [(0, 0), (0, 1)]  # type: ignore[arg-type]
    assert s.waiting(TP0) == 0
    s.offer([rec(0, 3, b"d")])  # a fetch that raced the revoke: dropped
    assert s.waiting(TP0) == 0
    s.done(started[1])
    assert s.committable(TP0) == 0 and s.completed_beyond(TP0) == {1}
    s.done(started[0])
    # a@2 of p0 was dropped; a@0 of p1 (behind it in key a's lane) runs
    assert ids(start_all(s)) == [(1, 0)]
    assert s.committable(TP0) == 2  # the dropped record is not committed past
    s.forget([TP0])
    assert s.committable(TP0) is None
    s.offer([rec(0, 2, b"a")])  # assigned again: from the committed offset
    assert s.waiting(TP0) == 1


def test_restore_skips_what_was_done_before_a_restart() -> None:
    s = ProcessScheduler("key", concurrency=10)
    s.restore(TP0, 10, decode_completed(encode_completed(10, {5, 11, 12, 14, 20}), 10))
    assert s.committable(TP0) == 10
    assert s.completed_beyond(TP0) == {11, 12, 14, 20}  # kept until offered
    s.offer([rec(0, o, bytes([o])) for o in range(10, 16)])  # 13's record is gone
    started = start_all(s)
    assert ids(started) == [(0, 10), (0, 13), (0, 15)]
    assert s.completed_beyond(TP0) == {11, 12, 14, 20}
    for r in started:
        s.done(r)
    assert s.committable(TP0) == 16 and s.completed_beyond(TP0) == {20}
    s.offer([rec(0, 21)])  # 20 never came (compacted): no longer claimed
    assert s.committable(TP0) == 21 and s.completed_beyond(TP0) == frozenset()
    with pytest.raises(ValueError, match="offered already"):
        s.restore(TP0, 0, set())


def test_the_metadata_bound_stops_starts_until_the_lowest_record_finishes() -> None:
    # key "a" is stuck at offset 0; "a" has every other record after it, so each other
    # record finishing leaves a run of its own
    def workload(limit: bool) -> tuple[ProcessScheduler, Record, int]:
        s = ProcessScheduler("key", concurrency=50, limit_metadata=limit)
        s.offer([rec(0, o, b"a" if o % 2 == 0 else b"%d" % o) for o in range(20_000)])
        stuck = s.next_ready()
        assert stuck is not None and stuck.offset == 0
        finished = 0
        while started := start_all(s):
            for r in started:
                s.done(r)
                finished += 1
        return s, stuck, finished

    def expensive(limit: bool) -> ProcessScheduler:
        # runs of one record between 130 waiting ones: 3 bytes a run in the metadata
        s = ProcessScheduler("key", concurrency=50, limit_metadata=limit)
        s.offer([rec(0, o, b"a" if o % 131 else b"%d" % o) for o in range(1, 120_000)])
        stuck = s.next_ready()
        assert stuck is not None and stuck.offset == 1
        while started := start_all(s):
            for r in started:
                s.done(r)
        return s

    assert not fits(1, expensive(limit=False).completed_beyond(TP0))
    assert fits(1, expensive(limit=True).completed_beyond(TP0))

    s, stuck, finished = workload(limit=False)
    assert not fits(0, s.completed_beyond(TP0))  # unbounded: would not fit
    s, stuck, finished = workload(limit=True)
    assert 0 < finished < 10_000
    assert fits(0, s.completed_beyond(TP0))
    text = encode_completed(0, s.completed_beyond(TP0))
    assert len(text) <= MAX_METADATA_BYTES
    assert decode_completed(text, 0) == s.completed_beyond(TP0)
    s.done(stuck)  # the lowest finishes: the partition moves again
    more = start_all(s)
    assert more and more[0].offset == 2


# -- model-checked --------------------------------------------------------------------------


def lane_of(ordering: Ordering, r: Record) -> Hashable:
    if ordering == "key" and r.key is not None:
        return (r.topic, r.key)
    return (r.topic, r.partition)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Ordering, int, list[Record], list[int]]:
    ordering: Ordering = draw(st.sampled_from(["key", "partition", "none"]))
    concurrency = draw(st.integers(1, 6))
    records = []
    for p in range(draw(st.integers(1, 3))):
        offset = draw(st.integers(0, 5))
        for _ in range(draw(st.integers(0, 25))):
            key = draw(st.sampled_from([None, b"a", b"b", b"c", b"d"]))
            records.append(rec(p, offset, key))
            offset += draw(st.integers(1, 3))
    # interleave partitions, keeping each partition's offset order
    order = draw(st.permutations(records))
    by_p: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        by_p[r.partition].append(r)
    interleaved = [by_p[r.partition].pop(0) for r in order]
    actions = draw(st.lists(st.integers(0, 99), max_size=200))
    return ordering, concurrency, interleaved, actions


class Model:
    """The scheduler's promises checked against a plain record of what happened."""

    def __init__(self, ordering: Ordering, concurrency: int) -> None:
        self.s = ProcessScheduler(ordering, concurrency)
        self.ordering = ordering
        self.concurrency = concurrency
        self.offered: dict[TopicPartition, list[Record]] = defaultdict(list)
        self.started: set[tuple[int, int]] = set()
        self.finished: set[tuple[int, int]] = set()
        self.running: list[Record] = []
        self.lane_offers: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self.lane_starts: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self.revoked: set[int] = set()

    def offer(self, records: list[Record]) -> None:
        self.s.offer(records)
        for r in records:
            if r.partition in self.revoked:
                continue
            self.offered[TopicPartition(r.topic, r.partition)].append(r)
            self.lane_offers[lane_of(self.ordering, r)].append((r.partition, r.offset))

    def start(self) -> bool:
        r = self.s.next_ready()
        if r is None:
            return False
        assert isinstance(r, Record)
        rid = (r.partition, r.offset)
        assert rid not in self.started and r.partition not in self.revoked
        lane = lane_of(self.ordering, r)
        if self.ordering != "none":  # one at a time per lane
            assert all(lane_of(self.ordering, x) != lane for x in self.running)
        self.started.add(rid)
        self.running.append(r)
        self.lane_starts[lane].append(rid)
        assert len(self.running) <= self.concurrency
        return True

    def finish(self, index: int) -> None:
        r = self.running.pop(index % len(self.running))
        self.s.done(r)
        self.finished.add((r.partition, r.offset))

    def check(self) -> None:
        assert self.s.running == len(self.running)
        for lane, starts in self.lane_starts.items():
            offers = [x for x in self.lane_offers[lane] if x in self.started]
            assert starts == offers  # started in the order offered, none skipped
        for tp, records in self.offered.items():
            unfinished = [r.offset for r in records if (r.partition, r.offset) not in self.finished]
            expected = unfinished[0] if unfinished else records[-1].offset + 1
            assert self.s.committable(tp) == expected
            assert self.s.completed_beyond(tp) == {
                r.offset for r in records
                if (r.partition, r.offset) in self.finished and r.offset > expected
            }  # fmt: skip
            if tp.partition not in self.revoked:
                waiting = [r for r in records if (r.partition, r.offset) not in self.started]
                assert self.s.waiting(tp) == len(waiting)


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_ordering_concurrency_and_commits_hold_under_any_completion_order(
    work: tuple[Ordering, int, list[Record], list[int]],
) -> None:
    ordering, concurrency, records, actions = work
    m = Model(ordering, concurrency)
    pending = list(records)
    for a in actions:
        if a < 30 and pending:
            n = a % 5 + 1
            m.offer(pending[:n])
            del pending[:n]
        elif a < 70:
            m.start()
        elif m.running:
            m.finish(a)
        m.check()
    # then everything offered runs to the end: no record is left behind
    m.offer(pending)
    while True:
        while m.start():
            pass
        m.check()
        if not m.running:
            break
        m.finish(0)
    assert m.started == {(r.partition, r.offset) for r in records}
    for tp, offered in m.offered.items():
        assert m.s.committable(tp) == offered[-1].offset + 1


@settings(max_examples=300, deadline=None)
@given(workloads(), st.integers(0, 200), st.integers(0, 2))
def test_revoke_then_restart_from_the_commit_redoes_only_what_had_not_finished(
    work: tuple[Ordering, int, list[Record], list[int]], revoke_at: int, revoked_p: int
) -> None:
    ordering, concurrency, records, actions = work
    tp = TopicPartition("t", revoked_p)
    m = Model(ordering, concurrency)
    pending = list(records)
    steps = [*actions[:revoke_at], -1, *actions[revoke_at:]]
    running_at_revoke: list[Record] = []
    for a in steps:
        if a == -1:
            expected = [r for r in m.running if r.partition == revoked_p]
            running_at_revoke = m.s.revoke([tp])  # type: ignore[assignment]
            assert sorted(ids(running_at_revoke)) == sorted(ids(expected))
            m.revoked.add(revoked_p)
        elif a < 30 and pending:
            m.offer(pending[:3])
            del pending[:3]
        elif a < 70:
            m.start()
        elif m.running:
            m.finish(a)
        m.check()
    while m.running:  # the caller waits for the running handlers (the revoked ones too)
        m.finish(0)
        while m.start():
            pass
        m.check()
    # the commit, then a restart of the partition from it
    of_tp = [r for r in records if r.partition == revoked_p]
    committed = m.s.committable(tp)
    if committed is None:  # nothing of it was offered before the revoke
        committed = of_tp[0].offset if of_tp else 0
        metadata = encode_completed(committed, ())
    else:
        metadata = encode_completed(committed, m.s.completed_beyond(tp))
    m.s.forget([tp])
    done_before = {r.offset for r in of_tp if (r.partition, r.offset) in m.finished}
    again = ProcessScheduler(ordering, concurrency)
    again.restore(tp, committed, decode_completed(metadata, committed))
    again.offer([r for r in of_tp if r.offset >= committed])
    redone = set()
    while True:
        batch = start_all(again)
        if not batch:
            break
        for r in batch:
            redone.add(r.offset)
            again.done(r)
    # nothing lost: every record ran before or runs now; redone: only the unfinished ones
    assert done_before | redone == {r.offset for r in of_tp}
    assert not (done_before & redone)


def test_the_lowest_unfinished_record_starts_even_at_the_metadata_bound() -> None:
    s = ProcessScheduler("key", concurrency=50)
    records = [rec(0, 0, b"a"), rec(0, 1, b"a")]
    # from 2 on: "b" at even offsets (b@2 stays running), a key of its own at odd ones
    records += [rec(0, o, b"b" if o % 2 == 0 else b"%d" % o) for o in range(2, 20_000)]
    s.offer(records)
    first = start_all(s)
    a0, b2 = first[0], first[1]
    assert (a0.offset, b2.offset) == (0, 2)
    for r in first[2:]:
        s.done(r)
    while started := start_all(s):
        for r in started:
            s.done(r)
    assert s.waiting(TP0) > 10_000  # stopped at the bound
    s.done(a0)  # a@1 is now the lowest unfinished: finishing it adds no run
    assert s.committable(TP0) == 1
    a1 = s.next_ready()
    assert a1 is not None and a1.offset == 1
    assert s.next_ready() is None  # nothing else while at the bound
    s.done(a1)
    s.done(b2)
    assert s.next_ready() is not None


def test_a_parked_lane_is_released_when_its_record_becomes_the_lowest_unfinished() -> None:
    s = ProcessScheduler("key", concurrency=50)
    s.offer([rec(1, 0, b"x")])  # x's first record: in partition 1, stays running a while
    records = [rec(0, 0, b"a"), rec(0, 1, b"x")]  # x@p0:1 waits behind it
    records += [rec(0, o, b"b" if o % 2 == 0 else b"%d" % o) for o in range(2, 20_000)]
    s.offer(records)
    first = start_all(s)
    x_p1, a0, b2 = first[0], first[1], first[2]
    assert [(r.partition, r.offset) for r in (x_p1, a0, b2)] == [(1, 0), (0, 0), (0, 2)]
    for r in first[3:]:
        s.done(r)
    while started := start_all(s):
        for r in started:
            s.done(r)
    s.done(x_p1)
    assert s.next_ready() is None  # x@p0:1 is not the lowest (a@0 runs): parked at the bound
    s.done(a0)
    x1 = s.next_ready()
    assert x1 is not None and (x1.partition, x1.offset) == (0, 1)
