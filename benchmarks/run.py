"""Run every benchmark in this folder, one after the other (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BENCHMARKS = ["protocol_bench.py", "codec_bench.py", "producer_bench.py", "consumer_bench.py"]


def main() -> int:
    status = 0
    for name in BENCHMARKS:
        script = HERE / name
        if not script.exists():
            sys.stderr.write(f"{name}: missing, skipped\n")
            continue
        sys.stdout.write(f"== {name}\n")
        sys.stdout.flush()
        status |= subprocess.call([sys.executable, str(script)])
    return status


if __name__ == "__main__":
    raise SystemExit(main())
