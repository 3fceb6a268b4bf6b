"""Hypothesis strategies for the generated Kafka messages, built from ``Message.FIELDS``.

A strategy for ``(cls, version)`` fills exactly the fields that ``version`` carries, with
values that fit their wire type (and ``None`` where the field is nullable in that
version); the other fields keep their defaults, so an encode/decode round trip must give
back an equal object. In flexible versions it also adds unknown tagged fields.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from hypothesis import strategies as st

from aiostream_kafka.protocol.base import FieldInfo, Message, Request, Response
from aiostream_kafka.protocol.messages import (
    API_KEYS,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    ControlRecordTypeSchema,
    EndTxnMarker,
    RequestHeader,
    ResponseHeader,
)

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

#: every top-level generated class
TOP_LEVEL: list[type[Message]] = [
    *(cls for pair in API_KEYS.values() for cls in pair),
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
    EndTxnMarker,
    ControlRecordTypeSchema,
]


def all_message_versions() -> list[tuple[type[Message], int]]:
    """Every (top-level class, version) pair the codec supports."""
    return [
        (cls, version)
        for cls in TOP_LEVEL
        for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
    ]


def case_id(case: tuple[type[Message], int]) -> str:
    cls, version = case
    return f"{cls.__name__}-v{version}"


def in_range(versions: tuple[int, int] | None, version: int) -> bool:
    return versions is not None and versions[0] <= version <= versions[1]


def _interesting_ints(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted(e for e in {low, high, 0, -1, 1, 127, 128, 16383, 16384} if low <= e <= high)
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _element(base: str, struct: type[Message] | None, version: int, depth: int) -> Any:
    if struct is not None:
        return message_strategy(struct, version, depth + 1)
    if base == "bool":
        return st.booleans()
    if base in INT_RANGES:
        return _interesting_ints(*INT_RANGES[base])
    if base == "float64":
        return st.floats(allow_nan=False)
    if base == "string":
        return st.text(max_size=12)
    if base in ("bytes", "records"):
        return st.binary(max_size=24)
    if base == "uuid":
        return st.one_of(st.just(UUID(int=0)), st.uuids())
    raise AssertionError(f"no strategy for {base}")


def field_strategy(info: FieldInfo, version: int, depth: int) -> Any:
    """A strategy for the value of one field in ``version``."""
    kafka_type = info.kafka_type
    is_array = kafka_type.startswith("[]")
    base = kafka_type[2:] if is_array else kafka_type
    element = _element(base, info.struct, version, depth)
    value = st.lists(element, max_size=3 if depth < 2 else 1) if is_array else element
    if in_range(info.nullable_versions, version):
        value = st.one_of(st.none(), value)
    return value


_CACHE: dict[tuple[str, int, int], Any] = {}


def message_strategy(cls: type[Message], version: int, depth: int = 0) -> Any:
    """A strategy for instances of ``cls`` whose non-default fields all exist in ``version``."""
    key = (f"{cls.__module__}.{cls.__qualname__}", version, depth)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _CACHE[key] = _build(cls, version, depth)
    return cached


def _build(cls: type[Message], version: int, depth: int) -> Any:
    kwargs: dict[str, Any] = {}
    for info in cls.FIELDS:
        if in_range(info.versions, version):
            kwargs[info.name] = field_strategy(info, version, depth)
    if cls.is_flexible(version):
        known = {info.tag for info in cls.FIELDS if info.tag is not None}
        tags = st.integers(0, 2**31 - 1).filter(lambda tag: tag not in known)
        kwargs["unknown_tagged_fields"] = st.dictionaries(tags, st.binary(max_size=6), max_size=2)
    return st.builds(cls, **kwargs)


def is_api_message(cls: type[Message]) -> bool:
    return issubclass(cls, (Request, Response))
