"""What a handler of the fake broker gets with a request: the cluster's state, the broker
that received it, the request header and version, and the client's address."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiostream_kafka.protocol.messages.request_header import RequestHeader
from aiostream_kafka.testing.fake.sasl import SaslServer
from aiostream_kafka.testing.fake.state import BrokerInfo, ClusterState

__all__ = ["PLAINTEXT", "SASL_PLAINTEXT", "Connection", "RequestContext"]

PLAINTEXT = "PLAINTEXT"
SASL_PLAINTEXT = "SASL_PLAINTEXT"


@dataclass(slots=True)
class Connection:
    """One client connection: its listener and, on a SASL listener, its authentication
    (requests other than ApiVersions and the SASL ones close it until authenticated)."""

    listener: str = PLAINTEXT
    sasl: SaslServer | None = None
    #: Set by a handler: close the connection once its response is written.
    close_after_response: bool = False
    #: Called once the connection is closed (a share session ends with it).
    on_close: list[Callable[[], None]] = field(default_factory=list)


@dataclass(slots=True)
class RequestContext:
    """One request being served."""

    state: ClusterState
    broker: BrokerInfo
    header: RequestHeader
    version: int
    client_host: str
    connection: Connection = field(default_factory=Connection)

    @property
    def node_id(self) -> int:
        """The node id of the broker serving the request."""
        return self.broker.node_id

    def port_of(self, broker: BrokerInfo) -> int:
        """The port of ``broker``'s listener of the kind this request came in on (what
        Metadata and the other answers naming brokers give)."""
        if self.connection.listener == SASL_PLAINTEXT:
            return broker.sasl_port
        return broker.port

    @property
    def client_id(self) -> str:
        """The client id of the request header ("" when null)."""
        return self.header.client_id or ""
