"""Transactions against real brokers, on both protocol versions: v2 (KIP-890, Kafka 4's
default ``transaction.version``) and v1 (a broker formatted with ``transaction.version=1``).

Each version gets its own one-broker cluster for this module (pytest runs all the tests
of one before starting the other), with a short
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` so that a timed-out
transaction is aborted by the coordinator within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from helpers import eventually
from helpers import read_records as _read

import aiostream_kafka
from aiostream_kafka import (
    Admin,
    CommitFailedError,
    Consumer,
    ConsumerGroupMetadata,
    InvalidProducerEpochError,
    KafkaError,
    OffsetSpec,
    Producer,
    ProducerFencedError,
    ProducerRecord,
    Record,
    TopicPartition,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionState,
    TransactionStateError,
    process_exactly_once,
)
from aiostream_kafka.errors import ConfigError
from aiostream_kafka.testing import KafkaCluster, probe

pytestmark = pytest.mark.real_broker(
    reason=(
        "its cluster forces the local jars (transaction.version 1 set at format time); the "
        "same tests run against the fake, both protocols, in test_fake_txn.py"
    )
)

_SERVER_PROPERTIES = {
    # The coordinator looks for timed-out transactions this often (default 10 s).
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("txn_cluster",)


@pytest.fixture(scope="module", params=["v2", "v1"])
def txn_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A one-broker cluster whose transaction protocol is the parameter."""
    features = {"transaction.version": 1} if request.param == "v1" else None
    cluster = KafkaCluster(
        brokers=1, server_properties=_SERVER_PROPERTIES, source="local", features=features
    )
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


def _v2(cluster: KafkaCluster) -> bool:
    return not cluster.features


async def _topic(
    cluster: KafkaCluster, partitions: int = 1, config: dict[str, str] | None = None
) -> str:
    name = f"tx-{uuid.uuid4().hex[:12]}"
    await probe.create_topic(cluster.bootstrap_servers, name, partitions, 1, config)
    return name


def _values(records: list[Record]) -> list[bytes]:
    return sorted(r.value for r in records)  # type: ignore[misc]


@contextlib.asynccontextmanager
async def _producer(cluster: KafkaCluster, **options: object) -> AsyncIterator[Producer]:
    tid = options.pop("transactional_id", None) or f"tid-{uuid.uuid4().hex[:10]}"
    async with Producer(cluster.bootstrap_servers, transactional_id=tid, **options) as p:
        yield p


# -- no broker ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"transactional_id": ""},
        {"transactional_id": 7},
        {"transactional_id": "t", "enable_idempotence": False},
        {"transactional_id": "t", "acks": 1},
        {"transactional_id": "t", "transaction_timeout_ms": 0},
    ],
)
def test_transactional_options_are_checked_before_io(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Producer("127.0.0.1:1", **options)


async def test_transactional_calls_on_a_plain_producer_are_refused() -> None:
    producer = Producer("127.0.0.1:1")
    assert producer.transaction_state is None
    with pytest.raises(TransactionStateError, match="transactional_id"):
        producer.begin_transaction()
    with pytest.raises(TransactionStateError, match="transactional_id"):
        await producer.commit_transaction()
    with pytest.raises(TransactionStateError, match="transactional_id"):
        await producer.send_offsets_to_transaction({}, "g")


# -- commit and abort --------------------------------------------------------------------


async def test_committed_records_are_read_committed_aborted_ones_only_uncommitted(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster, partitions=3)
    async with _producer(txn_cluster) as producer:
        assert producer.transaction_state is TransactionState.READY
        assert producer._txn is not None and producer._txn.v2 is _v2(txn_cluster)
        pid, epoch = producer.producer_id_and_epoch
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            await producer.send(topic, b"outside")
        producer.begin_transaction()
        assert producer.transaction_state is TransactionState.IN_TRANSACTION
        with pytest.raises(TransactionStateError, match="already open"):
            producer.begin_transaction()
        for i in range(30):
            await producer.enqueue(topic, b"commit-1-%d" % i, partition=i % 3)
        await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.READY
        # v2 bumps the epoch at the end of every transaction; v1 keeps it.
        assert producer.producer_id_and_epoch == ((pid, epoch + 1) if _v2(txn_cluster)
                                                  else (pid, epoch))  # fmt: skip

        producer.begin_transaction()
        acked = [await producer.send(topic, b"abort-%d" % i, partition=i % 3) for i in range(6)]
        assert all(m.offset >= 0 for m in acked)  # written, yet never read committed
        await producer.abort_transaction()

        async with producer.transaction():
            for i in range(10):
                await producer.enqueue(topic, b"commit-2-%d" % i, key=b"k%d" % i)
        # a transaction that wrote nothing ends without a request
        async with producer.transaction():
            pass
        with pytest.raises(TransactionStateError, match="no transaction is open"):
            await producer.commit_transaction()

    committed = sorted([b"commit-1-%d" % i for i in range(30)] +
                       [b"commit-2-%d" % i for i in range(10)])  # fmt: skip
    aborted = [b"abort-%d" % i for i in range(6)]
    assert _values(await _read(bs, topic, 3, "read_committed")) == committed
    assert _values(await _read(bs, topic, 3, "read_uncommitted")) == sorted(committed + aborted)
    # librdkafka, an independent reader, agrees in both isolation levels.
    by_librdkafka = await asyncio.to_thread(_confluent_read, bs, topic, 3, "read_committed")
    assert sorted(by_librdkafka) == committed
    by_librdkafka = await asyncio.to_thread(_confluent_read, bs, topic, 3, "read_uncommitted")
    assert sorted(by_librdkafka) == sorted(committed + aborted)


async def test_batch_calls_join_the_transaction(txn_cluster: KafkaCluster) -> None:
    """send_batch/enqueue_batch in a transactional producer: refused outside a
    transaction, committed and aborted with the transaction's other records."""
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster, partitions=3)
    committed = [b"batch-commit-%d" % i for i in range(3000)]
    aborted = [b"batch-abort-%d" % i for i in range(500)]
    async with _producer(txn_cluster) as producer:
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            await producer.send_batch(topic, [b"outside"])
        async with producer.transaction():
            meta = await producer.send_batch(topic, committed[:2000])
            assert meta.record_count == 2000
            pending = await producer.enqueue_batch(
                topic, committed[2000:], keys=[b"k%d" % i for i in range(1000)]
            )
        assert (await pending).record_count == 1000
        producer.begin_transaction()
        await producer.send_batch(topic, aborted, partition=1)
        await producer.abort_transaction()
    assert _values(await _read(bs, topic, 3, "read_committed")) == sorted(committed)
    everything = await _read(bs, topic, 3, "read_uncommitted")
    assert _values(everything) == sorted(committed + aborted)


def _confluent_read(bs: str, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    """The values librdkafka reads from ``topic`` in ``isolation_level``, up to the end
    (read_committed: the last stable offset; read_uncommitted: the high watermark)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"oracle-{uuid.uuid4().hex}",
            "isolation.level": isolation_level,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_end: set[int] = set()
        while len(at_end) < partitions:
            message = consumer.poll(10)
            assert message is not None, "librdkafka read nothing for 10 s"
            error = message.error()
            if error is not None:
                assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


async def test_transaction_scope_aborts_on_an_exception_and_reraises_it(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster)
    async with _producer(txn_cluster, linger_ms=1000) as producer:
        with pytest.raises(ValueError, match="boom"):
            async with producer.transaction():
                await producer.send(topic, b"sent-then-aborted")
                # not sent yet (linger): it fails with TransactionAbortedError
                pending = await producer.enqueue(topic, b"never-sent")
                raise ValueError("boom")
        assert producer.transaction_state is TransactionState.READY
        with pytest.raises(TransactionAbortedError):
            await pending

        # A task cancelled inside the block aborts too, then stays cancelled.
        started = asyncio.Event()

        async def work() -> None:
            async with producer.transaction():
                await producer.send(topic, b"cancelled")
                started.set()
                await asyncio.sleep(3600)

        task = asyncio.create_task(work())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert producer.transaction_state is TransactionState.READY

        async with producer.transaction():
            await producer.send(topic, b"kept")
    assert _values(await _read(bs, topic, 1, "read_committed")) == [b"kept"]
    assert _values(await _read(bs, topic, 1, "read_uncommitted")) == sorted(
        [b"sent-then-aborted", b"cancelled", b"kept"]
    )


async def test_closing_with_an_open_transaction_aborts_it(txn_cluster: KafkaCluster) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster)
    async with _producer(txn_cluster) as producer:
        producer.begin_transaction()
        await producer.send(topic, b"open-at-close")
    assert producer.transaction_state is TransactionState.READY
    async with _producer(txn_cluster) as producer:
        async with producer.transaction():
            await producer.send(topic, b"committed")
    # The read would stall at the open transaction if close had not ended it.
    assert _values(await _read(bs, topic, 1, "read_committed", timeout_s=10)) == [b"committed"]


# -- fencing -----------------------------------------------------------------------------


async def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster, partitions=2)
    tid = f"fenced-{uuid.uuid4().hex[:8]}"
    first = Producer(bs, transactional_id=tid)
    await first.start()
    try:
        first.begin_transaction()
        await first.send(topic, b"zombie-0", partition=0)
        async with _producer(txn_cluster, transactional_id=tid) as second:
            # The second's init fenced the first and aborted its open transaction.
            pending = [
                await first.enqueue(topic, b"zombie-%d" % i, partition=i % 2) for i in range(1, 7)
            ]
            # The commit fails: abortable when the partition leader refused the records
            # first (INVALID_PRODUCER_EPOCH), fatal when the coordinator answered first
            # (v1: AddPartitionsToTxn of partition 1). The abort then finds it fenced.
            with pytest.raises((TransactionAbortableError, ProducerFencedError)):
                await first.commit_transaction()
            if first.transaction_state is not TransactionState.FATAL_ERROR:
                with pytest.raises(ProducerFencedError):
                    await first.abort_transaction()
            assert first.transaction_state is TransactionState.FATAL_ERROR
            assert isinstance(first.error, ProducerFencedError)
            assert first.transaction_error is first.error
            # Every record it held failed: with the partition leader's answer for those
            # already sent, with the fatal error for the others.
            for future in pending:
                assert isinstance(await _error_of(future), (InvalidProducerEpochError,
                                                             ProducerFencedError))  # fmt: skip
            # It stays unusable.
            with pytest.raises(ProducerFencedError):
                await first.send(topic, b"zombie-late")
            with pytest.raises(ProducerFencedError):
                first.begin_transaction()

            async with second.transaction():
                await second.send(topic, b"second", partition=1)
    finally:
        await first.close()
    assert _values(await _read(bs, topic, 2, "read_committed")) == [b"second"]


async def _error_of(future: asyncio.Future[object]) -> BaseException | None:
    await asyncio.wait([future], timeout=30)
    assert future.done()
    return future.exception()


async def test_a_fenced_producer_inside_a_transaction_scope_raises_producer_fenced(
    txn_cluster: KafkaCluster,
) -> None:
    topic = await _topic(txn_cluster)
    tid = f"fenced-scope-{uuid.uuid4().hex[:8]}"
    async with _producer(txn_cluster, transactional_id=tid) as first:
        with pytest.raises(ProducerFencedError) as fenced:
            async with first.transaction():
                await first.send(topic, b"a")
                async with _producer(txn_cluster, transactional_id=tid):
                    pass
                await first.send(topic, b"b")  # refused: the epoch is old
        # The failure that revealed it is kept as the cause.
        assert isinstance(fenced.value.__cause__, KafkaError)
        assert first.error is fenced.value


# -- consumer offsets in the transaction -------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_send_offsets_to_transaction_commits_the_group_offsets_only_on_commit(
    txn_cluster: KafkaCluster, protocol: str
) -> None:
    """Under both group protocols: with ``group_protocol="consumer"`` the metadata carries
    the KIP-848 member epoch, which the coordinator checks as it checks a generation."""
    bs = txn_cluster.bootstrap_servers
    source = await _topic(txn_cluster, partitions=2)
    sink = await _topic(txn_cluster, partitions=2)
    async with Producer(bs) as plain:
        for i in range(20):
            await plain.enqueue(source, b"%d" % i, partition=i % 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = Admin(bs)
    async with (
        admin,
        Consumer(
            bs, group_id=group, isolation_level="read_committed", group_protocol=protocol
        ) as consumer,
        _producer(txn_cluster) as producer,
    ):
        consumer.subscribe([source])
        records: list[Record] = []
        async with asyncio.timeout(30):
            async for record in consumer.stream():
                records.append(record)
                if len(records) == 20:
                    break
        metadata = consumer.group_metadata()
        assert metadata.group_id == group and metadata.generation_id >= 1 and metadata.member_id
        offsets = {}
        for r in records:
            offsets[TopicPartition(r.topic, r.partition)] = r.offset + 1

        # Aborted: the group's offsets do not move.
        producer.begin_transaction()
        aborted = [
            await producer.enqueue(sink, b"x" + r.value, partition=r.partition)  # type: ignore[operator]
            for r in records
        ]
        await producer.send_offsets_to_transaction(offsets, metadata)
        await producer.abort_transaction()
        # Each record was written (then aborted) or failed as not sent before the abort.
        for outcome in await asyncio.gather(*aborted, return_exceptions=True):
            assert not isinstance(outcome, BaseException) or isinstance(
                outcome, TransactionAbortedError
            ), outcome
        assert await admin.list_consumer_group_offsets(group) == {}

        # A stale generation is refused (KIP-447): abortable, the producer goes on.
        stale = ConsumerGroupMetadata(group, metadata.generation_id + 7, metadata.member_id)
        producer.begin_transaction()
        with pytest.raises(TransactionAbortableError) as refused:
            await producer.send_offsets_to_transaction(offsets, stale)
        assert isinstance(refused.value.__cause__, CommitFailedError)
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()

        # Committed: output and offsets together.
        async with producer.transaction():
            for r in records:
                await producer.enqueue(sink, b"y" + r.value, partition=r.partition)  # type: ignore[operator]
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())

        async def committed() -> dict[TopicPartition, int]:
            found = await admin.list_consumer_group_offsets(group)
            return {tp: om.offset for tp, om in found.items()}

        # the commit markers reach the group coordinator just after EndTxn returns
        await eventually(committed, lambda found: found == offsets)
    assert _values(await _read(bs, sink, 2, "read_committed")) == sorted(
        b"y%d" % i for i in range(20)
    )


# -- transaction timeout -----------------------------------------------------------------


async def test_a_timed_out_transaction_gives_an_abortable_error(
    txn_cluster: KafkaCluster,
) -> None:
    """The coordinator aborts a transaction older than ``transaction_timeout_ms`` and bumps
    the epoch. The next write is refused (INVALID_PRODUCER_EPOCH) and the commit raises
    the abortable error. Aborting then goes on with protocol v2 (the bumped epoch is the
    next transaction's); protocol v1 cannot tell this from a newer producer having fenced
    this one, so the abort is fenced (fatal), as in the Java client."""
    bs = txn_cluster.bootstrap_servers
    topic = await _topic(txn_cluster)
    async with _producer(txn_cluster, transaction_timeout_ms=2000) as producer:
        producer.begin_transaction()
        await producer.send(topic, b"timed-out")
        await asyncio.sleep(4)  # 2 s timeout + 0.5 s cleanup interval, with margin
        with pytest.raises(InvalidProducerEpochError):
            await producer.send(topic, b"too-late")
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError) as abortable:
            await producer.commit_transaction()
        assert isinstance(abortable.value.__cause__, InvalidProducerEpochError)
        assert producer.transaction_error is not None
        if _v2(txn_cluster):
            await producer.abort_transaction()
            assert producer.transaction_state is TransactionState.READY
            async with producer.transaction():
                await producer.send(topic, b"after")
        else:
            with pytest.raises(ProducerFencedError):
                await producer.abort_transaction()
            assert producer.transaction_state is TransactionState.FATAL_ERROR
    expected = [b"after"] if _v2(txn_cluster) else []
    assert _values(await _read(bs, topic, 1, "read_committed")) == expected


async def test_a_commit_after_the_timeout_without_new_writes(txn_cluster: KafkaCluster) -> None:
    """Nothing was written after the coordinator aborted the transaction: the commit itself
    is refused. v2: abortable (INVALID_TXN_STATE past the timeout), and the producer goes
    on after the abort; v1: fenced, as above."""
    topic = await _topic(txn_cluster)
    async with _producer(txn_cluster, transaction_timeout_ms=2000) as producer:
        producer.begin_transaction()
        await producer.send(topic, b"timed-out")
        await asyncio.sleep(4)
        if _v2(txn_cluster):
            with pytest.raises(TransactionAbortableError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send(topic, b"after")
        else:
            with pytest.raises(ProducerFencedError):
                await producer.commit_transaction()


# -- exactly once through a crash --------------------------------------------------------


async def _transform(
    bs: str,
    producer: Producer,
    source: str,
    sink: str,
    group: str,
    batches: int | None,
    crash: asyncio.Event | None = None,
) -> None:
    """Consume ``source`` as ``group``, write each record's value + b"!" to ``sink`` with
    ``producer`` and commit the offsets in the same transaction, ``batches`` times (None:
    until idle for 2 s). With ``crash``: the last transaction is left open (records
    written, not committed) and the task waits there, to be cancelled like a killed
    worker."""
    await producer.start()  # (nothing if started)
    async with Consumer(bs, group_id=group, isolation_level="read_committed",
                        session_timeout_ms=6000) as consumer:  # fmt: skip
        consumer.subscribe([source])
        done = 0
        while batches is None or done < batches:
            try:
                async with asyncio.timeout(2 if batches is None else 30):
                    batch = await anext(consumer.batches())
            except TimeoutError:
                break
            producer.begin_transaction()
            for r in batch:
                await producer.enqueue(sink, r.value + b"!", partition=r.partition)  # type: ignore[operator]
            offsets = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in batch}
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            done += 1
            if crash is not None and batches is not None and done == batches:
                await producer.flush()  # the records are in the log, uncommitted
                crash.set()
                await asyncio.sleep(3600)  # killed here
            await producer.commit_transaction()


async def test_a_worker_killed_mid_transaction_is_replaced_exactly_once(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    source = await _topic(txn_cluster, partitions=2)
    sink = await _topic(txn_cluster, partitions=2)
    count = 300
    async with Producer(bs, linger_ms=50, batch_size=2048) as plain:
        for i in range(count):
            await plain.enqueue(source, b"%04d" % i, partition=i % 2)
    group = f"worker-{uuid.uuid4().hex[:8]}"
    tid = f"worker-{uuid.uuid4().hex[:8]}"
    crashed = asyncio.Event()
    abandoned = Producer(bs, transactional_id=tid)
    try:
        worker = asyncio.create_task(_transform(bs, abandoned, source, sink, group, 2, crashed))
        await asyncio.wait_for(crashed.wait(), 60)
        worker.cancel()  # killed mid-transaction: no commit, no abort
        with pytest.raises(asyncio.CancelledError):
            await worker
        assert abandoned.transaction_state is TransactionState.IN_TRANSACTION
        # Its consumer left the group on the way out; its producer is abandoned with the
        # transaction open. The replacement's init fences it and aborts that transaction.
        async with Producer(bs, transactional_id=tid) as replacement:
            await _transform(bs, replacement, source, sink, group, None)
    finally:
        await abandoned.close()  # finds itself fenced; only releases its resources

    out = _values(await _read(bs, sink, 2, "read_committed"))
    assert out == sorted(b"%04d!" % i for i in range(count))  # each exactly once
    uncommitted = _values(await _read(bs, sink, 2, "read_uncommitted"))
    assert len(uncommitted) > count  # the killed transaction's records are in the log
    async with Admin(bs) as admin:

        async def committed() -> int:
            offsets = await admin.list_consumer_group_offsets(group)
            return sum(om.offset for om in offsets.values())

        # the commit markers reach the group coordinator just after EndTxn returns
        assert await eventually(committed, lambda total: total == count) == count


# -- a worker process SIGKILLed mid-transaction -------------------------------------------

# A consume-transform-produce worker, run as its own process: it reads ``source`` in
# ``group`` (read_committed), writes value + b"!" to ``sink`` (same partition) and commits
# the offsets in the same transaction every ``every`` records, and when every partition
# of ``source`` is read up to the end offsets it saw at start (then prints DONE and exits).
# With ``pause_at`` > 0, transaction number ``pause_at`` is left open once its records
# are flushed (written, uncommitted) and its offsets sent: it prints IN_TXN and waits to
# be killed.
_WORKER = """
import asyncio, sys

from aiostream_kafka import Admin, Consumer, OffsetSpec, Producer, TopicPartition


async def main(bs, source, partitions, sink, group, tid, every, pause_at):
    tps = [TopicPartition(source, p) for p in range(partitions)]
    async with Admin(bs) as admin:
        listed = await admin.list_offsets(dict.fromkeys(tps, OffsetSpec.latest()))
    ends = {tp: listed[tp].offset for tp in tps}
    # started (init_transactions) first: fences the killed instance, aborts its transaction
    async with Producer(bs, transactional_id=tid, linger_ms=5) as producer:
        print("READY", *producer.producer_id_and_epoch, flush=True)
        async with Consumer(bs, group_id=group, isolation_level="read_committed",
                            session_timeout_ms=6000, heartbeat_interval_ms=500,
                            max_poll_interval_ms=20000) as consumer:
            consumer.subscribe([source])
            done, held, offsets = 0, 0, {}
            async for record in consumer.stream():
                if not held:
                    producer.begin_transaction()
                await producer.enqueue(sink, record.value + b"!", partition=record.partition)
                offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
                held += 1
                owned = consumer.assignment()
                caught_up = set(tps) <= owned and all(
                    (consumer.position(tp) or -1) >= ends[tp] for tp in tps)
                if held < every and not caught_up:
                    continue
                await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                done += 1
                if done == pause_at:
                    await producer.flush()  # the records are in the log, uncommitted
                    print("IN_TXN", held, flush=True)
                    await asyncio.sleep(3600)  # SIGKILLed here
                await producer.commit_transaction()
                print("COMMITTED", done, held, flush=True)
                held, offsets = 0, {}
                if caught_up:
                    break
    print("DONE", flush=True)


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5],
                 sys.argv[6], int(sys.argv[7]), int(sys.argv[8])))
"""


@contextlib.asynccontextmanager
async def _worker_process(script: Path, *args: object) -> AsyncIterator[asyncio.subprocess.Process]:
    """The worker script running as a child process (stdout piped, stderr to a file next
    to the script); killed and reaped on the way out whatever happened."""
    env = dict(os.environ)
    root = str(Path(aiostream_kafka.__file__).resolve().parents[1])  # this checkout
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    with open(script.with_suffix(f".{uuid.uuid4().hex[:6]}.err"), "wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *map(str, args),
            stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env,
        )  # fmt: skip
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def _lines_until(proc: asyncio.subprocess.Process, wanted: str) -> list[str]:
    """The lines the process prints, up to the first one starting with ``wanted``."""
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith(wanted):
        line = await proc.stdout.readline()
        assert line, f"the worker exited ({await proc.wait()}) before {wanted}: {lines}"
        lines.append(line.decode().strip())
    return lines


async def test_a_worker_process_sigkilled_mid_transaction_is_replaced_exactly_once(
    txn_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """A worker process killed (SIGKILL: no abort, no leave-group, no close) with a
    transaction open whose records are in the log; a fresh process with the same
    transactional id and group fences it and goes on: the sink, read read_committed,
    holds every input once, and the group's offsets are the source's end offsets."""
    bs = txn_cluster.bootstrap_servers
    partitions, count, every, pause_at = 2, 400, 25, 4
    source = await _topic(txn_cluster, partitions=partitions)
    sink = await _topic(txn_cluster, partitions=partitions)
    async with Producer(bs, linger_ms=20, batch_size=2048) as plain:
        for i in range(count):
            await plain.enqueue(source, b"%04d" % i, partition=i % partitions)
    group = f"proc-{uuid.uuid4().hex[:8]}"
    tid = f"proc-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    args = (bs, source, partitions, sink, group, tid, every)

    async with _worker_process(script, *args, pause_at) as first:
        async with asyncio.timeout(30):
            lines = await _lines_until(first, "IN_TXN")
        assert lines[-1] == f"IN_TXN {every}"
        killed_id, killed_epoch = map(int, lines[0].split()[1:])
        assert [x for x in lines if x.startswith("COMMITTED")] == [
            f"COMMITTED {n} {every}" for n in range(1, pause_at)
        ]
        os.kill(first.pid, signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), 10) == -signal.SIGKILL
    # The killed transaction's records are in the log, not committed.
    async with asyncio.timeout(30):
        uncommitted = _values(await _read(bs, sink, partitions, "read_uncommitted"))
    assert len(uncommitted) == pause_at * every

    async with _worker_process(script, *args, 0) as second:
        async with asyncio.timeout(45):
            lines = await _lines_until(second, "DONE")
            assert await second.wait() == 0
    # the same producer id with a newer epoch: the killed instance is fenced
    producer_id, epoch = map(int, lines[0].split()[1:])
    assert producer_id == killed_id and epoch > killed_epoch
    committed_later = sum(int(x.split()[2]) for x in lines if x.startswith("COMMITTED"))
    assert committed_later == count - (pause_at - 1) * every  # it redid the killed batch

    out = _values(await _read(bs, sink, partitions, "read_committed"))
    assert out == sorted(b"%04d!" % i for i in range(count))  # each exactly once
    everything = _values(await _read(bs, sink, partitions, "read_uncommitted"))
    assert len(everything) == count + every  # plus the aborted transaction's records
    source_tps = [TopicPartition(source, p) for p in range(partitions)]
    async with Admin(bs) as admin:
        ends = await admin.list_offsets(dict.fromkeys(source_tps, OffsetSpec.latest()))

        async def committed() -> dict[TopicPartition, int]:
            found = await admin.list_consumer_group_offsets(group)
            return {tp: om.offset for tp, om in found.items()}

        # the commit markers reach the group coordinator just after EndTxn returns
        await eventually(committed, lambda found: found == {tp: ends[tp].offset
                                                            for tp in source_tps})  # fmt: skip


async def test_process_exactly_once_reads_a_batch_again_after_an_abort(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    source = await _topic(txn_cluster, partitions=2)
    sink = await _topic(txn_cluster, partitions=2)
    tiny = await _topic(txn_cluster, config={"max.message.bytes": "1000"})
    count = 200
    async with Producer(bs, linger_ms=20, batch_size=1024) as plain:
        for i in range(count):
            await plain.enqueue(source, b"%04d" % i, partition=i % 2)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    attempts: list[tuple[int, int]] = []

    def transform(batch: list[Record]) -> list[ProducerRecord]:
        first = (batch[0].partition, batch[0].offset)
        out = [ProducerRecord(sink, r.value + b"!", partition=r.partition) for r in batch]  # type: ignore[operator]
        if first not in attempts:  # the first attempt of every batch fails
            out.append(ProducerRecord(tiny, b"x" * 5000))  # refused by the topic: abortable
        attempts.append(first)
        return out

    async with (
        Admin(bs) as admin,
        Consumer(bs, group_id=group, isolation_level="read_committed") as consumer,
        _producer(txn_cluster) as producer,
    ):
        consumer.subscribe([source])
        task = asyncio.create_task(process_exactly_once(consumer, producer, transform))

        async def progress() -> int:
            if task.done():
                task.result()
            offsets = await admin.list_consumer_group_offsets(group)
            return sum(om.offset for om in offsets.values())

        await eventually(progress, lambda total: total == count, timeout_s=60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(attempts) == 2 * len(set(attempts))  # every batch ran twice
    assert _values(await _read(bs, sink, 2, "read_committed")) == sorted(
        b"%04d!" % i for i in range(count)
    )
    assert await _read(bs, tiny, 1, "read_committed") == []


async def test_process_exactly_once_spans_batches_by_count_and_time(
    txn_cluster: KafkaCluster,
) -> None:
    """transaction_records / transaction_ms: a transaction spans batches and partitions
    until it holds that many input records or has been open that long; an idle input's
    open transaction is committed when the time is up, not left to time out."""
    bs = txn_cluster.bootstrap_servers
    source = await _topic(txn_cluster, partitions=3)
    sink = await _topic(txn_cluster, partitions=1)
    count, late = 600, 10
    async with Producer(bs, linger_ms=5, batch_size=1024) as plain:
        for i in range(count):
            await plain.enqueue(source, b"%04d" % i, partition=i % 3)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    batches_seen = 0

    def transform(batch: list[Record]) -> list[ProducerRecord]:
        nonlocal batches_seen
        batches_seen += 1
        return [ProducerRecord(sink, r.value + b"!", partition=0) for r in batch]  # type: ignore[operator]

    async with (
        Admin(bs) as admin,
        Consumer(bs, group_id=group, isolation_level="read_committed") as consumer,
        _producer(txn_cluster) as producer,
    ):
        consumer.subscribe([source])
        pid, epoch = producer.producer_id_and_epoch
        task = asyncio.create_task(
            process_exactly_once(
                consumer, producer, transform, transaction_records=250, transaction_ms=1500
            )
        )

        async def progress() -> int:
            if task.done():
                task.result()
            offsets = await admin.list_consumer_group_offsets(group)
            return sum(om.offset for om in offsets.values())

        await eventually(progress, lambda total: total == count, timeout_s=60)
        # v2 bumps the epoch once per transaction: 600 records in transactions of at
        # least 250 (the last may be smaller, committed by the time limit).
        after_count = producer.producer_id_and_epoch[1] - epoch
        if _v2(txn_cluster):
            assert producer.producer_id_and_epoch[0] == pid
            assert 2 <= after_count <= 3, after_count
            assert batches_seen > after_count  # transactions spanned batches

        # A few more records, far fewer than 250: only the time limit commits them.
        async with Producer(bs) as plain:
            for i in range(count, count + late):
                await plain.send(source, b"%04d" % i, partition=i % 3)
        await eventually(progress, lambda total: total == count + late, timeout_s=15)
        if _v2(txn_cluster):
            assert producer.producer_id_and_epoch[1] - epoch == after_count + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert producer.transaction_state is TransactionState.READY
    assert _values(await _read(bs, sink, 1, "read_committed")) == sorted(
        b"%04d!" % i for i in range(count + late)
    )


async def test_process_exactly_once_refuses_bad_transaction_bounds(
    txn_cluster: KafkaCluster,
) -> None:
    bs = txn_cluster.bootstrap_servers
    async with (
        Consumer(bs, group_id="g-bounds", enable_auto_commit=False) as consumer,
        _producer(txn_cluster) as producer,
    ):
        for bad in (
            {"transaction_records": 0},
            {"transaction_ms": 0},
            {"transaction_records": True},
        ):
            with pytest.raises(ConfigError):
                await process_exactly_once(consumer, producer, lambda b: [], **bad)  # type: ignore[arg-type]
