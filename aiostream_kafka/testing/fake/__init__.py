"""An in-process Kafka cluster for tests, speaking the wire protocol: :class:`FakeCluster`.

Built from the project's generated message classes (requests decoded and responses
encoded by the codec the client uses). One module per job:

* :mod:`.cluster` -- :class:`FakeCluster`: the brokers' lifecycle, in the caller's loop or
  in a thread of its own (``start_blocking``);
* :mod:`.server` -- one broker's listener: connections, frames, dispatch, answers in order;
* :mod:`.state` -- brokers, topics, partitions and leaders, producer ids, the hooks;
* :mod:`.log` -- partition logs: batches stored as sent, offsets, idempotence;
* :mod:`.groups` -- the classic group coordinator and committed offsets;
* :mod:`.fetch_sessions` -- KIP-227 fetch sessions;
* :mod:`.handlers` -- one module per area of the protocol;
* :mod:`.control` -- fault injection and inspection (``cluster.control``);
* :mod:`.clock` -- the time the fake's timeouts read: real, or a test's
  :class:`ManualClock`.
"""

from __future__ import annotations

from aiostream_kafka.testing.fake.clock import ManualClock
from aiostream_kafka.testing.fake.cluster import FakeCluster
from aiostream_kafka.testing.fake.control import Control
from aiostream_kafka.testing.fake.state import HandlerCrash, HandlerCrashError, RequestLogEntry

__all__ = [
    "Control",
    "FakeCluster",
    "HandlerCrash",
    "HandlerCrashError",
    "ManualClock",
    "RequestLogEntry",
]
