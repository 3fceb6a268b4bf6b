"""A broker's error code as the typed exception the clients raise: the one mapping used
by the producer (Produce, InitProducerId, the transaction coordinator's answers, topic
metadata), the Admin client and the group (commits, committed offsets, JoinGroup and
SyncGroup). Sans-IO."""

from __future__ import annotations

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.protocol import error_codes as ec

__all__ = ["broker_error"]


def broker_error(code: int, context: str, broker_message: str | None = None) -> KafkaError:
    """The typed exception of Kafka error ``code`` (:func:`~aiostream_kafka.protocol.
    error_codes.error_for_code`: MESSAGE_TOO_LARGE is ``RecordTooLargeError``, an unknown
    code an ``UnrecognizedBrokerError`` subclass carrying it), its message saying what it
    concerns: ``"<context>: <ERROR_NAME>: <broker_message or the code's description>"``.

    Returns the exception; raises nothing (``ValueError`` for 0, which is no error).
    """
    info = ec.ERRORS_BY_CODE.get(code)
    name = info.name if info else f"error {code}"
    detail = broker_message or (info.description if info else "")
    return ec.error_for_code(code)(f"{context}: {name}: {detail}".rstrip(": "))
