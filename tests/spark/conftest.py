"""One SparkSession for the Spark tests (``local[2]``, no UI), with the data source
registered. Without pyspark or Java the Spark tests are skipped locally, but fail when the
environment variable CI is set."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _servers import require_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession (2 cores) with ``aiostream_kafka`` registered."""
    require_spark()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from aiostream_kafka.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("aiostream-kafka-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
