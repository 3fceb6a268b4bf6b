"""The data source from a Spark Connect client (PySpark 4.3's Connect server, started as
``SparkSession.builder.remote("local[2]")`` starts it, in a process of its own): batch
read, batch write and a streaming read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _paths import batch_read, batch_write, streaming_read
from _servers import connect_client, connect_server, require_spark

NewTopic = Callable[..., Awaitable[str]]


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Connect server (``local[2]``) and one client session for the module."""
    require_spark()
    work = tmp_path_factory.mktemp("connect")
    with connect_server(work, "local[2]", {}) as url, connect_client(url) as session:
        assert type(session).__module__ == "pyspark.sql.connect.session"
        yield session


async def test_batch_read_over_connect(
    connect: Any, kafka_cluster: Any, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    await batch_read(connect, kafka_cluster.bootstrap_servers, topic, 2)


async def test_batch_write_over_connect(
    connect: Any, kafka_cluster: Any, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    await batch_write(connect, kafka_cluster.bootstrap_servers, topic, 2)


async def test_streaming_read_over_connect(
    connect: Any, kafka_cluster: Any, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = await new_topic(partitions=2)
    await streaming_read(connect, kafka_cluster.bootstrap_servers, topic, 2, tmp_path)
