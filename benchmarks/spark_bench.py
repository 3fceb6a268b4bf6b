"""Spark benchmark: reading a Kafka topic into Parquet, ours beside Spark's JVM connector.

Both read the same topic on the same broker in the same SparkSession (``local[2]``): ours
is ``format("aiostream_kafka")`` (Python workers, Arrow batches), the JVM one is
``format("kafka")`` from ``org.apache.spark:spark-sql-kafka-0-10_2.13`` with its runtime
jars (token provider, kafka-clients, commons-pool2), fetched from Maven Central with
``mvn`` on the first run into the aiostream_kafka cache. Maven Central has no connector of
pyspark's version (4.3.0) yet, so the newest there (connector and token provider 4.2.0) is
used; the exact jars are printed, and a note when the connector's version is not
pyspark's. Each round
runs ``spark.read...load().write.parquet(...)`` for each connector, interleaved; the figure
is rows per second of the whole job (planning, reading, Arrow/row conversion, Parquet
writing). The machine is shared (the broker runs on it too): compare the ratio within one
run, not absolute numbers across machines.

    python benchmarks/spark_bench.py [--records N] [--partitions P] [--rounds R]
                                     [--bootstrap-servers B]

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
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def run_once(spark: Any, fmt: str, bootstrap: str, topic: str, out: Path) -> tuple[float, int]:
    """Read the whole topic with ``fmt`` into Parquet; return (seconds, rows written)."""
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .write.parquet(str(out))
    )
    elapsed = time.monotonic() - started
    rows = spark.read.parquet(str(out)).count()
    return elapsed, rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument(
        "--connector-version",
        default=None,
        help="JVM connector version (default: the first of "
        + ", ".join(c.connector for c in CONNECTOR_SETS)
        + " Maven Central has)",
    )
    parser.add_argument("--output", default=None, help="also write the results as JSON here")
    args = parser.parse_args()

    with broker(args.bootstrap_servers) as bootstrap:
        topic = f"spark-bench-{uuid.uuid4().hex[:8]}"

        async def create() -> None:
            async with Admin(bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, args.partitions, 1)])

        asyncio.run(create())
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
        spark = spark_session(args.cores, jars)
        times: dict[str, list[float]] = {name: [] for name in connectors}
        try:
            with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
                for fmt in connectors.values():  # warm-up: JVM classes, Python workers
                    run_once(spark, fmt, bootstrap, topic, Path(tmp) / "warm")
                for round_ in range(args.rounds):
                    order = list(connectors.items())
                    if round_ % 2:
                        order.reverse()
                    for name, fmt in order:
                        elapsed, rows = run_once(spark, fmt, bootstrap, topic, Path(tmp) / "out")
                        if rows != args.records:
                            raise RuntimeError(f"{name} wrote {rows} rows, not {args.records}")
                        times[name].append(elapsed)
                        print(
                            f"round {round_ + 1}: {name:<16} {elapsed:6.2f}s "
                            f"{rows / elapsed:>12,.0f} rows/s",
                            flush=True,
                        )
        finally:
            spark.stop()
            with contextlib.suppress(Exception):

                async def delete() -> None:
                    async with Admin(bootstrap) as admin:
                        await admin.delete_topics([topic])

                asyncio.run(delete())

    rates = {name: args.records / statistics.median(ts) for name, ts in times.items()}
    ratio = rates["aiostream_kafka"] / rates["jvm kafka"] if "jvm kafka" in rates else None
    print()
    print(f"{'connector':<16} {'median s':>9} {'rows/s':>12}")
    for name, ts in times.items():
        print(f"{name:<16} {statistics.median(ts):9.2f} {rates[name]:>12,.0f}")
    if ratio is not None:
        print(
            f"ratio ours / JVM connector ({connector_version}, pyspark {pyspark.__version__}): "
            f"{ratio:.2f}"
        )
    result = {
        "benchmark": "spark_read_to_parquet",
        "records": args.records,
        "partitions": args.partitions,
        "value_size": args.value_size,
        "cores": args.cores,
        "pyspark": pyspark.__version__,
        "jvm_connector": f"{CONNECTOR_GROUP}:{CONNECTOR_ARTIFACT}:{connector_version}",
        "jvm_jars": jar_names,
        "rounds": args.rounds,
        "seconds": times,
        "rows_per_s": rates,
        "ratio_ours_to_jvm": ratio,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
