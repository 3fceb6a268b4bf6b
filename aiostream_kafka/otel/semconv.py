"""The names of the OpenTelemetry messaging semantic conventions we emit, and the switch
between their versions.

The messaging conventions are still *Development*: by default we emit those of semconv
1.44 (the schema the installed SDK 1.45 speaks: ``messaging.system``,
``messaging.kafka.offset``, ``messaging.kafka.message.key``); semconv 1.45 renamed the
Kafka-specific and system attributes (``messaging.system.name``, ``kafka.offset``,
``kafka.message.key``, ``kafka.message.tombstone``). As the conventions ask of an
instrumentation that emits an older version by default, ``OTEL_SEMCONV_STABILITY_OPT_IN``
(a comma-separated list) switches: ``messaging`` emits the new names only,
``messaging/dup`` both (it wins when both are listed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "DURATION_BUCKETS_S",
    "SCHEMA_URL",
    "Names",
    "names_for",
]

#: The schema of the names emitted by default.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"

#: The bucket boundaries (seconds) the messaging conventions give their duration
#: histograms (``messaging.client.operation.duration``, ``messaging.process.duration``).
DURATION_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip

# Attributes whose name is the same in both versions.
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
BATCH_COUNT = "messaging.batch.message_count"
CLIENT_ID = "messaging.client.id"
BODY_SIZE = "messaging.message.body.size"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

# Metric names (the same in both versions).
OPERATION_DURATION = "messaging.client.operation.duration"
SENT_MESSAGES = "messaging.client.sent.messages"
CONSUMED_MESSAGES = "messaging.client.consumed.messages"
PROCESS_DURATION = "messaging.process.duration"
#: Not in the conventions (they define no lag): ours, named under our own namespace.
CONSUMER_LAG = "aiostream_kafka.consumer.lag"


@dataclass(frozen=True, slots=True)
class Names:
    """The spellings of the attributes that changed between versions: each a tuple of the
    names to set (one, or both under ``messaging/dup``)."""

    system: tuple[str, ...]
    offset: tuple[str, ...]
    key: tuple[str, ...]
    tombstone: tuple[str, ...]


_OLD = Names(
    system=("messaging.system",),
    offset=("messaging.kafka.offset",),
    key=("messaging.kafka.message.key",),
    tombstone=("messaging.kafka.message.tombstone",),
)
_NEW = Names(
    system=("messaging.system.name",),
    offset=("kafka.offset",),
    key=("kafka.message.key",),
    tombstone=("kafka.message.tombstone",),
)
_DUP = Names(
    system=_OLD.system + _NEW.system,
    offset=_OLD.offset + _NEW.offset,
    key=_OLD.key + _NEW.key,
    tombstone=_OLD.tombstone + _NEW.tombstone,
)


def names_for(opt_in: str | None = None) -> Names:
    """The names to emit under ``OTEL_SEMCONV_STABILITY_OPT_IN`` (``opt_in``, read from
    the environment when None)."""
    if opt_in is None:
        opt_in = os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "")
    values = {v.strip().lower() for v in opt_in.split(",")}
    if "messaging/dup" in values:
        return _DUP
    if "messaging" in values:
        return _NEW
    return _OLD
