"""Unit tests of the writer's planning (no Spark, no broker): how the rows of one Arrow
batch become producer batch calls, and that every row keeps its topic, partition, key,
value and headers, in order within each partition."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.producer.partitioner import partition_for_key
from aiostream_kafka.spark.keyhash import key_partitions
from aiostream_kafka.spark.options import parse_sink_options
from aiostream_kafka.spark.writer import (
    SINK_BATCH_SIZE,
    Run,
    plan_runs,
    producer_kwargs,
    split_by_key,
)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(**columns: tuple[list[Any], Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(data, type=t) for data, t in columns.values()], names=list(columns)
    )


def _rows(runs: list[Any]) -> list[tuple[Any, ...]]:
    """(topic, partition, key, value, headers) of every planned record, in call order."""
    out = []
    for run in runs:
        for i, value in enumerate(run.values):
            key = None if run.keys is None else run.keys[i]
            headers = None if run.headers is None else run.headers[i]
            out.append((run.topic, run.partition, key, value, headers))
    return out


def test_topic_option_and_no_partition_column_is_one_call() -> None:
    batch = _batch(key=(["a", None, "c"], pa.string()), value=([b"1", b"2", None], pa.binary()))
    runs = plan_runs(batch, "t")
    assert len(runs) == 1
    assert (runs[0].topic, runs[0].partition) == ("t", None)
    assert runs[0].keys == [b"a", None, b"c"]  # strings as UTF-8 bytes
    assert runs[0].values == [b"1", b"2", None]  # a null value is a tombstone
    assert runs[0].headers is None


def test_all_null_keys_and_headers_are_dropped() -> None:
    batch = _batch(
        key=([None, None], pa.binary()),
        value=(["x", "y"], pa.string()),
        headers=([None, []], HEADERS),
    )
    (run,) = plan_runs(batch, "t")
    assert run.keys is None and run.headers is None and run.values == [b"x", b"y"]


def test_headers_become_tuples_with_bytes() -> None:
    batch = _batch(
        value=([b"1", b"2"], pa.binary()),
        headers=([[{"key": "h", "value": b"v"}, {"key": "n", "value": None}], []], HEADERS),
    )
    (run,) = plan_runs(batch, "t")
    assert run.headers == [[("h", b"v"), ("n", None)], None]


def test_mixed_topics_and_partitions_are_grouped_in_row_order() -> None:
    topics = ["a", "b", "a", "b", "a", "a"]
    partitions = [0, 1, 1, 1, 0, 0]
    batch = _batch(
        topic=(topics, pa.string()),
        partition=(partitions, pa.int32()),
        key=([f"k{i}" for i in range(6)], pa.string()),
        value=([f"v{i}".encode() for i in range(6)], pa.binary()),
    )
    runs = plan_runs(batch, None)
    assert [(r.topic, r.partition, r.values) for r in runs] == [
        ("a", 0, [b"v0", b"v4", b"v5"]),
        ("b", 1, [b"v1", b"v3"]),
        ("a", 1, [b"v2"]),
    ]
    assert sorted(_rows(runs)) == sorted(
        (topics[i], partitions[i], f"k{i}".encode(), f"v{i}".encode(), None) for i in range(6)
    )


def test_topic_option_wins_over_the_topic_column() -> None:
    batch = _batch(topic=(["x", "y"], pa.string()), value=([b"1", b"2"], pa.binary()))
    (run,) = plan_runs(batch, "t")
    assert run.topic == "t" and run.values == [b"1", b"2"]


def test_one_topic_in_the_column_is_one_call() -> None:
    batch = _batch(topic=(["x", "x"], pa.string()), value=([b"1", b"2"], pa.binary()))
    (run,) = plan_runs(batch, None)
    assert (run.topic, run.partition, run.values) == ("x", None, [b"1", b"2"])


def test_named_and_unnamed_partitions_of_one_topic_keep_the_row_order() -> None:
    # a keyed row without a partition may land in a named one: such a topic is written
    # in runs of consecutive rows, so no row overtakes another
    batch = _batch(
        partition=([0, None, 0, 1, None], pa.int32()),
        key=(["k0", "k1", "k2", "k3", "k4"], pa.string()),
        value=([b"0", b"1", b"2", b"3", b"4"], pa.binary()),
    )
    runs = plan_runs(batch, "t")
    assert [(r.partition, r.values) for r in runs] == [
        (0, [b"0"]),
        (None, [b"1"]),
        (0, [b"2"]),
        (1, [b"3"]),
        (None, [b"4"]),
    ]


def test_null_topic_fails_before_anything_is_planned() -> None:
    batch = _batch(topic=(["a", None], pa.string()), value=([b"1", b"2"], pa.binary()))
    with pytest.raises(ConfigError, match="null 'topic'"):
        plan_runs(batch, None)


def test_empty_batch_plans_nothing() -> None:
    batch = _batch(topic=([], pa.string()), value=([], pa.binary()))
    assert plan_runs(batch, None) == []


def test_key_partitions_match_the_default_partitioner() -> None:
    rnd = random.Random(7)
    keys = [bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 23))) for _ in range(3000)]
    keys += [str(i).encode() for i in range(1000)]
    array = pa.array(keys, pa.binary())
    for count in (1, 2, 3, 12, 1000):
        assert key_partitions(array, count).tolist() == [partition_for_key(k, count) for k in keys]
    sliced = array.slice(17, 500)  # an offset into the buffers
    assert key_partitions(sliced, 5).tolist() == [partition_for_key(k, 5) for k in keys[17:517]]
    large = pa.array(keys[:300], pa.large_binary())
    assert key_partitions(large, 6).tolist() == [partition_for_key(k, 6) for k in keys[:300]]
    assert key_partitions(pa.array([], pa.binary()), 3).tolist() == []


def test_split_by_key_names_the_partitions_and_leaves_keyless_rows() -> None:
    keys = [b"a", None, b"b", b"c", None, b"a", b"d"]
    run = Run("t", None, [f"v{i}".encode() for i in range(7)], keys, [None] * 7)
    pieces = split_by_key(run, 3)
    expected = {
        f"v{i}".encode(): ("t", None if k is None else partition_for_key(k, 3), k, None)
        for i, k in enumerate(keys)
    }
    got = {value: (topic, p, key, h) for topic, p, key, value, h in _rows(pieces)}
    assert got == expected
    keyless = [p for p in pieces if p.partition is None]
    assert len(keyless) == 1 and keyless[0].keys is None
    assert keyless[0].values == [b"v1", b"v4"]
    for piece in pieces:  # each partition's rows in row order
        numbers = [int(v[1:]) for v in piece.values]
        assert numbers == sorted(numbers)
    assert len({p.partition for p in pieces}) == len(pieces)


def test_split_by_key_keeps_a_run_whose_keys_share_a_partition_whole() -> None:
    run = Run("t", None, [b"v0", b"v1", b"v2"], [b"same", b"same", b"same"], None)
    (piece,) = split_by_key(run, 5)
    assert piece.partition == partition_for_key(b"same", 5)
    assert piece.values is run.values and piece.keys is run.keys


def test_split_by_key_matches_the_producer_partitioner_row_by_row() -> None:
    """Many rows, keys of mixed lengths and nulls, single-row and large groups: every
    keyed row lands on partition_for_key's partition, keyless rows last, each group in
    row order, and nothing is lost or repeated."""
    rng = random.Random(7)
    keys: list[bytes | None] = [
        None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 12)) for _ in range(2000)
    ]
    values = [b"%d" % i for i in range(len(keys))]
    headers: list[Any] = [[("h", v)] for v in values]
    pieces = split_by_key(Run("t", None, values, keys, headers), 7)
    seen = []
    for piece in pieces:
        rows = [int(v) for v in piece.values]
        assert rows == sorted(rows)
        assert piece.headers == [headers[i] for i in rows]
        for i in rows:
            expected = None if keys[i] is None else partition_for_key(keys[i], 7)
            assert piece.partition == expected
        if piece.partition is not None:
            assert piece.keys == [keys[i] for i in rows]
        seen += rows
    assert pieces[-1].partition is None
    assert sorted(seen) == list(range(len(keys)))


def test_the_writer_batches_256_kib_unless_told_otherwise() -> None:
    """The sink's producer fills 256 KiB batches by default (a task has its rows at hand),
    never more than ``kafka.max.request.size``, and ``kafka.batch.size`` wins."""
    base = {"kafka.bootstrap.servers": "broker:9092", "topic": "t"}
    kwargs = producer_kwargs(parse_sink_options(base))
    assert kwargs["batch_size"] == SINK_BATCH_SIZE == 256 * 1024
    assert kwargs["enable_idempotence"] is True
    small_requests = parse_sink_options({**base, "kafka.max.request.size": "100000"})
    assert producer_kwargs(small_requests)["batch_size"] == 100_000
    told = parse_sink_options({**base, "kafka.batch.size": "16384"})
    assert producer_kwargs(told)["batch_size"] == 16_384
    # at least 8 batches in buffer_memory, never below 16 KiB
    small_memory = parse_sink_options({**base, "kafka.buffer.memory": "1048576"})
    assert producer_kwargs(small_memory)["batch_size"] == 131_072
    tiny_memory = parse_sink_options({**base, "kafka.buffer.memory": "65536"})
    assert producer_kwargs(tiny_memory)["batch_size"] == 16_384
    # a bad setting is left for the producer to name, not turned into a bad batch size
    bad = parse_sink_options({**base, "kafka.max.request.size": "-1"})
    assert "batch_size" not in producer_kwargs(bad)
