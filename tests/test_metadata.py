"""ClusterSnapshot: merging Metadata responses and KIP-951 leader hints (no broker needed)."""

from __future__ import annotations

import uuid

from aiostream_kafka.cluster.metadata import BrokerMetadata, ClusterSnapshot
from aiostream_kafka.protocol.messages.metadata import MetadataResponse
from aiostream_kafka.structs import TopicPartition

TOPIC_ID = uuid.uuid4()


def _response(leader: int, epoch: int) -> MetadataResponse:
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9090 + n)
            for n in (1, 2, 3)
        ],
        cluster_id="c",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name="t",
                topic_id=TOPIC_ID,
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=0,
                        leader_id=leader,
                        leader_epoch=epoch,
                        replica_nodes=[1, 2, 3],
                        isr_nodes=[1, 2, 3],
                    )
                ],
            )
        ],
    )


def test_merge_builds_the_snapshot() -> None:
    snapshot = ClusterSnapshot().merged(_response(2, 5), replace_topics=False)
    tp = TopicPartition("t", 0)
    assert snapshot.leader(tp) == BrokerMetadata(2, "127.0.0.1", 9092)
    assert snapshot.partition(tp).leader_epoch == 5  # type: ignore[union-attr]
    assert snapshot.topic_name(TOPIC_ID) == "t"
    assert snapshot.partition(TopicPartition("t", 1)) is None


def test_a_newer_leader_hint_moves_the_leader() -> None:
    tp = TopicPartition("t", 0)
    snapshot = ClusterSnapshot().merged(_response(2, 5), replace_topics=False)
    moved = snapshot.with_leader(tp, 3, 6)
    assert moved.leader(tp).node_id == 3  # type: ignore[union-attr]
    assert snapshot.leader(tp).node_id == 2  # type: ignore[union-attr]  # snapshots are immutable


def test_a_stale_leader_hint_is_ignored() -> None:
    tp = TopicPartition("t", 0)
    snapshot = ClusterSnapshot().merged(_response(2, 5), replace_topics=False)
    assert snapshot.with_leader(tp, 3, 5) is snapshot
    assert snapshot.with_leader(tp, 3, 4) is snapshot


def test_a_hint_can_bring_a_new_broker_endpoint() -> None:
    tp = TopicPartition("t", 0)
    snapshot = ClusterSnapshot().merged(_response(2, 5), replace_topics=False)
    endpoint = BrokerMetadata(4, "127.0.0.1", 9999)
    moved = snapshot.with_leader(tp, 4, 7, endpoint)
    assert moved.leader(tp) == endpoint
