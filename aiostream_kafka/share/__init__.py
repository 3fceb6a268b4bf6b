"""Share groups (KIP-932): Kafka as a queue. :class:`ShareConsumer` takes records of
partitions it shares with the other members of its group; each record is handed to one
member under a lock and acknowledged (accepted, released, rejected) by it."""

from aiostream_kafka.structs import ShareRecord

from .consumer import ShareConsumer
from .types import AcknowledgeType, ShareAcknowledgeError

__all__ = ["AcknowledgeType", "ShareAcknowledgeError", "ShareConsumer", "ShareRecord"]
