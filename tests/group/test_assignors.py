"""Assignors: exact results for known cases, and properties over random groups."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.group.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)
from aiostream_kafka.structs import TopicPartition as TP


def _members(topics_by_member: dict[str, set[str]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, frozenset(t)) for m, t in topics_by_member.items()}


def test_range_matches_the_java_assignor() -> None:
    # Two members, topics t0 and t1 with 3 partitions each (the example in Kafka's docs):
    # C0: [t0p0, t0p1, t1p0, t1p1], C1: [t0p2, t1p2].
    members = _members({"C0": {"t0", "t1"}, "C1": {"t0", "t1"}})
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, members)
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }


def test_roundrobin_matches_the_java_assignor() -> None:
    # Same group: C0: [t0p0, t0p2, t1p1], C1: [t0p1, t1p0, t1p2].
    members = _members({"C0": {"t0", "t1"}, "C1": {"t0", "t1"}})
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 2), TP("t1", 1)],
        "C1": [TP("t0", 1), TP("t1", 0), TP("t1", 2)],
    }


def test_static_members_are_ordered_by_instance_id() -> None:
    members = {
        "zzz": MemberSubscription("zzz", frozenset({"t"}), group_instance_id="a"),
        "aaa": MemberSubscription("aaa", frozenset({"t"}), group_instance_id="b"),
    }
    result = RangeAssignor().assign({"t": 2}, members)
    assert result == {"zzz": [TP("t", 0)], "aaa": [TP("t", 1)]}


def test_unknown_strategy_is_a_config_error() -> None:
    assert assignor_for("cooperative-sticky").name == "cooperative-sticky"
    with pytest.raises(ConfigError, match="sticky-ish"):
        assignor_for("sticky-ish")


def _rebalance_rounds(
    partitions: dict[str, int],
    topics_by_member: dict[str, set[str]],
    owned: dict[str, list[TP]],
    generation: int,
) -> tuple[dict[str, list[TP]], dict[str, list[TP]], int]:
    """Play the cooperative protocol until it settles: each round the members send what they
    own; a member that lost partitions revokes them and forces another round. Returns the
    first round's assignment, the final one, and the number of rounds."""
    assignor = CooperativeStickyAssignor()
    first: dict[str, list[TP]] | None = None
    for rounds in range(1, 6):
        subs = {
            m: MemberSubscription(m, frozenset(t), tuple(owned.get(m, [])), generation)
            for m, t in topics_by_member.items()
        }
        result = assignor.assign(partitions, subs)
        first = first or result
        revoked = any(set(owned.get(m, [])) - set(result[m]) for m in topics_by_member)
        owned = result
        generation += 1
        if not revoked:
            return first, result, rounds
    raise AssertionError("the cooperative rebalance did not settle in 5 rounds")


def test_cooperative_sticky_adds_a_member_in_two_rounds_keeping_the_rest() -> None:
    partitions = {"t": 12}
    before = {"A": [TP("t", p) for p in range(6)], "B": [TP("t", p) for p in range(6, 12)]}
    topics = {"A": {"t"}, "B": {"t"}, "C": {"t"}}
    first, final, rounds = _rebalance_rounds(partitions, topics, before, generation=5)
    assert rounds == 2
    assert first["C"] == []  # nothing handed over in the round it is revoked
    assert set(first["A"]) <= set(before["A"]) and set(first["B"]) <= set(before["B"])
    assert sorted(len(v) for v in final.values()) == [4, 4, 4]
    kept = sum(len(set(before[m]) & set(final[m])) for m in ("A", "B"))
    assert kept == 8  # only the 4 partitions C needs moved


def test_cooperative_sticky_conflicting_claims_go_to_the_newest_generation() -> None:
    subs = {
        "A": MemberSubscription("A", frozenset({"t"}), (TP("t", 0),), generation=3),
        "B": MemberSubscription("B", frozenset({"t"}), (TP("t", 0),), generation=4),
    }
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    assert TP("t", 0) in result["B"] and TP("t", 0) not in result["A"]


groups = st.builds(
    lambda n_members, topic_counts, subs_seed: (n_members, topic_counts, subs_seed),
    st.integers(1, 6),
    st.lists(st.integers(0, 9), min_size=1, max_size=4),
    st.randoms(use_true_random=False),
)


@settings(max_examples=150, deadline=None)
@given(groups, st.sampled_from(["range", "roundrobin", "cooperative-sticky"]), st.booleans())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(
    group: tuple[int, list[int], object], strategy: str, identical: bool
) -> None:
    n_members, counts, rnd = group
    topics = [f"t{i}" for i in range(len(counts))]
    partitions = dict(zip(topics, counts, strict=True))
    topics_by_member: dict[str, set[str]] = {}
    for i in range(n_members):
        chosen = set(topics) if identical else {t for t in topics if rnd.random() < 0.6}  # type: ignore[attr-defined]
        topics_by_member[f"m{i}"] = chosen or {topics[0]}
    if strategy == "cooperative-sticky":
        _, result, _ = _rebalance_rounds(partitions, topics_by_member, {}, 0)
    else:
        result = assignor_for(strategy).assign(partitions, _members(topics_by_member))
    assert set(result) == set(topics_by_member)
    counted = Counter(tp for parts in result.values() for tp in parts)
    wanted = {TP(t, p) for m in topics_by_member.values() for t in m for p in range(partitions[t])}
    assert set(counted) == wanted and all(c == 1 for c in counted.values())
    for member, parts in result.items():
        assert all(tp.topic in topics_by_member[member] for tp in parts)
    if identical and strategy != "range":
        sizes = [len(v) for v in result.values()]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 6), st.integers(1, 40), st.integers(0, 5), st.data())
def test_cooperative_sticky_moves_only_what_balance_needs(
    n_before: int, n_partitions: int, joiners: int, data: st.DataObject
) -> None:
    partitions = {"t": n_partitions}
    members = [f"m{i}" for i in range(n_before)]
    _, settled, _ = _rebalance_rounds(partitions, {m: {"t"} for m in members}, {}, 0)
    leaving = data.draw(st.lists(st.sampled_from(members), unique=True, max_size=n_before - 1))
    after_members = [m for m in members if m not in leaving] + [f"new{i}" for i in range(joiners)]
    owned = {m: settled[m] for m in after_members if m in settled}
    first, final, rounds = _rebalance_rounds(
        partitions, {m: {"t"} for m in after_members}, owned, 10
    )
    assert rounds <= 2
    # The first round never gives a partition to a new owner while another owns it.
    for member, parts in first.items():
        for tp in parts:
            assert all(tp not in owned[o] for o in owned if o != member)
    sizes = [len(v) for v in final.values()]
    assert max(sizes) - min(sizes) <= 1
    # Stickiness: a surviving member keeps min(what it had, its final share).
    for member, had in owned.items():
        kept = len(set(had) & set(final[member]))
        assert kept >= min(len(had), len(final[member]))
