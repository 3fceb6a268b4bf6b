"""Kafka as a job queue: workers of one share group (KIP-932, Kafka 4.2+) take jobs.

The members of a share group take the records of the same partitions cooperatively, one
record to one member at a time, under a lock; each record is acknowledged on its own.
``ShareConsumer.process(handler, concurrency=..., max_failures=...)`` runs the handler on
up to ``concurrency`` jobs at once per worker: a job whose handler returns is accepted
(done for good); one whose handler raises is released and delivered again (to any
worker, ``delivery_count`` one higher), or rejected once it has been delivered
``max_failures`` times (a poison job: archived, never delivered again).

Here every 10th job fails on its first delivery (a transient error: it succeeds when it
comes again) and job 13 always fails (rejected on its 3rd delivery). The share group's
configs are set first with the Admin client: start at the earliest record, a 15 s lock.

    python examples/share_worker.py                             # embedded local broker
    python examples/share_worker.py --bootstrap-servers 127.0.0.1:9092 --jobs 500 --workers 3
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections import Counter

from _local_kafka import ensure_topic, kafka

from aiostream_kafka import (
    Admin,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    Producer,
    ShareConsumer,
    ShareRecord,
)
from aiostream_kafka.serde import json_deserializer, json_serializer

MAX_FAILURES = 3
POISON = 13


class Jobs:
    """The outcome of every job, and a signal once each one is settled."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.done: dict[int, str] = {}  # job id -> the worker that finished it
        self.rejected: set[int] = set()
        self.deliveries: Counter[int] = Counter()
        self.all_settled = asyncio.Event()

    def settled(self) -> None:
        if len(self.done) + len(self.rejected) >= self.count:
            self.all_settled.set()


async def configure_group(bootstrap_servers: str, group: str) -> None:
    """A share group's settings are group configs (resource type GROUP), set before its
    first member joins: ``share.auto.offset.reset`` (latest by default: a new group would
    skip the jobs already waiting), the record lock, the delivery limit."""
    settings = {
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "15000",
        "share.delivery.count.limit": "5",
    }
    async with Admin(bootstrap_servers) as admin:
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp(name, value) for name, value in settings.items()
                ]
            }
        )


async def worker(
    name: str, bootstrap_servers: str, group: str, topic: str, jobs: Jobs, concurrency: int
) -> None:
    async def handle(record: ShareRecord) -> None:
        job = record.value  # {"id": ..., "work_ms": ...}, deserialized
        jobs.deliveries[job["id"]] += 1
        await asyncio.sleep(job["work_ms"] / 1000)  # the work
        if job["id"] == POISON or (job["id"] % 10 == 0 and record.delivery_count == 1):
            if record.delivery_count >= MAX_FAILURES:
                jobs.rejected.add(job["id"])  # process() rejects it as this raises
                jobs.settled()
            raise RuntimeError(f"job {job['id']} failed (delivery {record.delivery_count})")
        jobs.done[job["id"]] = name
        jobs.settled()

    async with ShareConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group, value_deserializer=json_deserializer()
    ) as consumer:
        consumer.subscribe([topic])
        processing = asyncio.create_task(
            consumer.process(handle, concurrency=concurrency, max_failures=MAX_FAILURES)
        )
        await jobs.all_settled.wait()  # a real worker runs until it is stopped
        await consumer.close()  # process() returns: the handlers running have finished
        await processing


async def main() -> None:
    parser = argparse.ArgumentParser(description="Workers of a share group taking jobs.")
    parser.add_argument("--bootstrap-servers", help="a running cluster (default: embedded)")
    parser.add_argument("--jobs", type=int, default=200, help="jobs to queue and work off")
    parser.add_argument("--workers", type=int, default=2, help="members of the share group")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs at once per worker")
    args = parser.parse_args()
    topic = f"jobs-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-workers"
    jobs = Jobs(args.jobs)

    async with kafka(args.bootstrap_servers) as bootstrap_servers:
        await ensure_topic(bootstrap_servers, topic, partitions=2)
        await configure_group(bootstrap_servers, group)
        async with Producer(bootstrap_servers, value_serializer=json_serializer()) as producer:
            for n in range(args.jobs):
                await producer.enqueue(topic, {"id": n, "work_ms": 5 + n % 20}, key=b"%d" % n)
        print(f"queued {args.jobs} jobs on {topic}")

        names = [f"worker-{i + 1}" for i in range(args.workers)]
        async with asyncio.timeout(300):
            async with asyncio.TaskGroup() as workers:
                for name in names:
                    workers.create_task(
                        worker(name, bootstrap_servers, group, topic, jobs, args.concurrency)
                    )

    by_worker = Counter(jobs.done.values())
    retried = sorted(j for j, n in jobs.deliveries.items() if n > 1 and j in jobs.done)
    print(f"done {len(jobs.done)} jobs: " + ", ".join(f"{n} {by_worker[n]}" for n in names))
    print(f"retried and done: {len(retried)} jobs")
    print(f"rejected: {sorted(jobs.rejected)} after {MAX_FAILURES} deliveries")


if __name__ == "__main__":
    asyncio.run(main())
