"""What a handler of the fake broker gets with a request: the cluster's state, the broker
that received it, the request header and version, and the client's address."""

from __future__ import annotations

from dataclasses import dataclass

from aiostream_kafka.protocol.messages.request_header import RequestHeader
from aiostream_kafka.testing.fake.state import BrokerInfo, ClusterState

__all__ = ["RequestContext"]


@dataclass(slots=True)
class RequestContext:
    """One request being served."""

    state: ClusterState
    broker: BrokerInfo
    header: RequestHeader
    version: int
    client_host: str

    @property
    def node_id(self) -> int:
        """The node id of the broker serving the request."""
        return self.broker.node_id

    @property
    def client_id(self) -> str:
        """The client id of the request header ("" when null)."""
        return self.header.client_id or ""
