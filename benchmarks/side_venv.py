"""Clients that need another interpreter than the suite's: a virtual environment of their
own ("side venv"), created once and cached, whose Python runs their ``benchmarks.worker``.

pyrallel-consumer requires Python >= 3.12 (every release declares it) while the suite runs
on the project's interpreter. :func:`interpreter` finds a Python 3.12 on this machine
(pyenv's versions first, then ``python3.12`` on ``PATH``), creates
``~/.cache/aiostream_kafka/bench-venv-<client>-py3.12`` with the client's pinned packages
the first time (from the package index, with that Python's own ``pip``) and returns the
venv's ``python``. Where there is no Python 3.12, or the install fails, it raises
:class:`NotRun` with the reason, and the runner reports the client as not run for that
reason: never a figure from another interpreter.

The worker run there imports only the standard library, ``benchmarks.worker``,
``benchmarks.clients.common``, ``benchmarks.settings``, ``benchmarks.process`` and the
client's own adapter (never ``aiostream_kafka``).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

#: client -> (the Python version it needs, its pinned requirements).
SIDE_CLIENTS: dict[str, tuple[str, list[str]]] = {
    # confluent-kafka pinned to the suite's own version, so both sides use one librdkafka.
    "pyrallel": ("3.12", ["pyrallel-consumer==1.0.0", "confluent-kafka==2.16.1"]),
}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aiostream_kafka"
VENV_TIMEOUT_S = 180.0
PIP_TIMEOUT_S = 600.0
LOCK_TIMEOUT_S = PIP_TIMEOUT_S + VENV_TIMEOUT_S + 60.0
_STAMP = ".bench-requirements"


class NotRun(Exception):
    """The client cannot run on this machine; the message says why."""


def _version_of(python: str) -> str | None:
    """``"3.12"`` for a Python 3.12 interpreter, or None if it does not run."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _release(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.name))


def candidates(version: str) -> list[str]:
    """Where a Python ``version`` may be, best first: pyenv's installed versions of it
    (``$PYENV_ROOT`` or ``~/.pyenv``, the newest patch release first), then
    ``python<version>`` on ``PATH``."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found: list[str] = []
    if root.is_dir():
        pattern = re.compile(rf"^{re.escape(version)}\.\d+$")
        versions = sorted(
            (p for p in root.iterdir() if pattern.match(p.name)), key=_release, reverse=True
        )
        found += [str(p / "bin" / "python") for p in versions if (p / "bin" / "python").exists()]
    on_path = shutil.which(f"python{version}")
    if on_path:
        found.append(on_path)
    return found


def find_python(version: str) -> str | None:
    """The first of :func:`candidates` that runs and reports ``version``, or None."""
    for python in candidates(version):
        if _version_of(python) == version:
            return python
    return None


def venv_dir(client: str) -> Path:
    version, _ = SIDE_CLIENTS[client]
    return CACHE / f"bench-venv-{client}-py{version}"


def _stamp(requirements: list[str]) -> str:
    return "\n".join(requirements) + "\n"


def _ready(path: Path, requirements: list[str]) -> bool:
    stamp = path / _STAMP
    return (
        (path / "bin" / "python").exists()
        and stamp.exists()
        and (stamp.read_text() == _stamp(requirements))
    )


def _run(args: list[str], timeout: float, what: str) -> None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NotRun(f"{what} took over {timeout:.0f}s") from exc
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise NotRun(f"{what} failed: {' / '.join(tail)}")


def _build(path: Path, base: str, requirements: list[str]) -> None:
    """A fresh venv at ``path`` (built beside it, then moved in place)."""
    staging = path.with_name(path.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    _run([base, "-m", "venv", str(staging)], VENV_TIMEOUT_S, f"{base} -m venv")
    pip = [str(staging / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run(
        [*pip, "install", "--quiet", *requirements],
        PIP_TIMEOUT_S,
        "pip install " + " ".join(requirements),
    )
    (staging / _STAMP).write_text(_stamp(requirements))
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)


def interpreter(client: str) -> str:
    """The ``python`` of ``client``'s side venv, created first if it is not there (or its
    pinned requirements changed); several processes asking at once build it once (a file
    lock, waited for at most ``LOCK_TIMEOUT_S``).

    Raises :class:`NotRun` when no Python of the client's version is found, when creating
    the venv or installing into it fails, or when the lock is not had in time."""
    version, requirements = SIDE_CLIENTS[client]
    path = venv_dir(client)
    if _ready(path, requirements):
        return str(path / "bin" / "python")
    base = find_python(version)
    if base is None:
        raise NotRun(f"not run: no Python {version} (pyenv or python{version} on PATH)")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NotRun(f"not run: {path} is being built by another process") from None
                time.sleep(0.5)
        try:
            if not _ready(path, requirements):
                try:
                    _build(path, base, requirements)
                except NotRun as exc:
                    raise NotRun(f"not run: {exc}") from exc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(path / "bin" / "python")
