"""The rebalance benchmark's analysis (``benchmarks/rebalance.py``) on synthetic member
logs: the longest pause over kept partitions only, the time to a first record, records
re-delivered and missing; and the scenario's per-row table. Pure: no broker."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.rebalance import Change, MemberTrace, analyze, kept_pause, read_member_log
from benchmarks.scenarios import rebalance as scenario

_seq = itertools.count()


def feed(trace: MemberTrace, partitions: list[int], start: float, stop: float, step: float) -> None:
    """One record per partition every ``step`` s over ``[start, stop)``."""
    t = start
    while t < stop - 1e-9:
        for p in partitions:
            trace.records.append((round(t, 6), p, next(_seq)))
        t += step


def scenario_traces() -> tuple[list[MemberTrace], list[Change]]:
    # m1 alone on 0-3; m2 joins at 10; m1 keeps 0 and 1 but they pause 10.2 -> 11.7 while
    # 2 and 3 (moving to m2) flow on until 12; m2's first record at 13 (started at 10.5).
    m1 = MemberTrace("m1", joined_at=0.0, started_at=0.3, left_at=20.0)
    feed(m1, [0, 1, 2, 3], 0.5, 10.3, 0.1)
    feed(m1, [2, 3], 10.3, 12.0, 0.1)
    feed(m1, [0, 1], 11.7, 20.0, 0.1)
    m2 = MemberTrace("m2", joined_at=10.0, started_at=10.5)
    feed(m2, [2, 3], 13.0, 20.2, 0.1)
    # m1 leaves at 20: m2 keeps 2 and 3, which pause 20.1 -> 20.9; 0 and 1 join at 21.
    feed(m2, [2, 3], 20.9, 30.0, 0.1)
    feed(m2, [0, 1], 21.0, 30.0, 0.1)
    changes = [Change(10.0, "join", "m2"), Change(20.0, "leave", "m1")]
    return [m1, m2], changes


def test_pause_counts_only_the_partitions_kept_through_the_change() -> None:
    members, changes = scenario_traces()
    m1 = members[0]
    gap, kept = kept_pause(m1, 10.0, 20.0, 1.0) or (None, None)
    assert kept == [0, 1]  # 2 and 3 were not received in the second before 20
    assert gap == pytest.approx(1.5)  # 10.2 -> 11.7, though 2 and 3 flowed meanwhile
    # over every partition it received, the longest gap would have been 0.1 s
    result = analyze(members, changes, end=30.0, produced=[])
    pauses = {c["member"]: c["pauses"] for c in result["changes"]}
    assert set(pauses["m2"]) == {"m1"}  # the joining member itself is not measured
    assert pauses["m2"]["m1"]["pause_s"] == pytest.approx(1.5)
    assert set(pauses["m1"]) == {"m2"}  # the leaving one neither
    assert pauses["m1"]["m2"]["kept"] == [2, 3]
    assert pauses["m1"]["m2"]["pause_s"] == pytest.approx(0.8)
    assert result["max_kept_pause_s"] == pytest.approx(1.5)
    assert result["longest_pause"]["member"] == "m1"


def test_a_member_gone_before_the_next_change_or_without_kept_partitions_is_not_measured() -> None:
    # m1 was told to close at 12 (its records go on while it closes): not measured over
    # the change at 10, whose effect is read at 15; m2 got nothing in the second before 10.
    m1 = MemberTrace("m1", joined_at=0.0, started_at=0.0, left_at=12.0)
    feed(m1, [0], 0.0, 15.0, 0.1)
    m2 = MemberTrace("m2", joined_at=5.0, started_at=5.0)
    feed(m2, [1], 5.0, 9.0, 0.1)
    feed(m2, [1], 12.0, 30.0, 0.1)
    m3 = MemberTrace("m3", joined_at=10.0, started_at=10.0)
    changes = [Change(5.0, "join", "m2"), Change(10.0, "join", "m3")]
    result = analyze([m1, m2, m3], changes, end=15.0, produced=[])
    by_at = {c["at"]: c["pauses"] for c in result["changes"]}
    assert set(by_at[5.0]) == {"m1"}
    assert by_at[10.0] == {}
    assert result["max_kept_pause_s"] == pytest.approx(0.1)
    assert result["members_without_records"] == ["m3"]


def test_first_record_redeliveries_and_missing() -> None:
    members, changes = scenario_traces()
    m1, m2 = members
    # one record re-delivered to another member, one twice to the same member
    shared = m1.records[-1]
    m2.records.append((29.5, shared[1], shared[2]))
    again = m1.records[0]
    m1.records.append((19.9, again[1], again[2]))
    m2.records.append((29.9, 5, -1))  # a value without a sequence number: not counted
    seqs = {s for m in members for _, _, s in m.records if s >= 0}
    produced = [*seqs, 10**9, 10**9 + 1]
    result = analyze(members, changes, end=30.0, produced=produced)
    assert result["first_record_s"] == {"m1": pytest.approx(0.2), "m2": pytest.approx(2.5)}
    assert result["first_record_median_s"] == pytest.approx(1.35)
    assert result["first_record_max_s"] == pytest.approx(2.5)
    assert result["redelivered"] == 2
    assert result["redelivered_same_member"] == 1
    assert result["redelivered_other_member"] == 1
    assert result["missing"] == 2
    assert result["missing_sample"] == [10**9, 10**9 + 1]
    assert result["produced"] == len(seqs) + 2


def test_read_member_log_skips_a_torn_last_line() -> None:
    lines = ["S 1.5\n", "R 2.0 3 17 42\n", "R 2.5 4 18 43\n", "C 9.0\n", "R 3.0 4 1"]
    trace = read_member_log(lines, MemberTrace("m1", joined_at=1.0))
    assert trace.started_at == 1.5
    assert trace.closed_at == 9.0
    assert trace.records == [(2.0, 3, 42), (2.5, 4, 43)]


def _summary(**values: float) -> dict[str, dict[str, float]]:
    return {k: {"median": v, "min": v, "max": v, "n": 1} for k, v in values.items()}


def test_table_has_a_row_per_client_and_protocol_ratios_and_skip_notes() -> None:
    figures = {
        "max_kept_pause_s": 0.2,
        "first_record_median_s": 5.0,
        "first_record_max_s": 5.5,
        "redelivered": 0.0,
        "missing": 0.0,
    }
    cases = [
        {
            "spec": {"protocol": "classic"},
            "summary": {
                "ours": _summary(**figures),
                "confluent": _summary(**{**figures, "max_kept_pause_s": 0.4}),
            },
            "unsupported": {},
            "errors": {},
        },
        {
            "spec": {"protocol": "consumer"},
            "summary": {"confluent": _summary(**figures, heartbeat_interval_ms=5000.0)},
            "unsupported": {"ours": "ConfigError: unknown option", "aiokafka": "no KIP-848"},
            "errors": {},
        },
    ]
    text = "\n".join(scenario.extra_table(cases))
    assert "| aiostream_kafka, classic (cooperative-sticky) | 0.20 | 5.00 | 5.50 | 0 | 0 |" in text
    assert "| confluent-kafka, group.protocol=consumer | 0.20 |" in text
    assert "| 5 s |" in text  # the heartbeat interval beside the KIP-848 figures
    assert '* aiostream_kafka, group_protocol="consumer": skipped: ConfigError' in text
    assert "| classic | 0.50x | 1.00x | 1.00x | n/a | n/a |" in text
