"""Quickstart: send records to Kafka and see where each one landed.

``send`` returns once the broker acknowledged the record (acks="all" by default, with
idempotence: a retry never writes a record twice). ``enqueue`` returns as soon as the
record is buffered, so many records travel together; await its future for the result.

    python examples/quickstart_producer.py                      # embedded local broker
    python examples/quickstart_producer.py --bootstrap-servers 127.0.0.1:9092 \
        --topic greetings --count 5 --burst 1000
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _local_kafka import ensure_topic, kafka

from aiostream_kafka import Producer
from aiostream_kafka.serde import json_serializer


async def produce(bootstrap_servers: str, topic: str, count: int, burst: int) -> None:
    async with Producer(bootstrap_servers, value_serializer=json_serializer()) as producer:
        # One at a time: each send waits for the broker's acknowledgement.
        for n in range(count):
            meta = await producer.send(
                topic, {"n": n, "text": f"hello #{n}"}, key=f"user-{n % 3}".encode()
            )
            print(f"sent n={n} to {meta.topic}[{meta.partition}] at offset {meta.offset}")

        # Many at once: enqueue only waits for buffer space; the futures resolve on ack.
        started = time.monotonic()
        futures = [
            await producer.enqueue(topic, {"n": n, "text": "bulk"}, key=f"user-{n % 3}".encode())
            for n in range(count, count + burst)
        ]
        await asyncio.gather(*futures)  # raises the first delivery error, if any
        if burst:
            rate = burst / max(time.monotonic() - started, 1e-9)
            print(f"sent {burst} more with enqueue ({rate:,.0f} records/s)")
    # Leaving ``async with`` delivered everything still buffered.
    print(f"produced {count + burst} records to {topic}")


async def main() -> None:
    parser = argparse.ArgumentParser(description="Send records to a Kafka topic.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--topic", default="greetings")
    parser.add_argument("--count", type=int, default=5, help="records sent one by one")
    parser.add_argument("--burst", type=int, default=1000, help="records sent with enqueue")
    args = parser.parse_args()
    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        await ensure_topic(bootstrap_servers, args.topic, partitions=3)
        await produce(bootstrap_servers, args.topic, args.count, args.burst)


if __name__ == "__main__":
    asyncio.run(main())
