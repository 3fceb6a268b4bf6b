"""Helpers shared by the tests (the fixtures come from the project's pytest plugin)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def processes_mentioning(text: str) -> list[int]:
    """Return the pids of live processes whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
            status = (entry / "status").read_text()
        except OSError:
            continue
        if "State:\tZ" in status:  # a zombie is already dead
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


async def eventually(
    probe: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout_s: float = 15.0
) -> T:
    """Call ``probe`` until ``check`` accepts its result; fail after ``timeout_s``.

    For state that the broker applies asynchronously (config changes travel through the
    KRaft metadata log before a broker serves them).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if check(value):
            return value
        if loop.time() > deadline:
            raise AssertionError(f"still {value!r} after {timeout_s}s")
        await asyncio.sleep(0.1)
