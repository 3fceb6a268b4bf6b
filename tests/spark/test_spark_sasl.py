"""The Spark data source over SASL_SSL (SCRAM) and SASL_PLAINTEXT (PLAIN), with the JVM
connector's option names: ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config`` and the PEM truststore."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _data import produce_rows

from aiostream_kafka.testing import KafkaCluster, probe


def _sasl_options(cluster: KafkaCluster, user: str = "admin") -> dict[str, str]:
    password = cluster.sasl_users[user]
    return {
        "kafka.bootstrap.servers": cluster.sasl_ssl_bootstrap_servers,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";'
        ),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(cluster.tls_ca_file),
    }


async def test_write_then_read_over_sasl_ssl(spark: Any, kafka_sasl_cluster: KafkaCluster) -> None:
    cluster = kafka_sasl_cluster
    topic = f"spark-sasl-{uuid.uuid4().hex[:8]}"
    await probe.create_topic(cluster.bootstrap_servers, topic, 2, 1, None)
    options = _sasl_options(cluster)
    rows = [(f"k{i}", f"v{i}") for i in range(50)]
    writer = spark.createDataFrame(rows, "key string, value string").write.format("aiostream_kafka")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.option("topic", topic).mode("append").save()
    reader = spark.read.format("aiostream_kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    got = reader.option("subscribe", topic).load().collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in got) == sorted(rows)


async def test_a_wrong_password_fails_the_read_fast_and_says_why(
    spark: Any, kafka_sasl_cluster: KafkaCluster
) -> None:
    cluster = kafka_sasl_cluster
    options = _sasl_options(cluster)
    options["kafka.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="not-her-password";'
    )
    reader = spark.read.format("aiostream_kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    began = time.monotonic()
    with pytest.raises(Exception) as failure:  # Spark wraps the worker's error
        reader.option("subscribe", "any-topic").load().collect()
    elapsed = time.monotonic() - began
    text = str(failure.value)
    assert "SaslAuthentication" in text and "SCRAM-SHA-256" in text, text[-2000:]
    assert "not-her-password" not in text
    assert elapsed < 30, elapsed


async def test_stream_read_and_write_over_sasl_plaintext_plain(
    spark: Any, kafka_sasl_cluster: KafkaCluster, tmp_path: Path
) -> None:
    cluster = kafka_sasl_cluster
    source, out = (f"spark-sasl-{name}-{uuid.uuid4().hex[:8]}" for name in ("in", "out"))
    for topic in (source, out):
        await probe.create_topic(cluster.bootstrap_servers, topic, 2, 1, None)
    rows = await produce_rows(cluster.bootstrap_servers, source, 2, 40, headers=False)
    password = cluster.sasl_users["admin"]
    options = {
        "kafka.bootstrap.servers": cluster.sasl_plaintext_bootstrap_servers,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{password}";'
        ),
    }
    reader = spark.readStream.format("aiostream_kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (
        reader.option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("aiostream_kafka")
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    query = (
        writer.option("topic", out)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240)
    assert query.exception() is None
    got = (
        spark.read.format("aiostream_kafka")
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
        .option("subscribe", out)
        .load()
        .collect()
    )
    assert sorted((bytes(r.key), bytes(r.value)) for r in got) == sorted(
        (r.key, r.value) for r in rows
    )
