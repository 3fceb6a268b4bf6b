"""confluent-kafka (librdkafka) in each scenario (inside a ``benchmarks.worker`` subprocess).

Its classic API is synchronous with librdkafka's own C threads doing the I/O; the
scenarios use it the way its documentation does (``produce()`` + ``poll()``, ``flush()``,
``consume()``/``poll()``), and its asyncio ``AIOProducer`` for the FastAPI pattern.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
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

NAME = "confluent-kafka"


def producer_config(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.producer_settings(spec["scenario"])
    names = {
        "acks": "acks",
        "linger_ms": "linger.ms",
        "batch_size": "batch.size",
        "enable_idempotence": "enable.idempotence",
        "max_request_size": "message.max.bytes",
    }
    return {
        "bootstrap.servers": spec["bootstrap"],
        **{theirs: base[common] for common, theirs in names.items() if common in base},
        "compression.type": spec.get("codec", "none"),
    }


def consumer_config(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.consumer_settings(spec["scenario"])
    return {
        "bootstrap.servers": spec["bootstrap"],
        # librdkafka requires a group.id; the partitions are assigned, the group never joined
        "group.id": f"bench-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.min.bytes": base["fetch_min_bytes"],
        "fetch.wait.max.ms": base["fetch_max_wait_ms"],
        "fetch.max.bytes": base["fetch_max_bytes"],
        "max.partition.fetch.bytes": base["max_partition_fetch_bytes"],
    }


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = spec["scenario"]
    out: dict[str, Any] = {}
    hide = {"bootstrap.servers"}
    if scenario in settings.PRODUCER_SCENARIOS:
        out["producer"] = {k: v for k, v in producer_config(spec).items() if k not in hide}
    if scenario == "produce_keyed":
        out["producer"]["(other settings)"] = "defaults"
    if scenario in ("consume", "pause", "latency_rate", "latency_closed"):
        config = consumer_config(spec)
        config["group.id"] = "bench-<random> (required; never joined)"
        out["consumer"] = {k: v for k, v in config.items() if k not in hide}
        out["consumer"]["(other settings)"] = "defaults"
    out["api"] = {
        "produce": "produce() + poll(0) per record (retry on BufferError), then flush()",
        "produce_keyed": "produce(topic, value, key=key) + poll(0) per record (its default "
        "partitioner; retry on BufferError), then flush()",
        "produce_batch": f"produce_batch(topic, [{{'value': v}}, ...]) per {spec.get('call')} "
        "records, one on_delivery callback, poll(0) after each call (on BufferError: "
        "poll and resubmit the messages it did not take), then flush()",
        "consume": "assign(); consume(num_messages=10000, timeout=1) / poll(1)",
        "latency_rate": "produce() at the offered rate from one thread, poll() in another",
        "latency_closed": "produce() + flush(); then poll() until the record arrives",
        "pause": "pause 9 of 10 partitions, resume 1, poll()",
        "fastapi": "classic Producer bridged to asyncio: produce(on_delivery=...) resolving an "
        "asyncio future via call_soon_threadsafe, a thread looping poll(0.05); N tasks, each "
        "awaits one such send",
        "rebalance": "each member: Consumer({group.id, enable.auto.commit: true, ...}); "
        "subscribe([topic]); consume(num_messages=1000, timeout=0.1) in a loop; close() to "
        "leave",
        "share": "each member: ShareConsumer({bootstrap.servers, group.id}) (the preview's "
        "defaults: share.acknowledgement.mode=implicit); subscribe([topic]); poll(0.1) in a "
        "loop, each batch accepted by the next poll()",
    }.get(scenario, "")
    if scenario == "rebalance":
        config = rebalance_config(spec)
        out["consumer"] = {k: v for k, v in config.items() if k not in hide}
        out["consumer"]["(other settings)"] = "defaults"
    return out


def run(spec: dict[str, Any]) -> dict[str, Any]:
    handler = {
        "produce": _produce,
        "produce_batch": _produce_batch,
        "produce_keyed": _produce,
        "fill": _fill,
        "consume": _consume,
        "latency_rate": _latency_rate,
        "latency_closed": _latency_closed,
        "pause": _pause,
        "fastapi": lambda s: asyncio.run(_fastapi(s)),
        "rebalance_member": _rebalance_member,
        "share_member": _share_member,
    }.get(spec["scenario"])
    if spec["scenario"] == "rebalance":
        from benchmarks.rebalance import drive

        return drive("confluent", spec)
    if spec["scenario"] == "share":
        from benchmarks import share

        return share.drive("confluent", spec)
    if handler is None:
        raise Unsupported(spec["scenario"])
    result: dict[str, Any] = handler(spec)
    return result


def _produce_all(producer: Any, topic: str, values: list[bytes], n: int, **kw: Any) -> None:
    """``n`` records of ``values`` (cycled); ``partitions``: round-robin over them;
    ``keys`` (with ``partitions``): record ``i`` gets key ``k{i % keys}`` and the partition
    ``(i % keys) % partitions`` (every record of a key on one partition); ``key_list``:
    record ``i`` gets key ``key_list[i % len(key_list)]``, its partition librdkafka's
    choice."""
    k = len(values)
    partitions = kw.pop("partitions", None)
    keys = kw.pop("keys", 0)
    key_list = kw.pop("key_list", None)
    nk = len(key_list) if key_list else 0
    for i in range(n):
        if key_list:  # the keyed family: its own partitioner
            extra: dict[str, Any] = {"key": key_list[i % nk]}
        elif keys and partitions:
            extra = {"key": b"k%d" % (i % keys), "partition": i % keys % partitions}
        else:
            extra = {"partition": i % partitions} if partitions else {}
        while True:
            try:
                producer.produce(topic, values[i % k], **extra, **kw)
                break
            except BufferError:  # its queue is full: serve callbacks and retry
                producer.poll(0.005)
        producer.poll(0)


def _produce(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    producer = confluent_kafka.Producer(producer_config(spec))
    errors: list[Any] = []
    keyed = {"key_list": settings.keys(spec["keys"])} if spec.get("keys") else {}

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    _produce_all(producer, topic, values, spec["warmup"], on_delivery=on_delivery, **keyed)
    producer.flush(60)
    started = time.perf_counter()
    _produce_all(producer, topic, values, n, on_delivery=on_delivery, **keyed)
    left = producer.flush(120)
    seconds = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} not delivered, errors {errors[:3]}")
    return {"records": n, "seconds": seconds}


def _produce_batches(
    producer: Any, topic: str, values: list[bytes], n: int, call: int, on_delivery: Any
) -> None:
    k = len(values)
    for first in range(0, n, call):
        messages = [{"value": values[i % k]} for i in range(first, min(first + call, n))]
        while messages:
            queued = producer.produce_batch(topic, messages, on_delivery=on_delivery)
            if queued == len(messages):
                break
            # Its queue was full: the messages it did not take carry an "_error"; serve
            # delivery reports and submit those again.
            messages = [m for m in messages if "_error" in m]
            for m in messages:
                del m["_error"]
            producer.poll(0.005)
        producer.poll(0)


def _produce_batch(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    topic, n, values = spec["topic"], spec["records"], settings.payloads(spec["size"])
    producer = confluent_kafka.Producer(producer_config(spec))
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    _produce_batches(producer, topic, values, spec["warmup"], spec["call"], on_delivery)
    producer.flush(60)
    started = time.perf_counter()
    _produce_batches(producer, topic, values, n, spec["call"], on_delivery)
    left = producer.flush(120)
    seconds = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} not delivered, errors {errors[:3]}")
    return {"records": n, "seconds": seconds}


def _fill(spec: dict[str, Any]) -> dict[str, Any]:
    """Write the data the consume scenarios read (round-robin over the partitions, or by
    key: ``keys``)."""
    import confluent_kafka

    producer = confluent_kafka.Producer(producer_config(spec))
    n, size = spec["records"], spec["size"]
    values = [stamp(i, size) for i in range(n)] if spec.get("stamped") else settings.payloads(size)
    started = time.perf_counter()
    _produce_all(
        producer, spec["topic"], values, n, partitions=spec["partitions"], keys=spec.get("keys", 0)
    )
    if producer.flush(300):
        raise RuntimeError("fill: not every record was delivered")
    return {"records": spec["records"], "seconds": time.perf_counter() - started}


def _consumer(spec: dict[str, Any], topic: str, partitions: int, offset: int) -> Any:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(consumer_config(spec))
    consumer.assign([confluent_kafka.TopicPartition(topic, p, offset) for p in range(partitions)])
    return consumer


def _consume(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    n = spec["records"]
    consumer = _consumer(spec, spec["topic"], spec["partitions"], confluent_kafka.OFFSET_BEGINNING)
    try:
        seen = 0
        started = time.perf_counter()
        if spec["mode"] == "batch":
            while seen < n:
                for msg in consumer.consume(num_messages=min(10_000, n - seen), timeout=1.0):
                    if msg.error() is None:
                        seen += 1
        else:
            while seen < n:
                msg = consumer.poll(1.0)
                if msg is not None and msg.error() is None:
                    seen += 1
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return {"records": seen, "seconds": seconds}


def _latency_rate(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    schedule = rate_schedule(spec)
    recorder = LatencyRecorder(schedule, spec["warmup"])
    consumer = _consumer(spec, spec["topic"], 1, confluent_kafka.OFFSET_END)
    producer = confluent_kafka.Producer(producer_config(spec))
    done = threading.Event()
    try:
        _sync_position(producer, consumer, spec)

        def consume() -> None:
            deadline = time.monotonic() + len(schedule.times) / spec["rate"] + 60
            while time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is None or msg.error() is not None:
                    continue
                if recorder.receive(unstamp(msg.value()), time.perf_counter()):
                    break
            done.set()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        schedule = recorder.schedule = rate_schedule(spec)  # from now
        for i, due in enumerate(schedule.times):
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.produce(spec["topic"], stamp(i, spec["size"]))
            producer.poll(0)
        producer.flush(30)
        done.wait(60)
        reader.join(5)
    finally:
        consumer.close()
    return recorder.result()


def _sync_position(producer: Any, consumer: Any, spec: dict[str, Any]) -> None:
    """Send warm-up records until the consumer sees one: its "end" offset is resolved
    (like Java's seekToEnd() + position() before timing starts). Not measured."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        producer.produce(spec["topic"], b"x" * spec["size"])
        producer.flush(30)
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            while consumer.poll(0.2) is not None:  # and nothing else is pending
                pass
            return
    raise RuntimeError("confluent-kafka: the consumer never saw a warm-up record")


def _latency_closed(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    consumer = _consumer(spec, spec["topic"], 1, confluent_kafka.OFFSET_END)
    producer = confluent_kafka.Producer(producer_config(spec))
    latencies = []
    try:
        _sync_position(producer, consumer, spec)
        for i in range(spec["records"]):
            value = closed_loop_value(i, spec["size"])
            begin = time.perf_counter()
            producer.produce(spec["topic"], value)
            producer.flush(30)  # like Java's send().get(): until acknowledged
            while True:
                msg = consumer.poll(30)
                if msg is not None and msg.error() is None:
                    break
            latencies.append((time.perf_counter() - begin) * 1000)
            assert msg.value() == value
    finally:
        consumer.close()
    return percentiles(latencies)


def _pause(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    picker = PausePicker(spec)
    topic = spec["topic"]
    partitions = [confluent_kafka.TopicPartition(topic, p) for p in range(spec["partitions"])]
    delivered = records = 0
    consumer = _consumer(spec, topic, spec["partitions"], confluent_kafka.OFFSET_BEGINNING)
    try:
        started = time.perf_counter()
        deadline = started + spec["seconds"]
        while (now := time.perf_counter()) < deadline:
            index = picker.pick()
            if index is None:
                break
            consumer.pause([tp for tp in partitions if tp.partition != index])
            consumer.resume([partitions[index]])
            msg = consumer.poll(min(spec["take_timeout"], deadline - now))
            if msg is None:
                picker.stalls += 1
                continue
            if msg.error() is not None:
                raise RuntimeError(f"confluent-kafka poll: {msg.error()}")
            picker.took(msg.partition())
            records += 1
            delivered += len(msg.value())
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return picker.result(records, seconds, delivered)


async def _fastapi(spec: dict[str, Any]) -> dict[str, Any]:
    """The classic producer bridged to asyncio: ``produce()`` with a delivery callback that
    resolves an asyncio future through ``call_soon_threadsafe``, a thread calling
    ``poll()`` (the pattern of confluent-kafka's asyncio example). Its own
    ``confluent_kafka.aio.AIOProducer`` only serves delivery reports when it next hands a
    buffer to librdkafka (1,000 messages or 1 s), so an awaited send waits up to 1 s."""
    import confluent_kafka

    topic, values = spec["topic"], settings.payloads(spec["size"])
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    producer = confluent_kafka.Producer(producer_config(spec))
    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()

    def settle(future: asyncio.Future[Any], err: Any, msg: Any) -> None:
        if future.done():
            return
        if err is not None:
            future.set_exception(RuntimeError(str(err)))
        else:
            future.set_result(msg)

    async def send(value: bytes) -> Any:
        future: asyncio.Future[Any] = loop.create_future()

        def on_delivery(err: Any, msg: Any) -> None:
            loop.call_soon_threadsafe(settle, future, err, msg)

        producer.produce(topic, value, on_delivery=on_delivery)
        return await future

    try:

        async def request(i: int) -> None:
            begin = time.perf_counter()
            await send(values[i % len(values)])
            latencies.append((time.perf_counter() - begin) * 1000)

        await request(0)
        latencies.clear()
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
        stop.set()
        await asyncio.to_thread(thread.join)
        producer.flush(30)
    return {"records": len(latencies), "seconds": seconds, **percentiles(latencies, "send_")}


def rebalance_config(spec: dict[str, Any]) -> dict[str, Any]:
    """A member of the rebalance scenario: a group, auto-commit (librdkafka's default, 5 s),
    ``group.protocol=consumer`` or the classic protocol with cooperative-sticky (its
    default session and heartbeat: 45 s, 3 s)."""
    config = {
        **consumer_config(spec),
        "group.id": spec.get("group", "bench-rebalance-<random>"),
        "enable.auto.commit": True,
    }
    if spec.get("protocol") == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config["partition.assignment.strategy"] = "cooperative-sticky"
    return config


def _rebalance_member(spec: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    stop = stop_on_stdin()
    log = MemberLog(spec["log"])
    log.start()
    consumer = confluent_kafka.Consumer(rebalance_config(spec))
    try:
        consumer.subscribe([spec["topic"]])
        deadline = time.monotonic() + spec["max_member_s"]
        while not stop.is_set() and time.monotonic() < deadline:
            messages = consumer.consume(num_messages=1000, timeout=0.1)
            now = time.monotonic()
            log.batch(
                now,
                [
                    (m.partition(), m.offset(), unstamp(m.value()))
                    for m in messages
                    if m.error() is None
                ],
            )
    finally:
        consumer.close()
    return log.closed()


# -- the share scenario (benchmarks/share.py) ------------------------------------------------


def share_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The preview ``ShareConsumer``'s settings: its defaults (implicit acknowledgement)."""
    return {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"]}


def _share_member(spec: dict[str, Any]) -> dict[str, Any]:
    """One member of a share group: confluent-kafka's preview ``ShareConsumer`` with its
    defaults (implicit: the records of a ``poll()`` are accepted by the next one)."""
    from array import array

    import confluent_kafka

    from benchmarks.share import Progress, write_times

    if not hasattr(confluent_kafka, "ShareConsumer"):
        raise Unsupported(f"confluent-kafka {confluent_kafka.version()[0]} has no ShareConsumer")
    stop = stop_on_stdin()
    prefix, delay = spec["prefix"], spec["delay_ms"] / 1000
    progress = Progress(prefix)
    times: array[int] = array("q")
    now_ns = time.monotonic_ns
    log = open(prefix + ".log", "w") if spec["mode"] == "log" else None
    consumer = confluent_kafka.ShareConsumer(share_config(spec))
    try:
        consumer.subscribe([spec["topic"]])
        while not stop.is_set():
            messages = consumer.poll(0.1)
            if log is None:
                for message in messages:
                    if message.error() is None:
                        times.append(now_ns())
                progress.count = len(times)
                continue
            batch = len(messages)
            for done, message in enumerate(messages):
                if message.error() is not None:
                    continue
                held = batch - done  # this one and the rest of its poll()
                progress.peak_held = max(progress.peak_held, held)
                if delay:
                    time.sleep(delay)
                progress.count += 1
                log.write(f"{now_ns()} {unstamp(message.value())} {held}\n")
                log.flush()
                if stop.is_set():
                    break
    finally:
        consumer.close()
    progress.close()
    if log is not None:
        log.close()
    else:
        write_times(prefix, times)
    return {"records": progress.count, "peak_held": progress.peak_held}
