"""The aiostream_kafka demo: produce a stream of records and consume it back.

With no ``--bootstrap-servers`` it starts an embedded local Kafka broker (see
``aiostream_kafka.testing.KafkaCluster``) and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

from aiostream_kafka.testing import KafkaCluster, probe


@contextlib.asynccontextmanager
async def _cluster(bootstrap: str | None) -> AsyncIterator[str]:
    if bootstrap:
        yield bootstrap
        return
    started = time.monotonic()
    print("starting an embedded Kafka broker ...", flush=True)
    async with KafkaCluster(brokers=1) as cluster:
        print(f"broker up at {cluster.bootstrap_servers} in {time.monotonic() - started:.1f}s")
        yield cluster.bootstrap_servers


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers", default=None, help="use this cluster instead")
    args = parser.parse_args()
    async with _cluster(args.bootstrap_servers) as bootstrap:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        apis = await probe.api_versions(host, int(port))
        print(
            f"the broker answers ApiVersions: {len(apis)} APIs, "
            f"Produce v{apis[0][0]}-{apis[0][1]}, Fetch v{apis[1][0]}-{apis[1][1]}"
        )
        print("produce/consume demo: not yet (arrives with the producer and consumer issues)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
