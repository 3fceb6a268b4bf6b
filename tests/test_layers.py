"""The shape of the package, checked: task ownership goes through one module, the
import graph has no cycle, and no module imports a layer above its own.

Every background task of the library is spawned into a ``TaskScope`` and every concurrent
wait goes through ``gather_all`` / ``gather_settled`` (``aiostream_kafka/concurrency.py``,
the one module that wraps ``asyncio.create_task``, ``ensure_future`` and ``gather``): a bare
task elsewhere has no owner that awaits it, and a bare ``gather`` leaves its siblings
running when one raises.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from collections.abc import Iterable, Mapping

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


# -- the import graph ---------------------------------------------------------------------

ROOT = "aiostream_kafka"


def _module_files() -> dict[str, pathlib.Path]:
    """Every module of the package (generated messages included) by dotted name."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _in_type_checking(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def _targets(
    module: str, is_package: bool, node: ast.AST, modules: Mapping[str, object]
) -> set[str]:
    """The package modules an import statement names (``from p import m`` names ``p.m``
    when ``m`` is a module, else ``p``)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in modules}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        if f"{source}.{alias.name}" in modules:
            out.add(f"{source}.{alias.name}")
        elif source in modules:
            out.add(source)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports: every import, top level, inside
    functions and under ``TYPE_CHECKING``. Left out, as re-exports rather than
    dependencies: the package root's lazy (``TYPE_CHECKING``) re-exports of the clients,
    and each sub-package's ``__init__`` importing its own submodules. A submodule
    importing its own package's ``__init__`` stays (a back-edge)."""
    files = _module_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        is_package = path.name == "__init__.py"
        typing_only = _in_type_checking(tree) if module == ROOT else set()
        deps: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            for target in _targets(module, is_package, node, files):
                if target == module:
                    continue
                if is_package and module != ROOT and target.startswith(module + "."):
                    continue  # a sub-package re-exporting its own submodules
                deps.add(target)
        graph[module] = deps
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its nodes in order (the first repeated at the end), or
    None. Iterative depth-first search, in sorted order so that the answer is stable."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert graph.get("aiostream_kafka.consumer.engine")  # the graph is read at all
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_sees_a_planted_back_edge() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": set(), "d": {"e"}, "e": set()}
    assert find_cycle(graph) is None
    graph["e"].add("b")  # the planted back-edge
    assert find_cycle(graph) == ["b", "d", "e", "b"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]


def test_the_graph_counts_function_level_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .engine import FetchEngine\n"
        "def f():\n    from aiostream_kafka.producer.sender import Sender\n"
    )
    modules = {"aiostream_kafka.consumer.engine", "aiostream_kafka.producer.sender"}
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        found |= _targets("aiostream_kafka.consumer.fetcher", False, node, dict.fromkeys(modules))
    assert found == modules


# -- the layers ---------------------------------------------------------------------------

#: Bottom to top; a module may import its own layer or lower. ``x.*`` is ``x`` and every
#: module below it, a plain name that module only.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "aiostream_kafka._version",
            "aiostream_kafka._native",
            "aiostream_kafka.errors",
            "aiostream_kafka.structs",
            "aiostream_kafka.habits",
            "aiostream_kafka.serde",
            "aiostream_kafka.concurrency",
            "aiostream_kafka.retry",
            "aiostream_kafka._args",  # argument checks shared by the clients (imports structs)
            "aiostream_kafka.protocol.*",
            "aiostream_kafka.admin.types",  # value types only (imports structs)
        ),
    ),
    ("transport", ("aiostream_kafka.security.*", "aiostream_kafka.net.*")),
    (
        "cluster",
        (
            "aiostream_kafka.config",
            "aiostream_kafka.cluster.*",
            "aiostream_kafka.requests.*",  # sans-IO request logic over the metadata
        ),
    ),
    (
        "components",
        (
            "aiostream_kafka.options",  # the keyword options over the three configs
            "aiostream_kafka._generated_options",  # their TypedDicts (tools/gen_signatures.py)
            # The clients' generated constructors (config objects only; the producer's and
            # the consumer's are under producer.* and consumer.*, as the producer's mixins
            # batch_calls and transaction_calls).
            "aiostream_kafka.admin._generated",
            "aiostream_kafka.group.*",
            "aiostream_kafka.producer.*",
            "aiostream_kafka.consumer.*",
            "aiostream_kafka.share.*",  # share groups (KIP-932): membership, acks, config
            "aiostream_kafka.otel.*",  # OpenTelemetry spans and metrics, hooked in by clients
            # KIP-714 metrics push: the OTLP encoder, the clients' stats, the pusher task
            "aiostream_kafka.telemetry.*",
            # the Admin client's calls, one module per area, over its plumbing
            "aiostream_kafka.admin.plumbing",
            "aiostream_kafka.admin.topics",
            "aiostream_kafka.admin.offsets",
            "aiostream_kafka.admin.configs",
            "aiostream_kafka.admin.groups",
            "aiostream_kafka.admin.share_groups",
        ),
    ),
    (
        "clients",
        (
            "aiostream_kafka.producer",
            "aiostream_kafka.producer.producer",
            "aiostream_kafka.consumer",
            "aiostream_kafka.consumer.consumer",
            "aiostream_kafka.share",
            "aiostream_kafka.share.consumer",
            "aiostream_kafka.admin",
            "aiostream_kafka.admin.client",
        ),
    ),
    (
        "integrations",
        (
            "aiostream_kafka",  # the root: lazy re-exports of every client
            "aiostream_kafka.exactly_once",
            "aiostream_kafka.supervisor",
            "aiostream_kafka.fastapi",
            "aiostream_kafka.spark.*",
            "aiostream_kafka.testing.*",
            "aiostream_kafka.cli",
        ),
    ),
]


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int | None:
    """The index of ``module``'s layer: the most specific pattern naming it wins (an exact
    name before ``x.*``, a longer ``x.*`` before a shorter); None if none does."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for index, (_, patterns) in enumerate(layers):
        for pattern in patterns:
            if pattern.endswith(".*"):
                stem = pattern[:-2]
                if module == stem or module.startswith(stem + "."):
                    rank = 2 * len(stem)
                else:
                    continue
            elif module == pattern:
                rank = 2 * len(pattern) + 1
            else:
                continue
            if best is None or rank > best[0]:
                best = (rank, index)
    return None if best is None else best[1]


def layer_breaches(
    graph: Mapping[str, Iterable[str]], layers: list[tuple[str, tuple[str, ...]]] = LAYERS
) -> list[str]:
    """Each import from a module to a higher layer, and each module with no layer."""
    problems = []
    for module in sorted(graph):
        mine = layer_of(module, layers)
        if mine is None:
            problems.append(f"{module}: in no layer (add it to LAYERS)")
            continue
        for dep in sorted(graph[module]):
            theirs = layer_of(dep, layers)
            if theirs is not None and theirs > mine:
                problems.append(f"{module} ({layers[mine][0]}) imports {dep} ({layers[theirs][0]})")
    return problems


def test_no_module_imports_a_layer_above_its_own() -> None:
    breaches = layer_breaches(import_graph())
    assert breaches == [], "layer breaches:\n" + "\n".join(breaches)


def test_the_layer_check_sees_a_planted_upward_edge() -> None:
    layers = [("low", ("p.base", "p.sub.*")), ("high", ("p", "p.sub.top"))]
    graph: dict[str, set[str]] = {"p": {"p.base"}, "p.base": set(), "p.sub.x": {"p.base"}}
    graph["p.sub.top"] = {"p.sub.x"}
    assert layer_breaches(graph, layers) == []
    graph["p.sub.x"].add("p.sub.top")  # upward: low imports high
    graph["p.base"].add("p")  # the root, as config once did for __version__
    graph["p.stray"] = set()
    assert layer_breaches(graph, layers) == [
        "p.base (low) imports p (high)",
        "p.stray: in no layer (add it to LAYERS)",
        "p.sub.x (low) imports p.sub.top (high)",
    ]


def test_the_real_layers_catch_config_importing_the_root() -> None:
    graph = import_graph()
    graph["aiostream_kafka.config"] = set(graph["aiostream_kafka.config"]) | {ROOT}
    assert layer_breaches(graph) == [
        "aiostream_kafka.config (cluster) imports aiostream_kafka (integrations)"
    ]


def test_importing_the_producer_or_consumer_does_not_load_the_admin_client() -> None:
    for package in ("aiostream_kafka.producer", "aiostream_kafka.consumer"):
        code = (
            f"import {package}, sys; "
            "assert 'aiostream_kafka.admin.client' not in sys.modules, 'admin.client loaded'"
        )
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, f"import {package}: {run.stderr}"
