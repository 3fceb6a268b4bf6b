"""Test data for the Spark tests: records written with explicit partitions, keys,
headers and timestamps, so each read can be checked exactly."""

from __future__ import annotations

import time
from dataclasses import dataclass

from aiostream_kafka.producer import Producer


@dataclass(frozen=True)
class Row:
    """One written record and where it landed."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


async def produce_rows(
    bootstrap: str,
    topic: str,
    partitions: int,
    per_partition: int,
    *,
    base_ts: int | None = None,
    headers: bool = True,
) -> list[Row]:
    """Write ``per_partition`` records to each partition; record i of partition p has
    key ``k{p}-{i}``, value ``v{p}-{i}``, timestamp ``base_ts + i * 1000`` and (with
    ``headers``) headers ``[("h", b"{i}"), ("n", None)]``. Returns them with offsets.

    ``base_ts`` defaults to an hour ago: far older timestamps would make the broker delete
    the records by retention (7 days) while a test runs."""
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 3_600_000
    rows: list[Row] = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
        futures = []
        for p in range(partitions):
            for i in range(per_partition):
                hdrs = (("h", str(i).encode()), ("n", None)) if headers else ()
                fut = await producer.enqueue(
                    topic,
                    value=f"v{p}-{i}".encode(),
                    key=f"k{p}-{i}".encode(),
                    headers=list(hdrs),
                    partition=p,
                    timestamp_ms=base_ts + i * 1000,
                )
                futures.append((fut, p, i, hdrs))
        await producer.flush()
        for fut, p, i, hdrs in futures:
            meta = await fut
            rows.append(
                Row(
                    p,
                    meta.offset,
                    f"k{p}-{i}".encode(),
                    f"v{p}-{i}".encode(),
                    base_ts + i * 1000,
                    hdrs,
                )
            )
    return rows
