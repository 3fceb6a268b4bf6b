"""The batch API (``Producer.send_batch``/``enqueue_batch``) against the broker: round trips
read back by an independent consumer (librdkafka), partitioning as ``send``'s, checks
before anything is appended, partial failures naming exactly the records not
acknowledged, cancellation, backpressure."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from helpers import KEEP_OLD_RECORDS
from producer_oracle import ReadRecord, read_all

from aiostream_kafka import Producer
from aiostream_kafka.errors import KafkaTimeoutError
from aiostream_kafka.producer import BatchDeliveryError, BatchMetadata, ProducerClosedError
from aiostream_kafka.producer.partitioner import partition_for_key
from aiostream_kafka.protocol.error_codes import (
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from aiostream_kafka.serde import json_deserializer, json_serializer, str_serializer
from aiostream_kafka.testing import KafkaCluster
from aiostream_kafka.testing.probe import create_topic

BATCH_LOG = "aiostream_kafka.producer.batch"


def _value(i: int, size: int = 100) -> bytes:
    """Record ``i``'s value: its index, then padding to ``size`` bytes."""
    head = b"%d|" % i
    return head + b"v" * (size - len(head))


def _index(record: ReadRecord) -> int:
    assert record.value is not None
    return int(record.value.split(b"|", 1)[0])


async def _wait_for(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.0005)


def _check_order(records: list[ReadRecord]) -> dict[int, ReadRecord]:
    """Each index read once, growing within each partition; returns index -> record."""
    seen: dict[int, ReadRecord] = {}
    last: dict[int, int] = {}
    for r in records:
        i = _index(r)
        assert i not in seen, f"record {i} written twice"
        assert i > last.get(r.partition, -1), f"record {i} out of order in {r.partition}"
        last[r.partition] = i
        seen[i] = r
    return seen


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
async def test_100k_records_round_trip_in_order_across_partitions(
    kafka_cluster: KafkaCluster, new_topic, keyed: bool
) -> None:
    partitions = 4
    topic = await new_topic(partitions=partitions)
    bs = kafka_cluster.bootstrap_servers
    n = 100_000
    values = [_value(i) for i in range(n)]
    keys = [b"key-%d" % (i % 997) for i in range(n)] if keyed else None
    async with Producer(bs) as producer:
        meta = await producer.send_batch(topic, values, keys)
    assert isinstance(meta, BatchMetadata)
    assert meta.topic == topic and meta.record_count == n
    where = meta.offsets()
    assert len(where) == n
    records = await read_all(bs, topic, partitions)
    assert len(records) == n
    seen = _check_order(records)
    assert sorted(seen) == list(range(n))
    for i, r in seen.items():
        assert r.value == values[i]
        assert where[i] == (r.partition, r.offset)
        if keys is not None:
            assert r.key == keys[i]
            assert r.partition == partition_for_key(keys[i], partitions)
        else:
            assert r.key is None
    # keyless: sticky partitions, moving on batch after batch, reach every partition
    assert {r.partition for r in records} == set(range(partitions))


async def test_keyed_partitioning_equals_send(kafka_cluster: KafkaCluster, new_topic) -> None:
    topic = await new_topic(partitions=7)
    keys: list[bytes | None] = [b"k%d" % i for i in range(300)]
    keys += [b"", b"x" * 1000, "clé".encode(), None, None]
    async with Producer(kafka_cluster.bootstrap_servers) as producer:
        singles = [await producer.send(topic, b"single", key=k) for k in keys]
        meta = await producer.send_batch(topic, [b"batch"] * len(keys), keys)
    where = meta.offsets()
    for i, key in enumerate(keys):
        if key is not None:
            assert where[i][0] == singles[i].partition, key
    assert meta.record_count == len(keys)


async def test_keyless_records_in_batches_past_the_plain_limit_round_trip(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """Keyless records with 256 KiB batches (past the 64 KiB where a batch call's plain
    path stops, so they go through the bulk encoder with null keys), sticky and pinned to
    a partition, some values of 8,000 bytes or more (encoded one by one): each arrives
    once, in order within its partition, with a null key and its value intact."""
    topic = await new_topic(partitions=3)
    n = 6000
    values = [_value(i, 9000 if i % 997 == 5 else 100) for i in range(n)]
    half = n // 2
    async with Producer(
        kafka_cluster.bootstrap_servers, batch_size=256 * 1024, linger_ms=20
    ) as producer:
        sticky = await producer.send_batch(topic, values[:half])
        pinned = await producer.send_batch(topic, values[half:], partition=1)
    assert sticky.record_count == half and pinned.record_count == n - half
    assert len(sticky.runs) > 1  # more than one batch
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 3)
    order = _check_order(records)
    assert sorted(order) == list(range(n))
    for i, record in order.items():
        assert record.key is None
        assert record.value == values[i]
        if i >= half:
            assert record.partition == 1


async def test_serializers_headers_timestamps_explicit_partition(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=3, config=KEEP_OLD_RECORDS)
    n = 500
    async with Producer(
        kafka_cluster.bootstrap_servers,
        key_serializer=str_serializer(),
        value_serializer=json_serializer(),
        batch_size=2048,  # several batches
    ) as producer:
        meta = await producer.send_batch(
            topic,
            [{"i": i} if i % 50 else None for i in range(n)],
            [f"k{i}" for i in range(n)],
            headers=[[("i", b"%d" % i)] if i % 2 else None for i in range(n)],
            partition=2,
            timestamps_ms=[1_700_000_000_000 + i for i in range(n)],
        )
    assert {run.partition for run in meta.runs} == {2}
    assert len(meta.runs) > 1
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 3)
    assert [r.partition for r in records] == [2] * n
    assert [r.offset for r in records] == list(range(n))
    for i, r in enumerate(records):
        assert r.key == f"k{i}".encode()
        assert json_deserializer()(r.value) == ({"i": i} if i % 50 else None)
        assert r.headers == ((("i", b"%d" % i),) if i % 2 else ())
        assert r.timestamp_ms == 1_700_000_000_000 + i
    assert meta.offsets() == {i: (2, i) for i in range(n)}


async def test_single_records_and_batch_calls_share_batches(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """Records of ``enqueue`` and of batch calls interleave in the same batches; each
    gets its own outcome (a future per single record, one per call)."""
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=100) as producer:
        before = await producer.enqueue(topic, _value(0), partition=0)
        call = await producer.enqueue_batch(topic, [_value(i) for i in range(1, 101)], partition=0)
        after = await producer.enqueue(topic, _value(101), partition=0)
        second = await producer.enqueue_batch(
            topic, [_value(i) for i in range(102, 110)], partition=0
        )
        meta, meta2 = await call, await second
        assert (await before).offset == 0 and (await after).offset == 101
    assert len(meta.runs) == 1 and meta.runs[0].offset == 1
    assert meta.offsets() == {i: (0, i + 1) for i in range(100)}
    assert meta2.offsets() == {i: (0, 102 + i) for i in range(8)}
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert [_index(r) for r in records] == list(range(110))


async def test_a_batch_over_the_topic_limit_is_split_keeping_the_calls_segments(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """The broker refuses our 16 KiB batches (max.message.bytes 2,000): they are split,
    and a call's runs of records are split with them: every record is delivered once, in
    order, at the offset the call's metadata says."""
    topic = await new_topic(partitions=1, config={"max.message.bytes": "2000"})
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=50) as producer:
        first = await producer.enqueue_batch(topic, [_value(i) for i in range(300)])
        single = await producer.enqueue(topic, _value(300))
        keyed = await producer.enqueue_batch(
            topic,
            [_value(i) for i in range(301, 600)],
            [b"k%d" % i for i in range(301, 600)],
            partition=0,
        )
        meta, meta_keyed = await first, await keyed
        assert (await single).offset == 300
    assert meta.offsets() == {i: (0, i) for i in range(300)}
    assert meta_keyed.offsets() == {i: (0, 301 + i) for i in range(299)}
    assert len(meta.runs) > 2  # split
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert [_index(r) for r in records] == list(range(600))


# -- checks before anything is appended ---------------------------------------------------


async def test_bad_input_is_refused_before_anything_is_appended(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=1)
    bs = kafka_cluster.bootstrap_servers
    async with Producer(bs, max_request_size=10_000, max_block_ms=1500) as producer:
        good = [_value(i) for i in range(10)]
        with pytest.raises(TypeError, match="sequence"):
            await producer.send_batch(topic, b"one value")
        with pytest.raises(TypeError, match=r"values\[3\]"):
            await producer.send_batch(topic, [*good[:3], "text", *good[3:]])
        with pytest.raises(TypeError, match=r"keys\[1\]"):
            await producer.send_batch(topic, good[:2], [b"k", 7])
        with pytest.raises(ValueError, match="keys"):
            await producer.send_batch(topic, good, [b"k"])
        with pytest.raises(TypeError, match=r"headers\[1\]"):
            await producer.send_batch(topic, good[:2], headers=[None, [("h", "str")]])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"timestamps_ms\[2\]"):
            await producer.send_batch(topic, good[:3], timestamps_ms=[1, 2, -3])
        oversized = [*good[:5], b"x" * 20_000, *good[5:]]
        with pytest.raises(RecordTooLargeError, match=r"values\[5\].*max_request_size"):
            await producer.send_batch(topic, oversized)
        with pytest.raises(RecordTooLargeError, match=r"values\[1\]"):
            await producer.send_batch(topic, good[:2], headers=[None, [("h", b"y" * 11_000)]])
        with pytest.raises(RecordTooLargeError, match=r"values\[1\]"):  # its key does it
            await producer.send_batch(topic, good[:2], keys=[b"k", b"k" * 11_000])
        started = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError, match="max_block_ms"):
            await producer.send_batch("no-such-topic-" + topic, good)
        assert 0.5 < time.monotonic() - started < 6
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 5"):
            await producer.send_batch(topic, good, partition=5)
        empty = await producer.send_batch(topic, [])
        assert empty.record_count == 0 and empty.runs == []
        # nothing of the refused calls was appended: this call's records come first
        meta = await producer.send_batch(topic, good)
        assert meta.offsets() == {i: (0, i) for i in range(10)}
        # the largest value and the largest key together exceed the limit, but on
        # different records: accepted
        meta = await producer.send_batch(topic, [b"v" * 5000, b"v"], keys=[b"k", b"k" * 5000])
        assert meta.record_count == 2
    with pytest.raises(ProducerClosedError):
        await producer.send_batch(topic, good)


async def test_a_call_larger_than_buffer_memory_waits_batch_by_batch(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=2)
    n = 20_000  # ~2 MB of batches through 64 KiB of buffer memory
    async with Producer(
        kafka_cluster.bootstrap_servers, buffer_memory=65536, batch_size=16384
    ) as producer:
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, producer.buffer_pool.used)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            meta = await producer.send_batch(topic, [_value(i) for i in range(n)])
        finally:
            watcher.cancel()
        assert meta.record_count == n
        assert 0 < peak <= 65536
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 2)
    assert sorted(_check_order(records)) == list(range(n))


async def test_a_large_batch_size_does_not_hold_memory_for_a_few_records_per_partition(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """64 partitions, 20 keyed records each, one call, 256 KiB batches in 4 MiB of buffer
    memory (64 full reservations would be 16 MiB): once half the memory is reserved,
    a new batch reserves about what its records need, so the call appends everything
    without waiting for memory, and the records arrive once each, in order."""
    partitions = 64
    topic = await new_topic(partitions=partitions)
    keys = [b"k%d" % k for k in range(10_000)]
    by_partition: dict[int, list[bytes]] = {}
    for key in keys:
        chosen = by_partition.setdefault(partition_for_key(key, partitions), [])
        if len(chosen) < 20:
            chosen.append(key)
    call_keys = [key for chosen in by_partition.values() for key in chosen]
    assert len(by_partition) == partitions and len(call_keys) == 20 * partitions
    values = [_value(i) for i in range(len(call_keys))]
    async with Producer(
        kafka_cluster.bootstrap_servers,
        batch_size=256 * 1024,
        buffer_memory=4 * 1024 * 1024,
        linger_ms=2000,  # nothing is sent for lack of a full batch while the call appends
    ) as producer:
        pool = producer.buffer_pool
        waited = 0

        async def watch() -> None:
            nonlocal waited
            while True:
                waited = max(waited, pool.queued)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            future = await producer.enqueue_batch(topic, values, call_keys)
        finally:
            watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher  # (an error in the watcher would surface here)
        assert waited == 0, "the call waited for buffer memory"
        meta = await future
        assert meta.record_count == len(values)
    records = await read_all(kafka_cluster.bootstrap_servers, topic, partitions)
    order = _check_order(records)
    assert sorted(order) == list(range(len(values)))
    for i, record in order.items():
        assert record.key == call_keys[i]
        assert record.partition == partition_for_key(call_keys[i], partitions)


# -- partial failure -----------------------------------------------------------------------


async def test_a_record_the_broker_refuses_fails_alone_and_is_named(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    """Record 100 is larger than the topic's max.message.bytes (the broker refuses it):
    the call fails with BatchDeliveryError naming index 100 only; the 299 others are
    acknowledged and written once, in order (the batches behind the refused one are
    resent under a new epoch)."""
    topic = await new_topic(partitions=1, config={"max.message.bytes": "3000"})
    values = [_value(i, 20) for i in range(300)]
    values[100] = _value(100, 4000)
    async with Producer(kafka_cluster.bootstrap_servers, batch_size=1500, linger_ms=20) as producer:
        with pytest.raises(BatchDeliveryError) as info:
            await producer.send_batch(topic, values)
        error = info.value
        assert error.failed_indexes == [100]
        assert error.failed_ranges == [range(100, 101)]
        assert error.failed_count == 1 and error.total == 300
        assert [f.partition for f in error.failures] == [0]
        assert isinstance(error.first_error, RecordTooLargeError)
        assert error.__cause__ is error.first_error
        assert not error.retriable
        assert "1 of 300" in str(error) and "indexes 100" in str(error)
        assert error.delivered.record_count == 299
        assert sorted(error.delivered.offsets()) == [i for i in range(300) if i != 100]
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert [_index(r) for r in records] == [i for i in range(300) if i != 100]


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("proxied",)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def proxied() -> AsyncIterator[KafkaCluster]:
    async with KafkaCluster(brokers=1, proxied=True) as cluster:
        yield cluster


@pytest.mark.skipif(
    bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
    reason="needs a proxied broker this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
)
@pytest.mark.real_broker(
    reason=(
        "a proxied broker (FaultProxy): proxies need brokers that advertise the proxies' "
        "addresses (local jars)"
    )
)
async def test_partial_failure_with_the_broker_unreachable_names_what_to_retry(
    proxied: KafkaCluster,
) -> None:
    """The broker stops answering (a blackhole) while a call is half done: batches in
    flight time out (delivery_timeout_ms), the rest of the call cannot get buffer memory
    (max_block_ms). The error names exactly the records not acknowledged; retrying
    those completes the call, and everything acknowledged was written once."""
    topic = f"partial-{os.getpid()}-{time.monotonic_ns()}"
    await create_topic(proxied.bootstrap_servers, topic, 3, 1, None)
    proxy = proxied.proxy(1)
    n = 3000
    values = [_value(i) for i in range(n)]
    try:
        async with Producer(
            proxied.bootstrap_servers,
            batch_size=1024,
            buffer_memory=8 * 1024,
            linger_ms=0,
            max_block_ms=500,
            request_timeout_ms=1000,
            delivery_timeout_ms=1500,
            retry_backoff_ms=50,
        ) as producer:
            await producer.partitions_for(topic)
            down = proxy.bytes_down

            async def blackhole_after_some_acks() -> None:
                # a few dozen Produce answers
                await _wait_for(lambda: proxy.bytes_down >= down + 3000)
                proxy.blackhole()

            hole = asyncio.create_task(blackhole_after_some_acks())
            started = time.monotonic()
            with pytest.raises(BatchDeliveryError) as info:
                await producer.send_batch(topic, values)
            elapsed = time.monotonic() - started
            await hole
            proxy.restore()
            error = info.value
            failed = error.failed_indexes
            delivered = sorted(error.delivered.offsets())
            assert 0 < len(delivered) < n and failed
            assert sorted(delivered + failed) == list(range(n))  # each has one outcome
            assert error.failed_count == len(failed)
            kinds = {type(f.error) for f in error.failures}
            assert kinds == {KafkaTimeoutError}, error.failures
            not_appended = [f for f in error.failures if f.partition is None]
            assert len(not_appended) == 1 and "max_block_ms" in str(not_appended[0].error)
            assert list(not_appended[0].indexes) == list(range(not_appended[0].indexes[0], n))
            assert any(f.partition is not None for f in error.failures)  # timed out in flight
            assert error.retriable
            assert elapsed < 15
            retry = await producer.send_batch(topic, [values[i] for i in failed])
            assert retry.record_count == len(failed)
    finally:
        proxy.restore()
    records = await read_all(proxied.bootstrap_servers, topic, 3)
    counts: dict[int, int] = {}
    for r in records:
        counts[_index(r)] = counts.get(_index(r), 0) + 1
    assert set(counts) == set(range(n))  # nothing lost
    # acknowledged once: never written twice; the timed-out ones may have been written
    # before the retry (the broker can have appended them while the answer never came)
    assert all(counts[i] == 1 for i in delivered)
    first_call = [r for r in records if _index(r) in set(delivered)]
    _check_order(first_call)


async def test_closing_during_a_call_delivers_what_was_appended_and_names_the_rest(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=2)
    n = 100_000
    producer = Producer(kafka_cluster.bootstrap_servers, buffer_memory=32768, batch_size=16384)
    await producer.start()
    try:
        task = asyncio.create_task(producer.send_batch(topic, [_value(i) for i in range(n)]))
        await _wait_for(lambda: producer.buffer_pool.queued > 0)  # waiting for memory
        await producer.close()
        with pytest.raises(BatchDeliveryError) as info:
            async with asyncio.timeout(10):
                await task
    finally:
        await producer.close()
    error = info.value
    (rest,) = error.failures  # everything appended was delivered by close()
    assert rest.partition is None and isinstance(rest.error, ProducerClosedError)
    appended = error.delivered.record_count
    assert 0 < appended < n
    assert list(rest.indexes) == list(range(appended, n))
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 2)
    assert sorted(_check_order(records)) == list(range(appended))


# -- cancellation --------------------------------------------------------------------------


def _cancelled_messages(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == BATCH_LOG and "cancelled" in r.getMessage()]


async def _cancel_once_appended(producer: Producer, task: asyncio.Task, count: int) -> None:  # type: ignore[type-arg]
    """Cancel a ``send_batch`` task as soon as its ``count`` records are in batches: it is
    then awaiting their acknowledgements, which take a few event-loop turns and a round
    trip to the broker (an awaited call does not linger while nothing else is appended,
    so a sleep shorter than ``linger_ms`` no longer lands before the acks)."""
    acc = producer._accumulator
    assert acc is not None
    async with asyncio.timeout(10):
        while sum(b.record_count for b in acc.incomplete) < count:  # noqa: ASYNC110 -- each turn
            await asyncio.sleep(0)
    assert not task.done()
    task.cancel()


async def test_cancelled_while_appending_sends_what_was_appended_and_logs_it(
    kafka_cluster: KafkaCluster, new_topic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=BATCH_LOG)
    topic = await new_topic(partitions=2)
    n = 100_000
    values = [_value(i) for i in range(n)]
    async with Producer(
        kafka_cluster.bootstrap_servers, buffer_memory=32768, batch_size=16384
    ) as producer:
        task = asyncio.create_task(producer.send_batch(topic, values))
        await asyncio.sleep(0.05)
        await _wait_for(lambda: producer.buffer_pool.queued > 0)  # waiting for memory
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await producer.flush()
        assert producer.buffer_pool.queued == 0
    (log,) = _cancelled_messages(caplog)
    match = re.search(
        r"after appending (\d+) of its 100000 record\(s\); all (\d+) were", log.getMessage()
    )
    assert match, log.getMessage()
    appended = int(match.group(1))
    assert 0 < appended < n and int(match.group(2)) == appended
    assert log.levelno == logging.INFO
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 2)
    assert sorted(_check_order(records)) == list(range(appended))


async def test_cancelled_while_waiting_for_acks_logs_the_outcome(
    kafka_cluster: KafkaCluster, new_topic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=BATCH_LOG)
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=300) as producer:
        task = asyncio.create_task(producer.send_batch(topic, [_value(i) for i in range(1000)]))
        await _cancel_once_appended(producer, task, 1000)
        with pytest.raises(asyncio.CancelledError):
            await task
        await producer.flush()
    (log,) = _cancelled_messages(caplog)
    assert "after appending 1000 of its 1000 record(s); all 1000 were acknowledged" in (
        log.getMessage()
    )
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert [_index(r) for r in records] == list(range(1000))


async def test_a_failure_after_cancellation_is_logged_not_lost(
    kafka_cluster: KafkaCluster, new_topic, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody awaits the outcome of a cancelled call: its failure is a WARNING naming
    the records, never an unretrieved exception (the suite fails on those)."""
    caplog.set_level(logging.INFO, logger=BATCH_LOG)
    topic = await new_topic(partitions=1, config={"max.message.bytes": "3000"})
    values = [_value(i, 20) for i in range(50)]
    values[7] = _value(7, 4000)
    async with Producer(
        kafka_cluster.bootstrap_servers, batch_size=1500, linger_ms=200
    ) as producer:
        task = asyncio.create_task(producer.send_batch(topic, values))
        await _cancel_once_appended(producer, task, len(values))
        with pytest.raises(asyncio.CancelledError):
            await task
        await producer.flush()
    (log,) = _cancelled_messages(caplog)
    assert log.levelno == logging.WARNING
    message = log.getMessage()
    assert "1 of them were not acknowledged (indexes 7)" in message
    assert "MESSAGE_TOO_LARGE" in message
    records = await read_all(kafka_cluster.bootstrap_servers, topic, 1)
    assert [_index(r) for r in records] == [i for i in range(50) if i != 7]


async def test_enqueue_batch_returns_before_the_acks(
    kafka_cluster: KafkaCluster, new_topic
) -> None:
    topic = await new_topic(partitions=1)
    async with Producer(kafka_cluster.bootstrap_servers, linger_ms=200) as producer:
        future = await producer.enqueue_batch(topic, [_value(i) for i in range(100)])
        assert not future.done()  # lingering
        await producer.flush()
        assert future.done() and future.result().record_count == 100


# -- bookkeeping, without a broker ----------------------------------------------------------


async def test_a_split_batch_resolves_each_calls_records_exactly_once() -> None:
    """Segments of three calls in one batch (one straddling the split point) and single
    records' futures: after the split each part resolves its share, each call once."""
    from aiostream_kafka.producer.accumulator import ProducerBatch
    from aiostream_kafka.producer.batch import BatchCompletion
    from aiostream_kafka.structs import TopicPartition

    loop = asyncio.get_running_loop()
    batch = ProducerBatch(TopicPartition("t", 0), 16384, 16384, 0.0, 1e9, loop)
    calls = [BatchCompletion("t", count, loop) for count in (3, 4, 2)]
    single = loop.create_future()
    position = 0
    layout = zip(calls, (3, 4, 2), (range(3), [9, 7, 5, 3], range(10, 12)), strict=True)
    for call, count, indexes in layout:
        for _ in range(count):
            batch.append(None, b"v%d" % position, None, 1_700_000_000_000, None)
            position += 1
        call.attach(batch, position - count, count, indexes)
        call.seal()
    batch.append(b"k", b"single", None, 1_700_000_000_000, single)
    # 10 records: [a a a b b | b b c c s]: call b straddles the split at 5
    first, second = batch.split(loop)
    assert [first.record_count, second.record_count] == [5, 5]
    first.complete(100, -1)
    assert calls[0].future.done() and not calls[1].future.done()
    second.fail(RecordTooLargeError("refused"))
    assert single.exception() is not None
    assert calls[0].future.result().offsets() == {0: (0, 100), 1: (0, 101), 2: (0, 102)}
    with pytest.raises(BatchDeliveryError) as info:
        calls[1].future.result()
    error = info.value
    assert error.failed_indexes == [3, 5]  # b's records at positions 5, 6 of the batch
    assert error.failed_ranges == [range(3, 4), range(5, 6)]
    assert error.delivered.offsets() == {9: (0, 103), 7: (0, 104)}
    assert "2 of 4 record(s)" in str(error) and "indexes 3, 5" in str(error)
    with pytest.raises(BatchDeliveryError, match="indexes 10-11"):
        calls[2].future.result()
    # resolving again (a late answer after close failed the batch) changes nothing
    second.complete(200, -1)
    assert calls[2].future.exception() is not None
