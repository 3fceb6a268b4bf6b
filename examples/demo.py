"""The aiostream_kafka demo: produce a stream of records and consume it back.

With no ``--bootstrap-servers`` it starts an embedded local Kafka broker
(``aiostream_kafka.testing.KafkaCluster``) and stops it at the end. It creates a fresh
topic, produces ``--records`` records with ``enqueue_nowait`` (no future per record), consumes them
back through ``Consumer.stream()`` with a progress bar, checks that every record arrived
exactly once and in order per partition, and prints counts and throughput.

    python examples/demo.py                       # embedded broker
    python examples/demo.py --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import AsyncIterator

from aiostream_kafka import Admin, BufferFullError, Consumer, NewTopic, Producer, TopicPartition


class Progress:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.started = self.drawn = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.drawn >= 0.1 or self.done >= self.total:
            self.drawn = now
            self.draw(now)

    def draw(self, now: float) -> None:
        width = 30
        filled = width * self.done // max(1, self.total)
        rate = self.done / max(now - self.started, 1e-9)
        sys.stderr.write(
            f"\r{self.label:<9} [{'#' * filled}{'.' * (width - filled)}] "
            f"{self.done:>9,}/{self.total:,}  {rate:>10,.0f} rec/s"
        )
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


@contextlib.asynccontextmanager
async def cluster(bootstrap: str | None) -> AsyncIterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from aiostream_kafka.testing import KafkaCluster

    started = time.monotonic()
    print(
        "starting an embedded Kafka broker (first run downloads Kafka 4.3.1 from Maven Central)..."
    )
    async with KafkaCluster(brokers=1) as local:
        print(f"broker up at {local.bootstrap_servers} in {time.monotonic() - started:.1f}s")
        yield local.bootstrap_servers


async def produce(bootstrap: str, topic: str, records: int, value_size: int) -> float:
    payload = b"x" * value_size
    progress = Progress("produce", records)
    started = time.monotonic()
    failed: list[BaseException] = []

    def delivered(_metadata: object, error: BaseException | None) -> None:
        progress.advance()
        if error is not None:
            failed.append(error)

    # The fastest call for a pipeline: enqueue_nowait() neither awaits nor makes a future;
    # when buffer_memory is full it raises BufferFullError and we wait for room. (A
    # request handler awaits producer.send() instead: it returns after the ack.)
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(records):
            key = f"key-{i % 1000}".encode()
            value = b"%d:" % i + payload
            while True:
                try:
                    producer.enqueue_nowait(topic, value, key=key, on_delivery=delivered)
                    break
                except BufferFullError:
                    await producer.wait_for_buffer()
        await producer.flush()
        if failed:
            raise RuntimeError(f"{len(failed)} records failed; first: {failed[0]!r}")
    return time.monotonic() - started


async def consume(
    bootstrap: str, topic: str, partitions: int, records: int
) -> tuple[float, int, int]:
    progress = Progress("consume", records)
    seen: set[int] = set()
    duplicates = 0
    last_offset: dict[int, int] = {}
    out_of_order = 0
    started = time.monotonic()
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        async for record in consumer.stream():
            number = int(record.value.split(b":", 1)[0])
            if number in seen:
                duplicates += 1
            seen.add(number)
            if record.offset <= last_offset.get(record.partition, -1):
                out_of_order += 1
            last_offset[record.partition] = record.offset
            progress.advance()
            if len(seen) >= records:
                break
    return time.monotonic() - started, duplicates, out_of_order


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", default=None, help="an existing cluster to use")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value")
    args = parser.parse_args()

    async with cluster(args.bootstrap_servers) as bootstrap:
        topic = f"aiostream-demo-{uuid.uuid4().hex[:8]}"
        async with Admin(bootstrap) as admin:
            new = NewTopic(topic, partitions=args.partitions, replication_factor=1)
            await admin.create_topics([new])
        print(
            f"topic {topic}: {args.partitions} partitions; "
            f"{args.records:,} records of {args.value_size} bytes"
        )
        try:
            produce_s = await produce(bootstrap, topic, args.records, args.value_size)
            consume_s, duplicates, out_of_order = await asyncio.wait_for(
                consume(bootstrap, topic, args.partitions, args.records), timeout=300
            )
        finally:
            async with Admin(bootstrap) as admin:
                await admin.delete_topics([topic])
    mb = args.records * args.value_size / 1e6
    print(
        f"produced {args.records:,} records in {produce_s:.2f}s: "
        f"{args.records / produce_s:,.0f} records/s, {mb / produce_s:.1f} MB/s "
        "(acks=all, idempotent)"
    )
    print(
        f"consumed {args.records:,} records in {consume_s:.2f}s: "
        f"{args.records / consume_s:,.0f} records/s, {mb / consume_s:.1f} MB/s via stream()"
    )
    print(f"duplicates: {duplicates}, out of order within a partition: {out_of_order}, missing: 0")
    return 0 if duplicates == 0 and out_of_order == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
