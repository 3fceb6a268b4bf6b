"""FakeCluster transactions (issue 34, part two): the real-broker transaction tests of
``test_transactions.py`` run again against the fake, on both transaction protocols, and
what only the fake can show (markers, the last stable offset, aborted-transaction lists,
fencing answers) checked at the wire. No JVM: these run in the unit tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
import test_transactions as real
from helpers import eventually, read_records

from aiostream_kafka import Consumer, Producer, ProducerRecord, Record, process_exactly_once
from aiostream_kafka.protocol.records import iter_batches
from aiostream_kafka.testing import FakeCluster, KafkaCluster

# The real-broker tests, collected here too with the fake ``txn_cluster`` below.
test_committed_records_are_read_committed_aborted_ones_only_uncommitted = (
    real.test_committed_records_are_read_committed_aborted_ones_only_uncommitted
)
test_batch_calls_join_the_transaction = real.test_batch_calls_join_the_transaction
test_transaction_scope_aborts_on_an_exception_and_reraises_it = (
    real.test_transaction_scope_aborts_on_an_exception_and_reraises_it
)
test_closing_with_an_open_transaction_aborts_it = (
    real.test_closing_with_an_open_transaction_aborts_it
)
test_a_second_producer_with_the_same_transactional_id_fences_the_first = (
    real.test_a_second_producer_with_the_same_transactional_id_fences_the_first
)
test_a_fenced_producer_inside_a_transaction_scope_raises_producer_fenced = (
    real.test_a_fenced_producer_inside_a_transaction_scope_raises_producer_fenced
)
test_send_offsets_to_transaction_commits_the_group_offsets_only_on_commit = (
    real.test_send_offsets_to_transaction_commits_the_group_offsets_only_on_commit
)
test_a_timed_out_transaction_gives_an_abortable_error = (
    real.test_a_timed_out_transaction_gives_an_abortable_error
)
test_a_commit_after_the_timeout_without_new_writes = (
    real.test_a_commit_after_the_timeout_without_new_writes
)
test_a_worker_killed_mid_transaction_is_replaced_exactly_once = (
    real.test_a_worker_killed_mid_transaction_is_replaced_exactly_once
)


@pytest.fixture(scope="module", params=["v2", "v1"])
def txn_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A fake one-broker cluster whose transaction protocol is the parameter (what the
    real-broker module's fixture of this name gives, in process)."""
    features = {"transaction.version": 1} if request.param == "v1" else None
    cluster = KafkaCluster(brokers=1, source="fake", features=features)
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


T = TypeVar("T")


async def _now(value: T) -> T:
    return value


def _topic() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


async def test_an_open_transaction_holds_the_lso_and_an_abort_is_listed() -> None:
    async with FakeCluster() as cluster:
        topic = _topic()
        cluster.create_topic(topic)
        bs = cluster.bootstrap_servers
        log = cluster.state.require_partition(topic, 0).log
        async with Producer(bs, transactional_id="tid-lso") as producer:
            producer.begin_transaction()
            await producer.send(topic, b"a1")
            await producer.send(topic, b"a2")
            assert log.last_stable_offset == 0 and log.high_watermark == 2
            await producer.abort_transaction()
            assert log.last_stable_offset == log.high_watermark == 3  # + the ABORT marker
            assert [(a.first_offset, a.last_offset) for a in log.aborted] == [(0, 2)]
            async with producer.transaction():
                await producer.send(topic, b"c1")
        markers = [b for b in log.batches if b.is_control]
        assert [m.base_offset for m in markers] == [2, 4]
        kinds = [next(iter_batches(m.data)).control_records()[0].type.name for m in markers]
        assert kinds == ["ABORT", "COMMIT"]
        committed = await read_records(bs, topic, 1, "read_committed")
        assert [r.value for r in committed] == [b"c1"]
        uncommitted = await read_records(bs, topic, 1, "read_uncommitted")
        assert sorted(r.value for r in uncommitted) == [b"a1", b"a2", b"c1"]


def _confluent_read(confluent: object, bs: str, topic: str, isolation: str, n: int) -> list[bytes]:
    """Values read by a confluent-kafka consumer without a group until ``n`` or idle 3 s."""
    import time

    consumer = confluent.Consumer(  # type: ignore[attr-defined]
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    )
    consumer.assign([confluent.TopicPartition(topic, 0, 0)])  # type: ignore[attr-defined]
    got: list[bytes] = []
    idle_until = time.monotonic() + 3
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < min(idle_until, deadline) and len(got) < n:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
                idle_until = time.monotonic() + 3
    finally:
        consumer.close()
    return got


def test_confluent_kafka_transactional_producer_and_read_committed_consumers() -> None:
    """librdkafka's transactional producer (AddPartitionsToTxn, EndTxn) against the fake;
    its read_committed consumer and ours see the committed records only."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster = FakeCluster()
    cluster.start_blocking()
    try:
        bs = cluster.bootstrap_servers
        topic = cluster.create_topic(_topic())
        producer = confluent.Producer({"bootstrap.servers": bs, "transactional.id": "rdk-tid"})
        producer.init_transactions(15)
        producer.begin_transaction()
        producer.produce(topic, b"aborted")
        producer.flush(15)
        producer.abort_transaction(15)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, b"committed-%d" % i)
        producer.commit_transaction(15)
        committed = _confluent_read(confluent, bs, topic, "read_committed", 3)
        assert committed == [b"committed-0", b"committed-1", b"committed-2"]
        everything = _confluent_read(confluent, bs, topic, "read_uncommitted", 4)
        assert everything == [b"aborted", b"committed-0", b"committed-1", b"committed-2"]
        ours = asyncio.run(read_records(bs, topic, 1, "read_committed"))
        assert [r.value for r in ours] == committed
        # A second instance fences the first: its next transactional call fails.
        second = confluent.Producer({"bootstrap.servers": bs, "transactional.id": "rdk-tid"})
        second.init_transactions(15)
        with pytest.raises(confluent.KafkaException) as fenced:
            producer.begin_transaction()
            producer.produce(topic, b"zombie")
            producer.commit_transaction(15)
        assert fenced.value.args[0].fatal()
    finally:
        cluster.stop_blocking()


async def test_exactly_once_helper_over_the_fake() -> None:
    """``process_exactly_once``: every source record lands once in the sink, and the
    group's offsets move only with committed transactions."""
    async with FakeCluster() as cluster:
        source, sink, group = _topic(), _topic(), f"g-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(source, partitions=2)
        cluster.create_topic(sink, partitions=2)
        bs = cluster.bootstrap_servers
        async with Producer(bs) as plain:
            for i in range(40):
                await plain.enqueue(source, b"%d" % i, partition=i % 2)
            await plain.flush()

        async def transform(records: list[Record]) -> list[ProducerRecord]:
            return [ProducerRecord(sink, r.value + b"!", partition=r.partition) for r in records]  # type: ignore[operator]

        async with (
            Producer(bs, transactional_id="eos-tid") as producer,
            Consumer(
                bs, group_id=group, isolation_level="read_committed", auto_offset_reset="earliest"
            ) as consumer,  # fmt: skip
        ):
            consumer.subscribe([source])
            task = asyncio.create_task(process_exactly_once(consumer, producer, transform))

            def done() -> bool:
                offsets = cluster.state.groups.committed(group)
                return all(
                    (source, p) in offsets and offsets[(source, p)].offset == 20 for p in range(2)
                )

            try:
                await eventually(lambda: _now(done()), bool, timeout_s=30)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        out = await read_records(bs, sink, 2, "read_committed")
        assert sorted(int(r.value[:-1]) for r in out) == list(range(40))  # type: ignore[index]
        committed = cluster.state.groups.committed(group)
        assert committed[(source, 0)].offset == 20 and committed[(source, 1)].offset == 20


async def _aiokafka_read(
    aiokafka: Any, bs: str, topic: str, partitions: int, isolation: str
) -> list[bytes]:
    """Values an aiokafka consumer without a group reads with ``isolation`` from the
    partitions of ``topic``, up to the end offsets it is given (the LSO for
    read_committed)."""
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bs, isolation_level=isolation, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        got: list[bytes] = []
        async with asyncio.timeout(20):
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(timeout_ms=200)
                got += [m.value for msgs in batch.values() for m in msgs]
        return got
    finally:
        await consumer.stop()


async def test_aiokafka_transactions_commit_abort_and_send_offsets() -> None:
    """aiokafka's transactional producer against the fake (InitProducerId, AddPartitions-
    ToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn in aiokafka's versions): committed
    records are read by a read_committed consumer, aborted ones only read_uncommitted;
    offsets sent in a committed transaction land in the group, those of an aborted one
    do not."""
    aiokafka = pytest.importorskip("aiokafka")
    async with FakeCluster() as cluster:
        topic, group = _topic(), f"g-{uuid.uuid4().hex[:6]}"
        cluster.create_topic(topic, partitions=2)
        bs = cluster.bootstrap_servers
        tp0 = aiokafka.TopicPartition(topic, 0)
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-tid")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"c1", partition=0)
                await producer.send_and_wait(topic, b"c2", partition=1)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"a1", partition=0)
            await producer.send_offsets_to_transaction({tp0: 9}, group)
            await producer.abort_transaction()
            assert (topic, 0) not in cluster.state.groups.committed(group)
            async with producer.transaction():
                await producer.send_and_wait(topic, b"c3", partition=0)
                await producer.send_offsets_to_transaction({tp0: 5}, group)
            assert cluster.state.groups.committed(group)[(topic, 0)].offset == 5
        finally:
            await producer.stop()
        log = cluster.state.require_partition(topic, 0).log
        kinds = [
            next(iter_batches(b.data)).control_records()[0].type.name
            for b in log.batches
            if b.is_control
        ]
        assert kinds == ["COMMIT", "ABORT", "COMMIT"]
        committed = await _aiokafka_read(aiokafka, bs, topic, 2, "read_committed")
        assert sorted(committed) == [b"c1", b"c2", b"c3"]
        uncommitted = await _aiokafka_read(aiokafka, bs, topic, 2, "read_uncommitted")
        assert sorted(uncommitted) == [b"a1", b"c1", b"c2", b"c3"]
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bs, group_id=group)
        await consumer.start()
        try:
            assert await consumer.committed(tp0) == 5
        finally:
            await consumer.stop()


@pytest.mark.allow_asyncio_errors  # aiokafka leaves its fenced futures unretrieved
async def test_aiokafka_a_second_transactional_producer_fences_the_first() -> None:
    aiokafka = pytest.importorskip("aiokafka")
    errors = pytest.importorskip("aiokafka.errors")
    async with FakeCluster() as cluster:
        topic = _topic()
        cluster.create_topic(topic)
        bs = cluster.bootstrap_servers
        first = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-fence")
        await first.start()
        try:
            second = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-fence")
            await second.start()
            try:
                with pytest.raises(errors.ProducerFenced):
                    async with first.transaction():
                        await first.send_and_wait(topic, b"zombie")
                async with second.transaction():
                    await second.send_and_wait(topic, b"kept")
            finally:
                await second.stop()
        finally:
            await first.stop()
        committed = await _aiokafka_read(aiokafka, bs, topic, 1, "read_committed")
        assert committed == [b"kept"]
