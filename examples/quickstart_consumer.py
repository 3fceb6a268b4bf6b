"""Quickstart: read a topic as a member of a consumer group.

The group's members share the topic's partitions; the group remembers how far it got
(committed offsets), so a restart resumes there. ``committing`` commits in the background
what the loop has processed (every 100 records or 5 seconds here).

    python examples/quickstart_consumer.py                      # embedded broker, sample data
    python examples/quickstart_consumer.py --bootstrap-servers 127.0.0.1:9092 \
        --topic greetings --group greeters                      # until Ctrl-C
"""

from __future__ import annotations

import argparse
import asyncio

from _local_kafka import ensure_topic, kafka

from aiostream_kafka import Consumer, Producer
from aiostream_kafka.serde import json_deserializer, json_serializer


async def consume(bootstrap_servers: str, topic: str, group: str, count: int | None) -> int:
    received = 0
    async with Consumer(
        bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",  # a new group starts at the beginning
        value_deserializer=json_deserializer(),
    ) as consumer:
        consumer.subscribe([topic])
        async for record in consumer.committing(consumer.stream(), every=100, within_s=5):
            print(
                f"received {record.value} (key {record.key!r}) "
                f"from {record.topic}[{record.partition}] at offset {record.offset}"
            )
            received += 1
            if count is not None and received >= count:
                break
        # Everything handed out has been processed: commit all of it before leaving
        # (``committing`` counts a record as processed once the loop asks for the next).
        await consumer.commit()
    # Leaving ``async with`` left the group: its partitions move to the other members.
    return received


async def main() -> None:
    parser = argparse.ArgumentParser(description="Consume a topic in a consumer group.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--topic", default="greetings")
    parser.add_argument("--group", default="quickstart")
    parser.add_argument("--count", type=int, help="stop after this many records")
    args = parser.parse_args()
    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        if args.bootstrap_servers is None:  # a fresh embedded broker: give it something
            await ensure_topic(bootstrap_servers, args.topic, partitions=3)
            async with Producer(bootstrap_servers, value_serializer=json_serializer()) as p:
                for n in range(5):
                    await p.send(args.topic, {"n": n, "text": f"hello #{n}"})
            args.count = args.count or 5
        received = await consume(bootstrap_servers, args.topic, args.group, args.count)
    print(f"consumed {received} records from {args.topic} as group {args.group}")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
