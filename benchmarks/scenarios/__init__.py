"""One module per scenario family; each has ``FAMILY``, ``TITLE``, ``ABOUT`` (Markdown)
and ``async def cases(ctx) -> list[Case]`` (creating and filling any shared topic)."""

from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES = ["produce", "consume", "latency", "pause", "fastapi", "codec"]
QUICK_SKIPS = {"codec"}  # micro-benchmarks without a broker: run them on their own


def family(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.scenarios.{name}")
