"""Testing helpers: a real Kafka cluster (:class:`KafkaCluster`), an in-process fake one
(:class:`FakeCluster`) and pytest fixtures.

The pytest plugin (``aiostream_kafka.testing.pytest_plugin``, registered through the
``pytest11`` entry point) provides the fixtures ``kafka_cluster`` and ``new_topic``.
"""

from __future__ import annotations

from aiostream_kafka.testing.cluster import KafkaCluster
from aiostream_kafka.testing.fake import FakeCluster
from aiostream_kafka.testing.jars import KAFKA_VERSION, ensure_kafka_jars

__all__ = ["KAFKA_VERSION", "FakeCluster", "KafkaCluster", "ensure_kafka_jars"]
