"""The consumer on a real 3-broker cluster with racks: follower fetching (KIP-392) and
failures of one broker that must not end the consumer.

One proxied cluster (a FaultProxy in front of each broker) with racks ``rack-a``,
``rack-b``, ``rack-c`` (brokers 1, 2, 3) and the rack-aware replica selector serves every
test of the module. A consumer with ``client_rack="rack-a"`` is served by broker 1 for
every partition broker 1 holds a replica of; a leader elsewhere answers its first Fetch
with ``preferred_read_replica=1`` and no records.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import pytest_asyncio
from helpers import eventually
from test_consumer import check_in_order, index_of, produce, take, tps

from aiostream_kafka.admin import Admin, NewTopic
from aiostream_kafka.cluster import Cluster
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer import Consumer
from aiostream_kafka.consumer.fetcher import Fetcher
from aiostream_kafka.errors import KafkaError, ProtocolError, UnsupportedVersionError
from aiostream_kafka.net.connection import BrokerConnection
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.protocol.base import Request
from aiostream_kafka.protocol.messages.consumer_protocol_subscription import (
    ConsumerProtocolSubscription,
)
from aiostream_kafka.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiostream_kafka.protocol.messages.fetch import FetchRequest, FetchResponse
from aiostream_kafka.protocol.messages.list_offsets import ListOffsetsRequest
from aiostream_kafka.protocol.messages.metadata import MetadataRequest
from aiostream_kafka.structs import Record, TopicPartition
from aiostream_kafka.testing import KafkaCluster

pytestmark = [
    pytest.mark.real_broker(
        reason=(
            "a proxied cluster with racks (FaultProxy in front of each broker, follower "
            "fetching by rack): proxies need brokers that advertise the proxies' addresses "
            "(local jars)"
        )
    ),
    pytest.mark.skipif(
        bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) and not os.environ.get("CI"),
        reason="these tests need brokers this process starts; KAFKA_BOOTSTRAP_SERVERS is set",
    ),
]

RACKS = ["rack-a", "rack-b", "rack-c"]
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
# Leaders 1, 2, 3: every broker leads one partition and follows the two others.
SPREAD = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


# Fixtures of this module that start brokers: their tests are marked ``broker`` (conftest).
broker_fixtures = ("racked",)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def racked() -> AsyncIterator[KafkaCluster]:
    async with KafkaCluster(
        brokers=3,
        racks=RACKS,
        proxied=True,
        server_properties={"replica.selector.class": RACK_AWARE},
    ) as cluster:
        yield cluster


async def _topic(cluster: KafkaCluster, name: str, assignment: dict[int, list[int]]) -> str:
    topic = f"{name}-{uuid.uuid4().hex[:8]}"
    async with Admin(cluster.bootstrap_servers, default_api_timeout_ms=60_000) as admin:
        created = await admin.create_topics(
            [NewTopic(topic, replica_assignment=assignment, config={"min.insync.replicas": "2"})]
        )
    description = created[topic]
    assert description is not None
    leaders = {p.partition: p.leader for p in description.partitions}
    assert leaders == {p: replicas[0] for p, replicas in assignment.items()}, leaders
    return topic


def _fetchers(consumer: Consumer) -> dict[int, Fetcher]:
    return consumer._engine.fetchers


def _leader(consumer: Consumer, tp: TopicPartition) -> int:
    meta = consumer.cluster.snapshot.partition(tp)
    assert meta is not None
    return meta.leader


async def _idle_fetches(consumer: Consumer, seconds: float) -> tuple[int, dict[int, int]]:
    """Fetch requests sent while nothing is produced: in total and per broker."""
    before = consumer.metrics().fetch_requests
    per_node = {n: f.requests for n, f in _fetchers(consumer).items()}
    await asyncio.sleep(seconds)
    after = {n: f.requests - per_node.get(n, 0) for n, f in _fetchers(consumer).items()}
    return consumer.metrics().fetch_requests - before, after


def _check_all(records: list[Record], count: int, partitions: int) -> None:
    check_in_order(records, partitions)
    assert sorted(index_of(r) for r in records) == list(range(count))


# -- follower fetching (KIP-392) -------------------------------------------------------------


async def test_a_consumer_reads_partitions_led_elsewhere_from_the_replica_in_its_rack(
    racked: KafkaCluster,
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-follower", SPREAD)
    await produce(bootstrap, topic, 300, 3)
    async with Consumer(bootstrap, client_rack="rack-a") as consumer:
        consumer.assign(tps(topic, 3))
        started = time.monotonic()
        got = await take(consumer.stream(), 300, within=15)
        elapsed = time.monotonic() - started
        _check_all(got, 300, 3)
        fetchers = _fetchers(consumer)
        # Partitions 1 and 2 (leaders 2 and 3) came from broker 1, their replica in
        # rack-a; their leaders sent no record, only the preferred replica.
        assert fetchers[1].records == 300
        assert fetchers[1].follower_records == 200
        for node in (2, 3):
            assert fetchers[node].records == 0
            assert fetchers[node].replica_moves == 1
        for tp in tps(topic, 3)[1:]:
            state = consumer._engine.partitions[tp]
            assert state.read_replica == 1 and _leader(consumer, tp) != 1
        # Idle: only broker 1 is asked, about once per long poll (fetch_max_wait_ms=500).
        total, per_node = await _idle_fetches(consumer, 3.0)
        assert per_node.get(2, 0) == 0 and per_node.get(3, 0) == 0, per_node
        assert total <= 10, per_node
        print(
            f"300 records in {elapsed:.2f} s; requests per broker "
            f"{ {n: f.requests for n, f in fetchers.items()} }; {total} fetches in 3 s idle"
        )


async def test_without_client_rack_every_partition_comes_from_its_leader(
    racked: KafkaCluster,
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-none", SPREAD)
    await produce(bootstrap, topic, 300, 3)
    async with Consumer(bootstrap) as consumer:
        consumer.assign(tps(topic, 3))
        _check_all(await take(consumer.stream(), 300, within=15), 300, 3)
        fetchers = _fetchers(consumer)
        assert {n: f.records for n, f in fetchers.items()} == {1: 100, 2: 100, 3: 100}
        assert all(f.follower_records == 0 and f.replica_moves == 0 for f in fetchers.values())


async def test_the_group_subscription_carries_client_rack(racked: KafkaCluster) -> None:
    """KIP-881: the member's rack reaches the coordinator (and the assignors) in its
    subscription metadata."""
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-group", SPREAD)
    await produce(bootstrap, topic, 30, 3)
    group = f"rack-group-{uuid.uuid4().hex[:8]}"
    async with Consumer(bootstrap, group_id=group, client_rack="rack-b") as consumer:
        consumer.subscribe([topic])
        got = await take(consumer.stream(), 30, within=30)
        assert len(got) == 30
        async with Admin(bootstrap) as admin:
            coordinator = await admin.find_coordinator(group)
            response = await admin.cluster.send(coordinator, DescribeGroupsRequest(groups=[group]))
        assert isinstance(response, DescribeGroupsResponse)
        (member,) = response.groups[0].members
        subscription, _ = ConsumerProtocolSubscription.decode_versioned(member.member_metadata)
        assert subscription.rack_id == "rack-b"
        assert subscription.topics == [topic]


async def test_an_out_of_range_answer_from_the_replica_goes_back_to_the_leader_not_a_reset(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica answers OFFSET_OUT_OF_RANGE (it may lag the leader): the partition is
    asked of its leader again, never reset (a reset to "latest" would skip records here).
    Partition 1 fails once and goes back to the replica; partition 2 fails twice in a
    row, so its leader (3) is asked without the rack and serves it itself."""
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-out-of-range", SPREAD)
    await produce(bootstrap, topic, 300, 3)
    faults = {1: 1, 2: 2}

    def out_of_range(request: Request, response: Any) -> Any:
        assert isinstance(response, FetchResponse)
        for t in response.responses:
            for pd in t.partitions:
                if faults.get(pd.partition_index, 0) > 0:
                    faults[pd.partition_index] -= 1
                    pd.error_code = 1  # OFFSET_OUT_OF_RANGE
                    pd.records = None
        return response

    async with Consumer(bootstrap, client_rack="rack-a", auto_offset_reset="latest") as consumer:
        with _patched_requests(monkeypatch, 1, (FetchRequest,), out_of_range):
            consumer.assign(tps(topic, 3))
            for tp in tps(topic, 3):
                consumer.seek(tp, 0)
            got = await take(consumer.stream(), 300, within=15)
        _check_all(got, 300, 3)
        assert faults == {1: 0, 2: 0}
        assert consumer.metrics().position_resets == 0
        fetchers = _fetchers(consumer)
        assert fetchers[1].replica_fallbacks == 3
        assert fetchers[1].follower_records == 100  # partition 1, back on the replica
        assert fetchers[3].records == 100  # partition 2, from its leader without the rack
        assert fetchers[3].rackless_until > time.monotonic()
        assert fetchers[2].records == 0 and fetchers[2].rackless_until == 0.0


# -- one broker failing does not end the consumer ---------------------------------------------


@contextmanager
def _patched_requests(
    monkeypatch: pytest.MonkeyPatch, node_id: int, types: tuple[type[Request], ...], fault: Any
) -> Iterator[list[int]]:
    """Requests of ``types`` to broker ``node_id`` go through ``fault(request, response)``
    (which raises, or returns the response to hand back); yields the count of faults."""
    original = BrokerConnection.request
    hits: list[int] = [0]

    async def request(self: BrokerConnection, request: Request, **kwargs: Any) -> Any:
        response = await original(self, request, **kwargs)
        if self.node_id == node_id and isinstance(request, types):
            hits[0] += 1
            return fault(request, response)
        return response

    with monkeypatch.context() as patch:
        patch.setattr(BrokerConnection, "request", request)
        yield hits


async def _wait_healthy_without(consumer: Consumer, stream: Any, count: int) -> list[Record]:
    """Read ``count`` records; the consumer must stay healthy throughout."""
    got = await take(stream, count, within=20)
    health = consumer.health()
    assert health.healthy and health.error is None, health
    assert consumer._engine.fatal is None
    return got


async def test_no_common_fetch_version_with_one_broker_fails_only_that_broker(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "broker-version", SPREAD)
    await produce(bootstrap, topic, 300, 3)
    original = BrokerConnection.version_for

    def version_for(self: BrokerConnection, request_type: type[Request]) -> int:
        if self.node_id == 2 and request_type is FetchRequest:
            raise UnsupportedVersionError("test: broker 2 shares no Fetch version with us")
        return original(self, request_type)

    async with Consumer(bootstrap) as consumer:
        consumer.assign(tps(topic, 3))
        stream = consumer.stream()
        with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
            patch.setattr(BrokerConnection, "version_for", version_for)
            got = await _wait_healthy_without(consumer, stream, 200)
            assert {r.partition for r in got} == {0, 2}
            await asyncio.sleep(2.0)  # broker 2 failed rounds meanwhile, backed off
            fetcher = _fetchers(consumer)[2]
            assert fetcher.broker_errors >= 2
            assert isinstance(fetcher.broker_error, UnsupportedVersionError)
            health = consumer.health()
            assert health.healthy  # a restart would not cure a broker's version
            assert len(health.broker_errors) == 1 and health.broker_errors[0].startswith(
                "broker 2:"
            ), health.broker_errors
            warnings = [
                r.getMessage() for r in caplog.records if "fetch from broker 2" in r.getMessage()
            ]
            # One WARNING naming the broker, not one per retry.
            assert len(warnings) == 1 and "UnsupportedVersionError" in warnings[0], warnings
            errors_while_broken = fetcher.broker_errors
        # Fixed (a broker upgraded, say): its partition is read too.
        got += await take(stream, 100, within=20)
        _check_all(got, 300, 3)
        assert fetcher.broker_error is None and consumer.health().broker_errors == ()
        assert consumer.health().last_progress_at is not None
        print(f"{errors_while_broken} failed rounds to broker 2 in ~2.5 s (backed off)")


async def test_responses_that_do_not_decode_from_one_broker_fail_only_that_broker(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fetch and ListOffsets answers of broker 3 are garbage: the fetcher and the offset
    resolver retry that broker; the consumer reads the others meanwhile."""
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "broker-garbage", SPREAD)
    await produce(bootstrap, topic, 300, 3)

    def garbage(request: Request, response: Any) -> Any:
        raise ProtocolError(f"test: {type(request).__name__} answer of broker 3 does not decode")

    async with (
        Consumer(bootstrap) as sought,  # positioned by seek: only Fetch meets the garbage
        Consumer(bootstrap) as reset,  # positioned by ListOffsets (auto_offset_reset)
    ):
        with _patched_requests(monkeypatch, 3, (FetchRequest, ListOffsetsRequest), garbage) as hits:
            sought.assign(tps(topic, 3))
            for tp in tps(topic, 3):
                sought.seek(tp, 0)
            reset.assign(tps(topic, 3))
            sought_stream, reset_stream = sought.stream(), reset.stream()
            got_sought = await _wait_healthy_without(sought, sought_stream, 200)
            got_reset = await _wait_healthy_without(reset, reset_stream, 200)
            assert {r.partition for r in got_sought} == {r.partition for r in got_reset} == {0, 1}
            await asyncio.sleep(1.5)
            assert _fetchers(sought)[3].broker_errors >= 1
            assert isinstance(_fetchers(sought)[3].broker_error, ProtocolError)
            assert reset.position(TopicPartition(topic, 2)) is None  # still not known
            assert sought.health().healthy and reset.health().healthy
            assert hits[0] >= 2
        got_sought += await take(sought_stream, 100, within=20)
        got_reset += await take(reset_stream, 100, within=20)
        _check_all(got_sought, 300, 3)
        _check_all(got_reset, 300, 3)


async def test_a_non_retriable_top_level_fetch_error_fails_only_that_broker(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "broker-top-level", SPREAD)
    await produce(bootstrap, topic, 300, 3)

    def unknown_server_error(request: Request, response: Any) -> Any:
        assert isinstance(response, FetchResponse)
        response.error_code = -1  # UNKNOWN_SERVER_ERROR: not retriable
        return response

    async with Consumer(bootstrap) as consumer:
        consumer.assign(tps(topic, 3))
        stream = consumer.stream()
        with _patched_requests(monkeypatch, 1, (FetchRequest,), unknown_server_error):
            got = await _wait_healthy_without(consumer, stream, 200)
            assert {r.partition for r in got} == {1, 2}

            async def broker_1_error() -> KafkaError | None:
                fetcher = _fetchers(consumer).get(1)
                return None if fetcher is None else fetcher.broker_error

            # (brokers 2 and 3 may hand out their 200 records before broker 1's first
            # answer comes back failed)
            await eventually(broker_1_error, lambda e: isinstance(e, ec.UnknownServerError), 10)
            assert consumer.health().healthy
        got += await take(stream, 100, within=20)
        _check_all(got, 300, 3)


async def test_an_authorization_error_still_ends_the_consumer_and_health_shows_it(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "broker-denied", SPREAD)
    await produce(bootstrap, topic, 30, 3)

    def denied(request: Request, response: Any) -> Any:
        assert isinstance(response, FetchResponse)
        response.error_code = 31  # CLUSTER_AUTHORIZATION_FAILED
        return response

    async with Consumer(bootstrap) as consumer:
        with _patched_requests(monkeypatch, 2, (FetchRequest,), denied):
            consumer.assign(tps(topic, 3))
            with pytest.raises(ec.ClusterAuthorizationFailedError):
                async with asyncio.timeout(20):
                    async for _ in consumer.stream():
                        pass
        health = consumer.health()
        assert not health.healthy
        assert isinstance(health.error, ec.ClusterAuthorizationFailedError)


async def test_metadata_moves_on_from_a_broker_whose_answer_fails(
    racked: KafkaCluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Metadata answer that does not decode, or no common version of Metadata, from
    one broker: the refresh asks the next one."""
    ports = {n: racked.proxy(n).port for n in (1, 2, 3)}
    original_request = BrokerConnection.request
    original_version = BrokerConnection.version_for
    asked: list[int] = []

    async def request(self: BrokerConnection, request: Request, **kwargs: Any) -> Any:
        response = await original_request(self, request, **kwargs)
        if isinstance(request, MetadataRequest) and self.port == ports[1]:
            asked.append(1)
            raise ProtocolError("test: broker 1's Metadata answer does not decode")
        return response

    def version_for(self: BrokerConnection, request_type: type[Request]) -> int:
        if request_type is MetadataRequest and self.port == ports[1]:
            asked.append(1)
            raise UnsupportedVersionError("test: no common Metadata version with broker 1")
        return original_version(self, request_type)

    for name, replacement in (("request", request), ("version_for", version_for)):
        cluster = Cluster(ClientConfig(bootstrap_servers=racked.bootstrap_servers))
        try:
            await cluster.bootstrap()
            # Brokers 2 and 3 look backed off, so that broker 1 is asked first.
            for node in (2, 3):
                cluster.pool.note_failure("127.0.0.1", ports[node])
            with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
                patch.setattr(BrokerConnection, name, replacement)
                for _ in range(10):
                    snapshot = await cluster.refresh()
                    assert sorted(snapshot.brokers) == [1, 2, 3]
            assert asked, name
            assert any(
                "metadata from broker 1" in r.getMessage() and r.levelno == logging.WARNING
                for r in caplog.records
            )
            print(f"{name}: broker 1 asked {len(asked)} time(s) in 10 refreshes")
            asked.clear()
            caplog.clear()
        finally:
            await cluster.close()


# -- the preferred replica fails: back to the leader ----------------------------------------


async def test_a_blackholed_preferred_replica_sends_its_partitions_back_to_their_leaders(
    racked: KafkaCluster,
) -> None:
    """Broker 1 follows both partitions (leaders 2 and 3) and is unreachable for clients
    only, so its leaders keep it in sync and would keep naming it: after the failed
    round they are asked without the rack, and serve the partitions themselves."""
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-blackhole", {0: [2, 1, 3], 1: [3, 1, 2]})
    await produce(bootstrap, topic, 200, 2)
    async with Consumer(
        bootstrap,
        client_rack="rack-a",
        request_timeout_ms=3_000,  # the blackholed Fetch fails after 3 s + the long poll
        socket_connection_setup_timeout_ms=3_000,
    ) as consumer:
        consumer.assign(tps(topic, 2))
        stream = consumer.stream()
        got = await take(stream, 200, within=15)
        fetchers = _fetchers(consumer)
        assert fetchers[1].follower_records == 200
        racked.proxy(1).blackhole()
        try:
            blackholed = time.monotonic()
            await produce(bootstrap, topic, 200, 2, start=200)
            got += await take(stream, 200, within=30)
            recovered = time.monotonic() - blackholed
            _check_all(got, 400, 2)
            assert fetchers[2].records + fetchers[3].records == 200
            assert fetchers[1].replica_fallbacks >= 2
            assert consumer.health().healthy
            total, per_node = await _idle_fetches(consumer, 2.0)
            assert total <= 12, per_node  # two leaders long-polling, no storm
            print(f"blackholed replica: 200 new records from the leaders in {recovered:.1f} s")
        finally:
            racked.proxy(1).restore()


async def test_a_stopped_preferred_replica_sends_its_partitions_back_to_their_leaders(
    racked: KafkaCluster,
) -> None:
    bootstrap = racked.bootstrap_servers
    topic = await _topic(racked, "rack-stopped", SPREAD)
    await produce(bootstrap, topic, 300, 3)
    async with Consumer(bootstrap, client_rack="rack-a") as consumer:
        consumer.assign(tps(topic, 3))
        stream = consumer.stream()
        got = await take(stream, 300, within=15)
        fetchers = _fetchers(consumer)
        assert fetchers[1].follower_records == 200
        await racked.stop_broker(1)
        try:
            stopped = time.monotonic()
            await produce(bootstrap, topic, 300, 3, start=300)
            got += await take(stream, 300, within=60)
            recovered = time.monotonic() - stopped
            _check_all(got, 600, 3)
            assert fetchers[2].records + fetchers[3].records == 300
            for tp in tps(topic, 3):
                assert _leader(consumer, tp) in (2, 3)
                assert consumer._engine.partitions[tp].read_replica is None
            assert consumer.health().healthy
            print(f"stopped replica: 300 new records from the leaders in {recovered:.1f} s")
        finally:
            await racked.start_broker(1)
