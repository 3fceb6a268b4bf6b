"""The KIP-848 member's checks that need no broker."""

from __future__ import annotations

import re
from typing import Any

import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.group.config import GroupConfig
from aiostream_kafka.group.consumer_protocol import ConsumerProtocolMember


class _Cluster:
    """What subscribe() touches of the cluster: the topics to keep metadata of."""

    def __init__(self) -> None:
        self.tracked: set[str] = set()

    def track(self, topics: Any) -> None:
        self.tracked.update(topics)


def _member() -> ConsumerProtocolMember:
    config = GroupConfig("g", protocol="consumer")
    return ConsumerProtocolMember(_Cluster(), config, None)  # type: ignore[arg-type]


def test_a_pattern_goes_to_the_broker_as_its_text() -> None:
    member = _member()
    member.subscribe(pattern=re.compile(r"orders\..*"))
    request = member._request(0)
    assert request.subscribed_topic_regex == r"orders\..*"
    assert request.subscribed_topic_names is None
    assert request.topic_partitions == []  # a join owns nothing
    assert request.rebalance_timeout_ms == 300_000


@pytest.mark.parametrize(
    ("pattern", "match"),
    [("", "non-empty"), (re.compile("orders", re.IGNORECASE), "inline")],
)
def test_patterns_the_broker_would_read_otherwise_are_refused(pattern: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _member().subscribe(pattern=pattern)


def test_after_the_join_only_changed_fields_are_sent() -> None:
    member = _member()
    member.subscribe(["a"])
    member._full = False
    member._sent_subscription = (frozenset({"a"}), None)
    member._sent_owned = frozenset()
    member._epoch = 3
    request = member._request(3)
    assert request.subscribed_topic_names is None and request.subscribed_topic_regex is None
    assert request.rebalance_timeout_ms == -1 and request.topic_partitions is None
    assert request.instance_id is None and request.server_assignor is None
    member._topics = frozenset({"a", "b"})
    assert member._request(3).subscribed_topic_names == ["a", "b"]
