"""Run by the Python a built wheel was installed into (``make dist``), outside the checkout:
the installed package imports, is the version just built, carries its typing marker, and,
when the wheel has the compiled modules, runs them all compiled (not the pure fallback).

    python tools/check_installed.py VERSION
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import aiostream_kafka
    from aiostream_kafka import _native

    expected_version = argv[0] if argv else None
    package = Path(aiostream_kafka.__file__).resolve().parent
    problems = []
    if (package.parent / "setup.py").exists():
        problems.append(f"imported from a checkout ({package}), not from the installed wheel")
    if expected_version == "":
        problems.append("the expected version given is empty (the caller could not read it)")
    elif expected_version and aiostream_kafka.__version__ != expected_version:
        problems.append(f"version {aiostream_kafka.__version__}, expected {expected_version}")
    if not (package / "py.typed").exists():
        problems.append("py.typed is missing")
    shipped = [name for name in _native.COMPILED_MODULES if _native._paths(name)[1]]
    running = _native.compiled_modules()
    if shipped and sorted(running) != sorted(_native.COMPILED_MODULES):
        problems.append(f"compiled modules shipped {shipped} but running compiled {running}")
    for problem in problems:
        print(f"check_installed: {problem}", file=sys.stderr)
    if not problems:
        build = f"compiled ({len(running)} modules)" if running else "pure Python"
        print(f"installed wheel OK: aiostream_kafka {aiostream_kafka.__version__}, {build}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
