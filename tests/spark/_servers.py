"""Spark where users run it, for the tests: a Spark Connect server (a process of its own,
:mod:`_connect_server`) and a standalone cluster (a master and two one-core workers started
from pyspark's own jars with ``spark-class``), both on 127.0.0.1 and random free ports,
each start and stop bounded by a deadline, the processes' logs in the failure message.

The tests talk to both through a Spark Connect client: the classic session of the other
Spark tests owns this process's one SparkContext, so a driver of a standalone application
is a Connect server too, its master the cluster's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import aiostream_kafka

#: The checkout (or site-packages) whose aiostream_kafka the Spark processes must import.
ROOT = Path(aiostream_kafka.__file__).resolve().parents[1]
START_DEADLINE_S = 120.0
STOP_DEADLINE_S = 20.0


def missing_spark() -> str | None:
    """Why Spark cannot run here (no pyspark/pyarrow, no Java), or None."""
    try:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed ({exc}); pip install -e '.[spark]'"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java on PATH or JAVA_HOME) for Spark"
    return None


def require_spark() -> None:
    """Skip (fail under CI, where Spark must run) without pyspark, pyarrow or Java."""
    reason = missing_spark()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark tests cannot run under CI: {reason}")
        pytest.skip(reason)


def free_port() -> int:
    """A TCP port nothing listens on now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_env(work: Path) -> dict[str, str]:
    """The environment of every Spark process: loopback only, this interpreter for the
    Python workers, this checkout's aiostream_kafka importable from anywhere."""
    import pyspark

    env = dict(os.environ)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env.pop("SPARK_REMOTE", None)
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_MASTER_HOST="127.0.0.1",
        SPARK_LOCAL_DIRS=str(work / "local"),
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_WORKER_DIR=str(work / "worker"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    )
    return env


class Processes:
    """Processes started for one fixture, each logging to a file of its own; stopped
    together (SIGTERM, then SIGKILL past the deadline)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.started: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, name: str, argv: list[str], *, stdin: int | None = None) -> Any:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=spark_env(self.work),
                cwd=str(ROOT),
                start_new_session=True,  # its children (Python workers, executors) with it
            )
        self.started.append((name, proc, log))
        return proc

    def logs(self, lines: int = 40) -> str:
        parts = []
        for name, proc, log in self.started:
            tail = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            parts.append(f"--- {name} (exit {proc.poll()}) {log}\n" + "\n".join(tail))
        return "\n".join(parts)

    def wait_for(self, what: str, ready: Any, deadline_s: float = START_DEADLINE_S) -> None:
        """Poll ``ready()`` until true; fail with the logs past the deadline or when a
        process died."""
        deadline = time.monotonic() + deadline_s
        while not ready():
            dead = [name for name, proc, _ in self.started if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"not within {deadline_s:.0f} s"
                self.stop()
                pytest.fail(f"{what}: {why}\n{self.logs()}")
            time.sleep(0.2)

    def stop(self) -> None:
        for _, proc, _ in reversed(self.started):
            if proc.poll() is None:
                if proc.stdin is not None:
                    with contextlib.suppress(OSError):
                        proc.stdin.close()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for _, proc, _ in self.started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_DEADLINE_S)


@contextlib.contextmanager
def connect_server(work: Path, master: str, conf: dict[str, str]) -> Iterator[str]:
    """A Spark Connect server on ``master``; yields its ``sc://`` URL."""
    work.mkdir(parents=True, exist_ok=True)
    procs = Processes(work)
    port = free_port()
    script = Path(__file__).with_name("_connect_server.py")
    argv = [sys.executable, str(script), master, str(port), *(f"{k}={v}" for k, v in conf.items())]
    proc = procs.start("connect-server", argv, stdin=subprocess.PIPE)
    log = work / "connect-server.log"
    procs.wait_for(
        "the Spark Connect server",
        lambda: "READY" in log.read_text(errors="replace") and _listening(port),
    )
    stdin: IO[bytes] | None = proc.stdin
    assert stdin is not None
    try:
        yield f"sc://127.0.0.1:{port}"
    finally:
        procs.stop()


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2) -> Iterator[str]:
    """A standalone master and ``workers`` one-core workers; yields the master URL once
    every worker registered."""
    import pyspark

    work.mkdir(parents=True, exist_ok=True)
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    procs = Processes(work)
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    procs.start(
        "master",
        [
            *(spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
            *("--port", str(port), "--webui-port", str(free_port())),
        ],
    )
    try:
        procs.wait_for("the standalone master", lambda: _listening(port))
        for i in range(workers):
            procs.start(
                f"worker{i}",
                [
                    *(spark_class, "org.apache.spark.deploy.worker.Worker", "--host"),
                    *("127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port())),
                    *("--cores", "1", "--memory", "1g", "--work-dir", str(work / f"work{i}")),
                    master,
                ],
            )

        def registered() -> bool:
            logs = [work / f"worker{i}.log" for i in range(workers)]
            return all(
                "Successfully registered with master" in p.read_text(errors="replace")
                for p in logs
                if p.exists()
            ) and all(p.exists() for p in logs)

        procs.wait_for(f"{workers} standalone workers", registered)
        yield master
    finally:
        procs.stop()


@contextlib.contextmanager
def connect_client(url: str) -> Iterator[Any]:
    """A Spark Connect session to ``url`` with the data source registered. PySpark marks
    the process as a Connect client while it is open (``SPARK_CONNECT_MODE_ENABLED``, which
    ``pyspark.sql.functions`` dispatch on); the mark is taken back afterwards, so the
    classic session of the other tests works as before."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from aiostream_kafka.spark import register

    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = RemoteSparkSession.builder.remote(url).create()
    try:
        register(session)
        yield session
    finally:
        with contextlib.suppress(Exception):
            session.stop()
        if before is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
        else:
            os.environ["SPARK_CONNECT_MODE_ENABLED"] = before
