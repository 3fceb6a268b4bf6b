"""Kafka's error table as exception classes."""

from __future__ import annotations

import pytest

from aiostream_kafka import errors
from aiostream_kafka.protocol import error_codes
from aiostream_kafka.protocol.error_codes import (
    ERRORS,
    ERRORS_BY_NAME,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    UnknownTopicOrPartitionError,
    UnrecognizedBrokerError,
    error_for_code,
    error_from_code,
    is_retriable,
    raise_for_code,
)


def test_every_code_from_minus_one_to_133() -> None:
    codes = [info.code for info in ERRORS]
    assert codes == [-1, *range(1, 134)]
    for info in ERRORS:
        cls = info.error_class
        assert issubclass(cls, errors.KafkaError)
        assert cls.error_code == info.code
        assert cls.retriable == info.retriable
        assert cls.__name__.endswith("Error")
        assert info.description and "\n" not in info.description
        assert error_for_code(info.code) is cls


def test_classes_from_errors_module() -> None:
    assert error_for_code(2) is errors.CorruptRecordError
    assert error_for_code(7) is errors.KafkaTimeoutError
    assert error_for_code(13) is errors.NetworkError
    assert error_for_code(35) is errors.UnsupportedVersionError
    assert ERRORS_BY_NAME["REQUEST_TIMED_OUT"].error_class is errors.KafkaTimeoutError


def test_names_and_retriable_flags() -> None:
    assert error_for_code(3) is UnknownTopicOrPartitionError
    assert error_for_code(6) is NotLeaderOrFollowerError
    assert error_for_code(45) is OutOfOrderSequenceNumberError
    assert error_for_code(17) is error_codes.InvalidTopicError
    assert error_for_code(56) is error_codes.KafkaStorageError
    assert error_for_code(-1) is error_codes.UnknownServerError
    retriable = {info.name for info in ERRORS if info.retriable}
    assert {
        "NOT_LEADER_OR_FOLLOWER",
        "NOT_COORDINATOR",
        "REQUEST_TIMED_OUT",
        "CONCURRENT_TRANSACTIONS",
        "SHARE_SESSION_LIMIT_REACHED",
    } <= retriable
    assert not retriable & {
        "OFFSET_OUT_OF_RANGE",
        "REBALANCE_IN_PROGRESS",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "UNSUPPORTED_VERSION",
        "TOPIC_AUTHORIZATION_FAILED",
        "UNKNOWN_SERVER_ERROR",
    }
    assert len(retriable) == 32
    assert ERRORS_BY_NAME["NOT_LEADER_OR_FOLLOWER"].invalid_metadata
    assert not ERRORS_BY_NAME["NOT_COORDINATOR"].invalid_metadata
    assert is_retriable(6) and not is_retriable(0) and not is_retriable(5000)


def test_raise_for_code() -> None:
    raise_for_code(0)
    with pytest.raises(UnknownTopicOrPartitionError, match="no such topic") as info:
        raise_for_code(3, "no such topic")
    assert info.value.error_code == 3
    assert info.value.retriable
    with pytest.raises(NotLeaderOrFollowerError, match="NOT_LEADER_OR_FOLLOWER"):
        raise_for_code(6)


def test_unknown_code_gets_a_class_carrying_it() -> None:
    cls = error_for_code(4242)
    assert issubclass(cls, UnrecognizedBrokerError)
    assert cls.error_code == 4242
    assert not cls.retriable
    assert error_for_code(4242) is cls
    assert isinstance(error_from_code(4242), UnrecognizedBrokerError)
    with pytest.raises(UnrecognizedBrokerError, match="4242"):
        raise_for_code(4242)
    with pytest.raises(ValueError):
        error_for_code(0)
