"""Large record batches are compressed and inflated in a worker thread, small ones inline,
and either way every record arrives exactly once, in order (real broker).

The codec functions are wrapped to record the thread each call ran on; a call on a batch
at or above ``OFFLOAD_MIN_BYTES`` of its codec must not run on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from aiostream_kafka import Consumer, Producer, ProducerClosedError, TopicPartition
from aiostream_kafka.protocol import compression
from aiostream_kafka.protocol.compression import OFFLOAD_MIN_BYTES, CompressionType
from aiostream_kafka.protocol.records import message_set, record_batch
from aiostream_kafka.testing import KafkaCluster

MIB = 1024 * 1024


@dataclass
class Call:
    kind: str  # "compress" / "decompress"
    codec: int
    size: int  # input bytes
    thread: int


@dataclass
class CodecCalls:
    """Wraps compress/decompress (where the client looks them up) to record each call."""

    calls: list[Call] = field(default_factory=list)
    delay_s: float = 0.0  # added to large calls made off the loop (cancellation tests)
    started: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_compress, real_decompress = compression.compress, compression.decompress
        loop_thread = threading.get_ident()

        def slow(codec: Any, size: int) -> None:
            if self.delay_s and threading.get_ident() != loop_thread:
                if size >= OFFLOAD_MIN_BYTES.get(int(codec), 1 << 62):
                    self.started.set()
                    time.sleep(self.delay_s)
                    self.finished.set()

        def compress(codec: Any, data: Any, **kw: Any) -> bytes:
            self.calls.append(Call("compress", int(codec), len(data), threading.get_ident()))
            slow(codec, len(data))
            return real_compress(codec, data, **kw)

        def decompress(codec: Any, data: Any, **kw: Any) -> bytes:
            self.calls.append(Call("decompress", int(codec), len(data), threading.get_ident()))
            slow(codec, len(data))
            return real_decompress(codec, data, **kw)

        # every module that calls the codecs: v2 batches compress and decompress, legacy
        # message sets only decompress
        for module in (compression, record_batch):
            monkeypatch.setattr(module, "compress", compress)
        for module in (compression, record_batch, message_set):
            monkeypatch.setattr(module, "decompress", decompress)

    def of(self, kind: str, codec: CompressionType) -> list[Call]:
        return [c for c in self.calls if c.kind == kind and c.codec == codec]


@pytest.fixture
def codec_calls(monkeypatch: pytest.MonkeyPatch) -> CodecCalls:
    calls = CodecCalls()
    calls.install(monkeypatch)
    return calls


def _values(count: int, size: int) -> list[bytes]:
    """Numbered values of random hex: compressible about 2:1, so a 1 MiB batch stays
    above every codec's offload size once compressed."""
    return [b"%09d|" % i + os.urandom(size // 2).hex().encode()[: size - 10] for i in range(count)]


async def _produce(bootstrap: str, topic: str, values: list[bytes], **options: Any) -> None:
    async with Producer(bootstrap, **options) as producer:
        futures = [await producer.enqueue(topic, v, partition=0) for v in values]
        await producer.flush()
    offsets = [f.result().offset for f in futures]
    assert offsets == list(range(offsets[0], offsets[0] + len(values)))


async def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    out: list[bytes] = []
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        async with asyncio.timeout(60):
            async for batch in consumer.batches():
                out.extend(r.value or b"" for r in batch)
                if len(out) >= count:
                    break
    return out


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
async def test_large_batches_are_compressed_and_inflated_off_the_loop(
    kafka_cluster: KafkaCluster, new_topic: Any, codec_calls: CodecCalls, codec: str
) -> None:
    topic = await new_topic()
    bootstrap = kafka_cluster.bootstrap_servers
    values = _values(6 * 1024, 1024)  # 6 MiB: five full 1 MiB batches and a small one
    loop_thread = threading.get_ident()
    await _produce(
        bootstrap,
        topic,
        values,
        compression_type=codec,
        batch_size=MIB,
        linger_ms=200,
        max_request_size=2 * MIB,
    )
    ct = CompressionType[codec.upper()]
    threshold = OFFLOAD_MIN_BYTES[ct]
    compressions = codec_calls.of("compress", ct)
    large = [c for c in compressions if c.size >= threshold]
    assert len(large) >= 5, compressions
    assert all(c.thread != loop_thread for c in large), large
    assert all(c.thread == loop_thread for c in compressions if c.size < threshold)

    got = await _consume(bootstrap, topic, len(values))
    assert got == values  # every record once, in order, intact
    inflations = codec_calls.of("decompress", ct)
    large = [c for c in inflations if c.size >= threshold]
    assert len(large) >= 5, inflations
    assert all(c.thread != loop_thread for c in large), large
    assert all(c.thread == loop_thread for c in inflations if c.size < threshold)


async def test_small_batches_stay_on_the_loop(
    kafka_cluster: KafkaCluster, new_topic: Any, codec_calls: CodecCalls
) -> None:
    topic = await new_topic()
    bootstrap = kafka_cluster.bootstrap_servers
    values = _values(2000, 200)  # 16 KiB batches (the default size)
    loop_thread = threading.get_ident()
    await _produce(bootstrap, topic, values, compression_type="gzip", linger_ms=5)
    assert await _consume(bootstrap, topic, len(values)) == values
    gzip = [c for c in codec_calls.calls if c.codec == CompressionType.GZIP]
    assert {c.kind for c in gzip} == {"compress", "decompress"}
    assert len(gzip) >= 2 * (2000 * 200 // 16384)
    assert all(c.thread == loop_thread for c in gzip), gzip


async def test_a_producer_closed_during_a_compression_job_drops_its_result(
    kafka_cluster: KafkaCluster, new_topic: Any, codec_calls: CodecCalls
) -> None:
    """close(timeout) while a batch is being compressed in a thread: the job's task is
    cancelled, the batch fails with ProducerClosedError without waiting for the thread,
    and the thread's result, when it comes, goes nowhere (no asyncio error is logged)."""
    topic = await new_topic()
    codec_calls.delay_s = 1.0
    values = _values(1200, 1024)  # one full 1 MiB batch and a small one
    producer = Producer(
        kafka_cluster.bootstrap_servers,
        compression_type="gzip",
        batch_size=MIB,
        linger_ms=60_000,
        max_request_size=2 * MIB,
    )
    await producer.start()
    futures = [await producer.enqueue(topic, v, partition=0) for v in values]
    assert await asyncio.to_thread(codec_calls.started.wait, 10)
    started = time.monotonic()
    await producer.close(timeout=0.1)
    assert time.monotonic() - started < 0.9  # did not wait for the thread
    assert not codec_calls.finished.is_set()
    assert all(f.done() for f in futures)
    errors = [f.exception() for f in futures]
    assert isinstance(errors[0], ProducerClosedError), errors[0]
    assert await asyncio.to_thread(codec_calls.finished.wait, 10)
    await asyncio.sleep(0.05)  # the dropped result is delivered to nobody


async def test_a_consumer_closed_during_an_inflation_job_drops_its_result(
    kafka_cluster: KafkaCluster, new_topic: Any, codec_calls: CodecCalls
) -> None:
    """Closing the consumer while its fetcher awaits a thread inflating a batch: the
    fetcher stops at once (nothing is filed), the thread's result goes nowhere."""
    topic = await new_topic()
    bootstrap = kafka_cluster.bootstrap_servers
    values = _values(1100, 1024)
    await _produce(
        bootstrap,
        topic,
        values,
        compression_type="gzip",
        batch_size=MIB,
        linger_ms=100,
        max_request_size=2 * MIB,
    )
    codec_calls.delay_s = 1.0
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([TopicPartition(topic, 0)])
    assert await asyncio.to_thread(codec_calls.started.wait, 10)
    started = time.monotonic()
    await consumer.close()
    assert time.monotonic() - started < 0.9  # did not wait for the thread
    assert not codec_calls.finished.is_set()
    assert await asyncio.to_thread(codec_calls.finished.wait, 10)
    await asyncio.sleep(0.05)
