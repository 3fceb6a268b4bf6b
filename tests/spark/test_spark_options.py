"""Bad options fail at load()/save()/start() with a message saying what is wrong and what to
do; the text is checked as the user sees it (wrapped by Spark)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiostream_kafka.testing import KafkaCluster

NewTopic = Callable[..., Awaitable[str]]


def _load(spark: Any, options: dict[str, str], *, stream: bool = False) -> Any:
    reader = (spark.readStream if stream else spark.read).format("aiostream_kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a", "assign": '{"a":[0]}'},
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign'",
        ),
        (
            {"kafka.bootstrap.servers": "127.0.0.1:1"},
            "(given: none)",
        ),
        (
            {
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "subscribe": "a",
                "startingOffsets": "bogus",
            },
            "option 'startingOffsets' must be 'earliest', 'latest' or JSON offsets",
        ),
        (
            {"subscribe": "a"},
            "option 'kafka.bootstrap.servers' is required",
        ),
        (
            {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a", "failOnDataLoss": "yes"},
            "option 'failOnDataLoss' must be 'true' or 'false'",
        ),
        (
            {
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "subscribe": "a",
                "kafka.auto.offset.reset": "x",
            },
            "set the source option 'startingOffsets' instead",
        ),
    ],
)
def test_bad_read_options_fail_at_load(spark: Any, options: dict[str, str], expected: str) -> None:
    with pytest.raises(Exception) as info:
        _load(spark, options)
    assert expected in str(info.value)
    assert "ConfigError" in str(info.value)


def test_bad_stream_options_fail_at_load(spark: Any) -> None:
    with pytest.raises(Exception) as info:
        _load(
            spark,
            {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribePattern": "a", "subscribe": "b"},
            stream=True,
        )
    assert "exactly one of the options" in str(info.value)


def test_batch_only_rules(spark: Any, kafka_cluster: KafkaCluster) -> None:
    options = {
        "kafka.bootstrap.servers": kafka_cluster.bootstrap_servers,
        "subscribe": "a",
        "startingOffsets": "latest",
    }
    with pytest.raises(Exception) as info:
        _load(spark, options).collect()
    assert "startingOffsets='latest' is not valid for batch queries" in str(info.value)


def test_overwrite_and_missing_columns_fail_at_save(
    spark: Any, kafka_cluster: KafkaCluster
) -> None:
    bs = kafka_cluster.bootstrap_servers
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception) as info:
        df.write.format("aiostream_kafka").option("kafka.bootstrap.servers", bs).option(
            "topic", "t"
        ).mode("overwrite").save()
    assert "cannot overwrite" in str(info.value)
    assert '.mode("append")' in str(info.value)

    with pytest.raises(Exception) as info:
        df.write.format("aiostream_kafka").option("kafka.bootstrap.servers", bs).mode(
            "append"
        ).save()
    assert "topic option required when no 'topic' attribute is present" in str(info.value)

    with pytest.raises(Exception) as info:
        df.select("key").write.format("aiostream_kafka").option(
            "kafka.bootstrap.servers", bs
        ).option("topic", "t").mode("append").save()
    assert "Required attribute 'value' not found" in str(info.value)

    with pytest.raises(Exception) as info:
        df.write.format("aiostream_kafka").option("topic", "t").mode("append").save()
    assert "option 'kafka.bootstrap.servers' is required" in str(info.value)
