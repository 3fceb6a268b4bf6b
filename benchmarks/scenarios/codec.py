"""The codec micro-benchmarks (no broker): ``codec_bench.py`` (record batches, ours vs
aiokafka's C and pure-Python codecs) and ``protocol_bench.py`` (message codecs)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.runner import ROOT, Context, log

FAMILY = "codec"
TITLE = "Codec micro-benchmarks (no broker; ours vs aiokafka)"
ABOUT = (
    "`benchmarks/codec_bench.py` encodes and decodes 1,000-record batches (ours, "
    "aiokafka's C extension, aiokafka's pure Python) and `benchmarks/protocol_bench.py` "
    "times the Metadata/Fetch/Produce message codecs; their own output follows. Not part "
    "of `--quick`."
)


async def _script(name: str, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "benchmarks" / name),
        *args,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    if proc.returncode:
        text += f"\n({name} exited {proc.returncode})"
    return text


async def run_standalone(ctx: Context) -> dict[str, Any]:
    rounds = str(max(1, ctx.profile.codec_rounds))
    with tempfile.TemporaryDirectory() as tmp:
        codec_json = Path(tmp) / "codec.json"
        log("  codec_bench.py ...")
        codec_out = await _script("codec_bench.py", "--rounds", rounds, "--json", str(codec_json))
        data = json.loads(codec_json.read_text()) if codec_json.exists() else None
    log("  protocol_bench.py ...")
    protocol_out = await _script("protocol_bench.py", "--rounds", str(min(5, int(rounds))))
    return {
        "codec_bench": {"output": codec_out, "json": data},
        "protocol_bench": {"output": protocol_out},
    }


def about(profile: Any) -> str:
    del profile
    return ABOUT
