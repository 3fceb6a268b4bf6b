"""The producer's mapping of a broker's error code to its typed exception, shared by the
sender (Produce), the transaction manager (the coordinator's answers) and the producer
(metadata of a topic): the one mapping of every client, :mod:`aiostream_kafka.requests.errors`
(MESSAGE_TOO_LARGE is ``RecordTooLargeError`` there too)."""

from __future__ import annotations

from aiostream_kafka.requests.errors import broker_error

__all__ = ["broker_error"]
