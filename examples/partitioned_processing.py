"""Process every partition concurrently, each one in order.

``partitioned_stream()`` yields one async iterator per assigned partition (and more as
partitions are assigned). Give each its own task: partitions run concurrently, records of
one partition (so of one key) stay in order, and a slow partition holds back only itself
(its prefetch queue fills and only its fetching stops).

The example writes ``--count`` account events keyed by account, then processes them with
a simulated 2 ms of I/O per record, one task per partition, checks that every account's
events came in order, and stops with ``drain()`` once all were processed.

    python examples/partitioned_processing.py                   # embedded local broker
    python examples/partitioned_processing.py --bootstrap-servers 127.0.0.1:9092 --count 600
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter

from _local_kafka import ensure_topic, kafka

from aiostream_kafka import Consumer, Producer, TopicPartition
from aiostream_kafka.consumer.iterators import PartitionRecords
from aiostream_kafka.serde import json_deserializer, json_serializer


async def produce(bootstrap_servers: str, topic: str, count: int, accounts: int) -> None:
    async with Producer(bootstrap_servers, value_serializer=json_serializer()) as producer:
        futures = [
            await producer.enqueue(
                topic, {"account": n % accounts, "seq": n // accounts}, key=b"%d" % (n % accounts)
            )
            for n in range(count)
        ]
        await asyncio.gather(*futures)


class Processor:
    def __init__(self, consumer: Consumer, count: int) -> None:
        self.consumer, self.count = consumer, count
        self.per_partition: Counter[int] = Counter()
        self.last_seq: dict[int, int] = {}
        self.out_of_order = 0
        self.all_done = asyncio.Event()

    async def process_partition(self, tp: TopicPartition, records: PartitionRecords) -> None:
        # One partition, one record at a time; committed in the background as we go.
        async for record in self.consumer.committing(records, every=100, within_s=1):
            event = record.value
            await asyncio.sleep(0.002)  # the I/O a real service would do for the event
            if event["seq"] != self.last_seq.get(event["account"], -1) + 1:
                self.out_of_order += 1
            self.last_seq[event["account"]] = event["seq"]
            self.per_partition[tp.partition] += 1
            if sum(self.per_partition.values()) >= self.count:
                self.all_done.set()
        # The iterator ended: the partition was revoked or the consumer drained.

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:

            async def dispatch() -> None:
                async for tp, records in self.consumer.partitioned_stream():
                    tasks.create_task(self.process_partition(tp, records))

            tasks.create_task(dispatch())
            await self.all_done.wait()
            # Graceful stop: hand out what is fetched, commit, leave the group, close.
            # Every iterator ends, so the tasks return and the TaskGroup exits.
            await self.consumer.drain(timeout=10)


async def main() -> None:
    parser = argparse.ArgumentParser(description="Per-partition concurrent processing.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--count", type=int, default=600, help="events to write and process")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--accounts", type=int, default=30)
    args = parser.parse_args()
    topic = f"accounts-{uuid.uuid4().hex[:8]}"
    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        await ensure_topic(bootstrap_servers, topic, partitions=args.partitions)
        await produce(bootstrap_servers, topic, args.count, args.accounts)
        print(f"wrote {args.count} events for {args.accounts} accounts to {topic}")
        started = time.monotonic()
        async with Consumer(
            bootstrap_servers, group_id=f"{topic}-processor", value_deserializer=json_deserializer()
        ) as consumer:
            consumer.subscribe([topic])
            processor = Processor(consumer, args.count)
            await processor.run()
        elapsed = time.monotonic() - started
    total = sum(processor.per_partition.values())
    print("per partition:", dict(sorted(processor.per_partition.items())))
    print(
        f"processed {total} events over {len(processor.per_partition)} partitions in "
        f"{elapsed:.2f}s (one at a time would take at least {total * 0.002:.2f}s of I/O); "
        f"out of order: {processor.out_of_order}"
    )


if __name__ == "__main__":
    asyncio.run(main())
