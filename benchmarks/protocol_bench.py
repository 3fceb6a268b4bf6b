"""Message codec micro-benchmark: the generated codec against aiokafka's, no broker.

Times, per call, the decode and encode of the messages on a client's hot paths:

* a Metadata response of 100 topics x 10 partitions (v5, which both codecs have, and
  v12, flexible, which only ours has);
* a Fetch response of 50 partitions with 16 KiB of records each (v11 for both, v16 ours);
* a whole Produce request frame with 10 partitions of 16 KiB (v8 for both, v11 ours).

Both codecs decode the same bytes. aiokafka builds tuples, ours typed objects. Each
figure is the best of several rounds (the machine may be shared and noisy), and the two
implementations are interleaved round by round.

Usage: ``python benchmarks/protocol_bench.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import io
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiostream_kafka.protocol.headers import encode_request
from aiostream_kafka.protocol.messages import FetchResponse, MetadataResponse, ProduceRequest

RECORDS = bytes(16384)


def metadata(version: int) -> MetadataResponse:
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=i, host=f"b{i}", port=9092)
            for i in range(3)
        ],
        cluster_id="cluster",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                name=f"topic-{t}",
                topic_id=uuid.uuid4() if version >= 10 else uuid.UUID(int=0),
                partitions=[
                    MetadataResponse.MetadataResponsePartition(
                        partition_index=p,
                        leader_id=p % 3,
                        leader_epoch=5 if version >= 7 else -1,
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                        offline_replicas=[],
                    )
                    for p in range(10)
                ],
            )
            for t in range(100)
        ],
    )


def fetch() -> FetchResponse:
    return FetchResponse(
        session_id=1,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="orders",
                topic_id=uuid.uuid4(),
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=p,
                        high_watermark=100,
                        last_stable_offset=100,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=RECORDS,
                    )
                    for p in range(50)
                ],
            )
        ],
    )


def produce() -> ProduceRequest:
    partitions = [ProduceRequest.PartitionProduceData(index=p, records=RECORDS) for p in range(10)]
    return ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=partitions)],
    )


def cases() -> list[tuple[str, Callable[[], Any], Callable[[], Any] | None]]:
    """(name, ours, aiokafka or None)."""
    from aiokafka.protocol.fetch import FetchResponse_v11
    from aiokafka.protocol.metadata import MetadataResponse_v5
    from aiokafka.protocol.produce import ProduceRequest_v8

    md5, md12 = metadata(5), metadata(12)
    md5_bytes, md12_bytes = md5.encode(5), md12.encode(12)
    md5_theirs = MetadataResponse_v5.decode(io.BytesIO(md5_bytes))
    fr = fetch()
    fr11, fr16 = fr.encode(11), fr.encode(16)
    fr11_theirs = FetchResponse_v11.decode(io.BytesIO(fr11))
    pr = produce()
    pr_theirs = ProduceRequest_v8(
        transactional_id=None,
        required_acks=-1,
        timeout=30000,
        topics=[("orders", [(p, RECORDS) for p in range(10)])],
    )
    return [
        (
            "Metadata v5 decode",
            lambda: MetadataResponse.decode(md5_bytes, 5),
            lambda: MetadataResponse_v5.decode(io.BytesIO(md5_bytes)),
        ),
        ("Metadata v5 encode", lambda: md5.encode(5), md5_theirs.encode),
        ("Metadata v12 decode", lambda: MetadataResponse.decode(md12_bytes, 12), None),
        (
            "Fetch v11 decode",
            lambda: FetchResponse.decode(fr11, 11),
            lambda: FetchResponse_v11.decode(io.BytesIO(fr11)),
        ),
        ("Fetch v11 encode", lambda: fr.encode(11), fr11_theirs.encode),
        ("Fetch v16 decode", lambda: FetchResponse.decode(fr16, 16), None),
        (
            "Produce v8 request frame",
            lambda: encode_request(pr, 8, 1, "client"),
            lambda: pr_theirs.build_request_header(1, "client").encode() + pr_theirs.encode(),
        ),
        ("Produce v11 request frame", lambda: encode_request(pr, 11, 1, "client"), None),
    ]


def per_call(fn: Callable[[], Any], budget: float = 0.05) -> float:
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= budget:
            return elapsed / n
        n *= 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    table = cases()
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name, ours, theirs in table:
            for who, fn in (("ours", ours), ("aiokafka", theirs)):
                if fn is not None:
                    key = (name, who)
                    best[key] = min(best.get(key, float("inf")), per_call(fn))
    print(f"{'case':30} {'ours (us)':>10} {'aiokafka (us)':>14} {'speed-up':>9}")
    for name, _ours, _theirs in table:
        mine = best[(name, "ours")] * 1e6
        other = best.get((name, "aiokafka"))
        if other is None:
            print(f"{name:30} {mine:10.1f} {'-':>14} {'-':>9}")
        else:
            print(f"{name:30} {mine:10.1f} {other * 1e6:14.1f} {other * 1e6 / mine:8.1f}x")


if __name__ == "__main__":
    main()
