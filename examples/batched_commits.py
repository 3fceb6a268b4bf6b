"""Process records a batch at a time and commit after each batch (at-least-once).

``batches()`` yields what one fetch returned for one partition, as a list. Store the
whole batch in one go (here: one SQLite transaction), then ``commit()``: the group's
offsets move past the batch only once it is stored. A crash between the two re-delivers
the batch on restart, so the store must tolerate seeing it again -- an upsert keyed by
(partition, offset) does.

For record-at-a-time processing, ``consumer.committing(consumer.stream(), every=500,
within_s=5)`` commits in the background instead (see quickstart_consumer.py).

    python examples/batched_commits.py                          # embedded local broker
    python examples/batched_commits.py --bootstrap-servers 127.0.0.1:9092 --count 5000
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import uuid

from _local_kafka import ensure_topic, kafka

from aiostream_kafka import Admin, Consumer, Producer, Record


def store(db: sqlite3.Connection, batch: list[Record]) -> None:
    """Upsert a batch in one transaction (idempotent: a re-delivered batch overwrites)."""
    with db:
        db.executemany(
            "INSERT OR REPLACE INTO payments (partition, offset, amount) VALUES (?, ?, ?)",
            [(r.partition, r.offset, int(r.value or b"0")) for r in batch],
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description="Batch processing with explicit commits.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--count", type=int, default=5000, help="payments to write and store")
    parser.add_argument("--group", default=None, help="consumer group (default: a new one)")
    args = parser.parse_args()
    topic = f"payments-{uuid.uuid4().hex[:8]}"
    group = args.group or f"{topic}-loader"
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE payments (partition INT, offset INT, amount INT,"
        " PRIMARY KEY (partition, offset))"
    )

    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        await ensure_topic(bootstrap_servers, topic, partitions=3)
        async with Producer(bootstrap_servers) as producer:
            futures = [await producer.enqueue(topic, b"%d" % (n % 100)) for n in range(args.count)]
            await asyncio.gather(*futures)
        print(f"wrote {args.count} payments to {topic}")

        batches = 0
        async with Consumer(bootstrap_servers, group_id=group) as consumer:
            consumer.subscribe([topic])
            async for batch in consumer.batches():
                store(db, batch)
                await consumer.commit()  # everything handed out so far is stored
                batches += 1
                print(f"batch {batches}: {len(batch)} records of partition {batch[0].partition}")
                stored = db.execute("SELECT COUNT(*) FROM payments").fetchone()[0]
                if stored >= args.count:
                    break

        async with Admin(bootstrap_servers) as admin:
            committed = await admin.list_consumer_group_offsets(group)
    total = db.execute("SELECT COUNT(*), SUM(amount) FROM payments").fetchone()
    print(f"stored {total[0]} payments (sum {total[1]}) in {batches} batches")
    offsets = {tp.partition: meta.offset for tp, meta in sorted(committed.items())}
    print(f"committed offsets of group {group}: {offsets} (total {sum(offsets.values())})")


if __name__ == "__main__":
    asyncio.run(main())
