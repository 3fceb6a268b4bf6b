"""The fake broker's request handlers, one module per area; importing this package fills
:data:`~.registry.REGISTRY` (what ApiVersions advertises and the server dispatches on).

* :mod:`.metadata` -- ApiVersions, Metadata, DescribeCluster, FindCoordinator
* :mod:`.admin` -- CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords
* :mod:`.consumer_groups` -- KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe
* :mod:`.configs` -- DescribeConfigs, IncrementalAlterConfigs, AlterConfigs
* :mod:`.produce` -- Produce
* :mod:`.fetch` -- Fetch, ListOffsets, OffsetForLeaderEpoch
* :mod:`.groups` -- the classic group protocol, offsets, ListGroups/DescribeGroups/DeleteGroups
* :mod:`.sasl` -- SaslHandshake, SaslAuthenticate (SASL_PLAINTEXT listeners)
* :mod:`.share` -- share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe,
  ShareFetch, ShareAcknowledge, Describe/Alter/DeleteShareGroupOffsets
* :mod:`.transactions` -- InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
  TxnOffsetCommit, EndTxn
"""

from __future__ import annotations

from aiostream_kafka.testing.fake.handlers import (
    admin,
    configs,
    consumer_groups,
    fetch,
    groups,
    metadata,
    produce,
    sasl,
    share,
    transactions,
)
from aiostream_kafka.testing.fake.handlers.metadata import api_versions_response
from aiostream_kafka.testing.fake.handlers.registry import REGISTRY, ApiSpec, error_response

__all__ = [
    "REGISTRY",
    "ApiSpec",
    "admin",
    "api_versions_response",
    "configs",
    "consumer_groups",
    "error_response",
    "fetch",
    "groups",
    "metadata",
    "produce",
    "sasl",
    "share",
    "transactions",
]
