"""Bounded growth over a long life, against the real broker: idle connections closed, dead
ones dropped, topics no longer produced to forgotten (KIP-526) with their producer state."""

from __future__ import annotations

import asyncio

from aiostream_kafka import Admin, Producer
from aiostream_kafka.net.pool import Lane
from aiostream_kafka.structs import TopicPartition
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.proxy import FaultProxy


async def test_idle_connections_are_closed_and_replaced(kafka_cluster: KafkaCluster) -> None:
    async with Admin(kafka_cluster.bootstrap_servers, connections_max_idle_ms=500) as admin:
        pool = admin.cluster.pool
        await admin.list_topics()
        first = {id(c) for c in pool.connections()}
        assert first
        await asyncio.sleep(1.8)  # idle > 500 ms, and past the once-a-second sweep
        await admin.list_topics()  # the sweep runs on get(): old ones closed, a new one used
        now = pool.connections()
        assert now and not first & {id(c) for c in now}
        assert all(not c.closed for c in now)
        assert len(pool._dead) <= len(first)  # closing ones only, not a growing list
        await asyncio.sleep(1.2)
        await admin.list_topics()
        # The first ones' reader tasks ended: forgotten (the dead list holds only the
        # connections this sweep just closed, whose readers are still finishing).
        assert not first & {id(c) for c in pool._dead}
        assert len(pool._dead) <= len(now)


async def test_busy_connections_are_not_closed_as_idle(kafka_cluster: KafkaCluster) -> None:
    async with Admin(kafka_cluster.bootstrap_servers, connections_max_idle_ms=700) as admin:
        await admin.list_topics()
        conn = admin.cluster.pool.connections()[0]
        for _ in range(12):  # 2.4 s of use, each gap well below the idle limit
            await admin.list_topics()
            await asyncio.sleep(0.2)
        assert not conn.closed


async def test_dead_connections_do_not_pile_up(kafka_cluster: KafkaCluster) -> None:
    host, port = kafka_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    async with FaultProxy(host, int(port)) as proxy:
        async with Admin(proxy.address, reconnect_backoff_ms=10) as admin:
            pool = admin.cluster.pool
            for _ in range(8):
                conn = await pool.get(proxy.listen_host, proxy.port, Lane.CONTROL)
                await proxy.cut()
                for _ in range(100):
                    if conn.finished:
                        break
                    await asyncio.sleep(0.01)
                assert conn.finished
            # each get() after a cut retired the dead one; none is kept once finished
            await asyncio.sleep(1.1)
            await pool.get(proxy.listen_host, proxy.port, Lane.CONTROL)
            assert len(pool._dead) == 0
            assert len(pool.connections()) == 1


async def test_topics_not_produced_to_are_forgotten(kafka_cluster: KafkaCluster, new_topic) -> None:  # type: ignore[no-untyped-def]
    old, fresh = await new_topic(partitions=3), await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, metadata_max_idle_ms=600) as producer:
        for i in range(30):
            await producer.enqueue(old, value=b"x", key=str(i).encode())
        await producer.enqueue(old, value=b"keyless")
        await producer.flush()
        cluster = producer.cluster
        acc = producer._accumulator
        assert acc is not None
        assert old in cluster._tracked and TopicPartition(old, 0) in acc.batches
        await asyncio.sleep(1.2)  # idle past metadata_max_idle_ms
        # Producing elsewhere runs the sender's prune pass, and refreshes the metadata.
        for _ in range(5):
            await producer.send(fresh, value=b"y")
            await asyncio.sleep(0.3)
        await cluster.refresh()
        assert old not in cluster._tracked
        assert old not in cluster.snapshot.topics  # the snapshot holds what is still asked
        assert fresh in cluster.snapshot.topics
        assert not [tp for tp in acc.batches if tp.topic == old]
        assert old not in producer._sticky
        # The topic still exists: its idempotence sequences stay (resetting them would make
        # its next batch out of order for the broker).
        idem = producer._idempotence
        assert idem is not None and TopicPartition(old, 0) in idem.partitions
        # Producing to it again works, in order, from where its sequences were.
        meta = await producer.send(old, value=b"again", partition=0)
        assert meta.topic == old and meta.offset >= 0
