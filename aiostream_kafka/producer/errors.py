"""The producer's mapping of a broker's error code to its typed exception, shared by the
sender (Produce), the transaction manager (the coordinator's answers) and the producer
(metadata of a topic)."""

from __future__ import annotations

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol import error_codes as ec

__all__ = ["broker_error"]

_MESSAGE_TOO_LARGE = 10


def broker_error(code: int, context: str, broker_message: str | None = None) -> KafkaError:
    """The typed exception of Kafka error ``code``, its message saying what it concerns
    (``context``, the error's name, and the broker's message or the code's description).
    MESSAGE_TOO_LARGE maps to ``RecordTooLargeError``. Returns it; raises nothing."""
    info = ec.ERRORS_BY_CODE.get(code)
    name = info.name if info else f"error {code}"
    detail = broker_message or (info.description if info else "")
    cls: type[KafkaError] = ec.error_for_code(code)
    if code == _MESSAGE_TOO_LARGE:
        cls = ec.RecordTooLargeError
    return cls(f"{context}: {name}: {detail}".rstrip(": "))
