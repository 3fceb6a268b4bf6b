"""Every record sent is read back exactly once, intact, by an independent client
(confluent-kafka / librdkafka), for each compression type."""

from __future__ import annotations

import os
import time

import pytest
from helpers import KEEP_OLD_RECORDS
from producer_oracle import read_all

from aiostream_kafka.producer import Producer
from aiostream_kafka.testing import KafkaCluster

# 200,000 records for each codec; the suite stays within its time budget because the
# producer sends them in ~2 s per codec and librdkafka reads them back in about as long.
COUNT = int(os.environ.get("PRODUCER_ROUNDTRIP_COUNT", "200000"))
PARTITIONS = 4
BASE_TS = 1_700_000_000_000


def _record(i: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]:
    key = None if i % 3 == 0 else b"key-%d" % (i % 1000)
    value = b"%09d|" % i + b"payload-" * (i % 8) + bytes([i % 251])
    headers: list[tuple[str, bytes | None]] = []
    if i % 5 == 0:
        headers = [("trace", b"%d" % i), ("nullable", None)]
    return key, value, headers


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_every_record_is_read_back_exactly_once_and_intact(
    kafka_cluster: KafkaCluster, new_topic, compression: str | None
) -> None:
    topic = await new_topic(partitions=PARTITIONS, config=KEEP_OLD_RECORDS)
    bs = kafka_cluster.bootstrap_servers
    started = time.monotonic()
    async with Producer(bs, compression_type=compression) as producer:
        futures = []
        for i in range(COUNT):
            key, value, headers = _record(i)
            futures.append(
                await producer.enqueue(
                    topic, value, key=key, headers=headers or None, timestamp_ms=BASE_TS + i
                )
            )
    produced = time.monotonic() - started
    metas = [f.result() for f in futures]  # all resolved by close()
    # The oracle reads at least up to every offset we were told was written.
    acked: dict[int, int] = {}
    for m in metas:
        acked[m.partition] = max(acked.get(m.partition, 0), m.offset + 1)
    records = await read_all(bs, topic, PARTITIONS, until=acked)
    assert len(records) == COUNT, (len(records), COUNT)
    by_index: dict[int, object] = {}
    for r in records:
        assert r.value is not None
        i = int(r.value[:9])
        assert i not in by_index, f"record {i} read twice"
        by_index[i] = r
        key, value, headers = _record(i)
        assert (r.key, r.value, r.headers) == (key, value, tuple(headers)), i
        assert (r.timestamp_type, r.timestamp_ms) == (1, BASE_TS + i)  # CreateTime, ours
        meta = metas[i]
        assert (meta.partition, meta.offset, meta.timestamp_ms) == (
            r.partition,
            r.offset,
            BASE_TS + i,
        )
    assert len(by_index) == COUNT
    print(f"{compression}: {COUNT} records produced in {produced:.2f}s")
