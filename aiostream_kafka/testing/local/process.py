"""The JVMs of a local cluster as processes: the java command line, one spawn, one reap.

The JVMs are plain ``subprocess.Popen`` children, so that a cluster is not tied to one
event loop, in a session of their own (killed as a process group); on Linux they also get
``PR_SET_PDEATHSIG`` so that they die with the Python process even if it is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from aiostream_kafka.testing.jars import uses_log4j1

_LOG_TAIL_LINES = 60
_REAP_WAIT_S = 30.0


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """Return the last ``lines`` lines of the file at ``path`` (empty if it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def java_command(
    java: str,
    lib: Path,
    log_config: Path,
    version: str,
    jvm_options: list[str],
    main_class: str,
    *args: str,
    heap: str | None = None,
    classpath: Sequence[str] = (),
) -> list[str]:
    """The command line running ``main_class`` of Kafka ``version``'s jars in ``lib``
    (then the ``classpath`` entries: plugins such as a metrics reporter) with ``args``,
    logging as ``log_config`` says (Log4j 1 or 2, by version)."""
    cmd = [java]
    if heap:
        cmd += [f"-Xms{heap}", f"-Xmx{heap}"]
    if uses_log4j1(version):
        logging_option = f"-Dlog4j.configuration=file:{log_config}"
    else:
        logging_option = f"-Dlog4j2.configurationFile={log_config}"
    cmd += [
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        logging_option,
        *jvm_options,
        "-cp",
        os.pathsep.join([f"{lib}/*", *classpath]),
        main_class,
        *args,
    ]
    return cmd


def spawn_jvm(cmd: list[str], log_file: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Start ``cmd`` with its output appended to ``log_file``; return the process and the
    open log file (both for :func:`reap`)."""
    handle = open(log_file, "ab")
    try:
        process = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    except BaseException:
        handle.close()
        raise
    return process, handle


def reap(process: subprocess.Popen[bytes] | None, log_handle: IO[bytes] | None) -> None:
    """SIGKILL the process group of ``process`` (if any), wait up to 30 s for it to go,
    and close ``log_handle`` (if any). Idempotent."""
    if process is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_REAP_WAIT_S)
    if log_handle is not None:
        log_handle.close()
