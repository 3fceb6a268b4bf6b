"""Testing an application against the in-process fake Kafka (``FakeCluster``): no JVM, no
container, ready in a millisecond; the clients speak the real protocol to it.

The application under test is ``forward``: it reads orders, writes them to a topic of
confirmations in transactions, exactly once. The checks run as plain code here (each
``check_*`` is what a test function would be) and print what they saw.

    python examples/testing_with_fake.py
"""

from __future__ import annotations

import asyncio

from aiostream_kafka import (
    Consumer,
    InvalidProducerEpochError,
    Producer,
    ProducerRecord,
    Record,
    TopicPartition,
    process_exactly_once,
)
from aiostream_kafka.testing import FakeCluster
from aiostream_kafka.testing.fake import ManualClock


# -- the application under test ------------------------------------------------------------
async def forward(bootstrap_servers: str, source: str, sink: str, group: str, count: int) -> None:
    """Confirm ``count`` orders of ``source`` into ``sink``, exactly once."""

    seen: set[tuple[int, int]] = set()  # (partition, offset) of the orders confirmed

    def confirm(records: list[Record]) -> list[ProducerRecord]:
        seen.update((r.partition, r.offset) for r in records)
        return [ProducerRecord(sink, b"confirmed:" + (r.value or b"")) for r in records]

    async with (
        Consumer(
            bootstrap_servers,
            group_id=group,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        ) as consumer,  # fmt: skip
        Producer(bootstrap_servers, transactional_id=f"{group}-forwarder") as producer,
    ):
        consumer.subscribe([source])
        while len(seen) < count:  # one transaction per batch read
            await process_exactly_once(consumer, producer, confirm, max_transactions=1)


async def read(bootstrap_servers: str, topic: str, count: int) -> list[bytes]:
    """``count`` committed values of ``topic`` (partition 0), from the start."""
    values: list[bytes] = []
    async with Consumer(bootstrap_servers, isolation_level="read_committed",
                        auto_offset_reset="earliest") as consumer:  # fmt: skip
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(30):
            async for record in consumer.stream():
                values.append(record.value or b"")
                if len(values) == count:
                    return values
    return values


# -- the checks ------------------------------------------------------------------------------
async def check_forwarding() -> None:
    async with FakeCluster() as cluster:
        cluster.create_topic("orders")
        cluster.create_topic("confirmations")
        async with Producer(cluster.bootstrap_servers) as producer:
            for n in range(3):
                await producer.send("orders", b"order-%d" % n)
        await forward(cluster.bootstrap_servers, "orders", "confirmations", "shop", count=3)
        assert await read(cluster.bootstrap_servers, "confirmations", 3) == [
            b"confirmed:order-0", b"confirmed:order-1", b"confirmed:order-2",
        ]  # fmt: skip
        assert cluster.state.groups.committed("shop")[("orders", 0)].offset == 3
        print(
            f"forwarding: 3 orders confirmed (cluster up in {cluster.startup_seconds * 1e3:.2f} ms)"
        )


async def check_fault_injection() -> None:
    async with FakeCluster(brokers=3) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=3)
        control = cluster.control
        # The next two Produce requests fail as if leadership had just moved.
        control.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=2)
        # Every Fetch answer is held 200 ms (a slow broker), until control.clear().
        control.delay("Fetch", 0.2)
        async with Producer(cluster.bootstrap_servers) as producer:
            meta = await producer.send("orders", b"survives", partition=0)
            # Leadership moves for real: the producer follows the new leader.
            new_leader = control.move_leader("orders", 0)
            await producer.send("orders", b"after the move", partition=0)
            # A broker stops: its connections drop, its partitions get other leaders.
            await control.stop_broker(new_leader)
            await producer.send("orders", b"after the stop", partition=0)
            await control.start_broker(new_leader)
        control.clear()
        produced = control.requests("Produce")
        assert [r.value for r in control.records("orders", 0)] == [
            b"survives", b"after the move", b"after the stop",
        ]  # fmt: skip
        print(
            f"fault injection: offset {meta.offset} written after 2 refusals; "
            f"{len(produced)} Produce requests seen"
        )


def check_from_synchronous_code() -> None:
    """``start_blocking()``: the fake serves from a thread of its own, for synchronous
    test suites and clients that run their own threads (confluent-kafka, kafka-python)."""
    cluster = FakeCluster()
    cluster.start_blocking()
    try:
        cluster.create_topic("events")

        async def produce() -> None:
            async with Producer(cluster.bootstrap_servers) as producer:
                await producer.send("events", b"from another loop")

        asyncio.run(produce())  # a client on an event loop of its own
        assert [r.value for r in cluster.records("events")] == [b"from another loop"]
    finally:
        cluster.stop_blocking()


async def check_deterministic_time() -> None:
    """A ``ManualClock``: the fake's timeouts run out when the test advances the clock."""
    async with FakeCluster(clock=ManualClock()) as cluster:
        cluster.create_topic("orders")
        bs = cluster.bootstrap_servers
        async with Producer(bs, transactional_id="slow", transaction_timeout_ms=60_000) as p:
            p.begin_transaction()
            await p.send("orders", b"never committed")
            cluster.advance_time(59.9)  # the coordinator still waits
            assert cluster.state.transactions.transactions["slow"].state == "Ongoing"
            cluster.advance_time(0.2)  # past the timeout: aborted, the epoch bumped
            try:
                await p.send("orders", b"too late")
            except InvalidProducerEpochError:
                await p.abort_transaction()  # it cannot commit; abort it
            else:
                raise AssertionError("the coordinator did not abort the transaction")
            async with p.transaction():  # the producer goes on
                await p.send("orders", b"committed")
        assert await read(bs, "orders", 1) == [b"committed"]


async def main() -> None:
    await check_forwarding()
    await check_fault_injection()
    await check_deterministic_time()
    print("deterministic time: the transaction was aborted at 60 s of the fake's clock")
    await asyncio.to_thread(check_from_synchronous_code)
    print("start_blocking: served a client running its own event loop")
    print("all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
