"""Run by test_spark_memory.py in a process of its own: read ranges of one partition with
the executor's range reader (``reader.read_range``, no Spark) and print, per range, the
process's peak RSS growth during the read (VmHWM, reset before each read through
``/proc/self/clear_refs``) as one JSON line.

    python _memory_read.py BOOTSTRAP TOPIC OPTIONS_JSON END [END ...] [--keep]

Before the reported reads, ``[0, first END)`` is read once (imports, connections and the
allocators' first arenas are then in place).

``--keep`` keeps every Arrow batch (a reader that does not bound its memory), to show
that the measurement sees growth."""

from __future__ import annotations

import json
import sys


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--keep"]
    keep = "--keep" in sys.argv
    bootstrap, topic, options, *ends = args
    from aiostream_kafka.spark.options import parse_source_options
    from aiostream_kafka.spark.reader import KafkaInputPartition, read_range

    opts = parse_source_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **json.loads(options)}
    )
    for _ in read_range(opts, KafkaInputPartition(0, topic, 0, 0, int(ends[0]))):
        pass
    kept = []
    for end in map(int, ends):
        before = _status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # the peak RSS starts again from the current RSS
        rows = batches = most = 0
        for batch in read_range(opts, KafkaInputPartition(0, topic, 0, 0, end)):
            rows += batch.num_rows
            batches += 1
            most = max(most, batch.num_rows)
            if keep:
                kept.append(batch)
        peak = _status_kb("VmHWM")
        report = {"end": end, "rows": rows, "batches": batches, "most_rows": most}
        report |= {"rss_before_kb": before, "peak_kb": peak, "growth_kb": peak - before}
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
