"""Checks of the public calls' collection arguments (a leaf module: it imports only structs).

A ``str`` is iterable, so ``consumer.subscribe("orders")`` would subscribe to the topics
``o``, ``r``, ``d``, ``e``, ``s`` and ``admin.delete_topics("orders")`` delete those.
Every call that takes a collection of names raises ``TypeError`` for a bare ``str``
instead, naming the call to write (:func:`names`). Calls that take partitions accept one
collection of them or the partitions themselves as separate arguments
(:func:`partitions`), as ``assign`` and ``pause`` both do.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from typing import Any, TypeVar, cast

from aiostream_kafka.structs import TopicPartition

__all__ = ["collection", "names", "partitions"]

T = TypeVar("T")


def names(value: Collection[str], call: str, what: str = "topic names") -> Collection[str]:
    """``value`` itself, after checking it is not one bare ``str`` (or ``bytes``).

    Raises:
        TypeError: ``value`` is a ``str`` or ``bytes``; the message names the call to write
            (``subscribe(["orders"])``).
    """
    if isinstance(value, (str, bytes, bytearray)):
        shown = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
        raise TypeError(
            f"{call}() takes a collection of {what}, not a single {type(value).__name__} "
            f"(iterating it would give its characters): write {call}({json.dumps([shown])})"
        )
    return value


def collection(value: Collection[T], call: str, item: type, example: str) -> Collection[T]:
    """``value`` itself, after checking it is a collection and not one bare item of type
    ``item`` or a ``str``.

    Raises:
        TypeError: ``value`` is a single ``item`` or a ``str``; the message shows
            ``example``, the call to write.
    """
    if isinstance(value, (item, str, bytes, bytearray)):
        raise TypeError(
            f"{call}() takes a collection of {item.__name__}, not a single "
            f"{type(value).__name__}: write {example}"
        )
    return value


def _is_partition(value: Any) -> bool:
    """A ``TopicPartition``, or a plain ``(topic, partition)`` tuple standing for one."""
    return isinstance(value, TopicPartition) or (
        type(value) is tuple and len(value) == 2 and isinstance(value[0], str)
    )


def partitions(
    args: tuple[TopicPartition | Iterable[TopicPartition], ...], call: str
) -> list[TopicPartition]:
    """The partitions of a call that takes either one collection of partitions
    (``pause([tp0, tp1])``) or the partitions as separate arguments (``pause(tp0, tp1)``).
    Each entry is checked by the caller (as before: ``ValueError`` for a malformed one).

    Raises:
        TypeError: a ``str`` where partitions are expected, or a collection mixed with
            partitions.
    """
    if len(args) == 1 and not _is_partition(args[0]):
        only = args[0]
        if isinstance(only, (str, bytes, bytearray)) or not isinstance(only, Iterable):
            raise TypeError(
                f"{call}() takes TopicPartitions, or one collection of them, not "
                f"{only!r}: write {call}(TopicPartition(topic, partition), ...) or "
                f"{call}([TopicPartition(topic, partition), ...])"
            )
        return list(cast("Iterable[TopicPartition]", only))  # not one partition
    out: list[TopicPartition] = []
    for arg in args:
        if isinstance(arg, Iterable) and not _is_partition(arg):
            raise TypeError(
                f"{call}() takes TopicPartitions, or one collection of them (not both): got {arg!r}"
            )
        out.append(arg)  # type: ignore[arg-type]  # anything else: checked by the caller
    return out
