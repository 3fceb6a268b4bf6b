"""The constructors' typed options and what a wrong name says (issue 21, items 1 and 2).

No broker needed: every check here runs before any network I/O (port 1 has no broker).
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aiostream_kafka import Admin, ConfigError, Consumer, Producer, Record, TimestampType
from aiostream_kafka.config import ClientConfig
from aiostream_kafka.consumer.config import ConsumerConfig, GroupOptions
from aiostream_kafka.fastapi import KafkaIntegration
from aiostream_kafka.habits import HABITS, Habit, MissingHabitError
from aiostream_kafka.options import ConsumerOptions, ProducerOptions, option_names
from aiostream_kafka.producer.config import ProducerConfig

ROOT = Path(__file__).resolve().parent.parent
BS = "127.0.0.1:1"


def test_generated_constructors_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_signatures.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (
        "the generated constructors or TypedDicts are stale; run python"
        f" tools/gen_signatures.py\n{result.stdout}\n{result.stderr}"
    )


def _defaults(*classes: type, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.init and f.name not in skip and f.name not in out:
                out[f.name] = f.default
    return out


def _signature_defaults(cls: type) -> dict[str, Any]:
    params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    return {
        p.name: p.default
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "bootstrap_servers"
    }


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        (Producer, lambda: _defaults(ClientConfig, ProducerConfig, skip={"bootstrap_servers"})),
        (
            Consumer,
            lambda: _defaults(
                ClientConfig, ConsumerConfig, GroupOptions, skip={"bootstrap_servers"}
            ),
        ),
        (Admin, lambda: _defaults(ClientConfig, skip={"bootstrap_servers"})),
    ],
)
def test_constructor_parameters_are_the_config_fields_with_their_defaults(
    cls: type, expected: Any
) -> None:
    signature = _signature_defaults(cls)
    assert signature == expected()
    assert list(signature) == [n for n in option_names(cls.__name__) if n != "bootstrap_servers"]  # type: ignore[arg-type]
    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    assert params["unknown"].kind is inspect.Parameter.VAR_KEYWORD
    doc = inspect.getdoc(cls.__init__) or ""  # type: ignore[misc]
    for name in signature:
        assert f"    {name}: " in doc, f"{cls.__name__}.__init__ does not document {name}"


def test_defaults_are_unchanged() -> None:
    # Spot checks of today's defaults (the config classes are their source).
    producer = _signature_defaults(Producer)
    assert (producer["acks"], producer["linger_ms"], producer["batch_size"]) == ("all", 5, 16384)
    assert producer["buffer_memory"] == 32 * 1024 * 1024
    assert producer["enable_idempotence"] is None
    consumer = _signature_defaults(Consumer)
    assert consumer["auto_offset_reset"] == "earliest"
    assert consumer["enable_auto_commit"] is False
    assert consumer["max_prefetch_bytes"] == 64 * 1024 * 1024
    assert consumer["session_timeout_ms"] == 45_000
    assert consumer["partition_assignment_strategy"] == "cooperative-sticky"
    assert _signature_defaults(Admin)["default_api_timeout_ms"] == 60_000


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Producer(BS, lingerms=5),
            "unknown Producer option `lingerms`: did you mean `linger_ms`?",
        ),
        (
            lambda: Consumer(BS, group_id="g", sesion_timeout_ms=1),
            "unknown Consumer option `sesion_timeout_ms`: did you mean `session_timeout_ms`?",
        ),
        (
            lambda: Admin(BS, request_timeout=5),
            "unknown Admin option `request_timeout`: did you mean `request_timeout_ms`?",
        ),
        (
            lambda: Producer(BS, max_batch_size=32768),
            "unknown Producer option `max_batch_size`: aiokafka's `max_batch_size` is"
            " `batch_size` here (the target size of one partition's batch)",
        ),
        (
            lambda: Producer(BS, api_version="auto"),
            "unknown Producer option `api_version`: aiokafka's `api_version` has no equivalent"
            " here: each connection negotiates the API versions with its broker"
            " (ApiVersions); drop it",
        ),
        (
            lambda: Producer(BS, partitioner=object()),
            "unknown Producer option `partitioner`: aiokafka's `partitioner` has no equivalent"
            " here: keyed records go to Java's murmur2 partition and keyless ones to a sticky"
            " partition (KIP-480); pass partition= to send() to choose one yourself",
        ),
        (
            lambda: Consumer(BS, max_poll_records=500),
            "unknown Consumer option `max_poll_records`: aiokafka's and Java's"
            " `max_poll_records` has no equivalent here: there is no poll: batches() yields"
            " what one Fetch returned for one partition, and max_prefetch_batches /"
            " max_prefetch_bytes bound what is fetched ahead",
        ),
        (
            lambda: Consumer(BS, group_id="g", rebalance_timeout_ms=60_000),
            "unknown Consumer option `rebalance_timeout_ms`: aiokafka's `rebalance_timeout_ms`"
            " is `max_poll_interval_ms` here (the rebalance timeout is max_poll_interval_ms,"
            " as in the Java client)",
        ),
        (
            lambda: Consumer(BS, consumer_timeout_ms=200),
            "unknown Consumer option `consumer_timeout_ms`: aiokafka's `consumer_timeout_ms`"
            " has no equivalent here: the iterators wait for records; bound a wait with"
            " asyncio.timeout() around it",
        ),
        (
            lambda: Admin(BS, sasl_kerberos_service_name="kafka"),
            "unknown Admin option `sasl_kerberos_service_name`: aiokafka's"
            " `sasl_kerberos_service_name` has no equivalent here: GSSAPI (Kerberos) is not"
            " supported yet",
        ),
        (
            lambda: Producer(BS, loop=None),
            "unknown Producer option `loop`: aiokafka's `loop` has no equivalent here: the"
            " running event loop is used; drop the argument",
        ),
        (
            lambda: Producer(BS, **{"linger.ms": 5}),
            "unknown Producer option `linger.ms`: Java's `linger.ms` is `linger_ms` here",
        ),
        (
            lambda: Consumer(bootstrap_servers=BS, **{"group.id": "g"}),
            "unknown Consumer option `group.id`: Java's `group.id` is `group_id` here",
        ),
        (
            lambda: Consumer(**{"bootstrap.servers": BS}),
            "unknown Consumer option `bootstrap.servers`: Java's `bootstrap.servers` is"
            " `bootstrap_servers` here",
        ),
        (
            lambda: Consumer(BS, **{"max.poll.records": 10}),
            "unknown Consumer option `max.poll.records`: aiokafka's and Java's"
            " `max.poll.records` has no equivalent here: there is no poll: batches() yields"
            " what one Fetch returned for one partition, and max_prefetch_batches /"
            " max_prefetch_bytes bound what is fetched ahead",
        ),
        (
            lambda: Producer(BS, **{"retries": 3}),
            "unknown Producer option `retries`: Java's `retries` has no equivalent here:"
            " retries are bounded by time, delivery_timeout_ms (what the Java client"
            " recommends); drop it",
        ),
        (
            lambda: Producer(BS, **{"ssl.truststore.location": "ca.pem"}),
            "unknown Producer option `ssl.truststore.location`: Java's"
            " `ssl.truststore.location` is `ssl_cafile` here (a PEM file of the trusted"
            " authorities)",
        ),
        (
            lambda: Producer(BS, group_id="g"),
            "unknown Producer option `group_id`: `group_id` is an option of Consumer, not of"
            " Producer",
        ),
        (
            lambda: Admin(BS, linger_ms=5),
            "unknown Admin option `linger_ms`: `linger_ms` is an option of Producer, not of Admin",
        ),
        (
            lambda: Producer(BS, qqqqqq=1),
            "unknown Producer option `qqqqqq`; every option is listed in docs/configuration.md",
        ),
        (
            lambda: Producer(BS, lingerms=5, max_batch_size=1),
            "unknown Producer option `lingerms`: did you mean `linger_ms`?; unknown Producer"
            " option `max_batch_size`: aiokafka's `max_batch_size` is `batch_size` here (the"
            " target size of one partition's batch)",
        ),
        (
            lambda: Consumer(BS, session_timeout_ms=10_000),
            "['session_timeout_ms'] needs a group_id: offsets and subscriptions belong to a"
            " consumer group",
        ),
        (
            lambda: Consumer(),
            'Consumer needs bootstrap_servers: Consumer(bootstrap_servers="host:9092", ...)'
            ' or Consumer("topic", ..., bootstrap_servers="host:9092")',
        ),
        (
            lambda: KafkaIntegration(BS, producer_options={"lingerms": 5}),  # type: ignore[typeddict-unknown-key]
            "unknown Producer option `lingerms`: did you mean `linger_ms`?",
        ),
    ],
)
def test_bad_option_names_say_what_to_write(make: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make()
    assert str(caught.value) == message


def test_bad_option_in_a_fastapi_consumer_declaration() -> None:
    kafka = KafkaIntegration(BS)
    with pytest.raises(ConfigError) as caught:
        kafka.consumer(["t"], group_id="g", max_poll_records=5)  # type: ignore[call-arg]
    assert str(caught.value).startswith("unknown Consumer option `max_poll_records`: ")


def test_typed_dicts_hold_every_option() -> None:
    assert set(ProducerOptions.__annotations__) == set(option_names("Producer")) - {
        "bootstrap_servers"
    }
    assert set(ConsumerOptions.__annotations__) == set(option_names("Consumer")) - {
        "bootstrap_servers",
        "group_id",
    }


# -- the typing test: mypy on a user's file ---------------------------------------------------

GOOD = """
    from aiostream_kafka import Admin, Consumer, Producer
    from aiostream_kafka.fastapi import KafkaIntegration

    Producer("h:9092", linger_ms=20, acks=1, compression_type="zstd")
    Producer(bootstrap_servers=["h:9092"], max_in_flight_requests_per_connection=1)
    Consumer("orders", "payments", bootstrap_servers="h:9092", group_id="g",
             session_timeout_ms=30_000, partition_assignment_strategy=["range"])
    Consumer("h:9092", max_prefetch_batches=4)
    Admin("h:9092", default_api_timeout_ms=10_000)
    KafkaIntegration("h:9092", producer_options={"linger_ms": 1},
                     consumer_options={"fetch_max_wait_ms": 100})
    """

BAD = {
    "producer": ('Producer("h:9092", lingerms=5)', 'Argument "lingerms" to "Producer"'),
    "consumer": (
        'Consumer("t", bootstrap_servers="h:9092", max_poll_records=5)',
        'Argument "max_poll_records" to "Consumer"',
    ),
    "admin": ('Admin("h:9092", request_timeout=1)', 'Argument "request_timeout" to "Admin"'),
    "type": ('Producer("h:9092", linger_ms="5")', 'Argument "linger_ms" to "Producer"'),
    "fastapi": (
        'KafkaIntegration("h:9092", producer_options={"lingerms": 5})',
        'Argument "producer_options" to "KafkaIntegration" has incompatible type'
        ' "dict[str, int]"; expected "ProducerOptions | None"',
    ),
}


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "user_code.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MYPYPATH": str(ROOT)},
    )


def test_mypy_accepts_correct_options_and_flags_misspelled_ones(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    good = _mypy(tmp_path, GOOD)
    assert good.returncode == 0, good.stdout + good.stderr
    imports = (
        "from aiostream_kafka import Admin, Consumer, Producer\n"
        "from aiostream_kafka.fastapi import KafkaIntegration\n"
    )
    source = imports + "".join(f"{line}\n" for line, _ in BAD.values())
    bad = _mypy(tmp_path, source)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    for line_no, (_, needle) in enumerate(BAD.values(), start=3):
        assert f"user_code.py:{line_no}: error: {needle}" in bad.stdout, bad.stdout


# -- aiokafka habits (no broker) ---------------------------------------------------------------


def test_consumer_takes_topics_positionally_and_keeps_a_positional_bootstrap() -> None:
    consumer = Consumer("orders", "payments", bootstrap_servers=BS, group_id="g")
    assert consumer._topics == ("orders", "payments")
    assert consumer.client_config.addresses == [("127.0.0.1", 1)]
    legacy = Consumer(BS, group_id="g")
    assert legacy._topics == ()
    assert legacy.client_config.addresses == [("127.0.0.1", 1)]
    with pytest.raises(ConfigError, match="topics must be non-empty str"):
        Consumer("", bootstrap_servers=BS)


def test_record_timestamp_is_a_read_only_alias() -> None:
    record = Record("t", 0, 7, 1_700_000_000_000, TimestampType.CREATE_TIME, None, b"v", [], 3)
    assert record.timestamp == 1_700_000_000_000
    record.timestamp_ms = 5
    assert record.timestamp == 5
    with pytest.raises(AttributeError):
        record.timestamp = 9  # type: ignore[misc]
    assert not hasattr(record, "__dict__")  # still a slotted class


@pytest.mark.parametrize(
    ("make", "name", "message"),
    [
        (
            lambda: Consumer(BS),
            "getmany",
            "Consumer has no getmany(); use `async for batch in consumer.batches()`: a list of"
            " records per Fetch and partition (bound what is fetched ahead with"
            " max_prefetch_batches/max_prefetch_bytes)",
        ),
        (
            lambda: Consumer(BS),
            "getone",
            "Consumer has no getone(); use `async for record in consumer` (or"
            " `consumer.stream()`); for one record, keep one iterator: `it = aiter(consumer)`,"
            " then `await anext(it)`",
        ),
        (
            lambda: Producer(BS),
            "send_and_wait",
            "Producer has no send_and_wait(); use `await producer.send(topic, value)`: send()"
            " returns once the record is acknowledged (aiokafka's send() + await is enqueue()"
            " here, which returns the future)",
        ),
        (
            lambda: Producer(BS),
            "create_batch",
            "Producer has no create_batch(); use `await producer.send_batch(topic, values,"
            " keys)`: one call for many records, split into batches by partition",
        ),
        (
            lambda: Admin(BS),
            "alter_configs",
            "Admin has no alter_configs(); use `await admin.incremental_alter_configs(...)`"
            " (KIP-339; the old AlterConfigs replaced every setting of the resource)",
        ),
    ],
)
def test_missing_aiokafka_calls_name_the_equivalent(make: Any, name: str, message: str) -> None:
    client = make()
    with pytest.raises(MissingHabitError) as caught:
        getattr(client, name)
    assert str(caught.value) == message
    assert isinstance(caught.value, AttributeError)
    assert not hasattr(client, name)
    assert name in HABITS[type(client).__name__]


def test_other_missing_attributes_are_plain_attribute_errors() -> None:
    consumer = Consumer(BS)
    with pytest.raises(AttributeError) as caught:
        consumer.no_such_thing  # type: ignore[attr-defined]  # noqa: B018
    assert not isinstance(caught.value, MissingHabitError)
    assert str(caught.value) == "'Consumer' object has no attribute 'no_such_thing'"


def test_every_habit_names_a_call_that_really_is_missing() -> None:
    for cls in (Producer, Consumer, Admin):
        for name in HABITS[cls.__name__]:
            assert isinstance(vars(cls)[name], Habit), f"{cls.__name__}.{name} exists"
    for cls in (Producer, Consumer, Admin):
        assert inspect.iscoroutinefunction(cls.stop)


@pytest.mark.parametrize(
    ("aiokafka_class", "client"),
    [
        ("aiokafka:AIOKafkaProducer", "Producer"),
        ("aiokafka:AIOKafkaConsumer", "Consumer"),
        ("aiokafka.admin:AIOKafkaAdminClient", "Admin"),
    ],
)
def test_every_aiokafka_option_is_an_option_here_or_explained(
    aiokafka_class: str, client: Any
) -> None:
    module_name, _, name = aiokafka_class.partition(":")
    module = pytest.importorskip(module_name)
    params = inspect.signature(getattr(module, name).__init__).parameters
    names = [p for p in params if p not in ("self", "topics")]  # topics: positional here too
    ours = set(option_names(client))
    for option in names:
        if option in ours:
            continue
        with pytest.raises(ConfigError) as caught:
            {"Producer": Producer, "Consumer": Consumer, "Admin": Admin}[client](
                BS, **{option: None}
            )
        text = str(caught.value)
        assert text.startswith(f"unknown {client} option `{option}`: aiokafka's"), text
        assert "did you mean" not in text
