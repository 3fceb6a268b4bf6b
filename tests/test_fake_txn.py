"""FakeCluster transactions (issue 34, part two): the real-broker transaction tests of
``test_transactions.py`` run again against the fake, on both transaction protocols, and
what only the fake can show (markers, the last stable offset, aborted-transaction lists,
fencing answers) checked at the wire. No JVM: these run in the unit tier.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import test_transactions as real
from helpers import read_records

from aiostream_kafka import Producer
from aiostream_kafka.protocol.records import iter_batches
from aiostream_kafka.testing import FakeCluster, KafkaCluster

# The real-broker tests, collected here too with the fake ``txn_cluster`` below.
test_committed_records_are_read_committed_aborted_ones_only_uncommitted = (
    real.test_committed_records_are_read_committed_aborted_ones_only_uncommitted
)
test_batch_calls_join_the_transaction = real.test_batch_calls_join_the_transaction
test_transaction_scope_aborts_on_an_exception_and_reraises_it = (
    real.test_transaction_scope_aborts_on_an_exception_and_reraises_it
)
test_closing_with_an_open_transaction_aborts_it = (
    real.test_closing_with_an_open_transaction_aborts_it
)
test_a_second_producer_with_the_same_transactional_id_fences_the_first = (
    real.test_a_second_producer_with_the_same_transactional_id_fences_the_first
)
test_a_fenced_producer_inside_a_transaction_scope_raises_producer_fenced = (
    real.test_a_fenced_producer_inside_a_transaction_scope_raises_producer_fenced
)
test_send_offsets_to_transaction_commits_the_group_offsets_only_on_commit = (
    real.test_send_offsets_to_transaction_commits_the_group_offsets_only_on_commit
)
test_a_timed_out_transaction_gives_an_abortable_error = (
    real.test_a_timed_out_transaction_gives_an_abortable_error
)
test_a_commit_after_the_timeout_without_new_writes = (
    real.test_a_commit_after_the_timeout_without_new_writes
)
test_a_worker_killed_mid_transaction_is_replaced_exactly_once = (
    real.test_a_worker_killed_mid_transaction_is_replaced_exactly_once
)


@pytest.fixture(scope="module", params=["v2", "v1"])
def txn_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A fake one-broker cluster whose transaction protocol is the parameter (what the
    real-broker module's fixture of this name gives, in process)."""
    features = {"transaction.version": 1} if request.param == "v1" else None
    cluster = KafkaCluster(brokers=1, source="fake", features=features)
    cluster.start_blocking()
    try:
        yield cluster
    finally:
        cluster.close_blocking()


def _topic() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


async def test_an_open_transaction_holds_the_lso_and_an_abort_is_listed() -> None:
    async with FakeCluster() as cluster:
        topic = _topic()
        cluster.create_topic(topic)
        bs = cluster.bootstrap_servers
        log = cluster.state.require_partition(topic, 0).log
        async with Producer(bs, transactional_id="tid-lso") as producer:
            producer.begin_transaction()
            await producer.send(topic, b"a1")
            await producer.send(topic, b"a2")
            assert log.last_stable_offset == 0 and log.high_watermark == 2
            await producer.abort_transaction()
            assert log.last_stable_offset == log.high_watermark == 3  # + the ABORT marker
            assert [(a.first_offset, a.last_offset) for a in log.aborted] == [(0, 2)]
            async with producer.transaction():
                await producer.send(topic, b"c1")
        markers = [b for b in log.batches if b.is_control]
        assert [m.base_offset for m in markers] == [2, 4]
        kinds = [next(iter_batches(m.data)).control_records()[0].type.name for m in markers]
        assert kinds == ["ABORT", "COMMIT"]
        committed = await read_records(bs, topic, 1, "read_committed")
        assert [r.value for r in committed] == [b"c1"]
        uncommitted = await read_records(bs, topic, 1, "read_uncommitted")
        assert sorted(r.value for r in uncommitted) == [b"a1", b"a2", b"c1"]
