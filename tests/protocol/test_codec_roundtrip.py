"""Round trips of every generated message in every version, driven by Hypothesis.

For each (message, version): encode -> decode gives an equal object, and encoding the
decoded object gives the same bytes again.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_strategies import all_message_versions, case_id, message_strategy

from aiostream_kafka.protocol.base import Message

CASES = all_message_versions()

# ~600 (message, version) pairs: a few examples each still covers every one of them,
# and the whole directory stays well under a minute.
ROUND_TRIP = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@ROUND_TRIP
@given(data=st.data())
def test_round_trip(case: tuple[type[Message], int], data: st.DataObject) -> None:
    cls, version = case
    message = data.draw(message_strategy(cls, version))
    encoded = message.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded == message
    assert decoded.encode(version) == encoded


def test_every_version_of_every_api_is_covered() -> None:
    from aiostream_kafka.protocol.messages import API_KEYS

    covered = {(cls.__name__, version) for cls, version in CASES}
    for request_type, response_type in API_KEYS.values():
        for cls in (request_type, response_type):
            for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
                assert (cls.__name__, version) in covered
    assert len(API_KEYS) == 89  # every API of Kafka 4.3.1 that was not removed
