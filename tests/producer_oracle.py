"""confluent-kafka (librdkafka) as an independent oracle for the producer tests: it reads
back what our producer wrote, and partitions keys with its Java-compatible murmur2."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import confluent_kafka


@dataclass(frozen=True, slots=True)
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    timestamp_type: int


def _read_all(
    bootstrap: str, topic: str, partitions: int, timeout_s: float, until: dict[int, int]
) -> list[ReadRecord]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"oracle-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    try:
        # Read each partition up to its end offset (the later of the broker's high
        # watermark and ``until``), counting records rather than trusting end-of-partition
        # events.
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, p), timeout=10
            )
            ends[p] = max(high, until.get(p, 0))
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        out: list[ReadRecord] = []
        position = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout_s
        while any(position[p] < ends[p] for p in range(partitions)):
            if time.monotonic() > deadline:
                raise AssertionError(f"oracle read timed out at positions {position}, ends {ends}")
            for m in consumer.consume(num_messages=20_000, timeout=0.5):
                err = m.error()
                if err is not None:
                    raise AssertionError(f"oracle consumer error: {err}")
                ts_type, ts = m.timestamp()
                position[m.partition()] = m.offset() + 1
                out.append(
                    ReadRecord(
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value(),
                        tuple(m.headers() or ()),
                        ts,
                        ts_type,
                    )
                )
        return out
    finally:
        consumer.close()


async def read_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout_s: float = 120.0,
    until: dict[int, int] | None = None,
) -> list[ReadRecord]:
    """Every record of ``topic`` up to its end, read by librdkafka: up to the high
    watermark, and at least up to ``until[partition]`` (an offset) when given."""
    return await asyncio.to_thread(_read_all, bootstrap, topic, partitions, timeout_s, until or {})


def _librdkafka_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> list[int]:
    """The partition librdkafka's ``murmur2_random`` partitioner (the Java client's
    algorithm) picks for each key, from its delivery reports."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    result: dict[int, int] = {}

    def report(index: int):  # type: ignore[no-untyped-def]
        def on_delivery(err, msg):  # type: ignore[no-untyped-def]
            assert err is None, err
            result[index] = msg.partition()

        return on_delivery

    for i, key in enumerate(keys):
        producer.produce(topic, value=b"oracle", key=key, on_delivery=report(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    return [result[i] for i in range(len(keys))]


async def librdkafka_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> list[int]:
    """See :func:`_librdkafka_partitions`."""
    return await asyncio.to_thread(_librdkafka_partitions, bootstrap, topic, keys)


def assert_exactly_once_in_order(records: list[ReadRecord], expected: object) -> None:
    """Each expected record id (the record's value, an int in ASCII) is read exactly once,
    and ids grow within each partition (they were sent in that order)."""
    seen: dict[int, int] = {}
    last_per_partition: dict[int, int] = {}
    for r in records:
        assert r.value is not None
        i = int(r.value)
        assert i not in seen, f"record {i} written twice (offsets {seen[i]} and {r.offset})"
        seen[i] = r.offset
        assert i > last_per_partition.get(r.partition, -1), f"record {i} out of order"
        last_per_partition[r.partition] = i
    missing = sorted(set(expected) - set(seen))  # type: ignore[call-overload]
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:10]}"
