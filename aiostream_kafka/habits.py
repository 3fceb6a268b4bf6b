"""What aiokafka's (and the Java client's) calls that have no namesake here are called.

``Producer``, ``Consumer`` and ``Admin`` get one class attribute per name below
(:func:`install`, run at import time only, so that type checkers still flag these names): reading
it raises an ``AttributeError`` that names the equivalent, so ``consumer.getmany()`` says to use
``batches()`` instead of a bare "has no attribute". docs/migration-aiokafka.md lists the same
table. The names are left out of ``dir(instance)`` (so tab completion does not offer calls
that raise), and ``hasattr`` says False.

Not a ``__getattr__``: a class that defines one has every attribute read go through it, and
CPython then no longer specializes ``self.x`` for the class's instances; on the producer's
per-record path that cost ~1,500 instructions per record (callgrind, issue 18).
"""

from __future__ import annotations

__all__ = ["HABITS", "Habit", "MissingHabitError", "install", "missing_attribute"]

# class -> {aiokafka/Java name: what to use here}
HABITS: dict[str, dict[str, str]] = {
    "Producer": {
        "send_and_wait": "`await producer.send(topic, value)`: send() returns once the record"
        " is acknowledged (aiokafka's send() + await is enqueue() here, which returns the"
        " future)",
        "create_batch": "`await producer.send_batch(topic, values, keys)`: one call for many"
        " records, split into batches by partition",
    },
    "Consumer": {
        "getmany": "`async for batch in consumer.batches()`: a list of records per Fetch and"
        " partition (bound what is fetched ahead with max_prefetch_batches/max_prefetch_bytes)",
        "getone": "`async for record in consumer` (or `consumer.stream()`); for one record,"
        " keep one iterator: `it = aiter(consumer)`, then `await anext(it)`",
        "poll": "there is no poll: `async for batch in consumer.batches()`",
        "committed": "`await admin.list_consumer_group_offsets(group_id)` (Admin); a group"
        " member starts each assigned partition at its committed offset by itself",
        "seek_to_committed": "a group member starts each assigned partition at its committed"
        " offset by itself; to go back to it, `consumer.seek(tp, offset)` with the offset from"
        " `admin.list_consumer_group_offsets(group_id)`",
        "last_poll_timestamp": "`consumer.health()`: `last_fetch_at`, `last_progress_at` and"
        " (with a group) `idle_s`",
        "partitions_for_topic": "`await admin.describe_topics([topic])` (Admin), or"
        " `producer.partitions_for(topic)`",
        "topics": "`await admin.list_topics()` (Admin)",
        # Not implemented for real: leaving the group and joining it again later would
        # need a membership that can stop and start again; close() leaves it.
        "unsubscribe": "`await consumer.close()` leaves the group; `consumer.subscribe(...)`"
        " again changes the subscription, `consumer.unassign()` drops a manual assignment",
    },
    "Admin": {
        "alter_configs": "`await admin.incremental_alter_configs(...)` (KIP-339; the old"
        " AlterConfigs replaced every setting of the resource)",
    },
}


class MissingHabitError(AttributeError):
    """An aiokafka or Java client call that has another name here (an ``AttributeError``,
    so ``hasattr`` and ``getattr(obj, name, default)`` behave as usual)."""


def missing_attribute(owner: object, name: str) -> AttributeError:
    """The error for ``owner.name``, which does not exist: it names the equivalent when
    ``name`` is an aiokafka or Java habit. Returns the exception; the caller raises it."""
    cls = owner.__name__ if isinstance(owner, type) else type(owner).__name__
    use = HABITS.get(cls, {}).get(name)
    if use is None:
        return AttributeError(f"{cls!r} object has no attribute {name!r}", name=name, obj=owner)
    return MissingHabitError(f"{cls} has no {name}(); use {use}", name=name, obj=owner)


class Habit:
    """The class attribute standing for an aiokafka or Java call that has another name
    here: reading it (on the class or an instance) raises :class:`MissingHabitError`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> object:
        raise missing_attribute(obj if obj is not None else owner, self.name)


def install(cls: type) -> None:
    """Give ``cls`` a :class:`Habit` for each of its names in :data:`HABITS`, and a
    ``__dir__`` that leaves them out (``dir(instance)``, hence tab completion).

    Raises:
        RuntimeError: ``cls`` has a real member of that name (drop it from ``HABITS``), or
            a ``__dir__`` of its own.
    """
    hidden = frozenset(HABITS[cls.__name__])
    for name in hidden:
        if name in vars(cls):
            raise RuntimeError(f"{cls.__name__}.{name} exists: drop it from HABITS")
        setattr(cls, name, Habit(name))
    if "__dir__" in vars(cls):
        raise RuntimeError(f"{cls.__name__} defines __dir__: filter the habits in it")

    def __dir__(self: object) -> list[str]:
        return [name for name in object.__dir__(self) if name not in hidden]

    setattr(cls, "__dir__", __dir__)  # noqa: B010 -- a method of a class not known here
