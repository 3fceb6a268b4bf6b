"""The standalone ZooKeeper of a ZooKeeper-mode cluster (older brokers, Kafka 2.x/3.x).

Before 3.3 KRaft was not production-ready (and before 2.8 it did not exist), so those
versions run in ZooKeeper mode by default: one more JVM, a standalone ZooKeeper from the
ZooKeeper jar Kafka ships, with the brokers registered in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from aiostream_kafka.errors import BrokerUnavailableError
from aiostream_kafka.testing.local.config import HOST
from aiostream_kafka.testing.local.process import log_tail, reap, spawn_jvm

log = logging.getLogger("aiostream_kafka.testing.local")

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_HEAP = "256m"


class LocalZooKeeper:
    """One ZooKeeper JVM in ``directory`` on ``HOST:port``: :meth:`write_config`,
    :meth:`start`, :meth:`stop`."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def properties_file(self) -> Path:
        return self.directory / "zookeeper.properties"

    def write_config(self) -> None:
        """Create the directory and write ``zookeeper.properties`` (answers ``srvr``)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(
            f"dataDir={self.directory / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={HOST}\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr\n"
        )

    async def start(
        self,
        java_command: Callable[..., list[str]],
        deadline: float,
        timeout_s: float,
        version: str,
    ) -> None:
        """Start the JVM (its command line from ``java_command(main_class, *args,
        heap=...)``) and wait until it answers ``srvr``, by ``deadline`` (monotonic; the
        error names ``timeout_s``). Raises ``BrokerUnavailableError`` with the log's tail
        if it exits or does not answer in time."""
        cmd = java_command(ZOOKEEPER_MAIN, str(self.properties_file), heap=_HEAP)
        self._process, self._log = spawn_jvm(cmd, self.log_file)
        log.info(
            "started ZooKeeper (pid %d) on %s:%d for Kafka %s",
            self._process.pid,
            HOST,
            self.port,
            version,
        )
        await self._wait(deadline, timeout_s)

    async def _wait(self, deadline: float, timeout_s: float) -> None:
        assert self._process is not None
        while True:
            if self._process.poll() is not None:
                raise BrokerUnavailableError(
                    f"ZooKeeper exited with code {self._process.returncode} while "
                    f"starting. Last lines of its log ({self.log_file}):\n"
                    f"{log_tail(self.log_file)}"
                )
            with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
                async with asyncio.timeout(2.0):
                    reader, writer = await asyncio.open_connection(HOST, self.port)
                    try:
                        writer.write(b"srvr")
                        answer = await reader.read(4096)
                    finally:
                        writer.close()
                if b"Zookeeper version" in answer:
                    return
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"ZooKeeper on {HOST}:{self.port} did not come up within "
                    f"{timeout_s:.0f}s. Last lines of its log:\n"
                    f"{log_tail(self.log_file)}"
                )
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        """Kill the JVM (if it runs) and close its log. Synchronous and idempotent."""
        process, self._process = self._process, None
        handle, self._log = self._log, None
        reap(process, handle)
