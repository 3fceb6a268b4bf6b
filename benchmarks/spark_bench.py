"""Spark benchmark: ours beside Spark's JVM Kafka connector, in one SparkSession.

Scenarios (``--scenarios read,write,stream``, run in that order; default ``read``):

* ``read``: ``spark.read...load().write.parquet()``, the whole topic into Parquet.
* ``write``: ``df.write.format(...).mode("append").save()`` of a Parquet table of
  ``--records`` rows (a key of up to 4 digits, none with ``--keyless-writes``, a
  ``--value-size`` value; written once before the rounds) into a fresh topic per run.
* ``stream``: ``readStream`` with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger``
  (``--max-offsets-per-trigger``, 100,000) into a Parquet sink, from ``start()`` to the
  end of the query; the time spent inside micro-batches (their ``triggerExecution``) and
  outside them is shown too, and each micro-batch phase (``durationMs``). A third source
  runs here, the *python floor* (``benchmarks/spark_floor.py``): the same micro-batches
  of rows made in memory by a Python data source that fetches nothing, i.e. what PySpark
  itself costs any Python streaming source; the summary gives ours / floor and
  floor / JVM. The *steady state* is shown beside the end-to-end figure: the rows of the
  micro-batches after the first over the sum of their ``triggerExecution`` durations (so
  without the query's start and its first micro-batch), per connector, with the ratios.
* ``memory`` (opt-in, run after the others): one partition of ``--memory-records``'s
  largest size of small records (``--memory-value-size``, 10 B), produced once with our
  batch call, read up to each size (default 1M and 10M) into the ``noop`` sink by each
  connector, each read in a SparkSession (a JVM) of its own after a warm-up read of 10,000
  records; reported: the peak RSS during the read (VmHWM, reset before it through
  ``/proc/<pid>/clear_refs``) of the Python worker that read (ours) and of the JVM (in
  ``local`` mode the executor is the driver's JVM), and their growth from the smallest
  size to the largest (a bounded task grows by nothing). ``--read-option KEY=VALUE``
  passes options to our source (``maxRecordsPerArrowBatch``...).
* ``write`` also runs the *python floor*'s writer: the same table handed to a Python
  Arrow writer that only counts its rows (PySpark's own cost of any Python sink).

Both connectors run against the same broker in the same SparkSession (``local[2]``): ours
is ``format("aiostream_kafka")`` (Python workers, Arrow batches), the JVM one is
``format("kafka")`` from ``org.apache.spark:spark-sql-kafka-0-10_2.13`` with its runtime
jars (token provider, kafka-clients, commons-pool2), fetched from Maven Central with
``mvn`` on the first run into the aiostream_kafka cache. Maven Central has no connector of
pyspark's version (4.3.0) yet, so the newest there (connector and token provider 4.2.0) is
used; the exact jars are printed, and a note when the connector's version is not
pyspark's.

After a Spark job that uses neither connector (the JVM's own warm-up) and, per scenario,
its Spark work without a connector (a Parquet write of the Kafka columns; a scan of the
write's source table), each scenario runs each connector once (the *cold* run, reported
apart: the python floor first where the scenario has it, so that it pays Spark's
Python worker start and ours shows its own imports and connections; then ours; then the
JVM one, which pays its class loading), then ``--rounds`` rounds, the connectors interleaved and
their order reversed every other round; the figure is rows per second of the whole job
(median), and the ratio ours / JVM. The machine is shared (the broker runs on it too):
compare the ratio within one run, not absolute numbers across machines.

    python benchmarks/spark_bench.py [--scenarios read,write,stream,memory] [--records N]
                                     [--partitions P] [--rounds R] [--bootstrap-servers B]
                                     [--memory-records 1000000,10000000]

Without ``--bootstrap-servers`` an embedded broker is started
(``aiostream_kafka.testing.KafkaCluster``). Results are printed (``--output FILE`` also
writes them as JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiostream_kafka import Admin, NewTopic, Producer

CONNECTOR_GROUP, CONNECTOR_ARTIFACT = "org.apache.spark", "spark-sql-kafka-0-10_2.13"
TOKEN_ARTIFACT = "spark-token-provider-kafka-0-10_2.13"

#: The format of benchmarks/spark_floor.py's source (registered for the stream scenario).
FLOOR_FORMAT = "aiostream_kafka_floor"


def register_floor(spark: Any) -> None:
    """Register the Python-floor source (benchmarks/spark_floor.py) in ``spark``."""
    try:
        from benchmarks.spark_floor import FORMAT
        from benchmarks.spark_floor import register_floor as register
    except ImportError:  # run as a script: benchmarks/ is on sys.path
        from spark_floor import FORMAT  # type: ignore[import-not-found,no-redef]
        from spark_floor import register_floor as register  # type: ignore[no-redef]
    assert FORMAT == FLOOR_FORMAT
    register(spark)


@dataclass(frozen=True)
class ConnectorSet:
    """One combination of the JVM connector and the runtime jars it needs that pyspark
    does not ship: the token provider, kafka-clients (the version the connector's POM
    names) and commons-pool2. Compression codecs and slf4j come with pyspark."""

    connector: str
    token_provider: str
    kafka_clients: str
    commons_pool2: str

    def coordinates(self) -> list[tuple[str, str, str]]:
        return [
            (CONNECTOR_GROUP, CONNECTOR_ARTIFACT, self.connector),
            (CONNECTOR_GROUP, TOKEN_ARTIFACT, self.token_provider),
            ("org.apache.kafka", "kafka-clients", self.kafka_clients),
            ("org.apache.commons", "commons-pool2", self.commons_pool2),
        ]

    @property
    def name(self) -> str:
        return f"connector {self.connector} + token provider {self.token_provider}"


#: Tried in order, each connector with the token provider of its own release line (the
#: newest there: Maven Central has token providers 4.0.0, 4.1.1 and 4.2.0, no 4.1.2/4.1.3).
#: Maven Central has no 4.3.x connector yet (checked 2026-11-25), so the 4.2.0 pair runs on
#: pyspark 4.3.0; the benchmark prints that note.
CONNECTOR_SETS = [
    ConnectorSet("4.3.0", "4.3.0", "3.9.2", "2.13.1"),
    ConnectorSet("4.2.0", "4.2.0", "3.9.2", "2.13.1"),
    ConnectorSet("4.1.3", "4.1.1", "3.9.1", "2.12.1"),
]

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.github.aiostream-kafka</groupId>
  <artifactId>spark-kafka-connector-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

# Each jar is taken alone (exclusions of everything transitive): spark-core, spark-sql and
# the codecs are pyspark's own.
_DEPENDENCY = """    <dependency>
      <groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>"""


# Spark's parent POM lists a Google mirror of Maven Central as a repository; where that host
# is unreachable resolution fails, so every repository is mirrored to Maven Central itself.
_SETTINGS = """<settings><mirrors><mirror>
  <id>central-only</id><mirrorOf>*</mirrorOf><url>https://repo.maven.apache.org/maven2</url>
</mirror></mirrors></settings>
"""


def _resolve(combo: ConnectorSet, lib: Path) -> bool:
    """Copy the jars of ``combo`` into ``lib`` with Maven; False when Maven Central lacks
    one of them."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("the JVM connector is fetched with Maven: install `mvn` first")
    print(f"resolving {combo.name} with Maven...", flush=True)
    deps = "\n".join(
        _DEPENDENCY.format(group=g, artifact=a, version=v) for g, a, v in combo.coordinates()
    )
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(_POM.format(dependencies=deps))
        Path(work, "settings.xml").write_text(_SETTINGS)
        cmd = [mvn, "-B", "-q", "-s", str(Path(work, "settings.xml"))]
        cmd += ["dependency:copy-dependencies"]
        cmd += [f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if "Could not find artifact" in output or "was not found in" in output:
            shutil.rmtree(lib, ignore_errors=True)
            return False
        raise SystemExit(f"Maven failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    (lib / ".complete").write_text("ok\n")
    return True


def connector_jars(combos: list[ConnectorSet]) -> tuple[ConnectorSet, list[str]]:
    """The first of ``combos`` Maven Central has, resolved once into the aiostream_kafka
    cache. Returns (the combination, jar paths)."""
    from aiostream_kafka.testing.jars import cache_root

    for combo in combos:
        lib = cache_root() / (
            f"spark-sql-kafka-{combo.connector}-tp{combo.token_provider}"
            f"-kc{combo.kafka_clients}-cp{combo.commons_pool2}"
        )
        if (lib / ".complete").exists() or _resolve(combo, lib):
            return combo, sorted(str(j) for j in lib.glob("*.jar"))
        print(f"{combo.name}: not (all) on Maven Central", flush=True)
    raise LookupError(f"none of {[c.name for c in combos]} found on Maven Central")


async def _produce_ours(bootstrap: str, topic: str, records: int, value_size: int) -> None:
    payload = b"x" * value_size
    async with Producer(bootstrap_servers=bootstrap, linger_ms=10, batch_size=262_144) as p:
        for i in range(records):
            await p.enqueue(topic, value=payload, key=b"%d" % (i % 10_000))
        await p.flush()


def produce(bootstrap: str, topic: str, records: int, value_size: int) -> float:
    """Fill ``topic``; confluent-kafka when installed (fastest), else our producer."""
    started = time.monotonic()
    try:
        import confluent_kafka
    except ImportError:
        asyncio.run(_produce_ours(bootstrap, topic, records, value_size))
        return time.monotonic() - started
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000}
    )
    payload = b"x" * value_size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, key=b"%d" % (i % 10_000))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return time.monotonic() - started


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """The given cluster, or an embedded one for the run."""
    if bootstrap:
        yield bootstrap
        return
    from aiostream_kafka.testing import KafkaCluster

    cluster = KafkaCluster(brokers=1)
    cluster.start_blocking()
    try:
        yield cluster.bootstrap_servers
    finally:
        cluster.close_blocking()


def spark_session(cores: int, jars: list[str]) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiostream_kafka.spark import register

    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("aiostream-kafka-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def warm_up(spark: Any, out: Path) -> None:
    """A Spark job that touches no connector (range -> Parquet): the JVM's own warm-up
    (code generation, Parquet classes), so the cold runs show each connector's own cost."""
    spark.range(200_000, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS s").write.mode(
        "overwrite"
    ).parquet(str(out))


@dataclass
class Run:
    """One timed run of a scenario with one connector."""

    seconds: float
    rows: int
    #: streaming only: seconds spent inside micro-batches (the sum of their
    #: ``triggerExecution`` durations) and their number.
    batch_seconds: float | None = None
    batches: int | None = None
    #: streaming only: seconds per phase of the micro-batches (their ``durationMs`` keys
    #: other than ``triggerExecution``, summed over the micro-batches).
    phases: dict[str, float] | None = None
    #: streaming only: the micro-batches after the first (the steady state): their rows
    #: and seconds (the sum of their ``triggerExecution`` durations).
    steady_rows: int | None = None
    steady_seconds: float | None = None

    @property
    def steady_rate(self) -> float | None:
        """Rows per second of the micro-batches after the first (None: fewer than two)."""
        if not self.steady_rows or not self.steady_seconds:
            return None
        return self.steady_rows / self.steady_seconds


class Scenario:
    """A measurement repeated per connector: ``run(fmt)`` in a fresh output place."""

    name = ""
    describe = ""
    #: connectors measured in this scenario only (name -> format)
    extra_connectors: dict[str, str] = {}

    def __init__(
        self, spark: Any, bootstrap: str, args: argparse.Namespace, tmp: Path, topic: str
    ) -> None:
        self.spark = spark
        self.bootstrap = bootstrap
        self.args = args
        self.tmp = tmp
        self.topic = topic  # the topic the reads read (filled before the rounds)

    def run(self, fmt: str) -> Run:
        raise NotImplementedError

    def read_options(self, fmt: str) -> dict[str, str]:
        """A read's source options: the rows' shape for the python floor, the topic from
        its start for the Kafka connectors."""
        if fmt == FLOOR_FORMAT:
            args = self.args
            return {
                "records": str(args.records),
                "partitions": str(args.partitions),
                "valueSize": str(args.value_size),
            }
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": self.topic,
            "startingOffsets": "earliest",
        }

    def warm_up(self) -> None:
        """Run the scenario's Spark work that is not a connector's (so that the first
        connector's cold run does not pay it for both)."""
        out = self.tmp / "warm-kafka-rows"
        shutil.rmtree(out, ignore_errors=True)
        # a Parquet write of the Kafka source's columns, as the reads end
        self.spark.range(10_000, numPartitions=2).selectExpr(
            "CAST(CAST(id AS STRING) AS BINARY) AS key",
            "CAST(repeat('x', 10) AS BINARY) AS value",
            "'t' AS topic",
            "CAST(id % 4 AS INT) AS partition",
            "id AS offset",
            "CAST(id AS TIMESTAMP) AS timestamp",
            "0 AS timestampType",
        ).write.parquet(str(out))

    def close(self) -> None:
        """Drop what the scenario created."""


class ReadScenario(Scenario):
    """``spark.read...load().write.parquet()``: the whole topic into Parquet."""

    name = "read"
    describe = "batch read of the topic into Parquet"
    #: PySpark's own cost of a Python batch source (benchmarks/spark_floor.py)
    extra_connectors = {"python floor": FLOOR_FORMAT}

    def run(self, fmt: str) -> Run:
        out = self.tmp / "read-out"
        shutil.rmtree(out, ignore_errors=True)
        started = time.monotonic()
        options = self.read_options(fmt)
        if fmt != FLOOR_FORMAT:
            options["endingOffsets"] = "latest"
        self.spark.read.format(fmt).options(**options).load().write.parquet(str(out))
        elapsed = time.monotonic() - started
        return Run(elapsed, self.spark.read.parquet(str(out)).count())


class StreamScenario(Scenario):
    """``readStream`` with ``Trigger.AvailableNow`` and ``maxOffsetsPerTrigger`` into a
    Parquet sink: the whole topic in micro-batches, from start() to the query's end."""

    name = "stream"
    describe = "streaming read (AvailableNow) into Parquet"
    #: PySpark's own cost of a Python streaming source (benchmarks/spark_floor.py)
    extra_connectors = {"python floor": FLOOR_FORMAT}

    def run(self, fmt: str) -> Run:
        out, ckpt = self.tmp / "stream-out", self.tmp / "stream-ckpt"
        for d in (out, ckpt):
            shutil.rmtree(d, ignore_errors=True)
        started = time.monotonic()
        options = self.read_options(fmt)
        per_trigger = "perTrigger" if fmt == FLOOR_FORMAT else "maxOffsetsPerTrigger"
        options[per_trigger] = str(self.args.max_offsets_per_trigger)
        query = (
            self.spark.readStream.format(fmt)
            .options(**options)
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.monotonic() - started
        if query.exception() is not None:
            raise RuntimeError(f"{fmt} stream failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        inside = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
        phases: dict[str, float] = {}
        for p in progress:
            for key, ms in p["durationMs"].items():
                if key != "triggerExecution":
                    phases[key] = phases.get(key, 0.0) + ms / 1000
        rows = self.spark.read.parquet(str(out)).count()
        steady = progress[1:]
        return Run(
            elapsed,
            rows,
            inside,
            len(progress),
            phases,
            steady_rows=sum(p["numInputRows"] for p in steady),
            steady_seconds=sum(p["durationMs"].get("triggerExecution", 0) for p in steady) / 1000,
        )


class WriteScenario(Scenario):
    """``df.write.format(...).mode("append").save()`` of a Parquet table of keys and
    values (written once, before the rounds) into a fresh topic per run."""

    name = "write"
    describe = "batch write of a Parquet table to a topic"
    #: PySpark's own cost of a Python Arrow writer (benchmarks/spark_floor.py)
    extra_connectors = {"python floor": FLOOR_FORMAT}

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.source = self.tmp / "write-source"
        args = self.args
        columns = [f"CAST(repeat('x', {args.value_size}) AS BINARY) AS value"]
        if not args.keyless_writes:
            columns.insert(0, "CAST(CAST(id % 10000 AS STRING) AS BINARY) AS key")
        (
            self.spark.range(args.records, numPartitions=args.cores)
            .selectExpr(*columns)
            .write.parquet(str(self.source))
        )
        self.topics: list[str] = []

    def warm_up(self) -> None:
        """Scan the source table once (into the ``noop`` sink)."""
        self.spark.read.parquet(str(self.source)).write.format("noop").mode("overwrite").save()

    def run(self, fmt: str) -> Run:
        if fmt == FLOOR_FORMAT:
            count_file = self.tmp / "floor-count"
            count_file.unlink(missing_ok=True)
            df = self.spark.read.parquet(str(self.source))
            started = time.monotonic()
            df.write.format(fmt).option("countFile", str(count_file)).mode("append").save()
            return Run(time.monotonic() - started, int(count_file.read_text()))
        topic = f"spark-bench-write-{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topic(self.bootstrap, topic, self.args.partitions))
        self.topics.append(topic)
        df = self.spark.read.parquet(str(self.source))
        options = dict(option.split("=", 1) for option in self.args.write_option)
        started = time.monotonic()
        (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", topic)
            .options(**options)
            .mode("append")
            .save()
        )
        elapsed = time.monotonic() - started
        rows = asyncio.run(count_records(self.bootstrap, topic))
        asyncio.run(delete_topics(self.bootstrap, [topic]))
        self.topics.remove(topic)
        return Run(elapsed, rows)

    def close(self) -> None:
        if self.topics:
            asyncio.run(delete_topics(self.bootstrap, self.topics))


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


async def delete_topics(bootstrap: str, topics: list[str]) -> None:
    async with Admin(bootstrap) as admin:
        await admin.delete_topics(topics)


async def count_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (the sum of its partitions' end offsets: a fresh topic)."""
    from aiostream_kafka.admin import OffsetSpec
    from aiostream_kafka.structs import TopicPartition

    async with Admin(bootstrap) as admin:
        meta = await admin.list_topics()
        tps = [TopicPartition(topic, p.partition) for p in meta[topic].partitions]
        found = await admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})
        return sum(found[tp].offset for tp in tps)


SCENARIOS = {"read": ReadScenario, "write": WriteScenario, "stream": StreamScenario}

# -- memory (opt-in: --scenarios memory) ------------------------------------------------------

#: The scenario run apart from the others: a fresh SparkSession (JVM) per measurement.
MEMORY = "memory"


def _status_kb(pid: int, field: str) -> int | None:
    """``field`` (VmHWM, VmRSS) of ``/proc/<pid>/status`` in kB; None when gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _children() -> dict[int, list[int]]:
    """Every process's children (from ``/proc/*/stat``)."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spark_processes(root: int) -> tuple[list[int], list[int]]:
    """The JVM(s) under the gateway process ``root`` (itself included) and the Python
    workers Spark forked (children of its ``pyspark.daemon``, or plain workers)."""
    tree = _children()
    jvms: list[int] = []
    workers: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        cmd = _cmdline(pid)
        if "java" in cmd.split(" ", 1)[0]:
            jvms.append(pid)
        elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            if "pyspark.daemon" in cmd and any(
                "pyspark.daemon" in _cmdline(c) for c in tree.get(pid, [])
            ):
                continue  # the daemon itself forks the workers and reads nothing
            workers.append(pid)
    return jvms, workers


def _reset_peaks(pids: list[int]) -> None:
    """Start each process's VmHWM again from its current RSS (Linux ``clear_refs``)."""
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")


def memory_child(params: dict[str, Any]) -> dict[str, Any]:
    """One measurement in a fresh SparkSession: a warm-up read of 10,000 records with the
    connector (the Python workers and the connector's classes start), the peaks reset, the
    read of ``[0, records)`` of partition 0 into the ``noop`` sink, then each process's
    peak RSS (VmHWM) and RSS before the read."""
    spark = spark_session(params["cores"], params["jars"])
    try:
        gateway = spark.sparkContext._gateway.proc.pid

        def read(end: int) -> float:
            started = time.monotonic()
            options = {
                "kafka.bootstrap.servers": params["bootstrap"],
                "assign": json.dumps({params["topic"]: [0]}),
                "startingOffsets": "earliest",
                "endingOffsets": json.dumps({params["topic"]: {"0": end}}),
                **params["options"],
            }
            spark.read.format(params["format"]).options(**options).load().write.format("noop").mode(
                "overwrite"
            ).save()
            return time.monotonic() - started

        read(10_000)
        jvms, workers = spark_processes(gateway)
        before = {pid: _status_kb(pid, "VmRSS") for pid in jvms + workers}
        _reset_peaks(jvms + workers)
        seconds = read(params["records"])
        jvms, workers = spark_processes(gateway)  # a worker may have been forked meanwhile

        def peak(pids: list[int]) -> dict[str, int] | None:
            found = [(_status_kb(p, "VmHWM"), before.get(p), p) for p in pids]
            found = [f for f in found if f[0] is not None]
            if not found:
                return None
            hwm, rss, pid = max(found, key=lambda f: f[0] or 0)
            return {"pid": pid, "peak_kb": hwm or 0, "rss_before_kb": rss or 0}

        return {
            "seconds": seconds,
            "jvm": peak(jvms),
            # the JVM connector reads in the JVM (a Python process Spark may start for
            # its data source lookup reads nothing)
            "python_worker": peak(workers) if params["format"] != "kafka" else None,
            "python_workers": len(workers),
        }
    finally:
        spark.stop()


async def _produce_small(bootstrap: str, topic: str, records: int, value_size: int) -> None:
    """``records`` keyless records into partition 0, with our batch call."""
    value = b"v" * value_size
    step = 200_000
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=1 << 20) as p:
        for done in range(0, records, step):
            await p.send_batch(topic, [value] * min(step, records - done), partition=0)


def measure_memory(
    bootstrap: str, args: argparse.Namespace, jars: list[str], connectors: dict[str, str]
) -> dict[str, Any]:
    """The memory scenario: one partition of ``max(--memory-records)`` small records,
    read up to each size by each connector, each read in a SparkSession (a JVM) of its
    own; prints and returns the peaks."""
    sizes = sorted(int(n) for n in args.memory_records.split(","))
    topic = f"spark-bench-mem-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topic(bootstrap, topic, 1))
    started = time.monotonic()
    asyncio.run(_produce_small(bootstrap, topic, sizes[-1], args.memory_value_size))
    print(
        f"memory: produced {sizes[-1]:,} records of {args.memory_value_size} B to one "
        f"partition in {time.monotonic() - started:.1f}s",
        flush=True,
    )
    options = dict(option.split("=", 1) for option in args.read_option)
    # the child (and Spark's Python workers) import this checkout's aiostream_kafka
    path = [str(Path(__file__).resolve().parents[1]), *filter(None, [os.getenv("PYTHONPATH")])]
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, fmt in connectors.items():
            for size in sizes:
                params = {
                    "cores": args.cores,
                    "jars": jars,
                    "bootstrap": bootstrap,
                    "topic": topic,
                    "format": fmt,
                    "records": size,
                    "options": options if fmt == "aiostream_kafka" else {},
                }
                out = subprocess.run(
                    [sys.executable, __file__, "--memory-child", json.dumps(params)],
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                    capture_output=True,
                    text=True,
                    timeout=1800,
                    check=False,
                )
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                if out.returncode != 0 or not lines:
                    raise RuntimeError(f"memory run of {name} failed:\n{out.stderr[-3000:]}")
                run = json.loads(lines[-1])
                results.setdefault(name, {})[str(size)] = run
                print(_memory_line(name, size, run), flush=True)
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(delete_topics(bootstrap, [topic]))
    return {"records": sizes, "value_size": args.memory_value_size, "runs": results}


def _mb(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:,.0f}"


def _memory_line(name: str, size: int, run: dict[str, Any]) -> str:
    rate = size / run["seconds"]
    text = f"memory {name:<16} {size:>11,} records {run['seconds']:6.2f}s {rate:>10,.0f} rows/s"
    for label in ("python_worker", "jvm"):
        p = run[label]
        if p is not None:
            text += (
                f"  {label.replace('_', ' ')} peak {_mb(p['peak_kb'])} MB"
                f" (before {_mb(p['rss_before_kb'])})"
            )
    return text


def print_memory(memory: dict[str, Any]) -> None:
    """The peaks per connector and size, and their growth from the smallest size."""
    sizes = memory["records"]
    print(
        f"\nmemory: one partition of {sizes[-1]:,} records of {memory['value_size']} B read "
        "to each size into the noop sink, a SparkSession each; peak RSS (VmHWM, reset "
        "before the read) in MB"
    )
    print(f"{'connector':<16} {'records':>11} {'python worker':>14} {'JVM':>8}")
    for name, runs in memory["runs"].items():
        for size in sizes:
            run = runs[str(size)]
            worker = run["python_worker"]["peak_kb"] if run["python_worker"] else None
            jvm = run["jvm"]["peak_kb"] if run["jvm"] else None
            print(f"{name:<16} {size:>11,} {_mb(worker):>14} {_mb(jvm):>8}")
        first, last = runs[str(sizes[0])], runs[str(sizes[-1])]
        growth = []
        for label in ("python_worker", "jvm"):
            if first[label] and last[label]:
                delta = last[label]["peak_kb"] - first[label]["peak_kb"]
                growth.append(f"{label.replace('_', ' ')} {delta / 1024:+,.0f} MB")
        print(f"{name:<16} growth {sizes[0]:,} -> {sizes[-1]:,}: {', '.join(growth)}")


def _line(scenario: str, label: str, name: str, run: Run) -> str:
    rate = run.rows / run.seconds
    text = f"{scenario:<6} {label:<8} {name:<16} {run.seconds:6.2f}s {rate:>10,.0f} rows/s"
    if run.batch_seconds is not None:
        outside = run.seconds - run.batch_seconds
        text += f"  ({run.batches} micro-batches {run.batch_seconds:.2f}s, outside {outside:.2f}s)"
    if run.steady_rate is not None:
        text += f"\n{'':8}steady state (after micro-batch 1): {run.steady_rate:,.0f} rows/s"
    if run.phases:
        text += (
            "\n"
            + " " * 8
            + "phases: "
            + ", ".join(f"{key} {seconds:.2f}s" for key, seconds in sorted(run.phases.items()))
        )
    return text


def _steady_rates(runs: dict[str, list[Run]]) -> dict[str, float]:
    """Per connector, the median over its rounds of the steady-state rows/s (streams)."""
    rates: dict[str, float] = {}
    for name, rs in runs.items():
        found = [r.steady_rate for r in rs if r.steady_rate is not None]
        if found:
            rates[name] = statistics.median(found)
    return rates


def measure(
    scenario: Scenario, connectors: dict[str, str], rounds: int, records: int
) -> tuple[dict[str, Run], dict[str, list[Run]]]:
    """The cold (first) run of each connector, then ``rounds`` interleaved rounds (the
    order reversed every other round). Returns (cold runs, runs per connector)."""

    def one(label: str, name: str, fmt: str) -> Run:
        run = scenario.run(fmt)
        if run.rows != records:
            raise RuntimeError(f"{scenario.name}: {name} moved {run.rows} rows, not {records}")
        print(_line(scenario.name, label, name, run), flush=True)
        return run

    scenario.warm_up()
    connectors = connectors | scenario.extra_connectors
    # The floor's cold run goes first: it pays what any Python data source pays first
    # (Spark starting its Python workers), so ours' cold run shows our own first cost.
    first = sorted(connectors.items(), key=lambda item: item[0] not in scenario.extra_connectors)
    cold = {name: one("cold", name, fmt) for name, fmt in first}
    runs: dict[str, list[Run]] = {name: [] for name in connectors}
    for round_ in range(rounds):
        order = list(connectors.items())
        if round_ % 2:
            order.reverse()
        for name, fmt in order:
            runs[name].append(one(f"round {round_ + 1}", name, fmt))
    return cold, runs


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument(
        "--keyless-writes",
        action="store_true",
        help="the write scenario's table has no key column (records go to sticky partitions)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument(
        "--scenarios",
        default="read",
        help="comma-separated, run in this order: " + ", ".join(SCENARIOS) + " (default: read)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=100_000,
        help="maxOffsetsPerTrigger of the stream scenario",
    )
    parser.add_argument(
        "--connector-version",
        default=None,
        help="JVM connector version (default: the first of "
        + ", ".join(c.connector for c in CONNECTOR_SETS)
        + " Maven Central has)",
    )
    parser.add_argument(
        "--write-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option given to every connector's write (repeatable), e.g. "
        "kafka.batch.size=262144 to compare the connectors at one batch size",
    )
    parser.add_argument("--output", default=None, help="also write the results as JSON here")
    parser.add_argument(
        "--memory-records",
        default="1000000,10000000",
        help="the memory scenario's read sizes (comma-separated; one partition of the largest)",
    )
    parser.add_argument(
        "--memory-value-size", type=int, default=10, help="the memory scenario's value size"
    )
    parser.add_argument(
        "--read-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option given to our source in the memory scenario (repeatable), e.g. "
        "maxRecordsPerArrowBatch=10000",
    )
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:  # one measurement of the memory scenario
        print(json.dumps(memory_child(json.loads(args.memory_child))), flush=True)
        return 0
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in names if s not in SCENARIOS and s != MEMORY]
    if unknown or not names:
        parser.error(f"unknown scenarios {unknown}: choose among {', '.join([*SCENARIOS, MEMORY])}")
    memory_wanted = MEMORY in names
    names = [s for s in names if s != MEMORY]
    memory: dict[str, Any] | None = None

    with broker(args.bootstrap_servers) as bootstrap:
        topic = f"spark-bench-{uuid.uuid4().hex[:8]}"
        needs_topic = any(s in ("read", "stream") for s in names)
        if needs_topic:
            asyncio.run(create_topic(bootstrap, topic, args.partitions))
            produce_s = produce(bootstrap, topic, args.records, args.value_size)
            print(f"produced {args.records:,} records to {topic} in {produce_s:.1f}s", flush=True)
        import pyspark

        combos = [c for c in CONNECTOR_SETS if args.connector_version in (None, c.connector)]
        connectors = {"aiostream_kafka": "aiostream_kafka", "jvm kafka": "kafka"}
        connector_version = "unavailable"
        jar_names: list[str] = []
        try:
            combo, jars = connector_jars(combos)
            connector_version = combo.connector
            jar_names = [Path(j).name for j in jars]
            print(f"JVM connector jars ({combo.name}): {', '.join(jar_names)}", flush=True)
            if combo.connector != pyspark.__version__:
                print(
                    f"note: the JVM connector is {combo.connector}, pyspark is "
                    f"{pyspark.__version__} (Maven Central has no matching connector)",
                    flush=True,
                )
        except LookupError as exc:
            print(f"JVM connector unavailable ({exc}): measuring ours only", flush=True)
            jars = []
            del connectors["jvm kafka"]
        results: dict[str, tuple[dict[str, Run], dict[str, list[Run]]]] = {}
        if names:
            session_started = time.monotonic()
            spark = spark_session(args.cores, jars)
            register_floor(spark)
            print(f"SparkSession started in {time.monotonic() - session_started:.1f}s", flush=True)
            try:
                with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp_dir:
                    tmp = Path(tmp_dir)
                    warm_up(spark, tmp / "warm-up")
                    for name in names:
                        scenario = SCENARIOS[name](spark, bootstrap, args, tmp, topic)
                        try:
                            results[name] = measure(scenario, connectors, args.rounds, args.records)
                        finally:
                            scenario.close()
            finally:
                spark.stop()
                if needs_topic:
                    with contextlib.suppress(Exception):
                        asyncio.run(delete_topics(bootstrap, [topic]))
        if memory_wanted:  # after the shared session is gone: a JVM per measurement
            memory = measure_memory(bootstrap, args, jars, connectors)

    if memory is not None:
        print_memory(memory)
    if results:
        print()
        print(
            f"{args.records:,} records of {args.value_size} B, {args.partitions} partitions, "
            f"local[{args.cores}], median of {args.rounds} rounds"
        )
        print(f"{'scenario':<8} {'connector':<16} {'median s':>9} {'rows/s':>12} {'cold s':>8}")
    summary: dict[str, Any] = {}
    for name, (cold, runs) in results.items():
        rates = {
            c: args.records / statistics.median(r.seconds for r in rs) for c, rs in runs.items()
        }
        for c, rs in runs.items():
            extra = ""
            if rs[0].batch_seconds is not None:
                inside = statistics.median(r.batch_seconds or 0.0 for r in rs)
                outside = statistics.median(r.seconds - (r.batch_seconds or 0.0) for r in rs)
                extra = f"  micro-batches {inside:.2f}s, outside them {outside:.2f}s"
            print(
                f"{name:<8} {c:<16} {statistics.median(r.seconds for r in rs):9.2f} "
                f"{rates[c]:>12,.0f} {cold[c].seconds:8.2f}{extra}"
            )
        ratio = rates["aiostream_kafka"] / rates["jvm kafka"] if "jvm kafka" in rates else None
        if ratio is not None:
            cold_ratio = cold["jvm kafka"].seconds / cold["aiostream_kafka"].seconds
            given = f", write options {' '.join(args.write_option)}" if name == "write" else ""
            print(
                f"{name:<8} ratio ours / JVM connector ({connector_version}, pyspark "
                f"{pyspark.__version__}{given if args.write_option else ''}): "
                f"{ratio:.2f} (cold: {cold_ratio:.2f})"
            )
        floor = rates.get("python floor")
        floor_ratios: dict[str, float] = {}
        if floor is not None:
            floor_ratios["ours_to_floor"] = rates["aiostream_kafka"] / floor
            text = f"ours / python floor: {floor_ratios['ours_to_floor']:.2f}"
            if "jvm kafka" in rates:
                floor_ratios["floor_to_jvm"] = floor / rates["jvm kafka"]
                text += f"; python floor / JVM connector: {floor_ratios['floor_to_jvm']:.2f}"
            print(f"{name:<8} {text}")
        steady = _steady_rates(runs)
        steady_ratios: dict[str, float] = {}
        if steady:
            print(
                f"{name:<8} steady state (micro-batches after the first, median rows/s): "
                + ", ".join(f"{c} {r:,.0f}" for c, r in steady.items())
            )
            pairs = [
                ("ours_to_jvm", "aiostream_kafka", "jvm kafka"),
                ("floor_to_jvm", "python floor", "jvm kafka"),
                ("ours_to_floor", "aiostream_kafka", "python floor"),
            ]
            for key, a, b in pairs:
                if a in steady and b in steady:
                    steady_ratios[key] = steady[a] / steady[b]
            print(
                f"{name:<8} steady state: "
                + "; ".join(f"{k.replace('_to_', ' / ')} {v:.2f}" for k, v in steady_ratios.items())
                + (f" (end to end: ours / jvm {ratio:.2f})" if ratio is not None else "")
            )
        summary[name] = {
            "seconds": {c: [r.seconds for r in rs] for c, rs in runs.items()},
            "micro_batch_seconds": {c: [r.batch_seconds for r in rs] for c, rs in runs.items()},
            "micro_batch_phases": {c: [r.phases for r in rs] for c, rs in runs.items()},
            "cold_seconds": {c: r.seconds for c, r in cold.items()},
            "rows_per_s": rates,
            "ratio_ours_to_jvm": ratio,
            **{f"ratio_{k}": v for k, v in floor_ratios.items()},
        }
        if steady:
            summary[name]["steady_rows_per_s"] = {
                c: [r.steady_rate for r in rs] for c, rs in runs.items()
            }
            summary[name]["steady_median_rows_per_s"] = steady
            summary[name].update({f"steady_ratio_{k}": v for k, v in steady_ratios.items()})
    result = {
        "benchmark": "spark",
        "scenarios": names,
        "records": args.records,
        "partitions": args.partitions,
        "value_size": args.value_size,
        "cores": args.cores,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "write_options": args.write_option,
        "keyless_writes": args.keyless_writes,
        "pyspark": pyspark.__version__,
        "jvm_connector": f"{CONNECTOR_GROUP}:{CONNECTOR_ARTIFACT}:{connector_version}",
        "jvm_jars": jar_names,
        "rounds": args.rounds,
        "results": summary,
        "memory": memory,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
