"""The Java client, through the perf tools of Kafka's ``kafka-tools`` jar:

* produce -- ``org.apache.kafka.tools.ProducerPerformance`` (``--throughput -1``, the warm-up
  records excluded by its own ``--warmup-records``; its "steady state" summary is used);
* consume -- ``org.apache.kafka.tools.ConsumerPerformance`` (it subscribes with a group; its
  ``fetch.time.ms`` excludes the group join, so the rate is ``fetch.nMsg.sec``);
* latency_closed -- ``org.apache.kafka.tools.EndToEndLatency`` (one record in flight: send,
  wait for the ack, poll until it is read; its own producer/consumer settings).

The JVM's start-up is never timed: every figure is the tool's own. The worker that runs
the JVM reports the JVM's peak RSS (``RUSAGE_CHILDREN``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid
from typing import Any

from benchmarks import settings
from benchmarks.clients.common import Unsupported

NAME = "Java (kafka-clients 4.3.1 perf tools)"


def lib_dir() -> str:
    from aiostream_kafka.testing.jars import ensure_kafka_jars

    return str(ensure_kafka_jars())


def java_command(main: str) -> list[str]:
    from aiostream_kafka.testing.jars import java_executable

    return [java_executable(), settings.JAVA_HEAP, "-cp", f"{lib_dir()}/*", main]


def producer_props(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.PRODUCER
    return {
        "acks": base["acks"],
        "linger.ms": base["linger_ms"],
        "batch.size": base["batch_size"],
        "enable.idempotence": str(base["enable_idempotence"]).lower(),
        "max.request.size": base["max_request_size"],
        "compression.type": spec.get("codec", "none"),
    }


def consumer_props(spec: dict[str, Any]) -> dict[str, Any]:
    base = settings.CONSUMER
    return {
        "fetch.min.bytes": base["fetch_min_bytes"],
        "fetch.max.wait.ms": base["fetch_max_wait_ms"],
        "fetch.max.bytes": base["fetch_max_bytes"],
        "max.partition.fetch.bytes": base["max_partition_fetch_bytes"],
        "receive.buffer.bytes": 65536,  # the client default; the tool's own is 2 MiB
    }


def describe(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = spec["scenario"]
    if scenario == "produce":
        return {
            "tool": "ProducerPerformance --throughput -1 --record-size S --warmup-records W",
            "producer": producer_props(spec),
            "jvm": settings.JAVA_HEAP,
        }
    if scenario == "consume":
        return {
            "tool": "ConsumerPerformance (subscribes with a fresh group; fetch.time.ms excludes "
            "the group join)",
            "consumer": consumer_props(spec) | {"(other settings)": "defaults"},
            "jvm": settings.JAVA_HEAP,
        }
    if scenario == "latency_closed":
        return {
            "tool": "EndToEndLatency (hard-coded: producer linger.ms=0, consumer "
            "fetch.max.wait.ms=0, one record in flight; percentiles in whole ms, truncated)",
            "producer": {"acks": "all", "linger.ms": 0, "enable.idempotence": "true (default)"},
            "consumer": {"fetch.max.wait.ms": 0, "(other settings)": "defaults"},
            "jvm": settings.JAVA_HEAP,
        }
    if scenario == "share":
        return {
            "tool": "benchmarks/java/ShareMember.java (a small driver of KafkaShareConsumer, "
            "one JVM per member; the perf tool ShareConsumerPerformance runs its consumers "
            "as threads of one JVM and times them itself)",
            "consumer": {
                "(settings)": "defaults: share.acknowledgement.mode=implicit, "
                "share.acquire.mode=batch_optimized"
            },
            "jvm": settings.JAVA_HEAP,
        }
    return {}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    scenario = spec["scenario"]
    if scenario == "produce":
        return _produce(spec)
    if scenario == "consume":
        if spec["mode"] != "batch":
            raise Unsupported("the Java consumer only has poll(): see the batch rows")
        return _consume(spec)
    if scenario == "latency_closed":
        return _latency_closed(spec)
    if scenario == "share":
        from benchmarks import share

        return share.drive("java", spec)
    raise Unsupported(scenario)


def _run(cmd: list[str], timeout: float = 600) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{cmd[4]} exited {proc.returncode}: {proc.stderr[-2000:]}{proc.stdout[-2000:]}"
        )
    return proc.stdout


def _produce(spec: dict[str, Any]) -> dict[str, Any]:
    n, warmup = spec["records"], spec["warmup"]
    props = [f"{k}={v}" for k, v in producer_props(spec).items()]
    cmd = [
        *java_command("org.apache.kafka.tools.ProducerPerformance"),
        "--bootstrap-server", spec["bootstrap"],
        "--topic", spec["topic"],
        "--num-records", str(n + warmup),
        "--record-size", str(spec["size"]),
        "--throughput", "-1",
    ]  # fmt: skip
    if warmup:
        cmd += ["--warmup-records", str(warmup)]
    cmd += ["--command-property", *props]
    out = _run(cmd)
    pattern = r"(\d+) (steady state )?records sent, ([\d.]+) records/sec"
    lines = [m for m in re.finditer(pattern, out)]
    if not lines:
        raise RuntimeError(f"ProducerPerformance: no summary in {out[-1000:]}")
    steady = [m for m in lines if m.group(2)] or lines
    m = steady[-1]
    records, rate = int(m.group(1)), float(m.group(3))
    return {"records": records, "seconds": records / rate, "tool_summary": m.group(0)}


def _consume(spec: dict[str, Any]) -> dict[str, Any]:
    props = [f"{k}={v}" for k, v in consumer_props(spec).items()]
    cmd = [
        *java_command("org.apache.kafka.tools.ConsumerPerformance"),
        "--bootstrap-server", spec["bootstrap"],
        "--topic", spec["topic"],
        "--num-records", str(spec["records"]),
        "--group", f"perf-{uuid.uuid4().hex[:12]}",
        "--fetch-size", str(settings.CONSUMER["max_partition_fetch_bytes"]),
        "--socket-buffer-size", "65536",
        "--timeout", "30000",
        "--command-property", *props,
    ]  # fmt: skip
    out = _run(cmd)
    lines = [line for line in out.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [f.strip() for f in lines[header].split(",")]
    values = [f.strip() for f in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    records = int(row["data.consumed.in.nMsg"])
    seconds = int(row["fetch.time.ms"]) / 1000
    return {"records": records, "seconds": seconds, "tool_summary": row}


def _latency_closed(spec: dict[str, Any]) -> dict[str, Any]:
    cmd = [
        *java_command("org.apache.kafka.tools.EndToEndLatency"),
        "--bootstrap-server", spec["bootstrap"],
        "--topic", spec["topic"],
        "--num-records", str(spec["records"]),
        "--producer-acks", "all",
        "--record-size", str(spec["size"]),
    ]  # fmt: skip
    started = time.perf_counter()
    out = _run(cmd)
    avg = re.search(r"Avg latency: ([\d.]+) ms", out)
    pct = re.search(r"50th = (\d+), 99th = (\d+), 99\.9th = (\d+)", out)
    if not avg or not pct:
        raise RuntimeError(f"EndToEndLatency: no summary in {out[-1000:]}")
    return {
        "samples": spec["records"],
        "p50_ms": float(pct.group(1)),
        "p99_ms": float(pct.group(2)),
        "p999_ms": float(pct.group(3)),
        "avg_ms": float(avg.group(1)),
        "wall_seconds": time.perf_counter() - started,
        "whole_ms_percentiles": True,
    }


def versions() -> dict[str, str]:
    from aiostream_kafka.testing.jars import KAFKA_VERSION, java_executable

    proc = subprocess.run(
        [java_executable(), "-version"], capture_output=True, text=True, check=False
    )
    first = (proc.stderr or proc.stdout).splitlines()[:1]
    return {
        "java": first[0] if first else "?",
        "kafka_tools": KAFKA_VERSION,
        "java_home": os.environ.get("JAVA_HOME", ""),
    }
