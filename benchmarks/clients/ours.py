"""aiostream_kafka in each scenario (run inside a ``benchmarks.worker`` subprocess)."""

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

NAME = "aiostream_kafka"


def producer_options(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.producer_settings(spec["scenario"])
    names = {
        "acks": "acks",
        "linger_ms": "linger_ms",
        "batch_size": "batch_size",
        "enable_idempotence": "enable_idempotence",
        "max_request_size": "max_request_size",
    }
    options: dict[str, Any] = {
        ours: base[common] for common, ours in names.items() if common in base
    }
    codec = spec.get("codec", "none")
    options["compression_type"] = None if codec == "none" else codec
    if spec.get("otel") == "off":
        options["opentelemetry"] = False
    return options


def consumer_options(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.consumer_settings(spec["scenario"])
    options: dict[str, Any] = {"group_id": None, **base}
    if spec.get("otel") == "off":
        options["opentelemetry"] = False
    return options


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = spec["scenario"]
    out: dict[str, Any] = {}
    if scenario in settings.PRODUCER_SCENARIOS:
        out["producer"] = producer_options(spec)
    if scenario == "produce_keyed":
        out["producer"]["(other settings)"] = "defaults"
    if scenario in ("consume", "pause", "latency_rate", "latency_closed"):
        out["consumer"] = consumer_options(spec) | {"(other settings)": "defaults"}
    out["api"] = {
        "produce": "await producer.enqueue(...) per record (pipelined), then await each future"
        " in turn",
        "produce_keyed": "await producer.enqueue(topic, value, key=key) per record, then await "
        "each future in turn",
        "produce_batch": f"await producer.enqueue_batch(topic, values) per {spec.get('call')} "
        "records (one future per call), then await each future in turn",
        "consume": "consumer.assign(); async for batch in consumer.batches() / "
        "async for record in consumer.stream()",
        "latency_rate": "enqueue() at the offered rate; consumer.stream() in the same loop",
        "latency_closed": "await producer.send(); then await the next record from stream()",
        "pause": "pause 9 of 10 partitions, resume 1, take one record from stream()",
        "fastapi": "N tasks, each: await producer.send(...) once",
        "rebalance": "each member: Consumer(group_id=..., enable_auto_commit=True"
        + (', group_protocol="consumer"' if spec.get("protocol") == "consumer" else "")
        + "); subscribe([topic]); async for batch in consumer.batches(); close() to leave",
        "share": "each member: ShareConsumer(bootstrap_servers=..., group_id=...) (defaults: "
        "implicit acknowledgement, max_prefetch_records=500, fetch_max_wait_ms=500); "
        "subscribe([topic]); async for record in sc",
        "process": (
            "no consumer (the asyncio floor): an asyncio.Queue(maxsize=4*C) fed by one task "
            "with the topic's (partition, offset) pairs, C tasks each: await queue.get(); "
            f"await handler(record) (C={spec.get('concurrency')})"
            if spec.get("floor")
            else "subscribe([topic]); async for record in consumer.stream(): await handler(record)"
            if spec.get("concurrency") == 1
            else f"subscribe([topic]); await consumer.process(handler, concurrency="
            f'{spec.get("concurrency")}, ordering="key") (commits: every=1000, within_s=5.0)'
        ),
        "process_kill": "two members in turn, each: subscribe([topic]); await "
        f'consumer.process(handler, concurrency={spec.get("concurrency")}, ordering="key") '
        "(commits: every=1000, within_s=5.0); the first SIGKILLed",
    }.get(scenario, "")
    if spec.get("api") == "enqueue_nowait":
        key = ", key=key" if scenario == "produce_keyed" else ""
        out["api"] = (
            f"producer.enqueue_nowait(topic, value{key}) per record (no future, no callback); "
            "on BufferFullError: await producer.wait_for_buffer() and call again; then await "
            "producer.flush()"
        )
    if scenario in ("process", "process_kill") and not spec.get("floor"):
        out["consumer"] = process_options(spec) | {"(other settings)": "defaults"}
    if scenario == "rebalance":
        out["consumer"] = rebalance_options(spec) | {"(other settings)": "defaults"}
    import aiostream_kafka.protocol.records  # noqa: F401 -- loads the record decoder too
    from aiostream_kafka import _native

    if spec.get("otel"):
        from benchmarks.otel import describe as otel_describe

        out["opentelemetry"] = otel_describe("ours", spec["otel"])
    compiled = _native.compiled_modules()
    out["build"] = f"compiled: {', '.join(compiled)}" if compiled else "pure Python"
    return out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    handler = {
        "produce": _produce,
        "produce_batch": _produce_batch,
        "produce_keyed": _produce,
        "fill": _produce,
        "consume": _consume,
        "latency_rate": _latency_rate,
        "latency_closed": _latency_closed,
        "pause": _pause,
        "fastapi": _fastapi,
        "rebalance_member": _rebalance_member,
        "share_member": _share_member,
        "process": _process,
        "process_member": _process_member,
    }.get(spec["scenario"])
    if spec["scenario"] == "process_kill":
        from benchmarks.process import drive_kill

        return drive_kill(spec)
    if spec["scenario"] == "rebalance":
        from benchmarks.rebalance import drive

        return drive("ours", spec)
    if spec["scenario"] == "share":
        from benchmarks import share

        return share.drive("ours", spec)
    if handler is None:
        raise Unsupported(spec["scenario"])
    if spec.get("otel"):  # the otel scenario: one mode set up in this process first
        from benchmarks.otel import run_mode

        return run_mode("ours", spec, lambda: asyncio.run(handler(spec)))
    return asyncio.run(handler(spec))


async def _produce(spec: dict[str, Any]) -> dict[str, Any]:
    """``produce`` and ``produce_keyed`` (``spec["keys"]``: record ``i`` has key
    ``settings.keys(...)[i % keys]``); ``spec["api"]`` ``enqueue_nowait``: that call instead
    of ``enqueue``, and ``flush()`` as the last acknowledgement."""
    from aiostream_kafka import Producer

    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    keys = settings.keys(spec["keys"]) if spec.get("keys") else None
    nowait = spec.get("api") == "enqueue_nowait"
    async with Producer(spec["bootstrap"], **producer_options(spec)) as producer:
        if nowait:
            await _nowait(producer, topic, values, keys, spec["warmup"])
            await producer.flush()
            started = time.perf_counter()
            await _nowait(producer, topic, values, keys, n)
            await producer.flush()
            seconds = time.perf_counter() - started
            return {"records": n, "seconds": seconds}
        warm = await _enqueue(producer, topic, values, keys, spec["warmup"])
        await asyncio.gather(*warm)
        started = time.perf_counter()
        futures = await _enqueue(producer, topic, values, keys, n)
        for future in futures:  # not gather(): it would time asyncio's callbacks, not us
            await future
        seconds = time.perf_counter() - started
    return {"records": n, "seconds": seconds}


async def _enqueue(
    producer: Any, topic: str, values: list[bytes], keys: list[bytes] | None, n: int
) -> list[Any]:
    k = len(values)
    enqueue = producer.enqueue
    if keys is None:
        return [await enqueue(topic, values[i % k]) for i in range(n)]
    nk = len(keys)
    return [await enqueue(topic, values[i % k], key=keys[i % nk]) for i in range(n)]


async def _nowait(
    producer: Any, topic: str, values: list[bytes], keys: list[bytes] | None, n: int
) -> None:
    """``n`` records through ``enqueue_nowait``; when the buffer is full, wait for room and
    call again (the call buffered nothing)."""
    from aiostream_kafka import BufferFullError

    k = len(values)
    enqueue_nowait = producer.enqueue_nowait
    nk = len(keys) if keys is not None else 0
    for i in range(n):
        value = values[i % k]
        key = keys[i % nk] if keys is not None else None
        while True:
            try:
                enqueue_nowait(topic, value, key)
                break
            except BufferFullError:
                await producer.wait_for_buffer()


async def _produce_batch(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Producer

    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    k, call = len(values), spec["call"]
    async with Producer(spec["bootstrap"], **producer_options(spec)) as producer:
        await producer.send_batch(topic, [values[i % k] for i in range(spec["warmup"])])
        started = time.perf_counter()
        futures = []
        for first in range(0, n, call):
            chunk = [values[i % k] for i in range(first, min(first + call, n))]
            futures.append(await producer.enqueue_batch(topic, chunk))
        for future in futures:
            await future
        seconds = time.perf_counter() - started
    return {"records": n, "seconds": seconds}


async def _consume(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Consumer, TopicPartition

    n = spec["records"]
    async with Consumer(spec["bootstrap"], **consumer_options(spec)) as consumer:
        consumer.assign([TopicPartition(spec["topic"], p) for p in range(spec["partitions"])])
        seen = 0
        started = time.perf_counter()
        if spec["mode"] == "batch":
            async for batch in consumer.batches():
                seen += len(batch)
                if seen >= n:
                    break
        else:
            async for _record in consumer.stream():
                seen += 1
                if seen >= n:
                    break
        seconds = time.perf_counter() - started
    return {"records": seen, "seconds": seconds}


async def _latency_rate(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Consumer, Producer, TopicPartition

    schedule = rate_schedule(spec)
    recorder = LatencyRecorder(schedule, spec["warmup"])
    size = spec["size"]
    async with (
        Producer(spec["bootstrap"], **producer_options(spec)) as producer,
        Consumer(spec["bootstrap"], **consumer_options(spec)) as consumer,
    ):
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await producer.send(spec["topic"], b"x" * size)  # connections and metadata up

        async def consume() -> None:
            async for record in consumer.stream():
                if recorder.receive(unstamp(record.value), time.perf_counter()):
                    return

        reader = asyncio.create_task(consume())
        futures = []
        for i, due in enumerate(schedule.times):
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            futures.append(await producer.enqueue(spec["topic"], stamp(i, size)))
        await asyncio.gather(*futures)
        await asyncio.wait_for(reader, 30)
    return recorder.result()


async def _latency_closed(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Consumer, Producer, TopicPartition

    latencies = []
    async with (
        Producer(spec["bootstrap"], **producer_options(spec)) as producer,
        Consumer(spec["bootstrap"], **consumer_options(spec)) as consumer,
    ):
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        stream = consumer.stream()
        for i in range(spec["records"]):
            value = closed_loop_value(i, spec["size"])
            begin = time.perf_counter()
            await producer.send(spec["topic"], value)
            record = await anext(stream)
            latencies.append((time.perf_counter() - begin) * 1000)
            assert record.value == value
    return percentiles(latencies)


async def _pause(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Consumer, TopicPartition

    picker = PausePicker(spec)
    partitions = [TopicPartition(spec["topic"], p) for p in range(spec["partitions"])]
    delivered = records = 0
    async with Consumer(spec["bootstrap"], **consumer_options(spec)) as consumer:
        consumer.assign(partitions)
        stream = consumer.stream()
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
                async with asyncio.timeout(min(spec["take_timeout"], deadline - now)):
                    record = await anext(stream)
            except TimeoutError:
                picker.stalls += 1
                continue
            picker.took(record.partition)
            records += 1
            delivered += len(record.value)
        seconds = time.perf_counter() - started
    return picker.result(records, seconds, delivered)


async def _fastapi(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Producer

    topic, values = spec["topic"], settings.payloads(spec["size"])
    latencies: list[float] = []

    async with Producer(spec["bootstrap"], **producer_options(spec)) as producer:

        async def request(i: int) -> None:
            begin = time.perf_counter()
            await producer.send(topic, values[i % len(values)])
            latencies.append((time.perf_counter() - begin) * 1000)

        await producer.send(topic, values[0])  # warm up
        started = time.perf_counter()
        for burst in range(spec["bursts"]):
            if spec["tasks"] == 1:  # sequential: one awaited send after another
                await request(burst)
                continue
            async with asyncio.TaskGroup() as tg:
                for i in range(spec["tasks"]):
                    tg.create_task(request(i))
        seconds = time.perf_counter() - started
    return {"records": len(latencies), "seconds": seconds, **percentiles(latencies, "send_")}


def rebalance_options(spec: dict[str, Any]) -> dict[str, Any]:
    """A member of the rebalance scenario: a group, auto-commit (every client's is on, at
    5 s), the classic protocol's defaults (cooperative-sticky, 45 s session, 3 s
    heartbeat) or ``group_protocol="consumer"``."""
    options = {**consumer_options(spec), "group_id": spec.get("group"), "enable_auto_commit": True}
    if spec.get("protocol") == "consumer":
        options["group_protocol"] = "consumer"
    return options


async def _rebalance_member(spec: dict[str, Any]) -> dict[str, Any]:
    from aiostream_kafka import Consumer
    from aiostream_kafka.errors import ConfigError

    stop = stop_on_stdin()
    log = MemberLog(spec["log"])
    log.start()
    try:
        consumer = Consumer(spec["bootstrap"], **rebalance_options(spec))
    except ConfigError as exc:
        if spec["protocol"] != "consumer":
            raise
        raise Unsupported(
            f'Consumer(group_protocol="consumer") raises ConfigError: {exc}'
        ) from None
    async with consumer:
        consumer.subscribe([spec["topic"]])

        async def pump() -> None:
            async for batch in consumer.batches():
                log.batch(
                    time.monotonic(), [(r.partition, r.offset, unstamp(r.value)) for r in batch]
                )

        reader = asyncio.create_task(pump())
        deadline = time.monotonic() + spec["max_member_s"]
        while not stop.is_set() and not reader.done() and time.monotonic() < deadline:
            await asyncio.wait([reader], timeout=0.05)
        reader.cancel()
        await asyncio.wait([reader], timeout=10)
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            raise RuntimeError(f"the member's reader failed: {reader.exception()!r}")
    return log.closed()


# -- the share scenario (benchmarks/share.py) ------------------------------------------------


async def _share_member(spec: dict[str, Any]) -> dict[str, Any]:
    """One member of a share group: ``ShareConsumer`` with its default options (implicit
    acknowledgement: a record is accepted when the loop asks for the next one)."""
    from array import array

    from aiostream_kafka import ShareConsumer
    from benchmarks.share import Progress, write_times

    stop = stop_on_stdin()
    prefix, delay = spec["prefix"], spec["delay_ms"] / 1000
    progress = Progress(prefix)
    times: array[int] = array("q")
    now_ns = time.monotonic_ns
    log = open(prefix + ".log", "w") if spec["mode"] == "log" else None  # noqa: ASYNC230
    async with ShareConsumer(bootstrap_servers=spec["bootstrap"], group_id=spec["group"]) as sc:
        sc.subscribe([spec["topic"]])

        async def pump() -> None:
            append = times.append
            if log is None:
                async for _record in sc:
                    append(now_ns())
                    progress.count += 1
                return
            processed = 0
            async for record in sc:
                held = sc.records_acquired - processed  # this one included
                progress.peak_held = max(progress.peak_held, held)
                if delay:
                    await asyncio.sleep(delay)
                processed += 1
                progress.count = processed
                log.write(f"{now_ns()} {unstamp(record.value)} {held}\n")
                log.flush()

        reader = asyncio.create_task(pump())
        while not stop.is_set() and not reader.done():
            await asyncio.wait([reader], timeout=0.05)
        reader.cancel()
        await asyncio.wait([reader], timeout=10)
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            raise RuntimeError(f"the member's reader failed: {reader.exception()!r}")
    progress.close()
    if log is not None:
        log.close()
    else:
        write_times(prefix, times)
    return {"records": progress.count, "peak_held": progress.peak_held}


# -- the process scenario (benchmarks/process.py) --------------------------------------------


def process_options(spec: dict[str, Any]) -> dict[str, Any]:
    """A fresh group read from the earliest offset, no auto-commit (``process()`` commits
    itself; the sequential loop commits nothing, as aiokafka's)."""
    options = {**consumer_options(spec), "group_id": spec.get("group") or "(fresh per run)"}
    options["auto_offset_reset"] = "earliest"
    options["enable_auto_commit"] = False
    if spec["scenario"] == "process_kill":
        options["session_timeout_ms"] = settings.PROCESS_SESSION_TIMEOUT_MS
    return options


async def _process(spec: dict[str, Any]) -> dict[str, Any]:
    """Throughput of ``process()`` at ``spec['concurrency']`` (1: ``async for record in
    consumer.stream()`` awaiting the handler per record); with ``spec['floor']`` the asyncio
    floor instead (``benchmarks.process.run_floor``: no consumer)."""
    import uuid

    from aiostream_kafka import Consumer
    from benchmarks.process import Tally, delay_of, run_floor

    if spec.get("floor"):
        return await run_floor(spec)
    concurrency = spec["concurrency"]
    tally = Tally(spec["records"], delay_of(spec["handler"], spec["seed"]))
    options = process_options(spec) | {"group_id": f"bench-process-{uuid.uuid4().hex[:10]}"}
    async with Consumer(spec["bootstrap"], **options) as consumer:
        consumer.subscribe([spec["topic"]])
        if concurrency == 1:

            async def sequential() -> None:
                async for record in consumer.stream():
                    await tally.handle(record)
                    if tally.done.is_set():
                        return

            task = asyncio.ensure_future(sequential())
        else:
            task = asyncio.ensure_future(
                consumer.process(tally.handle, concurrency=concurrency, ordering="key")
            )
        try:
            await tally.wait(task, settings.PROCESS_LIMIT_S)
        finally:
            await consumer.close()
            await asyncio.wait([task], timeout=60)
            if not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=10)
    return tally.result(concurrency)


async def _process_member(spec: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.process import run_member

    return await run_member(spec)
