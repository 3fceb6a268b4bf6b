"""One SparkSession for the Spark tests (``local[2]``, no UI), with the data source
registered. Without pyspark or Java the Spark tests are skipped locally, but fail when the
environment variable CI is set."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def _missing() -> str | None:
    try:
        import pyarrow  # type: ignore[import-untyped]  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"the spark extra is not installed ({exc}); pip install -e '.[spark]'"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java on PATH or JAVA_HOME) for Spark"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession (2 cores) with ``aiostream_kafka`` registered."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark tests cannot run under CI: {reason}")
        pytest.skip(reason)
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
