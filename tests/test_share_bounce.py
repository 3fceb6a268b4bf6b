"""Share consumers through broker failures on a real 3-broker cluster (replication 3):
the leader of most partitions is killed (SIGKILL) and restarted 5 s later, then the share
group coordinator's broker, while two members take 6,000 records with acknowledgements in
flight.

What must hold: every record is processed; only records in flight at a kill come again
(under 10 % in all, the goal the issue sets: confluent-kafka's preview delivered 17-48 %
twice in this run); and nothing accepted is handed out again afterwards (a fresh member
gets only records whose acceptance the members reported as not applied). A member keeps
the settlements no broker confirmed: a record it finished that comes back to it is
settled at once, not handed out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections import Counter

import pytest

from aiostream_kafka import Producer, ShareAcknowledgeError, ShareConsumer, ShareRecord
from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.admin.types import AlterConfigOp, ConfigResource, ConfigResourceType
from aiostream_kafka.testing import KafkaCluster

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
        reason="fault tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
    ),
]

TOTAL = 6000
PARTITIONS = 6


async def _wait_for(condition: object, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_broker_bounces_lose_no_acknowledgement(three_brokers: KafkaCluster) -> None:
    bs = three_brokers.bootstrap_servers
    topic = f"share-bounce-{uuid.uuid4().hex[:8]}"
    group = f"share-bounce-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap_servers=bs, default_api_timeout_ms=60_000) as admin:
        created = await admin.create_topics(
            [NewTopic(topic, partitions=PARTITIONS, replication_factor=3)]
        )
        await admin.incremental_alter_configs(
            {
                ConfigResource(ConfigResourceType.GROUP, group): [
                    AlterConfigOp("share.auto.offset.reset", "earliest"),
                    AlterConfigOp("share.heartbeat.interval.ms", "200"),
                ]
            }
        )
        leaders = Counter(p.leader for p in created[topic].partitions)  # type: ignore[union-attr]
        victim = leaders.most_common(1)[0][0]
    async with Producer(bootstrap_servers=bs, linger_ms=5) as producer:
        for i in range(TOTAL):
            await producer.enqueue(topic, value=b"%d" % i, key=b"%d" % i)
        await producer.flush()

    handled: Counter[int] = Counter()
    stop = asyncio.Event()

    async def member(sc: ShareConsumer) -> None:
        sc.subscribe([topic])
        while not stop.is_set():
            try:
                async for record in sc:
                    handled[int(record.value)] += 1
                    await asyncio.sleep(0.002)  # some work: the kills land mid-stream
                    if stop.is_set():
                        break
            except ShareAcknowledgeError:
                continue
            return

    async with (
        ShareConsumer(bootstrap_servers=bs, group_id=group, request_timeout_ms=10_000) as a,
        ShareConsumer(bootstrap_servers=bs, group_id=group, request_timeout_ms=10_000) as b,
    ):
        tasks = [asyncio.create_task(member(a)), asyncio.create_task(member(b))]
        try:
            await _wait_for(lambda: len(handled) >= TOTAL // 5, 60)
            await three_brokers.kill_broker(victim)
            await asyncio.sleep(5)
            await three_brokers.start_broker(victim)
            await _wait_for(lambda: len(handled) >= TOTAL // 2, 120)
            async with Admin(bootstrap_servers=bs, default_api_timeout_ms=60_000) as admin:
                coordinator = (await admin.describe_share_groups([group]))[group].coordinator
            await three_brokers.kill_broker(coordinator)
            await asyncio.sleep(5)
            await three_brokers.start_broker(coordinator)
            await _wait_for(lambda: len(handled) >= TOTAL, 180)
            # Records whose acknowledgements were lost come back for a while: to the member
            # that finished them (settled at once) or to the other one (a duplicate). Wait
            # until nothing has been handed out for 10 s.
            loop = asyncio.get_running_loop()
            last = (a.records_delivered + b.records_delivered, loop.time())

            def quiet() -> bool:
                nonlocal last
                delivered = a.records_delivered + b.records_delivered
                if delivered != last[0]:
                    last = (delivered, loop.time())
                return loop.time() - last[1] >= 10

            await _wait_for(quiet, 120)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for sc in (a, b):
            with contextlib.suppress(ShareAcknowledgeError):
                await sc.commit()
        resettled = a.records_resettled + b.records_resettled
        # What the members finished and no broker confirmed: reported as not applied
        # (ShareAcknowledgeError), so it may come again once they are gone.
        unconfirmed = {(tp.partition, o) for sc in (a, b) for (tp, o) in sc._unconfirmed}
    assert set(handled) == set(range(TOTAL))
    again = sum(n - 1 for n in handled.values())
    logging.getLogger(__name__).warning(
        "share bounce: %d of %d records handled twice or more (%.1f %%); %d settled again "
        "from memory", again, TOTAL, 100 * again / TOTAL, resettled,
    )  # fmt: skip
    assert again < TOTAL // 10, (again, resettled)
    # Nothing whose acceptance a broker confirmed is handed out again: a fresh member of
    # the group gets only records the members reported as not applied.
    fresh: list[ShareRecord] = []
    async with ShareConsumer(bootstrap_servers=bs, group_id=group) as late:
        late.subscribe([topic])
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(8):
                async for record in late:
                    fresh.append(record)
    offsets = {(r.partition, r.offset) for r in fresh}
    logging.getLogger(__name__).warning(
        "share bounce: a fresh member got %d records (delivery counts %s, partitions %s); "
        "%d settlements were unconfirmed",
        len(fresh), dict(Counter(r.delivery_count for r in fresh)),
        dict(Counter(r.partition for r in fresh)), len(unconfirmed),
    )  # fmt: skip
    assert len(offsets) == len(fresh)
    assert offsets <= unconfirmed, sorted(offsets - unconfirmed)[:20]
