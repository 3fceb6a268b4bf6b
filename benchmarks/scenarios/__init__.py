"""One module per scenario family; each has ``FAMILY``, ``TITLE``, ``ABOUT`` (Markdown)
and ``async def cases(ctx) -> list[Case]`` (creating and filling any shared topic); it may
have ``extra_table(cases) -> list[str]`` (Markdown lines the report adds after its
tables)."""

from __future__ import annotations

import importlib
from types import ModuleType

FAMILIES = [
    "produce",
    "produce_keyed",
    "consume",
    "latency",
    "pause",
    "fastapi",
    "codec",
    "rebalance",
    "share",
    "process",
    "otel",
]
QUICK_SKIPS = {"codec"}  # micro-benchmarks without a broker: run them on their own
#: Run only when named in ``--scenarios`` (minutes per round, several processes per run).
OPT_IN = {"rebalance", "share", "process", "otel", "produce_keyed"}


def family(name: str) -> ModuleType:
    return importlib.import_module(f"benchmarks.scenarios.{name}")
