"""The exception hierarchy of aiostream_kafka.

Every error the library raises is a :class:`KafkaError`. Errors that the broker reports
by error code are subclasses generated from Kafka's error table (see
``aiostream_kafka.protocol.error_codes``); the others describe local conditions:

* :class:`ProtocolError` -- bytes from the wire that do not decode;
* :class:`CorruptRecordError` -- a record batch whose CRC or framing is wrong;
* :class:`NetworkError` -- a connection that could not be made or was lost (retriable);
* :class:`TLSHandshakeError` -- a TLS handshake that failed (not retriable);
* :class:`KafkaTimeoutError` -- an operation that did not finish within its timeout;
* :class:`BootstrapError` -- no bootstrap server answered within ``bootstrap_timeout_ms``;
* :class:`ConfigError` -- a configuration value that is invalid, raised before any I/O;
* :class:`ConsumerStateError` -- a consumer call that does not fit its state
  (:class:`NothingToConsumeError`: iterating with nothing assigned or subscribed);
* :class:`BrokerUnavailableError` -- the test harness could not provide a broker.
"""

from __future__ import annotations

from typing import TypeVar

_E = TypeVar("_E", bound=BaseException)


class KafkaError(Exception):
    """Base class of every error raised by aiostream_kafka.

    ``retriable`` tells whether repeating the same operation may succeed.
    ``error_code`` is Kafka's numeric error code when the broker reported the error,
    else ``None``.
    """

    retriable: bool = False
    error_code: int | None = None


class ProtocolError(KafkaError):
    """Bytes received from the wire do not form a valid Kafka message."""


class CorruptRecordError(ProtocolError):
    """A record batch failed its CRC check or is malformed (Kafka's CORRUPT_MESSAGE)."""

    retriable = True
    error_code = 2


class NetworkError(KafkaError):
    """A connection to a broker could not be made or was lost; the request may be retried."""

    retriable = True
    error_code = 13


class TLSHandshakeError(NetworkError):
    """The TLS handshake with a broker failed (untrusted certificate, wrong host name,
    no common protocol). Not retriable: fix the ``ssl_context`` or the broker's certificate."""

    retriable = False


class KafkaTimeoutError(KafkaError):
    """An operation did not complete within its configured timeout."""

    retriable = True
    error_code = 7


class BootstrapError(KafkaTimeoutError):
    """No bootstrap server answered within ``bootstrap_timeout_ms``.

    ``causes`` maps each ``"host:port"`` tried to the last error it gave (connection
    refused, a timeout, a TLS failure...). Check ``bootstrap_servers``, the port (the
    broker's listener for this ``security_protocol``) and that the brokers are up.
    """

    def __init__(self, message: str, causes: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.causes: dict[str, str] = dict(causes or {})


class ClientClosedError(KafkaError):
    """The client (Producer, Consumer or Admin) was closed: a call still running when
    ``close()`` began, or made after it, fails with this. Not retriable."""


class BufferFullError(KafkaError):
    """``Producer.enqueue_nowait()`` found no room: ``buffer_memory`` is taken by records
    not yet acknowledged (or too many records wait for a topic's metadata). Nothing was
    buffered. Retriable: wait for room (``await producer.wait_for_buffer()``), or raise
    ``buffer_memory``. (asyncio's ``QueueFull``; confluent-kafka's ``BufferError``.)"""

    retriable = True


class RecordsNotDeliveredError(KafkaError):
    """Records given to ``Producer.enqueue_nowait()`` without an ``on_delivery`` callback
    failed (each failure was also logged): raised by ``flush()`` and ``close()`` so that
    no failure goes unnoticed. ``count`` is how many failed since the last report,
    ``first_error`` the first of them."""

    def __init__(self, count: int, first_error: BaseException) -> None:
        super().__init__(
            f"{count} record(s) given to enqueue_nowait() without on_delivery failed; "
            f"the first: {first_error!r}"
        )
        self.count = count
        self.first_error = first_error


class ConfigError(KafkaError, ValueError):
    """A configuration value is invalid. Raised before any network I/O."""


class CommitFailedError(KafkaError):
    """Offsets could not be committed because this member no longer owns the partitions
    (a rebalance revoked them, or the member was removed from the group). Nothing was
    written; the new owner continues from the last committed offset."""


class FencedMemberError(KafkaError):
    """Another consumer joined with this member's ``group_instance_id`` (static membership):
    this one is fenced and stops. Not retriable: give each instance a unique id."""


class ConsumerStateError(KafkaError):
    """The call does not fit the consumer's state: a partition that is not assigned, an
    iterator used before ``start()``, or two kinds of iterator mixed. (Also importable from
    ``aiostream_kafka.consumer.errors``.)"""


class NothingToConsumeError(ConsumerStateError):
    """An iterator (``stream()``, ``batches()``, ``partitioned_stream()``, ``async for ...
    in consumer``) was started on a consumer with nothing assigned and nothing subscribed:
    it would wait forever. Call ``consumer.subscribe([...])`` (with a ``group_id``) or
    ``consumer.assign([...])`` first, or give the topics to ``Consumer(...)``."""


class UnsupportedVersionError(KafkaError):
    """The client and the broker share no version of an API (Kafka's UNSUPPORTED_VERSION)."""

    error_code = 35


class BrokerUnavailableError(KafkaError):
    """The test harness could not provide a Kafka broker (missing Java/Maven, failed start)."""


def reraisable(exc: _E) -> _E:
    """Return ``exc`` ready to be raised again with the traceback it had when first
    stored, for errors kept and raised to every later caller (a consumer's fatal error, a
    failed member's error). Without this, each ``raise`` of the same object prepends the
    raising frames to its traceback, which then grows without bound in a long-lived
    service."""
    origin = exc.__dict__.setdefault("_aiostream_kafka_tb", exc.__traceback__)
    return exc.with_traceback(origin)


__all__ = [
    "BootstrapError",
    "BrokerUnavailableError",
    "BufferFullError",
    "ClientClosedError",
    "CommitFailedError",
    "ConfigError",
    "CorruptRecordError",
    "FencedMemberError",
    "KafkaError",
    "KafkaTimeoutError",
    "NetworkError",
    "ProtocolError",
    "RecordsNotDeliveredError",
    "TLSHandshakeError",
    "UnsupportedVersionError",
]
