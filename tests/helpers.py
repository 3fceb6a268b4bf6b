"""Helpers shared by the tests (the fixtures come from the project's pytest plugin)."""

from __future__ import annotations

import os
from pathlib import Path


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
