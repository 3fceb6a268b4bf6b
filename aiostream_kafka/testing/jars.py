"""Resolve the Apache Kafka broker jars from Maven Central into a per-user cache.

The broker runs from the same jars the Apache Kafka distribution ships, fetched by Maven
(``mvn dependency:copy-dependencies``) from a throwaway POM. The result is cached in
``<cache>/kafka-<version>/lib`` and resolved once: later calls return at once. A file lock
makes concurrent first calls (several test processes) wait for one download instead of
racing.

Other versions than :data:`KAFKA_VERSION` (for tests against older brokers): Kafka 4 logs
through Log4j 2, as the default version; Kafka 2.x and 3.x log through Log4j 1, so their
POM brings the ``slf4j-reload4j`` binding instead (see :func:`uses_log4j1`) and no
``kafka-tools``. Their jars bundle ZooKeeper, which the harness runs for them when needed.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from aiostream_kafka.errors import BrokerUnavailableError

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.3.1"
SCALA_BINARY_VERSION = "2.13"
LOG4J_VERSION = "2.25.4"
SLF4J_RELOAD4J_VERSION = "1.7.36"  # the Log4j 1 binding for Kafka 2.x/3.x brokers
MIN_JAVA_MAJOR = 17

_ALTERNATIVE = (
    "Alternatively, point KAFKA_BOOTSTRAP_SERVERS at an existing Kafka cluster "
    "(e.g. KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092) and no local broker is started."
)

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.github.aiostream-kafka</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

# Kafka 2.x/3.x: the broker (ZooKeeper included) and a Log4j 1 binding.
_POM_LOG4J1 = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.github.aiostream-kafka</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>{reload4j}</version>
    </dependency>
  </dependencies>
</project>
"""


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.8.2"`` -> ``(2, 8, 2)``; a suffix such as ``-rc1`` is ignored.

    Raises:
        ValueError: ``version`` does not start with a number.
    """
    parts: list[int] = []
    for piece in version.split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.end() != len(piece):
            break
    if not parts:
        raise ValueError(f"not a Kafka version: {version!r}")
    return tuple(parts)


def uses_log4j1(version: str) -> bool:
    """Whether Kafka ``version`` logs through Log4j 1 (every version before 4.0)."""
    return version_tuple(version) < (4,)


def cache_root() -> Path:
    """Return the per-user cache directory (``$AIOSTREAM_KAFKA_CACHE`` overrides it)."""
    explicit = os.environ.get("AIOSTREAM_KAFKA_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "aiostream_kafka"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """Return the cache directory for one Kafka version (its jars are in ``lib/``)."""
    return cache_root() / f"kafka-{version}"


def java_executable() -> str:
    """Return the path of a ``java`` of version 17 or newer.

    Raises:
        BrokerUnavailableError: no ``java`` on PATH (or in ``$JAVA_HOME``), or it is too old.
    """
    java_home = os.environ.get("JAVA_HOME")
    candidate = None
    if java_home and (Path(java_home) / "bin" / "java").exists():
        candidate = str(Path(java_home) / "bin" / "java")
    else:
        candidate = shutil.which("java")
    if candidate is None:
        raise BrokerUnavailableError(
            "Cannot start a local Kafka broker: no `java` found on PATH. Kafka "
            f"{KAFKA_VERSION} needs Java {MIN_JAVA_MAJOR} or newer; install it with e.g. "
            "`apt-get install openjdk-17-jre-headless` (Debian/Ubuntu) or "
            "`brew install openjdk@17` (macOS), or set JAVA_HOME. " + _ALTERNATIVE
        )
    major = java_major_version(candidate)
    if major < MIN_JAVA_MAJOR:
        raise BrokerUnavailableError(
            f"Cannot start a local Kafka broker: {candidate} is Java {major}, but Kafka "
            f"{KAFKA_VERSION} needs Java {MIN_JAVA_MAJOR} or newer. Install a newer JDK "
            "(e.g. `apt-get install openjdk-17-jre-headless`) and put it first on PATH or set "
            "JAVA_HOME. " + _ALTERNATIVE
        )
    return candidate


def java_major_version(java: str) -> int:
    """Return the major version of the given ``java`` executable (8 for ``1.8.0_x``)."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerUnavailableError(
            f"Cannot run `{java} -version`: {exc}. " + _ALTERNATIVE
        ) from exc
    text = out.stderr + out.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        raise BrokerUnavailableError(
            f"Cannot tell the Java version from `{java} -version` output: {text.strip()!r}"
        )
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" style
        major = int(match.group(2))
    return major


def _mvn_executable() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerUnavailableError(
            "Cannot fetch the Kafka broker jars: no `mvn` (Apache Maven) found on PATH. "
            "Install it with e.g. `apt-get install maven` (Debian/Ubuntu) or `brew install "
            f"maven` (macOS); it downloads Kafka {KAFKA_VERSION} from Maven Central once into "
            f"{kafka_home()}. " + _ALTERNATIVE
        )
    return mvn


def ensure_kafka_jars(version: str = KAFKA_VERSION, *, timeout: float = 900.0) -> Path:
    """Make sure the broker jars of ``version`` are in the cache; return the ``lib`` dir.

    The first call downloads them with Maven (minutes on a cold Maven repository); later
    calls only check a marker file.

    Raises:
        BrokerUnavailableError: Java or Maven is missing, or Maven failed (its output is
            included in the message).
    """
    home = kafka_home(version)
    lib = home / "lib"
    marker = home / ".complete"
    if marker.exists():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():  # another process finished while we waited
            return lib
        mvn = _mvn_executable()
        java_executable()  # Maven needs a JDK too: fail with the clearer message first
        started = time.monotonic()
        log.info("resolving Apache Kafka %s jars from Maven Central into %s", version, lib)
        with tempfile.TemporaryDirectory(prefix="resolve-", dir=home) as work:
            if uses_log4j1(version):
                pom = _POM_LOG4J1.format(
                    scala=SCALA_BINARY_VERSION, kafka=version, reload4j=SLF4J_RELOAD4J_VERSION
                )
            else:
                pom = _POM.format(scala=SCALA_BINARY_VERSION, kafka=version, log4j=LOG4J_VERSION)
            Path(work, "pom.xml").write_text(pom)
            staging = Path(work, "lib")
            cmd = [
                mvn,
                "-B",
                "-q",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime",
            ]
            try:
                proc = subprocess.run(
                    cmd, cwd=work, capture_output=True, text=True, timeout=timeout, check=False
                )
            except subprocess.TimeoutExpired as exc:
                raise BrokerUnavailableError(
                    f"Maven did not finish resolving Kafka {version} within {timeout:.0f}s. "
                    + _ALTERNATIVE
                ) from exc
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-30:])
                raise BrokerUnavailableError(
                    f"Maven failed ({proc.returncode}) to resolve Kafka {version} jars from "
                    f"Maven Central:\n{tail}\n" + _ALTERNATIVE
                )
            if lib.exists():
                shutil.rmtree(lib)
            staging.rename(lib)
        marker.write_text(f"{time.monotonic() - started:.1f}s\n")
        log.info("resolved Kafka %s jars in %.1fs", version, time.monotonic() - started)
    return lib
