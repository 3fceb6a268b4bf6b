"""aiokafka in each scenario (run inside a ``benchmarks.worker`` subprocess)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks import settings
from benchmarks.clients.common import (
    LatencyRecorder,
    MemberLog,
    PausePicker,
    Unsupported,
    closed_loop_value,
    percentiles,
    rate_schedule,
    stamp,
    stop_on_stdin,
    unstamp,
)

NAME = "aiokafka"


def producer_options(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.producer_settings(spec["scenario"])
    codec = spec.get("codec", "none")
    names = {
        "acks": "acks",
        "linger_ms": "linger_ms",
        "batch_size": "max_batch_size",
        "enable_idempotence": "enable_idempotence",
        "max_request_size": "max_request_size",
    }
    return {
        **{theirs: base[common] for common, theirs in names.items() if common in base},
        "compression_type": None if codec == "none" else codec,
    }


def consumer_options(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.consumer_settings(spec["scenario"])
    return {
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        **base,
    }


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = spec["scenario"]
    out: dict[str, Any] = {}
    if scenario in settings.PRODUCER_SCENARIOS:
        out["producer"] = producer_options(spec)
    if scenario == "produce_keyed":
        out["producer"]["(other settings)"] = "defaults"
    if scenario in ("consume", "pause", "latency_rate", "latency_closed", "process"):
        out["consumer"] = consumer_options(spec) | {"(other settings)": "defaults"}
    if scenario == "process":
        out["consumer"]["group_id"] = "(fresh per run)"
    out["api"] = {
        "produce": "await producer.send(...) per record (returns once buffered), then await "
        "each future in turn",
        "produce_keyed": "await producer.send(topic, value, key=key) per record (its default "
        "partitioner), then await each future in turn",
        "produce_batch": "batch = producer.create_batch(); batch.append(...) until full; "
        "await producer.send_batch(batch, topic, partition=p), partitions in turn (aiokafka's "
        "batch producer example); then await each future in turn",
        "consume": "consumer.assign(); getmany(timeout_ms=1000) / async for msg in consumer",
        "latency_rate": "send() at the offered rate; getone() in the same loop",
        "latency_closed": "await send_and_wait(); then await getone()",
        "pause": "pause 9 of 10 partitions, resume 1, getone()",
        "fastapi": "N tasks, each: await producer.send_and_wait(...) once",
        "rebalance": "each member: AIOKafkaConsumer(topic, group_id=..., enable_auto_commit="
        "True); start(); getmany(timeout_ms=100) in a loop; stop() to leave (classic only: "
        "aiokafka has no KIP-848 protocol)",
        "process": "AIOKafkaConsumer(topic, group_id=...); async for msg in consumer: await "
        "handler(msg)",
    }.get(scenario, "")
    if scenario == "rebalance":
        out["consumer"] = rebalance_options(spec) | {"(other settings)": "defaults"}
    if spec.get("otel"):
        from benchmarks.otel import describe as otel_describe

        out["opentelemetry"] = otel_describe("aiokafka", spec["otel"])
    return out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    handler = {
        "produce": _produce,
        "produce_batch": _produce_batch,
        "produce_keyed": _produce,
        "consume": _consume,
        "latency_rate": _latency_rate,
        "latency_closed": _latency_closed,
        "pause": _pause,
        "fastapi": _fastapi,
        "rebalance_member": _rebalance_member,
        "process": _process,
    }.get(spec["scenario"])
    if spec["scenario"] == "rebalance":
        from benchmarks.rebalance import drive

        return drive("aiokafka", spec)
    if handler is None:
        raise Unsupported(spec["scenario"])
    if spec.get("otel"):  # the otel scenario: one mode set up in this process first
        from benchmarks.otel import run_mode

        return run_mode("aiokafka", spec, lambda: asyncio.run(handler(spec)))
    return asyncio.run(handler(spec))


async def _producer(spec: dict[str, Any]) -> Any:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=spec["bootstrap"], **producer_options(spec))
    await producer.start()
    return producer


async def _consumer(spec: dict[str, Any]) -> Any:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=spec["bootstrap"], **consumer_options(spec))
    await consumer.start()
    return consumer


async def _produce(spec: dict[str, Any]) -> dict[str, Any]:
    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    k = len(values)
    keys = settings.keys(spec["keys"]) if spec.get("keys") else [None]
    nk = len(keys)
    producer = await _producer(spec)
    try:
        send = producer.send
        warm = [await send(topic, values[i % k], keys[i % nk]) for i in range(spec["warmup"])]
        await asyncio.gather(*warm)
        started = time.perf_counter()
        futures = [await send(topic, values[i % k], keys[i % nk]) for i in range(n)]
        for future in futures:  # not gather(): it would time asyncio's callbacks, not us
            await future
        seconds = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"records": n, "seconds": seconds}


async def _send_batches(
    producer: Any, topic: str, values: list[bytes], n: int, partitions: list[int]
) -> list[Any]:
    """aiokafka's hand-built batches (its batch producer example): fill a ``BatchBuilder``
    until ``append`` says it is full, hand it to ``send_batch`` for the next partition."""
    k = len(values)
    futures = []
    turn = 0
    batch = producer.create_batch()
    for i in range(n):
        value = values[i % k]
        if batch.append(key=None, value=value, timestamp=None) is None:
            partition = partitions[turn % len(partitions)]
            turn += 1
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
            batch.append(key=None, value=value, timestamp=None)
    if batch.record_count():
        partition = partitions[turn % len(partitions)]
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


async def _produce_batch(spec: dict[str, Any]) -> dict[str, Any]:
    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    producer = await _producer(spec)
    try:
        partitions = sorted(await producer.partitions_for(topic))
        warm = await _send_batches(producer, topic, values, spec["warmup"], partitions)
        await asyncio.gather(*warm)
        started = time.perf_counter()
        futures = await _send_batches(producer, topic, values, n, partitions)
        for future in futures:
            await future
        seconds = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"records": n, "seconds": seconds}


async def _consume(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import TopicPartition

    n = spec["records"]
    consumer = await _consumer(spec)
    try:
        consumer.assign([TopicPartition(spec["topic"], p) for p in range(spec["partitions"])])
        seen = 0
        started = time.perf_counter()
        if spec["mode"] == "batch":
            while seen < n:
                fetched = await consumer.getmany(timeout_ms=1000)
                for records in fetched.values():
                    seen += len(records)
        else:
            async for _msg in consumer:
                seen += 1
                if seen >= n:
                    break
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
    return {"records": seen, "seconds": seconds}


async def _latency_rate(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import TopicPartition

    schedule = rate_schedule(spec)
    recorder = LatencyRecorder(schedule, spec["warmup"])
    producer = await _producer(spec)
    consumer = await _consumer(spec)
    try:
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await producer.send_and_wait(spec["topic"], b"x" * spec["size"])

        async def consume() -> None:
            while True:
                msg = await consumer.getone()
                if recorder.receive(unstamp(msg.value), time.perf_counter()):
                    return

        reader = asyncio.create_task(consume())
        futures = []
        for i, due in enumerate(schedule.times):
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            futures.append(await producer.send(spec["topic"], stamp(i, spec["size"])))
        await asyncio.gather(*futures)
        await asyncio.wait_for(reader, 30)
    finally:
        await producer.stop()
        await consumer.stop()
    return recorder.result()


async def _latency_closed(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import TopicPartition

    latencies = []
    producer = await _producer(spec)
    consumer = await _consumer(spec)
    try:
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        for i in range(spec["records"]):
            value = closed_loop_value(i, spec["size"])
            begin = time.perf_counter()
            await producer.send_and_wait(spec["topic"], value)
            msg = await consumer.getone()
            latencies.append((time.perf_counter() - begin) * 1000)
            assert msg.value == value
    finally:
        await producer.stop()
        await consumer.stop()
    return percentiles(latencies)


async def _pause(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import TopicPartition

    picker = PausePicker(spec)
    partitions = [TopicPartition(spec["topic"], p) for p in range(spec["partitions"])]
    delivered = records = 0
    consumer = await _consumer(spec)
    try:
        consumer.assign(partitions)
        started = time.perf_counter()
        deadline = started + spec["seconds"]
        while (now := time.perf_counter()) < deadline:
            index = picker.pick()
            if index is None:
                break
            active = partitions[index]
            consumer.pause(*[tp for tp in partitions if tp != active])
            consumer.resume(active)
            try:
                msg = await asyncio.wait_for(
                    consumer.getone(), min(spec["take_timeout"], deadline - now)
                )
            except TimeoutError:
                picker.stalls += 1
                continue
            picker.took(msg.partition)
            records += 1
            delivered += len(msg.value)
        seconds = time.perf_counter() - started
    finally:
        await consumer.stop()
    return picker.result(records, seconds, delivered)


async def _fastapi(spec: dict[str, Any]) -> dict[str, Any]:
    topic, values = spec["topic"], settings.payloads(spec["size"])
    latencies: list[float] = []
    producer = await _producer(spec)
    try:

        async def request(i: int) -> None:
            begin = time.perf_counter()
            await producer.send_and_wait(topic, values[i % len(values)])
            latencies.append((time.perf_counter() - begin) * 1000)

        await producer.send_and_wait(topic, values[0])
        started = time.perf_counter()
        for burst in range(spec["bursts"]):
            if spec["tasks"] == 1:  # sequential: one awaited send after another
                await request(burst)
                continue
            async with asyncio.TaskGroup() as tg:
                for i in range(spec["tasks"]):
                    tg.create_task(request(i))
        seconds = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"records": len(latencies), "seconds": seconds, **percentiles(latencies, "send_")}


def rebalance_options(spec: dict[str, Any]) -> dict[str, Any]:
    """A member of the rebalance scenario: a group, auto-commit on (aiokafka's default,
    5 s), the rest aiokafka's defaults (round-robin assignor: eager, 10 s session, 3 s
    heartbeat)."""
    return {**consumer_options(spec), "group_id": spec.get("group"), "enable_auto_commit": True}


async def _rebalance_member(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    if spec["protocol"] != "classic":
        raise Unsupported("aiokafka has no KIP-848 consumer protocol")
    stop = stop_on_stdin()
    log = MemberLog(spec["log"])
    log.start()
    consumer = AIOKafkaConsumer(
        spec["topic"], bootstrap_servers=spec["bootstrap"], **rebalance_options(spec)
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + spec["max_member_s"]
        while not stop.is_set() and time.monotonic() < deadline:
            data = await consumer.getmany(timeout_ms=100)
            now = time.monotonic()
            for tp, messages in data.items():
                log.batch(now, [(tp.partition, m.offset, unstamp(m.value)) for m in messages])
    finally:
        await consumer.stop()
    return log.closed()


async def _process(spec: dict[str, Any]) -> dict[str, Any]:
    """The process scenario's sequential loop: ``async for msg in consumer`` awaiting the
    handler per record (aiokafka has no concurrent form)."""
    import uuid

    from aiokafka import AIOKafkaConsumer

    from benchmarks.process import Tally, delay_of

    if spec["concurrency"] != 1:
        raise Unsupported("aiokafka has no concurrent processing")
    tally = Tally(spec["records"], delay_of(spec["handler"], spec["seed"]))
    options = consumer_options(spec) | {"group_id": f"bench-process-{uuid.uuid4().hex[:10]}"}
    consumer = AIOKafkaConsumer(spec["topic"], bootstrap_servers=spec["bootstrap"], **options)
    await consumer.start()
    try:

        async def sequential() -> None:
            async for msg in consumer:
                await tally.handle(msg)
                if tally.done.is_set():
                    return

        task = asyncio.ensure_future(sequential())
        try:
            await tally.wait(task, settings.PROCESS_LIMIT_S)
        finally:
            task.cancel()
            await asyncio.wait([task], timeout=10)
    finally:
        await consumer.stop()
    return tally.result(1)
