"""GroupCoordinator against the real broker, with a listener that records what it is told."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from helpers import eventually

from aiostream_kafka.admin import OffsetAndMetadata
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.errors import CommitFailedError, FencedMemberError
from aiostream_kafka.group.assignors import assignor_for
from aiostream_kafka.group.coordinator import GroupConfig, GroupCoordinator, GroupState
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


class Recorder:
    """Records assignment changes, as a consumer would act on them."""

    def __init__(self) -> None:
        self.owned: set[TopicPartition] = set()
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    async def partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("assigned", partitions))
        self.owned |= partitions

    async def partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("revoked", partitions))
        self.owned -= partitions

    async def partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.events.append(("lost", partitions))
        self.owned -= partitions

    def stalled(self) -> tuple[float, str]:
        return 0.0, "the test asks all the time"

    def member_failed(self, error: Exception) -> None:
        self.events.append(("failed", frozenset()))

    def revoked(self, since: int = 0) -> set[TopicPartition]:
        """Partitions revoked or lost since event number ``since``."""
        return {
            tp for kind, parts in self.events[since:] if kind in ("revoked", "lost") for tp in parts
        }


Member = tuple[GroupCoordinator, Recorder]


@pytest.fixture
async def members(kafka_cluster: KafkaCluster) -> AsyncIterator[Callable[..., Awaitable[Member]]]:
    started: list[tuple[GroupCoordinator, Cluster]] = []

    async def start(
        group: str,
        topics: list[str] | None = None,
        *,
        strategy: str = "cooperative-sticky",
        pattern: str | None = None,
        instance: str | None = None,
    ) -> Member:
        cluster = Cluster(ClientConfig(kafka_cluster.bootstrap_servers))
        await cluster.bootstrap()
        recorder = Recorder()
        config = GroupConfig(
            group_id=group,
            group_instance_id=instance,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=300,
            rebalance_timeout_ms=20_000,
            metadata_check_interval_ms=500,
        )
        coordinator = GroupCoordinator(cluster, config, [assignor_for(strategy)], recorder)
        coordinator.subscribe(topics or (), pattern=pattern)
        coordinator.start()
        started.append((coordinator, cluster))
        return coordinator, recorder

    yield start
    for coordinator, cluster in reversed(started):
        await coordinator.close()
        await cluster.close()


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


async def _all_stable(*coordinators: GroupCoordinator) -> None:
    async def check() -> bool:
        return (
            all(c.state is GroupState.STABLE and not c._rejoin.is_set() for c in coordinators)
            and len({c.generation for c in coordinators}) == 1
        )

    await eventually(check, bool, timeout_s=30)


async def test_members_split_the_partitions(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=12)
    group = _group()
    trio = [await members(group, [topic]) for _ in range(3)]
    await _all_stable(*(c for c, _ in trio))
    owned = [r.owned for _, r in trio]
    assert sorted(len(o) for o in owned) == [4, 4, 4]
    assert set().union(*owned) == {TopicPartition(topic, p) for p in range(12)}
    assert sum(len(o) for o in owned) == 12


async def test_cooperative_join_moves_only_what_it_must(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=12)
    group = _group()
    trio = [await members(group, [topic]) for _ in range(3)]
    await _all_stable(*(c for c, _ in trio))
    before = [set(r.owned) for _, r in trio]
    marks = [len(r.events) for _, r in trio]
    fourth = await members(group, [topic])
    await _all_stable(*(c for c, _ in trio), fourth[0])
    after = [r.owned for _, r in [*trio, fourth]]
    assert sorted(len(o) for o in after) == [3, 3, 3, 3]
    assert set().union(*after) == {TopicPartition(topic, p) for p in range(12)}
    for (_, recorder), had, mark in zip(trio, before, marks, strict=True):
        # Each old member gave up exactly the one partition the new member needed, and
        # kept the other three through the whole rebalance.
        assert len(recorder.revoked(mark)) == 1
        assert recorder.owned == had - recorder.revoked(mark)
        assert not any(kind == "lost" for kind, _ in recorder.events)


async def test_eager_protocol_revokes_everything_first(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=4)
    group = _group()
    first = await members(group, [topic], strategy="range")
    await _all_stable(first[0])
    assert len(first[1].owned) == 4
    second = await members(group, [topic], strategy="range")
    await _all_stable(first[0], second[0])
    assert ("revoked", frozenset(TopicPartition(topic, p) for p in range(4))) in first[1].events
    assert sorted(len(r.owned) for _, r in (first, second)) == [2, 2]


async def test_leaving_hands_partitions_over_at_once(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=6)
    group = _group()
    a, b = await members(group, [topic]), await members(group, [topic])
    await _all_stable(a[0], b[0])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await a[0].close()
    await eventually(lambda: asyncio.sleep(0, b[1].owned), lambda o: len(o) == 6, 15)
    # Far sooner than the 6 s session timeout: the member left, it did not expire.
    assert loop.time() - started < 5


async def test_commit_and_committed(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=2)
    group = _group()
    coordinator, _recorder = await members(group, [topic])
    await _all_stable(coordinator)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert await coordinator.offsets.committed([tp0, tp1]) == {tp0: None, tp1: None}
    await coordinator.offsets.commit({tp0: OffsetAndMetadata(42, "m"), tp1: OffsetAndMetadata(7)})
    committed = await coordinator.offsets.committed([tp0, tp1])
    assert committed[tp0] == OffsetAndMetadata(42, "m", None)
    assert committed[tp1] is not None and committed[tp1].offset == 7
    with pytest.raises(CommitFailedError, match="does not own"):
        await coordinator.offsets.commit({TopicPartition(topic, 5): OffsetAndMetadata(1)})


async def test_static_member_restart_keeps_its_partitions(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    topic = await new_topic(partitions=4)
    group = _group()
    a = await members(group, [topic], instance="instance-a")
    b = await members(group, [topic], instance="instance-b")
    await _all_stable(a[0], b[0])
    had = set(a[1].owned)
    generation = b[0].generation
    mark = len(b[1].events)
    await a[0].close()  # a static member does not leave the group on close
    again = await members(group, [topic], instance="instance-a")
    await _all_stable(again[0])
    assert again[1].owned == had
    assert b[0].generation == generation  # no rebalance for the others
    assert not b[1].revoked(mark)


async def test_a_second_member_with_the_same_instance_id_fences_the_first(
    new_topic: NewTopic,
    members,  # type: ignore[no-untyped-def]
) -> None:
    topic = await new_topic(partitions=2)
    group = _group()
    first = await members(group, [topic], instance="twin")
    await _all_stable(first[0])
    second = await members(group, [topic], instance="twin")
    await _all_stable(second[0])
    await eventually(lambda: asyncio.sleep(0, first[0].state), lambda s: s is GroupState.FENCED, 15)
    assert isinstance(first[0].error, FencedMemberError)
    assert first[1].owned == set()
    assert len(second[1].owned) == 2


async def test_a_pattern_picks_up_new_topics(new_topic: NewTopic, members) -> None:  # type: ignore[no-untyped-def]
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = await new_topic(name=f"{prefix}-a", partitions=2)
    coordinator, recorder = await members(_group(), pattern=rf"{prefix}-.*")
    await _all_stable(coordinator)
    assert {tp.topic for tp in recorder.owned} == {first}
    second = await new_topic(name=f"{prefix}-b", partitions=3)
    await eventually(
        lambda: asyncio.sleep(0, set(recorder.owned)), lambda o: len(o) == 5, timeout_s=20
    )
    assert {tp.topic for tp in recorder.owned} == {first, second}


async def test_a_task_that_dies_fails_the_member_instead_of_leaving_a_zombie(
    new_topic: NewTopic,
    members,  # type: ignore[no-untyped-def]
) -> None:
    """A bug in the heartbeat task (here: the listener's liveness probe raising) must not
    leave a member in its group without heartbeats: the member fails, visibly."""
    topic = await new_topic(partitions=2)
    coordinator, recorder = await members(_group(), [topic])
    await _all_stable(coordinator)

    def broken() -> tuple[float, str]:
        raise RuntimeError("probe bug")

    recorder.stalled = broken  # type: ignore[method-assign]
    await eventually(
        lambda: asyncio.sleep(0, coordinator.state), lambda s: s is GroupState.FAILED, 10
    )
    assert ("failed", frozenset()) in recorder.events
    assert coordinator.error is not None and "probe bug" in str(coordinator.error)
    assert coordinator.owned == frozenset()
