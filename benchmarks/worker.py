"""Runs one scenario for one client and prints one JSON line (``BENCH-RESULT {...}``).

``python -m benchmarks.worker CLIENT SPEC_JSON``: a fresh interpreter per run, so that no
two clients share a process and the peak RSS read at the end is this client's alone (for
Java: the JVM's, a child of this process).
"""

from __future__ import annotations

import json
import resource
import sys
import traceback

from benchmarks.clients import adapter
from benchmarks.clients.common import Unsupported

MARKER = "BENCH-RESULT "


def peak_rss_mb(client: str) -> float:
    """This process's peak RSS (``VmHWM``: ``ru_maxrss`` would carry over the parent's
    peak from before ``exec``), or, for Java, that of the JVM child (``RUSAGE_CHILDREN``)."""
    if client == "java":
        return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    client, spec = argv[0], json.loads(argv[1])
    module = adapter(client)
    out: dict[str, object] = {"client": client, "config": module.describe(spec)}
    try:
        out["result"] = module.run(spec)
    except Unsupported as exc:
        out["unsupported"] = str(exc) or spec["scenario"]
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-3000:]
    out["peak_rss_mb"] = peak_rss_mb(client)
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
