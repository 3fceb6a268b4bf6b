"""What the share consumer takes and raises besides records: :class:`AcknowledgeType`
and :class:`ShareAcknowledgeError`. (:class:`~aiostream_kafka.structs.ShareRecord` lives
in ``structs`` beside ``Record``, whose compiled class it extends.)"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from aiostream_kafka.errors import KafkaError
from aiostream_kafka.structs import TopicPartition

__all__ = ["AcknowledgeType", "ShareAcknowledgeError"]


class AcknowledgeType(enum.IntEnum):
    """How a share-group record is acknowledged (KIP-932; the values are the wire's).

    ``ACCEPT``: processed, archived. ``RELEASE``: given back, delivered again (its
    ``delivery_count`` grows). ``REJECT``: unprocessable, archived, never delivered again.
    ``RENEW`` (KIP-1222, Kafka 4.3+): keep the lock longer; the record stays to be
    acknowledged (the consumer renews locks itself with ``auto_renew_locks``).
    """

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class ShareAcknowledgeError(KafkaError):
    """The broker refused acknowledgements, or they could not be delivered (the share
    session they belonged to was lost): ``errors`` maps each partition to its error.
    The records concerned were not acknowledged; the broker delivers them again once
    their acquisition lock ends (or at once, when the session was lost)."""

    def __init__(self, errors: Mapping[TopicPartition, KafkaError]) -> None:
        self.errors = dict(errors)
        parts = "; ".join(
            f"{tp.topic}[{tp.partition}]: {e}" for tp, e in sorted(self.errors.items())
        )
        super().__init__(f"acknowledgements not applied: {parts}")
        self.retriable = all(e.retriable for e in self.errors.values())
