"""A Spark Connect server in a process of its own, started as PySpark's
``SparkSession.builder.remote("local[...]")`` starts its local one (a regular session with
the ``SparkConnectPlugin``), so that it can run beside the tests' classic session (one
SparkContext per process) and against any master.

Usage: ``python _connect_server.py MASTER PORT [key=value ...]``. Prints ``READY`` once
the session is up and runs until its standard input closes (or it gets SIGTERM).
"""

from __future__ import annotations

import sys


def main() -> None:
    master, port, *conf = sys.argv[1:]
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("aiostream-kafka-connect-tests")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", port)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for item in conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    print("READY", flush=True)
    try:
        sys.stdin.read()  # until the fixture closes it
    finally:
        session.stop()


if __name__ == "__main__":
    main()
