"""The shape of the package, checked: task ownership goes through one module.

Every background task of the library is spawned into a ``TaskScope`` and every concurrent
wait goes through ``gather_all`` / ``gather_settled`` (``aiostream_kafka/concurrency.py``,
the one module that wraps ``asyncio.create_task``, ``ensure_future`` and ``gather``): a bare
task elsewhere has no owner that awaits it, and a bare ``gather`` leaves its siblings
running when one raises.
"""

from __future__ import annotations

import ast
import pathlib

import aiostream_kafka

PACKAGE = pathlib.Path(aiostream_kafka.__file__).parent
_WRAPPER = PACKAGE / "concurrency.py"
_BARE = frozenset({"create_task", "ensure_future", "gather"})


def _library_modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "messages" not in p.parts)


def _bare_spawns(source: str) -> list[tuple[int, str]]:
    """(line, name) of each ``create_task``/``ensure_future``/``gather`` used or imported."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in _BARE:
            hits.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            hits.extend((node.lineno, a.name) for a in node.names if a.name in _BARE)
    return sorted(hits)


def test_no_bare_task_or_gather_outside_the_concurrency_module() -> None:
    offenders = [
        f"{p.relative_to(PACKAGE.parent)}:{line}: {name}"
        for p in _library_modules()
        if p != _WRAPPER
        for line, name in _bare_spawns(p.read_text())
    ]
    assert offenders == [], (
        "spawn tasks into a TaskScope and gather with gather_all/gather_settled "
        "(aiostream_kafka/concurrency.py):\n" + "\n".join(offenders)
    )


def test_the_check_sees_a_bare_spawn() -> None:
    sample = (
        "import asyncio\nfrom asyncio import gather\n"
        "async def f(c):\n    asyncio.create_task(c)\n    await asyncio.gather(c)\n"
    )
    assert _bare_spawns(sample) == [(2, "gather"), (4, "create_task"), (5, "gather")]
