"""The connection layer: one :class:`BrokerConnection` per socket, pooled per broker and lane."""

from aiostream_kafka.net.connection import BrokerConnection, ConnectionSettings
from aiostream_kafka.net.pool import ConnectionPool, Lane

__all__ = ["BrokerConnection", "ConnectionPool", "ConnectionSettings", "Lane"]
