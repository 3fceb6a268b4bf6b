"""Consumer groups: membership, partition assignment and committed offsets."""

from aiostream_kafka.group.assignors import (
    ASSIGNORS,
    Assignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    assignor_for,
)

__all__ = [
    "ASSIGNORS",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assignor_for",
]
