"""Partition assignors of the classic consumer group protocol.

The group leader runs one of these over every member's subscription and sends each member
its partitions through SyncGroup. The names are those of Kafka's Java assignors, so a group
may mix this client with others using the same strategy:

* ``range`` -- per topic, consecutive partition ranges to members sorted by id (eager);
* ``roundrobin`` -- all partitions, sorted, dealt to members in turn (eager);
* ``cooperative-sticky`` -- balanced, keeps every partition it can where it was, and never
  hands a partition to a new owner in the same round the old owner loses it (KIP-429): the
  old owner revokes it, rejoins, and the next round assigns it. Partitions that do not move
  keep flowing through the whole rebalance.

Assignors are pure: ``assign`` takes the partition counts and the subscriptions and returns
``{member_id: [TopicPartition, ...]}`` with every member present (possibly empty).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.structs import TopicPartition

RebalanceProtocol = Literal["eager", "cooperative"]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """What one member told the leader in JoinGroup: its topics and, for the cooperative
    protocol, the partitions it owns now and the generation it owned them in."""

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: str | None = None
    rack: str | None = None

    @property
    def sort_key(self) -> tuple[str, str]:
        # Static members keep their place across restarts (their member id changes).
        return (self.group_instance_id or self.member_id, self.member_id)


Assignment = dict[str, list[TopicPartition]]


def _all_partitions(
    partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
) -> list[TopicPartition]:
    wanted = set().union(*(m.topics for m in members.values())) if members else set()
    return [
        TopicPartition(topic, p)
        for topic in sorted(wanted)
        for p in range(partitions_per_topic.get(topic, 0))
    ]


class Assignor:
    """Base of the assignors: ``name`` is the protocol name sent in JoinGroup."""

    name: ClassVar[str]
    rebalance_protocol: ClassVar[RebalanceProtocol] = "eager"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        """Return each member's partitions. Topics missing from ``partitions_per_topic``
        (unknown to the metadata) are assigned to nobody."""
        raise NotImplementedError


class RangeAssignor(Assignor):
    """Per topic: partitions in order, split into consecutive ranges over the members
    subscribed to it, sorted; the first ``partitions % members`` get one more."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        result: Assignment = {m: [] for m in members}
        by_topic: dict[str, list[MemberSubscription]] = defaultdict(list)
        for member in members.values():
            for topic in member.topics:
                by_topic[topic].append(member)
        for topic in sorted(by_topic):
            count = partitions_per_topic.get(topic, 0)
            subscribers = sorted(by_topic[topic], key=lambda m: m.sort_key)
            each, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                n = each + (1 if i < extra else 0)
                result[member.member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + n)
                )
                start += n
        return result


class RoundRobinAssignor(Assignor):
    """All partitions sorted by (topic, partition), dealt to the members in turn (sorted),
    skipping members not subscribed to a partition's topic."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        result: Assignment = {m: [] for m in members}
        ordered = sorted(members.values(), key=lambda m: m.sort_key)
        if not ordered:
            return result
        turn = 0
        for tp in _all_partitions(partitions_per_topic, members):
            for _ in range(len(ordered)):
                member = ordered[turn % len(ordered)]
                turn += 1
                if tp.topic in member.topics:
                    result[member.member_id].append(tp)
                    break
        return result


@dataclass
class _Load:
    member: MemberSubscription
    assigned: list[TopicPartition] = field(default_factory=list)


class CooperativeStickyAssignor(Assignor):
    """Balanced and sticky, with the cooperative two-round hand-over of KIP-429."""

    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> Assignment:
        target, previous_owner = self._sticky_target(partitions_per_topic, members)
        # KIP-429: a partition that changes owner is withheld from its new owner this round;
        # the old owner sees it gone, revokes it, and rejoins, and the next round assigns it.
        result: Assignment = {}
        for member_id, partitions in target.items():
            result[member_id] = [
                tp for tp in partitions if previous_owner.get(tp, member_id) == member_id
            ]
        return result

    def _sticky_target(
        self, partitions_per_topic: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> tuple[Assignment, dict[TopicPartition, str]]:
        loads = {m: _Load(sub) for m, sub in members.items()}
        existing = set(_all_partitions(partitions_per_topic, members))

        # Who owns what now: the claim of the highest generation wins a conflict (a member
        # that missed a rebalance still lists what it owned before).
        previous_owner: dict[TopicPartition, str] = {}
        claim_generation: dict[TopicPartition, int] = {}
        for member_id, sub in sorted(members.items()):
            for tp in sub.owned:
                if tp not in existing or tp.topic not in sub.topics:
                    continue
                if tp not in previous_owner or sub.generation > claim_generation[tp]:
                    previous_owner[tp] = member_id
                    claim_generation[tp] = sub.generation

        eligible: dict[TopicPartition, list[str]] = {
            tp: sorted(
                (m for m, sub in members.items() if tp.topic in sub.topics),
                key=lambda m: members[m].sort_key,
            )
            for tp in sorted(existing)
        }

        # 1. Keep what each member validly owns, up to a fair share: the partitions it could
        #    have, divided by the members that could have them, rounded up.
        for member_id, load in loads.items():
            owned = sorted(tp for tp, owner in previous_owner.items() if owner == member_id)
            pool = [tp for tp in existing if tp.topic in load.member.topics]
            competitors = {m for tp in pool for m in eligible[tp]}
            share = -(-len(pool) // max(1, len(competitors)))
            load.assigned.extend(owned[:share])
        taken = {tp for load in loads.values() for tp in load.assigned}

        # 2. Hand out the rest, the most constrained partitions first, each to the eligible
        #    member with the fewest partitions.
        free = sorted(existing - taken, key=lambda tp: (len(eligible[tp]), tp))
        for tp in free:
            candidates = eligible[tp]
            if not candidates:
                continue
            best = min(candidates, key=lambda m: (len(loads[m].assigned), members[m].sort_key))
            loads[best].assigned.append(tp)

        # 3. Even out what is left uneven (possible with different subscriptions): move a
        #    partition from a member with two or more above an eligible one, preferring
        #    partitions that were not already owned where they are.
        for _ in range(len(existing) * max(1, len(members))):
            moved = False
            ordered = sorted(loads.values(), key=lambda load: -len(load.assigned))
            for heavy in ordered:
                for tp in sorted(
                    heavy.assigned,
                    key=lambda p: (previous_owner.get(p) == heavy.member.member_id, p),
                ):
                    light = min(
                        (loads[m] for m in eligible[tp]),
                        key=lambda load: (len(load.assigned), load.member.sort_key),
                    )
                    if len(heavy.assigned) - len(light.assigned) >= 2:
                        heavy.assigned.remove(tp)
                        light.assigned.append(tp)
                        moved = True
                        break
                if moved:
                    break
            if not moved:
                break

        target = {m: sorted(load.assigned) for m, load in loads.items()}
        return target, previous_owner


ASSIGNORS: dict[str, type[Assignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)
}


def assignor_for(name: str) -> Assignor:
    """Return the assignor called ``name`` (``range``, ``roundrobin``,
    ``cooperative-sticky``).

    Raises:
        ConfigError: no assignor has that name.
    """
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ConfigError(
            f"partition_assignment_strategy {name!r} is unknown; choose from {sorted(ASSIGNORS)}"
        ) from None
