"""The data source on a Spark standalone cluster: a master and two one-core workers
started from pyspark's own jars (``spark-class ...deploy.master.Master`` /
``...deploy.worker.Worker``, 127.0.0.1 only), an application of two executors. Batch read,
batch write and a streaming read, each checked to have run on both executors (processes
of their own, not the driver's), so nothing may depend on the driver and the executors
sharing a process or a machine-global cache.

The application's driver is a Spark Connect server (the classic session of the other Spark
tests owns this process's one SparkContext); the tests are its Connect client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _paths import batch_read, batch_write, streaming_read
from _servers import (
    connect_client,
    connect_server,
    require_spark,
    spark_env,
    standalone_cluster,
)

NewTopic = Callable[..., Awaitable[str]]
EXECUTORS = {"0", "1"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One standalone cluster, one application on it (2 executors of 1 core) and one
    Connect client session for the module."""
    require_spark()
    work = tmp_path_factory.mktemp("standalone")
    env = spark_env(work)
    conf = {
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executorEnv.PYTHONPATH": env["PYTHONPATH"],
        "spark.pyspark.python": env["PYSPARK_PYTHON"],
        # the first job waits for both executors (each test asserts both ran tasks)
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }
    with (
        standalone_cluster(work / "cluster") as master,
        connect_server(work / "driver", master, conf) as url,
        connect_client(url) as session,
    ):
        yield session


async def test_batch_read_on_two_executors(
    cluster: Any, kafka_cluster: Any, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=4)
    assert await batch_read(cluster, kafka_cluster.bootstrap_servers, topic, 4) == EXECUTORS


async def test_batch_write_on_two_executors(
    cluster: Any, kafka_cluster: Any, new_topic: NewTopic
) -> None:
    topic = await new_topic(partitions=2)
    assert await batch_write(cluster, kafka_cluster.bootstrap_servers, topic, 2) == EXECUTORS


async def test_streaming_read_on_two_executors(
    cluster: Any, kafka_cluster: Any, new_topic: NewTopic, tmp_path: Path
) -> None:
    topic = await new_topic(partitions=4)
    executors = await streaming_read(cluster, kafka_cluster.bootstrap_servers, topic, 4, tmp_path)
    assert executors == EXECUTORS
