"""Build script: the package is pure Python; with a C compiler and mypyc (in the build
requirements) the hot modules listed in ``aiostream_kafka/_native.py`` are compiled too.

``AIOSTREAM_KAFKA_PURE=1`` at build time builds without them. A build machine without a C
compiler gets the pure package, with a warning, rather than a failed install.
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def compiled_modules() -> list[str]:
    """COMPILED_MODULES of aiostream_kafka/_native.py, read without importing the package."""
    tree = ast.parse((HERE / "aiostream_kafka" / "_native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "COMPILED_MODULES":
            return list(ast.literal_eval(node.value))  # type: ignore[arg-type]
    raise SystemExit("setup.py: COMPILED_MODULES not found in aiostream_kafka/_native.py")


class OptionalBuildExt(build_ext):
    """Compile if we can; otherwise install the pure package."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the pure package still works
            print(
                f"warning: building the compiled modules failed ({exc}); installing the "
                "pure-Python package",
                file=sys.stderr,
            )

    def build_extension(self, ext):  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"warning: {ext.name} not compiled ({exc})", file=sys.stderr)


def ext_modules() -> list:  # type: ignore[type-arg]
    if os.environ.get("AIOSTREAM_KAFKA_PURE", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("warning: mypyc not available; installing the pure-Python package", file=sys.stderr)
        return []
    paths = [str(Path(*m.split(".")).with_suffix(".py")) for m in compiled_modules()]
    # The runtime library the compiled modules share goes inside the package
    # (aiostream_kafka/_mypyc__mypyc.*.so), not at the top level of site-packages or of the
    # checkout, where a script run from elsewhere (examples/) would not find it.
    return mypycify(paths, opt_level="3", debug_level="0", group_name="aiostream_kafka._mypyc")


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
