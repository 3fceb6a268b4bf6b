"""Transactions on a real 3-broker cluster whose transaction coordinator is killed.

``__transaction_state`` is replicated on the three brokers with ``min.insync.replicas``
2, so the coordinator's state survives the loss of one broker: the transaction's
partition moves to another broker, which loads it and finishes what the dead one began.
The producer must find the new coordinator and finish the commit there (within
``max_block_ms``), or fail it with a typed error; never hang, never lose a commit quietly.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from helpers import eventually, read_records

from aiostream_kafka import (
    Admin,
    KafkaTimeoutError,
    NewTopic,
    Producer,
    TransactionAbortableError,
    TransactionState,
)
from aiostream_kafka.testing import KafkaCluster

pytestmark = [
    pytest.mark.real_broker(
        reason=(
            "kills the transaction coordinator's broker with __transaction_state replicated "
            "over three JVM brokers (min ISR 2)"
        )
    ),
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
        reason="fault tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
    ),
]

_TRANSACTION_KEY_TYPE = 1  # FindCoordinator: the key is a transactional id


@pytest.fixture(scope="module", params=["v2", "v1"])
def three_brokers_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The shared ``three_brokers`` (tests/conftest.py) from the local jars, with
    ``__transaction_state`` on all three brokers (min ISR 2) and fast fencing of a killed
    broker; the transaction protocol version is the parameter."""
    return {
        "source": "local",
        "features": {"transaction.version": 1} if request.param == "v1" else None,
        "server_properties": {
            "transaction.state.log.replication.factor": "3",
            "transaction.state.log.min.isr": "2",
            # A killed broker is fenced (and its partitions move) after 4 s, not 9.
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
        },
    }


def _values(records: list[object]) -> list[bytes]:
    return sorted(r.value for r in records)  # type: ignore[attr-defined]


@pytest.mark.parametrize("when", ["before_commit", "with_commit"])
async def test_the_transaction_coordinator_killed_during_a_commit(
    three_brokers: KafkaCluster, when: str
) -> None:
    """``before_commit``: the coordinator is dead when the commit starts (its connection
    fails, FindCoordinator still names it until the controller fences it).
    ``with_commit``: it is killed while the commit runs (the records flushed, so the
    commit is the EndTxn, which the dead coordinator may or may not have logged).
    Either way the commit completes at the new coordinator, the records are read
    committed exactly once, and the producer goes on with a second transaction."""
    bs = three_brokers.bootstrap_servers
    topic = f"tx-faults-{uuid.uuid4().hex[:10]}"
    tid = f"tx-faults-{uuid.uuid4().hex[:10]}"
    first = [b"first-%d" % i for i in range(300)]
    second = [b"second-%d" % i for i in range(100)]
    async with Admin(bs, default_api_timeout_ms=60_000) as admin:
        await admin.create_topics(
            [NewTopic(topic, partitions=3, replication_factor=3,
                      config={"min.insync.replicas": "2"})]
        )  # fmt: skip
    victim: int | None = None
    try:
        async with (
            Admin(bs, default_api_timeout_ms=60_000) as admin,
            Producer(bs, transactional_id=tid, max_block_ms=60_000) as producer,
        ):
            victim = await admin.cluster.find_coordinator(tid, _TRANSACTION_KEY_TYPE)
            assert producer._txn is not None and producer._txn._coordinator == victim
            assert producer._txn.v2 is not bool(three_brokers.features)
            producer.begin_transaction()
            for i, value in enumerate(first):
                await producer.enqueue(topic, value, partition=i % 3)
            await producer.flush()
            loop = asyncio.get_running_loop()
            began = loop.time()
            if when == "before_commit":
                await three_brokers.kill_broker(victim)
                commit = asyncio.create_task(producer.commit_transaction())
            else:
                commit = asyncio.create_task(producer.commit_transaction())
                await three_brokers.kill_broker(victim)  # a thread kills it meanwhile
                # EndTxn went to the victim before it died (its answer was lost): the
                # commit has to be finished at the next coordinator.
                assert not commit.done()
            try:
                async with asyncio.timeout(65):  # max_block_ms and a margin: never hangs
                    await commit
            except KafkaTimeoutError:  # documented: the state stays COMMITTING; again
                assert producer.transaction_state is TransactionState.COMMITTING
                async with asyncio.timeout(65):
                    await producer.commit_transaction()
            except TransactionAbortableError:  # documented: abort, nothing is committed
                async with asyncio.timeout(65):
                    await producer.abort_transaction()
                outcome = "aborted"
            else:
                outcome = "committed"
            finally:
                commit.cancel()
            took = loop.time() - began
            print(f"{when}: the commit {outcome} in {took:.1f} s")
            assert producer.transaction_state is TransactionState.READY
            assert producer._txn._coordinator not in (None, victim)

            # The same producer goes on, with the new coordinator.
            async with asyncio.timeout(65):
                async with producer.transaction():
                    for i, value in enumerate(second):
                        await producer.enqueue(topic, value, partition=i % 3)
        committed = await read_records(bs, topic, 3, "read_committed", timeout_s=30)
        expected = second if outcome == "aborted" else first + second
        assert _values(committed) == sorted(expected)  # each once, none missing
    finally:
        if victim is not None:
            await three_brokers.start_broker(victim)
    async with Admin(bs, default_api_timeout_ms=60_000) as admin:
        # back in the ISR of the transaction log, for the next test
        async def in_sync() -> bool:
            topics = await admin.describe_topics(["__transaction_state"])
            return all(len(p.isr) == 3 for p in topics["__transaction_state"].partitions)

        await eventually(in_sync, bool, timeout_s=60)
