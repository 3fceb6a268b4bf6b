"""Unit tests without Spark or a broker: option parsing, canonical offsets, range
planning, the per-trigger limit."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import uuid
from typing import Any

import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.protocol import error_codes as ec
from aiostream_kafka.spark.offsets import (
    OffsetRange,
    from_json,
    plan_batch_ranges,
    plan_ranges,
    rate_limit,
    to_json,
)
from aiostream_kafka.spark.options import (
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)
from aiostream_kafka.structs import TopicPartition as TP

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_source_options_parsed() -> None:
    opts = parse_source_options(
        {
            **BS,
            "subscribe": "b, a,a",
            "startingoffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsetsByTimestamp": '{"a": {"0": 1000}}',
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "minPartitions": "4",
            "failOnDataLoss": "False",
            "includeHeaders": "true",
            "kafka.isolation.level": "read_committed",
            "kafka.request.timeout.ms": "5000",
            "kafka.fetch.max.bytes": "1048576",
        }
    )
    assert opts.subscribe == ("a", "b")
    assert opts.starting is not None and opts.starting.kind == "offsets"
    assert opts.starting.offsets == {TP("a", 0): 5, TP("a", 1): -2}
    assert opts.ending is not None and opts.ending.kind == "timestamps"
    assert opts.ending.timestamps == {TP("a", 0): 1000}
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (100, 10)
    assert opts.max_trigger_delay_ms == 30_000
    assert opts.min_partitions == 4
    assert opts.fail_on_data_loss is False and opts.include_headers is True
    assert opts.kafka.isolation_level == "read_committed"
    assert opts.kafka.consumer_kwargs() == {
        "request_timeout_ms": 5000,
        "security_protocol": "PLAINTEXT",
        "fetch_max_bytes": 1048576,
        "isolation_level": "read_committed",
    }


def test_assign_and_pattern_and_defaults() -> None:
    opts = parse_source_options({**BS, "assign": '{"t": [2, 0], "u": [1]}'})
    assert opts.assign == (TP("t", 0), TP("t", 2), TP("u", 1))
    assert opts.starting is None and opts.ending is None and opts.fail_on_data_loss
    opts = parse_source_options({**BS, "subscribePattern": r"orders\..*"})
    assert opts.subscribe_pattern == r"orders\..*"
    opts = parse_source_options({**BS, "subscribe": "t", "startingTimestamp": "1000"})
    assert opts.starting is not None and opts.starting.kind == "timestamp"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "'kafka.bootstrap.servers' is required"),
        ({**BS}, "exactly one of the options"),
        ({**BS, "subscribe": "t", "subscribePattern": "x"}, "given: subscribe, subscribePattern"),
        ({**BS, "subscribe": "t", "startingOffsets": "bogus"}, "must be 'earliest', 'latest'"),
        ({**BS, "subscribe": "t", "startingOffsets": '{"t": [1]}'}, "must map partitions"),
        ({**BS, "subscribe": "t", "endingOffsets": '{"t": {"0": -3}}'}, "must be >= 0, or -2"),
        ({**BS, "assign": '{"t": "0"}'}, "list of partition numbers"),
        ({**BS, "assign": "t:0"}, "not valid JSON"),
        ({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({**BS, "subscribe": "t", "maxTriggerDelay": "soon"}, "must be a duration"),
        ({**BS, "subscribe": "t", "includeHeaders": "1"}, "'true' or 'false'"),
        ({**BS, "subscribePattern": "("}, "not a valid regular expression"),
        ({**BS, "subscribe": "t", "kafka.sasl.mechanism": "PLAIN"}, "use SASL_PLAINTEXT or"),
        (
            {**BS, "subscribe": "t", "kafka.security.protocol": "SASL_SSL"},
            "'kafka.sasl.mechanism' must be PLAIN",
        ),
        (
            {
                **BS,
                "subscribe": "t",
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
            },
            "needs option 'kafka.sasl.jaas.config'",
        ),
        (
            {
                **BS,
                "subscribe": "t",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                'PlainLoginModule required username="u" password="TOPSECRET";',
            },
            "needs org.apache.kafka.common.security.scram.ScramLoginModule",
        ),
        (
            {
                **BS,
                "subscribe": "t",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain."
                'PlainLoginModule required password="TOPSECRET";',
            },
            "lacks username for PLAIN",
        ),
        (
            {
                **BS,
                "subscribe": "t",
                "kafka.security.protocol": "SASL_PLAINTEXT",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": "TOPSECRET",
            },
            "is not a JAAS line",
        ),
        ({**BS, "subscribe": "t", "kafka.isolation.level": "x"}, "'read_uncommitted' or"),
        ({**BS, "subscribe": "t", "kafka.enable.auto.commit": "true"}, "Spark checkpoint"),
        ({**BS, "subscribe": "t", "kafka.request.timeout.ms": "x"}, "must be an integer"),
        (
            {**BS, "subscribe": "t", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            "must not exceed",
        ),
    ],
)
def test_bad_source_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        parse_source_options({k.lower(): v for k, v in options.items()})
    assert message in str(info.value)
    assert "TOPSECRET" not in str(info.value)


def test_sasl_options_become_client_options() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required\n"
        '  username="alice" password="p@ss \\"word\\"";'
    )
    opts = parse_source_options(
        {**BS, "subscribe": "t", "kafka.security.protocol": "SASL_PLAINTEXT",
         "kafka.sasl.mechanism": "SCRAM-SHA-256", "kafka.sasl.jaas.config": jaas}
    )  # fmt: skip
    kwargs = opts.kafka.consumer_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "alice",
        'p@ss "word"',
    )
    assert "p@ss" not in repr(opts)


def test_batch_and_stream_rules() -> None:
    latest = parse_source_options({**BS, "subscribe": "t", "startingoffsets": "latest"})
    with pytest.raises(ConfigError, match="not valid for batch"):
        latest.check_batch()
    latest.check_stream()
    ending = parse_source_options({**BS, "subscribe": "t", "endingoffsets": "latest"})
    ending.check_batch()
    with pytest.raises(ConfigError, match="not valid for streaming"):
        ending.check_stream()
    early_end = parse_source_options({**BS, "subscribe": "t", "endingoffsets": '{"t":{"0":-2}}'})
    with pytest.raises(ConfigError, match="-2"):
        early_end.check_batch()


def test_sink_options() -> None:
    opts = parse_sink_options({**BS, "topic": "out", "kafka.linger.ms": "20", "kafka.acks": "1"})
    assert opts.topic == "out"
    assert opts.kafka.producer_kwargs() == {
        "security_protocol": "PLAINTEXT",
        "linger_ms": 20,
        "acks": 1,
    }
    with pytest.raises(ConfigError, match="bootstrap"):
        parse_sink_options({"topic": "out"})
    with pytest.raises(ConfigError, match="value column"):
        parse_sink_options({**BS, "kafka.value.serializer": "x"})


def test_durations() -> None:
    assert parse_duration_ms("d", "15m") == 900_000
    assert parse_duration_ms("d", "250") == 250
    assert parse_duration_ms("d", "2 h") == 7_200_000
    assert parse_duration_ms("d", "10ms") == 10


def test_offset_json_is_canonical() -> None:
    offsets = {TP("b", 10): 7, TP("a", 2): 1, TP("b", 2): 3, TP("a", 0): 9}
    data = to_json(offsets)
    text = json.dumps(data)
    assert text == '{"a": {"0": 9, "2": 1}, "b": {"10": 7, "2": 3}}'
    assert text == json.dumps(data, sort_keys=True)
    # the order given does not matter, and parsing gives the same offsets back
    assert json.dumps(to_json(dict(reversed(list(offsets.items()))))) == text
    assert from_json(json.loads(text)) == offsets
    assert from_json(None) == {}
    with pytest.raises(ConfigError, match="not an aiostream_kafka offset"):
        from_json({"a": 5})  # type: ignore[dict-item]


def test_ranges_one_per_partition_without_min_partitions() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 10, TP("t", 2): 5}
    end = {TP("t", 0): 100, TP("t", 1): 10, TP("t", 2): 6, TP("t", 3): 50}
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 0, 100), OffsetRange("t", 2, 5, 6)]
    # already at least min_partitions ranges: unchanged
    assert len(plan_ranges(start, end, min_partitions=2)) == 2


def test_ranges_split_by_min_partitions() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 0}
    end = {TP("t", 0): 300, TP("t", 1): 100}
    ranges = plan_ranges(start, end, min_partitions=4)
    assert ranges == [
        OffsetRange("t", 0, 0, 100),
        OffsetRange("t", 0, 100, 200),
        OffsetRange("t", 0, 200, 300),
        OffsetRange("t", 1, 0, 100),
    ]
    # a tiny partition stays whole and leaves its share to the others, as the JVM's
    # KafkaOffsetRangeCalculator: 9 pieces of partition 0 (not 10), 10 ranges in all
    ranges = plan_ranges({TP("t", 0): 0, TP("t", 1): 0}, {TP("t", 0): 1000, TP("t", 1): 3}, 10)
    assert [r for r in ranges if r.partition == 1] == [OffsetRange("t", 1, 0, 3)]
    p0 = [r for r in ranges if r.partition == 0]
    assert len(p0) == 9
    assert p0[0].start == 0 and p0[-1].end == 1000
    assert all(a.end == b.start for a, b in itertools.pairwise(p0))
    # each piece takes remaining // pieces_left: the round-off goes to the last one
    assert [r.size for r in p0] == [111] * 8 + [112]
    # never more pieces than offsets
    assert len(plan_ranges({TP("t", 0): 0}, {TP("t", 0): 3}, min_partitions=8)) == 3


def _sizes(sizes: list[int], min_partitions: int, max_records: int | None = None) -> list[int]:
    start = {TP("t", i): 0 for i in range(len(sizes))}
    end = {TP("t", i): n for i, n in enumerate(sizes)}
    return [r.size for r in plan_ranges(start, end, min_partitions, max_records)]


def test_ranges_as_the_jvm_range_calculator() -> None:
    """Counts of Spark 4.2's KafkaOffsetRangeCalculator.getRanges (the algorithm read from
    the connector's bytecode), where a split by shares of the total alone differs."""
    assert len(_sizes([99, 1], 50)) == 50  # not 51
    assert _sizes([100, 100, 100, 1, 1, 1], 7) == [100, 100, 100, 1, 1, 1]  # not 9 ranges
    assert _sizes([50, 50, 1, 1, 1], 5) == [50, 50, 1, 1, 1]
    assert len(_sizes([25, 25], 51)) == 50  # one piece per offset at most
    # Java's Math.round rounds half up: 2.5 -> 3 and 1.5 -> 2 pieces
    assert _sizes([5, 3], 4) == [1, 2, 2, 1, 2]
    # maxRecordsPerPartition first (ceil(size / max) pieces), then minPartitions; a
    # partition stays whole as soon as one of its pieces does (the JVM groups by partition)
    assert _sizes([10, 3], 0, max_records=4) == [3, 3, 4, 3]
    assert _sizes([10, 3], 6, max_records=4) == [3, 3, 4, 3]
    assert _sizes([40, 40], 4, max_records=30) == [20, 20, 20, 20]
    assert _sizes([40, 40], 6, max_records=30) == [10] * 8  # 1.5 pieces each: 2


def test_batch_reads_split_only_past_the_partition_count() -> None:
    """The JVM's batch read splits only when minPartitions exceeds the partitions read,
    empty ones included, or a range exceeds maxRecordsPerPartition."""
    tps = [TP("t", i) for i in range(6)]
    start = dict.fromkeys(tps, 0)
    end = {tp: n for tp, n in zip(tps, [5, 3, 0, 0, 0, 0], strict=True)}
    assert [r.size for r in plan_batch_ranges(start, end, 4)] == [5, 3]  # 4 <= 6: no split
    assert [r.size for r in plan_ranges(start, end, 4)] == [1, 2, 2, 1, 2]  # streams split
    assert [r.size for r in plan_batch_ranges(start, end, 7)] == [1, 1, 1, 2, 1, 1, 1]
    # a range over maxRecordsPerPartition: split, then minPartitions applies (4 > 3 pieces;
    # partition 0's piece of 2 has a share of 1, so both its pieces stay whole)
    assert [r.size for r in plan_batch_ranges(start, end, 4, 4)] == [2, 3, 1, 2]
    assert [r.size for r in plan_batch_ranges(start, end, None, 5)] == [5, 3]
    assert [r.size for r in plan_batch_ranges(start, end, 2, 2)] == [1, 2, 2, 1, 2]


def test_rate_limit_is_proportional_and_never_starves() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 0, TP("t", 2): 100}
    latest = {TP("t", 0): 900, TP("t", 1): 100, TP("t", 2): 101}
    end = rate_limit(start, latest, 100)
    # backlogs 900, 100, 1 of 1001: shares 89.9, 9.99, 0.0999 -> 89, 9, 1 (at least one)
    assert end == {TP("t", 0): 89, TP("t", 1): 9, TP("t", 2): 101}
    # a limit above the backlog reads everything
    assert rate_limit(start, latest, 10_000) == latest
    # nothing new: unchanged
    assert rate_limit(latest, latest, 10) == latest


def _stream_reader(**options: str) -> Any:
    pytest.importorskip("pyspark")
    from pyspark.sql.types import StructType

    from aiostream_kafka.spark.stream_reader import KafkaStreamReader

    return KafkaStreamReader(
        parse_source_options({**BS, "subscribe": "t", **options}), StructType()
    )


def test_default_read_limit_follows_the_options() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    assert _stream_reader().getDefaultReadLimit() == ReadAllAvailable()
    assert _stream_reader(maxOffsetsPerTrigger="9").getDefaultReadLimit() == ReadMaxRows(9)
    assert _stream_reader(minOffsetsPerTrigger="5").getDefaultReadLimit() == ReadMinRows(5)
    # no composite limit in PySpark: the maximum goes to Spark, the minimum stays in options
    both = _stream_reader(minOffsetsPerTrigger="5", maxOffsetsPerTrigger="9")
    assert both.getDefaultReadLimit() == ReadMaxRows(9)


def test_min_offsets_per_trigger_waits_for_rows_or_the_delay() -> None:
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    reader = _stream_reader(minOffsetsPerTrigger="10", maxTriggerDelay="5s")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    t0, t1 = {TP("t", 0): 0}, {TP("t", 0): 3}
    # the first trigger of a query goes through whatever is there (as the JVM source's)
    assert reader.admit(t0, t1, {}, limit, now=100.0) == t1
    # 3 then 9 new offsets < 10, within 5 s of the last trigger: held back
    t2 = {TP("t", 0): 12}
    assert reader.admit(t1, {TP("t", 0): 6}, {}, limit, now=101.0) is None
    assert reader.admit(t1, t2, {}, limit, now=104.9) is None
    # Trigger.Once (ReadAllAvailable) ignores the minimum
    assert reader.admit(t1, t2, {}, ReadAllAvailable(), now=104.9) == t2
    # the delay is over: goes through with what there is, and the delay starts again
    assert reader.admit(t1, t2, {}, limit, now=105.0) == t2
    assert reader.admit(t2, {TP("t", 0): 13}, {}, limit, now=106.0) is None
    # 10 new offsets, one in a partition that appeared (counted from 0, as in the JVM)
    latest = {TP("t", 0): 21, TP("t", 1): 1}
    assert reader.admit(t2, latest, {TP("t", 1): 0}, limit, now=106.5) == latest
    # the delay also passes with nothing new: the trigger goes through empty
    assert reader.admit(latest, latest, {}, limit, now=112.0) == latest
    assert reader.admit(latest, {TP("t", 0): 22, TP("t", 1): 1}, {}, limit, now=113.0) is None


def test_min_and_max_offsets_per_trigger_together() -> None:
    pytest.importorskip("pyspark")
    reader = _stream_reader(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="20")
    limit = reader.getDefaultReadLimit()
    start = {TP("t", 0): 0, TP("t", 1): 0}
    assert reader.admit(start, {TP("t", 0): 1, TP("t", 1): 1}, {}, limit, now=0.0) == {
        TP("t", 0): 1,
        TP("t", 1): 1,
    }
    after = {TP("t", 0): 1, TP("t", 1): 1}
    assert reader.admit(after, {TP("t", 0): 5, TP("t", 1): 5}, {}, limit, now=1.0) is None
    # 90 + 10 new: enough, and cut to 20 in proportion (18 + 2)
    end = reader.admit(after, {TP("t", 0): 91, TP("t", 1): 11}, {}, limit, now=2.0)
    assert end == {TP("t", 0): 19, TP("t", 1): 3}


def test_available_now_ignores_the_minimum_and_reports_the_latest() -> None:
    reader = _stream_reader(minOffsetsPerTrigger="1000", maxOffsetsPerTrigger="2000")
    reader._available_now = target = {TP("t", 0): 50}
    assert reader.admit({TP("t", 0): 0}, target, {}, reader.getDefaultReadLimit(), 1.0) == target
    assert reader.reportLatestOffset() is None  # nothing looked up yet
    reader._latest = target
    assert reader.reportLatestOffset() == {"t": {"0": 50}}


def test_commit_offsets_to_group_names_the_group() -> None:
    def group(**options: str) -> str | None:
        opts = {k.lower(): v for k, v in {**BS, "commitOffsetsToGroup": "true", **options}.items()}
        return parse_source_options(opts).commit_group

    assert parse_source_options({**BS, "subscribe": "t"}).commit_group is None
    assert group(subscribe="t", **{"kafka.group.id": "etl"}) == "etl"
    # <groupIdPrefix>-<16 hex of sha256 of the subscription>, the same for every restart
    digest = hashlib.sha256(b"subscribe=a,b").hexdigest()[:16]
    assert group(subscribe="b,a") == f"spark-kafka-source-{digest}"
    assert group(subscribe="a, b", groupIdPrefix="etl") == f"etl-{digest}"
    pattern = hashlib.sha256(b"subscribePattern=t.*").hexdigest()[:16]
    assert group(subscribePattern="t.*") == f"spark-kafka-source-{pattern}"
    assign = hashlib.sha256(b"assign=a:0,a:1,b:2").hexdigest()[:16]
    assert group(assign='{"b": [2], "a": [1, 0]}') == f"spark-kafka-source-{assign}"
    for bad in ("yes", ""):
        with pytest.raises(ConfigError, match="'commitOffsetsToGroup' must be 'true' or"):
            group(subscribe="t", commitOffsetsToGroup=bad)
    with pytest.raises(ConfigError, match="'groupIdPrefix' is empty"):
        group(subscribe="t", groupIdPrefix=" ")
    with pytest.raises(ConfigError, match="is for streaming reads"):
        parse_source_options({**BS, "subscribe": "t", "commitoffsetstogroup": "true"}).check_batch()


class _Session:
    """A stand-in for the reader's AdminSession: canned look-ups, recorded commits."""

    def __init__(self, latest: dict[TP, int]) -> None:
        self.latest = latest
        self.commits: list[tuple[str, dict[TP, int]]] = []
        self.fail: Exception | None = None

    def run(self, fn: Any) -> Any:
        session = self

        class Admin:
            async def alter_consumer_group_offsets(self, group: str, offsets: Any) -> None:
                if session.fail is not None:
                    raise session.fail
                session.commits.append((group, dict(offsets)))

            async def list_topics(self, include_internal: bool = False) -> Any:
                from aiostream_kafka.admin.types import PartitionInfo, TopicDescription

                infos = [PartitionInfo(tp.partition, 1, 0, (1,), (1,)) for tp in session.latest]
                return {"t": TopicDescription("t", uuid.uuid4(), False, infos)}

            async def list_offsets(self, specs: Any, isolation_level: str = "") -> Any:
                from aiostream_kafka.admin.types import OffsetAndTimestamp

                return {tp: OffsetAndTimestamp(session.latest[tp], -1, None) for tp in specs}

        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(fn(Admin()))
        finally:
            loop.close()

    def close(self) -> None:
        pass


def test_commit_offsets_to_group_after_spark_commits(caplog: pytest.LogCaptureFixture) -> None:
    reader = _stream_reader(commitOffsetsToGroup="true", **{"kafka.group.id": "g"})
    session = _Session({TP("t", 0): 5, TP("t", 1): 7})
    reader._admin = session
    initial = reader.initialOffset()  # latest: {0: 5, 1: 7}
    session.latest = {TP("t", 0): 6, TP("t", 1): 7}
    # a new query's first call: its start is the initial offset, which no batch committed
    end = reader.latestOffset(initial, None)
    assert end == {"t": {"0": 6, "1": 7}}
    assert session.commits == []
    session.latest = {TP("t", 0): 9, TP("t", 1): 7}
    # the next call's start is the end of the batch Spark committed: committed now
    assert reader.latestOffset(end, None) == {"t": {"0": 9, "1": 7}}
    assert session.commits == [("g", {TP("t", 0): 6, TP("t", 1): 7})]
    reader.commit(end)  # Spark's own word for the same batch: nothing new to commit
    assert len(session.commits) == 1
    # a failed commit is a warning, not an error, and the next call commits again
    session.fail = ec.CoordinatorNotAvailableError("no coordinator")
    with caplog.at_level(logging.WARNING, logger="aiostream_kafka.spark.stream_reader"):
        reader.commit({"t": {"0": 9, "1": 7}})
    assert "could not commit" in caplog.text and "CoordinatorNotAvailableError" in caplog.text
    assert "'g'" in caplog.text
    session.fail = None
    reader.latestOffset({"t": {"0": 9, "1": 7}}, None)
    assert session.commits[-1] == ("g", {TP("t", 0): 9, TP("t", 1): 7})
    # without the option: nothing
    plain = _stream_reader()
    plain._admin = other = _Session({TP("t", 0): 1})
    plain.commit({"t": {"0": 1}})
    plain.latestOffset({"t": {"0": 1}}, None)
    assert other.commits == []


def test_spark_bench_steady_state_leaves_the_first_micro_batch_out() -> None:
    from benchmarks.spark_bench import Run, _steady_rates

    # 10 s end to end; micro-batches after the first: 300 rows in 1.5 s (200 rows/s)
    runs = {
        "ours": [Run(10.0, 400, steady_rows=300, steady_seconds=1.5)] * 2
        + [Run(9.0, 400, steady_rows=300, steady_seconds=1.0)],
        "batch": [Run(1.0, 400)],  # not a stream: no steady state
        "one micro-batch": [Run(1.0, 400, steady_rows=0, steady_seconds=0.0)],
    }
    assert runs["ours"][0].steady_rate == 200.0
    assert _steady_rates(runs) == {"ours": 200.0}  # the median of 200, 200, 300
