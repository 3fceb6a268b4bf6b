"""Record-batch codec micro-benchmark: ours against aiokafka's, no broker.

Encodes and decodes 1,000-record batches (100-byte values) uncompressed and with lz4, and
reports records per second for

* ``ours``          -- aiostream_kafka.protocol.records (pure Python);
* ``aiokafka-C``    -- aiokafka's record codec with its compiled (Cython) extension;
* ``aiokafka-py``   -- aiokafka's pure-Python codec, run in a subprocess with
  ``AIOKAFKA_NO_EXTENSIONS=1`` (aiokafka reads it once, at import).

Decoding measures what a consumer needs: offset, timestamp, key, value and headers of every
record. Ours produces ``aiostream_kafka.structs.Record`` objects (what our consumer hands
out); for aiokafka two variants are timed: ``raw`` builds a tuple of those fields per record
straight from its decoder, ``consumer`` builds the ``ConsumerRecord`` its consumer hands out
(as ``aiokafka.consumer.fetcher`` does, minus deserializers).

Each figure is the best of several rounds (the machine is shared and noisy); the
implementations are interleaved round by round. Results go to ``results/codec.json``.

``--compression`` times the compression codecs alone instead (``protocol/compression.py``:
compress and bounded decompress of a batch's records section; zstd, lz4, gzip, snappy, and
decompressing the zstd frames Java's producer streams, ``zstd-java``) on
typical batches: 16 KiB and 1 MiB of 100-byte and 1 KiB JSON-like records. With
``--baseline FILE`` (another version of ``compression.py``, e.g. from ``git show
REV:aiostream_kafka/protocol/compression.py > /tmp/old.py``) both are timed, interleaved,
and the speed-up of the current one is reported. Results go to
``results/codec_compression.json``.

Usage: ``python benchmarks/codec_bench.py [--rounds N] [--quick] [--json PATH]``
or ``python benchmarks/codec_bench.py --compression [--codecs zstd,lz4] [--baseline FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

RECORDS_PER_BATCH = 1000
VALUE_SIZE = 100
TS = 1_700_000_000_000
CODECS = {"none": 0, "lz4": 3}


_Spec = tuple[bytes | None, bytes, list[tuple[str, bytes]], int]


def _workloads() -> dict[str, list[_Spec]]:
    """The records to encode: (key, value, headers, timestamp_ms)."""
    rng = random.Random(42)
    # hex text: realistic-looking, somewhat compressible payloads
    values = [rng.randbytes(VALUE_SIZE // 2).hex().encode() for _ in range(RECORDS_PER_BATCH)]
    plain: list[_Spec] = [(None, v, [], TS + i // 10) for i, v in enumerate(values)]
    keyed: list[_Spec] = [
        (
            f"user-{rng.randrange(10**6):06d}".encode(),
            v,
            [("trace-id", rng.randbytes(8).hex().encode()), ("source", b"bench")],
            TS + i // 10,
        )
        for i, v in enumerate(values)
    ]
    return {"plain": plain, "keyed+headers": keyed}


def _best(fn: Callable[[], Any], inner: int) -> float:
    """Seconds per call of ``fn``, best of one round of ``inner`` calls."""
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def _measure(cases: dict[str, Callable[[], Any]], rounds: int, inner: int) -> dict[str, float]:
    """Records per second for each case: best of ``rounds``, cases interleaved."""
    best = dict.fromkeys(cases, float("inf"))
    for fn in cases.values():  # warm up
        fn()
    for _ in range(rounds):
        for name, fn in cases.items():
            best[name] = min(best[name], _best(fn, inner))
    return {name: RECORDS_PER_BATCH / secs for name, secs in best.items()}


# -- ours ---------------------------------------------------------------------------------


def ours_cases() -> dict[str, Callable[[], Any]]:
    from aiostream_kafka.protocol.records import RecordBatchBuilder, read_records

    cases: dict[str, Callable[[], Any]] = {}
    for wname, records in _workloads().items():
        for cname, codec in CODECS.items():

            def encode(records: Any = records, codec: int = codec) -> bytes:
                builder = RecordBatchBuilder(batch_size=1 << 30)
                append = builder.append
                for key, value, headers, ts in records:
                    append(key, value, headers, ts)
                return builder.build(compression=codec)

            data = encode()

            def decode(data: bytes = data) -> int:
                recs = read_records(data, "bench", 0)
                return len(recs)

            assert decode() == RECORDS_PER_BATCH
            cases[f"{wname}|{cname}|encode"] = encode
            cases[f"{wname}|{cname}|decode"] = decode
            if cname == "lz4":
                # aiokafka compresses lz4 at level 9 (high compression); Java and we default
                # to the fast compressor. Same level, for a like-for-like row:
                def encode_l9(records: Any = records) -> bytes:
                    builder = RecordBatchBuilder(batch_size=1 << 30)
                    for key, value, headers, ts in records:
                        builder.append(key, value, headers, ts)
                    return builder.build(compression=3, compression_level=9)

                cases[f"{wname}|{cname}|encode (ours at lz4 level 9)"] = encode_l9
    return cases


# -- aiokafka (C or pure Python, whichever this process imported) --------------------------


def aiokafka_cases() -> tuple[dict[str, Callable[[], Any]], str]:
    from aiokafka.record.default_records import (  # type: ignore[import-untyped]
        DefaultRecordBatchBuilder,
    )
    from aiokafka.record.memory_records import MemoryRecords  # type: ignore[import-untyped]
    from aiokafka.structs import ConsumerRecord  # type: ignore[import-untyped]

    impl = f"{DefaultRecordBatchBuilder.__module__}.{DefaultRecordBatchBuilder.__name__}"
    cases: dict[str, Callable[[], Any]] = {}
    for wname, records in _workloads().items():
        for cname, codec in CODECS.items():

            def encode(records: Any = records, codec: int = codec) -> bytes:
                builder = DefaultRecordBatchBuilder(
                    magic=2,
                    compression_type=codec,
                    is_transactional=0,
                    producer_id=-1,
                    producer_epoch=-1,
                    base_sequence=-1,
                    batch_size=1 << 30,
                )
                append = builder.append
                for offset, (key, value, headers, ts) in enumerate(records):
                    append(offset, timestamp=ts, key=key, value=value, headers=headers)
                return bytes(builder.build())

            data = encode()

            def decode_raw(data: bytes = data) -> int:
                out: list[Any] = []
                append = out.append
                batches = MemoryRecords(data)
                while (batch := batches.next_batch()) is not None:
                    for r in batch:
                        append((r.offset, r.timestamp, r.key, r.value, r.headers))
                return len(out)

            def decode_consumer(data: bytes = data) -> int:
                # what aiokafka's Fetcher._consumer_record does per record
                out: list[Any] = []
                append = out.append
                batches = MemoryRecords(data)
                while (batch := batches.next_batch()) is not None:
                    for r in batch:
                        key = r.key
                        value = r.value
                        append(
                            ConsumerRecord(
                                "bench",
                                0,
                                r.offset,
                                r.timestamp,
                                r.timestamp_type,
                                key,
                                value,
                                r.checksum,
                                len(key) if key is not None else -1,
                                len(value) if value is not None else -1,
                                tuple(r.headers),
                            )
                        )
                return len(out)

            assert decode_raw() == decode_consumer() == RECORDS_PER_BATCH
            cases[f"{wname}|{cname}|encode"] = encode
            cases[f"{wname}|{cname}|decode"] = decode_raw
            cases[f"{wname}|{cname}|decode-consumer"] = decode_consumer
    return cases, impl


def _peer_main(rounds: int, inner: int) -> None:
    """Subprocess entry point: measure aiokafka as imported here, print JSON."""
    cases, impl = aiokafka_cases()
    print(json.dumps({"impl": impl, "rates": _measure(cases, rounds, inner)}))


def _run_pure_aiokafka(rounds: int, inner: int) -> dict[str, Any]:
    env = dict(os.environ, AIOKAFKA_NO_EXTENSIONS="1")
    out = subprocess.run(
        [sys.executable, __file__, "--peer", "--rounds", str(rounds), "--inner", str(inner)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- compression codecs alone ---------------------------------------------------------------

COMPRESSION_CODECS = {"zstd": 4, "zstd-java": 4, "lz4": 3, "gzip": 1, "snappy": 2}
"""``zstd-java``: decompressing zstd frames streamed without their content size, as Java's
producer (zstd-jni's ``ZstdOutputStream``, level 3) writes them."""
COMPRESSION_BATCHES = [(16 * 1024, 100), (16 * 1024, 1024), (1 << 20, 100), (1 << 20, 1024)]


def _records_section(batch_bytes: int, record_bytes: int) -> bytes:
    """The records section (what a codec compresses) of a batch of about ``batch_bytes``,
    JSON-like values of ``record_bytes`` each: fixed field names, varying ids and a random
    hex payload, which compresses about 2-3x like typical event data."""
    from aiostream_kafka.protocol.records import HEADER_SIZE, RecordBatchBuilder

    rng = random.Random(7)
    builder = RecordBatchBuilder(batch_size=1 << 30)
    n = 0
    while builder.size_in_bytes < batch_bytes:
        head = (
            f'{{"id":{rng.randrange(10**9)},"user":"user-{rng.randrange(10**4):04d}",'
            f'"event":"{rng.choice(("click", "view", "purchase"))}","ts":{TS + n},"data":"'
        )
        pad = max(0, record_bytes - len(head) - 2)
        value = (head + rng.randbytes(pad // 2 + 1).hex()[:pad] + '"}').encode()
        builder.append(f"user-{n % 1000}".encode(), value, None, TS + n)
        n += 1
    return builder.build()[HEADER_SIZE:]


def _load_compression(path: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_compression", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compression_main(args: argparse.Namespace) -> int:
    from aiostream_kafka.protocol import compression as current

    impls: dict[str, Any] = {"current": current}
    if args.baseline is not None:
        impls["baseline"] = _load_compression(args.baseline)
    codecs = [c for c in args.codecs.split(",") if c]
    cases: dict[str, Callable[[], Any]] = {}
    sizes: dict[str, int] = {}
    for batch_bytes, record_bytes in COMPRESSION_BATCHES:
        data = _records_section(batch_bytes, record_bytes)
        workload = f"{batch_bytes // 1024} KiB/{record_bytes} B"
        for cname in codecs:
            codec = COMPRESSION_CODECS[cname]
            for iname, mod in impls.items():
                if not mod.is_available(codec):
                    continue
                packed = mod.compress(codec, data)
                if cname == "zstd-java":
                    import zstandard

                    stream = zstandard.ZstdCompressor(level=3).compressobj()
                    packed = stream.compress(data) + stream.flush()
                assert mod.decompress(codec, packed) == data
                sizes[f"{workload}|{cname}"] = len(packed)

                def comp(mod: Any = mod, codec: int = codec, data: bytes = data) -> bytes:
                    out: bytes = mod.compress(codec, data)
                    return out

                def decomp(mod: Any = mod, codec: int = codec, packed: bytes = packed) -> bytes:
                    out: bytes = mod.decompress(codec, packed)
                    return out

                if cname != "zstd-java":
                    cases[f"{iname}|{workload}|{cname}|compress"] = comp
                cases[f"{iname}|{workload}|{cname}|decompress"] = decomp
            sizes[f"{workload}|{cname}|raw"] = len(data)

    # Seconds per call, best of the rounds; about 20 ms of calls per case and round.
    best = dict.fromkeys(cases, float("inf"))
    inner: dict[str, int] = {}
    for name, fn in cases.items():
        start = time.perf_counter()
        fn()
        fn()
        once = (time.perf_counter() - start) / 2
        inner[name] = max(1, min(2000, int(0.02 / max(once, 1e-7))))
    for _ in range(args.rounds):
        for name, fn in cases.items():
            best[name] = min(best[name], _best(fn, inner[name]))

    rows = []
    print(
        f"compression codecs, microseconds per batch (best of {args.rounds} rounds); "
        f"Python {platform.python_version()}"
    )
    header = f"{'batch':16} {'codec':9} {'op':10} {'in->out':>17} {'current':>10}"
    if "baseline" in impls:
        header += f" {'baseline':>10} {'speed-up':>8}"
    print(header)
    print("-" * len(header))
    for key in cases:
        iname, workload, cname, op = key.split("|")
        if iname != "current":
            continue
        raw, packed_len = sizes[f"{workload}|{cname}|raw"], sizes[f"{workload}|{cname}"]
        row: dict[str, Any] = {
            "batch": workload,
            "codec": cname,
            "op": op,
            "uncompressed_bytes": raw,
            "compressed_bytes": packed_len,
            "current_us": best[key] * 1e6,
        }
        base_key = f"baseline|{workload}|{cname}|{op}"
        line = (
            f"{workload:16} {cname:9} {op:10} "
            f"{f'{raw}->{packed_len}' if op == 'compress' else f'{packed_len}->{raw}':>17} "
            f"{row['current_us']:>10.1f}"
        )
        if base_key in best:
            row["baseline_us"] = best[base_key] * 1e6
            row["speedup"] = best[base_key] / best[key]
            line += f" {row['baseline_us']:>10.1f} {row['speedup']:>7.2f}x"
        rows.append(row)
        print(line)
    json_path = args.json if args.json is not None else HERE / "results" / "codec_compression.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(
        json.dumps(
            {
                "benchmark": "compression codecs",
                "unit": "microseconds per batch",
                "rounds": args.rounds,
                "baseline": str(args.baseline) if args.baseline else None,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "load_average": os.getloadavg(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {json_path}")
    return 0


# -- report ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--inner", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 rounds, for a smoke run")
    parser.add_argument("--json", type=Path, default=None, help="default results/codec.json")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--compression", action="store_true", help="time the compression codecs alone"
    )
    parser.add_argument(
        "--codecs", default=",".join(COMPRESSION_CODECS), help="with --compression: which"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="with --compression: another compression.py to time against",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds = 3
    if args.compression:
        return compression_main(args)
    if args.json is None:
        args.json = HERE / "results" / "codec.json"
    if args.peer:
        _peer_main(args.rounds, args.inner)
        return 0

    # The pure-Python peer runs first, alone, so it does not compete for the CPU.
    pure = _run_pure_aiokafka(max(3, args.rounds // 3), max(1, args.inner // 5))
    ours = ours_cases()
    peer, c_impl = aiokafka_cases()
    if ".default_records._DefaultRecordBatchBuilderPy" in c_impl:
        sys.stderr.write("warning: aiokafka's C extension is not in use in this process\n")
    both = {f"ours|{k}": v for k, v in ours.items()}
    both.update({f"c|{k}": v for k, v in peer.items()})
    rates = _measure(both, args.rounds, args.inner)

    rows = []
    for key in ours:
        wname, cname, op = key.split("|")
        ours_rate = rates[f"ours|{key}"]
        peer_key = key.split(" (")[0]  # "encode (ours at lz4 level 9)" -> "encode"
        c_rate = rates[f"c|{peer_key}"]
        py_rate = pure["rates"][peer_key]
        rows.append(
            {
                "workload": wname,
                "compression": cname,
                "op": op,
                "ours": ours_rate,
                "aiokafka_c": c_rate,
                "aiokafka_py": py_rate,
                "ours/aiokafka_c": ours_rate / c_rate,
                "ours/aiokafka_py": ours_rate / py_rate,
            }
        )
        if op == "decode":
            ckey = f"{wname}|{cname}|decode-consumer"
            c_cons = rates[f"c|{ckey}"]
            py_cons = pure["rates"][ckey]
            rows.append(
                {
                    "workload": wname,
                    "compression": cname,
                    "op": "decode (vs consumer objects)",
                    "ours": ours_rate,
                    "aiokafka_c": c_cons,
                    "aiokafka_py": py_cons,
                    "ours/aiokafka_c": ours_rate / c_cons,
                    "ours/aiokafka_py": ours_rate / py_cons,
                }
            )

    header = (
        f"{'workload':14} {'codec':5} {'op':32} {'ours':>11} {'aiokafka-C':>11} "
        f"{'aiokafka-py':>11} {'ours/C':>7} {'ours/py':>7}"
    )
    print(
        f"records/s, {RECORDS_PER_BATCH}-record batches, {VALUE_SIZE}-byte values, "
        f"best of {args.rounds} rounds; Python {platform.python_version()}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['workload']:14} {r['compression']:5} {r['op']:32} {r['ours']:>11,.0f} "
            f"{r['aiokafka_c']:>11,.0f} {r['aiokafka_py']:>11,.0f} "
            f"{r['ours/aiokafka_c']:>7.2f} {r['ours/aiokafka_py']:>7.2f}"
        )

    import aiokafka  # type: ignore[import-untyped]

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "benchmark": "codec",
                "unit": "records/s",
                "records_per_batch": RECORDS_PER_BATCH,
                "value_size": VALUE_SIZE,
                "rounds": args.rounds,
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "aiokafka": aiokafka.__version__,
                "aiokafka_c_impl": c_impl,
                "aiokafka_py_impl": pure["impl"],
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
