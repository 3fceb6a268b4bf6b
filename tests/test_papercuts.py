"""Papercuts a user hits (issue 27, "Deliver" item 5), checked without a broker: the
clients are constructed and not started, or started against nothing where the call
checks its arguments first.

* a ``str`` where a collection of names is expected raises ``TypeError`` naming the fix;
* one finite default close timeout for the Producer, the Consumer and the Admin;
* seconds are ``timeout`` (``drain(timeout_s=...)`` still accepted);
* ``assign``, ``pause``, ``resume`` and the seek/offset calls take a collection or varargs;
* the types public calls return are importable from ``aiostream_kafka``;
* ``health().reason`` (``problem`` a deprecated alias);
* aiokafka habits hidden from ``dir()`` but still raising; ``subscription()``;
* the README's status paragraph does not call landed features "not yet".
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import aiostream_kafka
from aiostream_kafka import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    Consumer,
    NewTopic,
    Producer,
    TopicPartition,
)
from aiostream_kafka.concurrency import DEFAULT_CLOSE_TIMEOUT_S
from aiostream_kafka.consumer.group import ConsumerHealth
from aiostream_kafka.habits import HABITS, MissingHabitError

ROOT = Path(__file__).resolve().parent.parent
BS = "127.0.0.1:9"  # never connected to: every call below fails or returns before I/O

TP0, TP1, TP2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


# -- 1. a str where a collection of names is expected ---------------------------------------


def test_subscribe_with_a_str_raises_type_error_naming_the_list_form() -> None:
    consumer = Consumer(BS, group_id="g")
    with pytest.raises(TypeError) as caught:
        consumer.subscribe("orders")  # type: ignore[arg-type]  # what a user writes
    assert 'subscribe(["orders"])' in str(caught.value)
    # before the state checks: the mistake is named even on an unstarted consumer
    with pytest.raises(TypeError):
        Consumer(BS).subscribe(b"orders")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "fix"),
    [
        (lambda a: a.delete_topics("orders"), 'delete_topics(["orders"])'),
        (lambda a: a.describe_topics("orders"), 'describe_topics(["orders"])'),
        (lambda a: a.describe_consumer_groups("g1"), 'describe_consumer_groups(["g1"])'),
        (lambda a: a.delete_consumer_groups("g1"), 'delete_consumer_groups(["g1"])'),
        (
            lambda a: a.list_consumer_groups(types="consumer"),
            "list_consumer_groups(types=['consumer'])",
        ),
        (
            lambda a: a.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "t")], keys="retention.ms"
            ),
            'describe_configs(["retention.ms"])',
        ),
        (lambda a: a.create_topics(NewTopic("t", 1, 1)), "create_topics([NewTopic(...)])"),
        (lambda a: a.create_topics("t"), "create_topics([NewTopic(...)])"),
        (
            lambda a: a.describe_configs(ConfigResource(ConfigResourceType.TOPIC, "t")),
            "describe_configs([resource])",
        ),
        (
            lambda a: a.list_consumer_group_offsets("g", TopicPartition("t", 0)),
            "list_consumer_group_offsets(group_id, [TopicPartition(topic, partition)])",
        ),
    ],
)
async def test_admin_calls_refuse_a_single_name_where_a_collection_is_expected(
    call: Any, fix: str
) -> None:
    admin = Admin(BS)  # not started: the arguments are checked before any I/O
    with pytest.raises(TypeError) as caught:
        await call(admin)
    assert fix in str(caught.value)


def test_consumer_constructor_topics_are_separate_strs() -> None:
    consumer = Consumer("orders", "payments", bootstrap_servers=BS, group_id="g")
    assert consumer._topics == ("orders", "payments")


# -- 2. one finite default close timeout ------------------------------------------------------


@pytest.mark.parametrize("make", [Producer, Consumer])
async def test_close_without_a_timeout_bounds_the_graceful_part_by_the_default(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close(timeout=None) hands the same finite limit to the close of the Producer and
    the Consumer (the Producer's used to be unbounded: delivery_timeout_ms per record)."""
    seen: list[object] = []

    async def record(self: object, limit: object) -> None:
        seen.append(limit)

    monkeypatch.setattr(make, "_close", record)
    await make(BS).close()
    await make(BS).close(timeout=None)
    await make(BS).stop()
    assert seen == [DEFAULT_CLOSE_TIMEOUT_S] * 3
    await make(BS).close(timeout=2.5)
    assert seen[-1] == 2.5


def test_every_close_documents_the_default() -> None:
    assert DEFAULT_CLOSE_TIMEOUT_S == 30.0
    for cls in (Producer, Consumer, Admin):
        doc = inspect.getdoc(cls.close) or ""
        assert "30 s" in doc, f"{cls.__name__}.close does not name its default: {doc}"


async def test_producer_close_cuts_an_endless_delivery_at_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flush that never completes (a broker that stopped answering) is cut at the
    default close timeout, and close returns."""
    from aiostream_kafka.producer import producer as producer_module

    monkeypatch.setattr(producer_module, "DEFAULT_CLOSE_TIMEOUT_S", 0.2)
    producer = Producer(BS)
    hung = asyncio.Event()

    async def never_flushes() -> None:
        hung.set()
        await asyncio.Event().wait()

    producer._state = "running"  # as after start(), without a broker
    monkeypatch.setattr(producer, "_flush", never_flushes)
    async with asyncio.timeout(10):
        await producer.close()
    assert hung.is_set() and producer.closed


# -- 3. seconds are ``timeout`` ---------------------------------------------------------------


def test_the_public_calls_that_wait_take_seconds_as_timeout() -> None:
    """The rule written in docs/reference/consumer.md: a call's own deadline in seconds is
    ``timeout``; ``*_ms`` only for Kafka's own names; ``_s`` only for settings."""
    for cls in (Producer, Consumer, Admin):
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member):
                continue
            for param in inspect.signature(member).parameters:
                if param == "timeout_s" and (cls, name) == (Consumer, "drain"):
                    continue  # the old name, kept as an alias
                assert not (param.startswith("timeout") and param.endswith("_s")), (
                    f"{cls.__name__}.{name}({param})"
                )
    assert "timeout" in inspect.signature(Consumer.drain).parameters


async def test_drain_takes_timeout_and_still_its_old_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waited: list[float] = []
    for kwargs in ({"timeout": 0.05}, {"timeout_s": 0.05}, {}):
        consumer = Consumer(BS)
        start = asyncio.get_running_loop().time()
        monkeypatch.setattr(consumer._engine, "has_undelivered", lambda: True)
        if not kwargs:  # the default is 30 s: end it early through close()
            monkeypatch.setattr("aiostream_kafka.consumer.consumer._DRAIN_TIMEOUT_S", 0.05)
        await consumer.drain(**kwargs)
        waited.append(asyncio.get_running_loop().time() - start)
        assert consumer._closed
    assert all(0.04 <= w < 5 for w in waited), waited
    await Consumer(BS).drain(0.01)  # positional, as before
    with pytest.raises(TypeError):
        await Consumer(BS).drain(timeout=1, timeout_s=1)


# -- 4. partitions: a collection or varargs, everywhere ---------------------------------------


def test_assign_and_pause_take_a_collection_or_varargs() -> None:
    consumer = Consumer(BS)
    consumer.assign([TP0, TP1])  # the existing form
    assert consumer.assignment() == {TP0, TP1}
    consumer.assign(TP0, TP1, TP2)  # varargs, as pause takes them
    assert consumer.assignment() == {TP0, TP1, TP2}
    consumer.assign(TP2)
    assert consumer.assignment() == {TP2}
    consumer.assign(partitions=[TP0, TP1])  # by keyword, as before
    assert consumer.assignment() == {TP0, TP1}
    consumer.assign([("t", 0)])  # plain tuples, as before
    assert consumer.assignment() == {TP0}

    consumer.assign([TP0, TP1, TP2])
    consumer.pause(TP0, TP1)  # the existing form
    assert consumer.paused() == {TP0, TP1}
    consumer.resume([TP0, TP1])  # a collection, as assign takes it
    assert consumer.paused() == set()
    consumer.pause([TP2])
    assert consumer.paused() == {TP2}
    consumer.resume(TP2)
    consumer.pause({TP0, TP1})
    assert consumer.paused() == {TP0, TP1}
    consumer.resume(("t", 0), ("t", 1))  # plain tuples, as before
    assert consumer.paused() == set()
    consumer.pause()  # nothing: a no-op, as before
    assert consumer.paused() == set()


def test_partition_calls_refuse_a_str_and_mixed_forms() -> None:
    consumer = Consumer(BS)
    consumer.assign([TP0, TP1])
    with pytest.raises(TypeError, match="TopicPartition"):
        consumer.pause("t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        consumer.pause(TP0, [TP1])
    with pytest.raises(TypeError):
        consumer.assign("t")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected TopicPartition"):
        consumer.assign(["t"])  # type: ignore[list-item]  # as before: ValueError


async def test_seek_and_offset_calls_take_a_collection_or_varargs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = Consumer(BS)
    consumer.assign([TP0, TP1])
    asked: list[list[TopicPartition]] = []

    async def lookup(specs: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        asked.append(sorted(specs))
        return {}

    monkeypatch.setattr(consumer, "_lookup", lookup)
    await consumer.seek_to_beginning(TP0, TP1)
    await consumer.seek_to_beginning([TP0, TP1])
    await consumer.seek_to_end({TP0})
    await consumer.seek_to_end()  # every assigned partition, as before
    await consumer.beginning_offsets([TP0, TP1])
    await consumer.beginning_offsets(TP0, TP1)
    await consumer.end_offsets(TP1)
    assert asked == [[TP0, TP1], [TP0, TP1], [TP0], [TP0, TP1], [TP0, TP1], [TP0, TP1], [TP1]]


# -- 5. what public calls return is importable from the package --------------------------------


def _named_types(annotation: Any) -> set[type]:
    """The classes an evaluated annotation names (through unions and generics)."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return {annotation}
    found: set[type] = set()
    origin = typing.get_origin(annotation)
    if isinstance(origin, type):
        found.add(origin)
    for arg in typing.get_args(annotation):
        found |= _named_types(arg)
    return found


#: Handles for diagnostics, reached through the client (``consumer.cluster``,
#: ``consumer.group``, ``producer.buffer_pool``), not values to construct or annotate with.
DIAGNOSTIC_HANDLES = {"Cluster", "ConsumerGroup", "BufferPool"}


@pytest.mark.parametrize("cls", [Producer, Consumer, Admin])
def test_every_type_a_public_call_returns_is_importable_from_the_package(cls: type) -> None:
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        func = member.fget if isinstance(member, property) else member
        if not callable(func):
            continue
        hints = typing.get_type_hints(func)
        for returned in _named_types(hints.get("return")):
            if returned.__module__ in ("builtins", "typing", "types", "collections.abc"):
                continue
            if returned.__module__.lstrip("_").startswith("asyncio") or returned.__name__ in (
                DIAGNOSTIC_HANDLES
            ):
                continue
            assert getattr(aiostream_kafka, returned.__name__, None) is returned, (
                f"{cls.__name__}.{name} returns {returned.__name__}, not importable "
                "from aiostream_kafka"
            )
            assert returned.__name__ in aiostream_kafka.__all__


def test_the_named_return_types_are_importable_and_lazy() -> None:
    from aiostream_kafka import (  # noqa: F401 -- importable is the test
        BatchRun,
        ConsumerHealth,
        OffsetAndTimestamp,
        TransactionScope,
    )

    script = (
        "import sys, aiostream_kafka\n"
        "assert 'aiostream_kafka.consumer.consumer' not in sys.modules\n"
        "assert 'aiostream_kafka.producer.producer' not in sys.modules\n"
        "assert 'ConsumerHealth' in dir(aiostream_kafka)\n"
        "from aiostream_kafka import ConsumerHealth, TransactionScope\n"
        "print(ConsumerHealth.__module__, TransactionScope.__module__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    modules = ["aiostream_kafka.consumer.group", "aiostream_kafka.producer.transaction_calls"]
    assert out.stdout.split() == modules


# -- 6. health().reason ---------------------------------------------------------------------


def test_health_reason_is_the_field_and_problem_a_deprecated_alias() -> None:
    health = ConsumerHealth(
        state="stable", last_heartbeat_at=None, last_fetch_at=None, error=None, reason="why"
    )
    assert health.reason == "why" and not health.healthy
    with pytest.warns(DeprecationWarning, match="reason"):
        assert health.problem == "why"
    assert "reason" in ConsumerHealth.__dataclass_fields__
    assert Consumer(BS).health().reason is None  # the consumer without a group


# -- 7. habits hidden from dir(), still raising; subscription() ------------------------------


@pytest.mark.parametrize("cls", [Producer, Consumer, Admin])
def test_habits_are_hidden_from_dir_and_still_raise(cls: type) -> None:
    client = cls(BS)
    listed = dir(client)
    for name in HABITS[cls.__name__]:
        assert name not in listed, f"dir({cls.__name__}) offers {name}"
        with pytest.raises(MissingHabitError, match=f"has no {name}"):
            getattr(client, name)
    assert "close" in listed and "__class__" in listed


def test_consumer_dir_offers_no_aiokafka_habit_that_raises() -> None:
    listed = dir(Consumer(BS))
    for name in ("getmany", "getone", "poll", "unsubscribe"):
        assert name not in listed
    assert "subscription" in listed and "subscribe" in listed


def test_subscription_is_a_frozenset_of_topic_names() -> None:
    consumer = Consumer(BS, group_id="g")
    assert consumer.subscription() == frozenset()  # not subscribed (not started)
    assert isinstance(consumer.subscription(), frozenset)
    assert "subscription" not in HABITS["Consumer"]
    manual = Consumer(BS)
    manual.assign([TP0])
    assert manual.subscription() == frozenset()


# -- 8. the README says what landed -----------------------------------------------------------


def test_readme_status_does_not_call_transactions_not_yet() -> None:
    readme = (ROOT / "README.md").read_text()
    status = readme[readme.index("**Status") :].split("\n\n", 1)[0]
    not_yet = status[status.index("Not yet") :]
    assert "transactions" not in not_yet.split(".")[0]
    assert "transactions" in status
