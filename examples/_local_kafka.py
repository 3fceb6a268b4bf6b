"""Shared by the examples: use the cluster given on the command line, or start one.

Not an example itself. ``kafka(None)`` starts an embedded single-broker Kafka
(``aiostream_kafka.testing.KafkaCluster``: Docker if available, else the Apache Kafka jars
from Maven Central, downloaded once) and stops it on exit.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import AsyncIterator

from aiostream_kafka import Admin, NewTopic, TopicAlreadyExistsError


@contextlib.asynccontextmanager
async def kafka(bootstrap_servers: str | None) -> AsyncIterator[str]:
    """Yield ``bootstrap_servers``, or the address of an embedded broker started for the
    duration of the block."""
    if bootstrap_servers:
        yield bootstrap_servers
        return
    from aiostream_kafka.testing import KafkaCluster

    print("starting an embedded Kafka broker (the first run downloads it)...", file=sys.stderr)
    started = time.monotonic()
    async with KafkaCluster(brokers=1) as cluster:
        print(
            f"embedded broker up at {cluster.bootstrap_servers} "
            f"in {time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )
        yield cluster.bootstrap_servers


async def ensure_topic(bootstrap_servers: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` unless it exists."""
    async with Admin(bootstrap_servers) as admin:
        with contextlib.suppress(TopicAlreadyExistsError):
            await admin.create_topics(
                [NewTopic(topic, partitions=partitions, replication_factor=1)]
            )
