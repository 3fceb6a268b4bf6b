"""The optional compiled build: which modules mypyc compiles, and the guard at import.

The hot modules are plain typed Python; a build with mypyc (``pip install .`` with a C
compiler, or ``make compile`` in a checkout) puts an extension module beside each source
file, which Python's import system then prefers. Never write them by hand: they are the
same source, compiled.

The compiled modules share one runtime library and see each other's classes as native
classes, so they are used all together or not at all. :func:`install` (run when this
module is imported, first thing in ``aiostream_kafka/__init__.py``) loads every one of
them from its source instead when

* ``AIOSTREAM_KAFKA_PURE=1`` is set in the environment (the pure package, e.g. to test
  it or to compare), or
* in a source checkout, any compiled module is older than its source file (a checkout
  edited after ``make compile``: the source wins, with a warning, rather than stale code
  running). An installed package is not checked: pip writes a wheel's files in no
  particular order, so there an extension may be a moment older than its source.

:func:`compiled_modules` tells which modules run compiled in this process.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

# Compiled by mypyc when the build has a C compiler (setup.py reads this list). Keep it to
# the modules profiling shows hot: every one costs build time on every install.
COMPILED_MODULES: tuple[str, ...] = (
    "aiostream_kafka.structs",
    "aiostream_kafka.protocol.varint",
    "aiostream_kafka.protocol.fastrecords",
    # the producer's per-record path (issue 32): the batch and its pending records, the
    # accumulator, the delivery sinks, the partitioners (murmur2), the append path
    "aiostream_kafka.producer.delivery",
    "aiostream_kafka.producer.partitioner",
    "aiostream_kafka.producer.accumulator",
    "aiostream_kafka.producer.append",
)

_PACKAGE_DIR = Path(__file__).resolve().parent
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _paths(name: str) -> tuple[Path, list[Path]]:
    """The source file of module ``name`` and the compiled files found beside it."""
    parts = name.split(".")[1:]
    source = _PACKAGE_DIR.joinpath(*parts).with_suffix(".py")
    stem = source.with_suffix("")
    built = [Path(str(stem) + suffix) for suffix in _EXTENSIONS]
    return source, [p for p in built if p.exists()]


def _in_checkout() -> bool:
    """The package is a source checkout's (edited in place, compiled by ``make compile``),
    not an installed copy."""
    root = _PACKAGE_DIR.parent
    return (root / "setup.py").exists() and (root / "pyproject.toml").exists()


def _reason_for_source() -> str | None:
    """Why the compiled modules must not be used (None: use them if present)."""
    if os.environ.get("AIOSTREAM_KAFKA_PURE", "") not in ("", "0"):
        return "AIOSTREAM_KAFKA_PURE is set"
    if not _in_checkout():
        return None
    for name in COMPILED_MODULES:
        source, built = _paths(name)
        if built and source.exists() and source.stat().st_mtime > built[0].stat().st_mtime:
            return f"{built[0].name} is older than {source.name} (run `make compile`)"
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the hot modules' source files ahead of their compiled twins."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        source, _ = _paths(fullname)
        return importlib.util.spec_from_file_location(fullname, source)


_installed = False


def install() -> None:
    """Decide, once per process, whether the compiled modules may be imported."""
    global _installed
    if _installed:
        return
    _installed = True
    if not any(_paths(name)[1] for name in COMPILED_MODULES):
        return  # a pure build: nothing to guard
    reason = _reason_for_source()
    if reason is None:
        return
    if any(name in sys.modules for name in COMPILED_MODULES):
        return  # too late to choose (imported before the package): keep what is loaded
    if "PURE" not in reason:
        log.warning("aiostream_kafka: running the pure-Python modules: %s", reason)
    sys.meta_path.insert(0, _SourceFinder())


def compiled_modules() -> list[str]:
    """The modules of :data:`COMPILED_MODULES` this process runs compiled (importing
    them first: the package loads its clients, and so most of them, on first use)."""
    out = []
    for name in COMPILED_MODULES:
        module = sys.modules.get(name) or importlib.import_module(name)
        origin = getattr(module, "__file__", None) or ""
        if origin.endswith(_EXTENSIONS):
            out.append(name)
    return out


install()
