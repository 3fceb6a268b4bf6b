"""Serializers and deserializers: turning keys and values into bytes and back.

A *serializer* is any callable ``(obj) -> bytes | None``; a *deserializer* is any callable
``(bytes | None) -> obj``. The producer takes ``key_serializer`` / ``value_serializer``, the
consumer ``key_deserializer`` / ``value_deserializer``; plain functions, lambdas and the
helpers below all fit.

Without a serializer the producer accepts only ``bytes``-like values (``bytes``,
``bytearray``, ``memoryview``) and ``None`` and raises :class:`TypeError` for anything
else, so a ``str`` is never silently encoded in a guessed charset.

``None`` is Kafka's null (a tombstone for a value) and passes through every helper
unchanged in both directions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Serializer = Callable[[Any], "bytes | bytearray | memoryview | None"]
"""``(obj) -> bytes | None``: turns a key or value into the bytes sent to Kafka."""

Deserializer = Callable[["bytes | None"], Any]
"""``(bytes | None) -> obj``: turns the bytes read from Kafka into a key or value."""

BytesLike = bytes | bytearray | memoryview

__all__ = [
    "BytesLike",
    "Deserializer",
    "Serializer",
    "bytes_deserializer",
    "bytes_serializer",
    "json_deserializer",
    "json_serializer",
    "serialize",
    "str_deserializer",
    "str_serializer",
]


def bytes_serializer(obj: BytesLike | None) -> BytesLike | None:
    """Pass ``bytes``, ``bytearray``, ``memoryview`` and ``None`` through unchanged.

    Raises:
        TypeError: ``obj`` is of any other type.
    """
    if obj is None or isinstance(obj, bytes | bytearray | memoryview):
        return obj
    raise TypeError(
        f"expected bytes, bytearray, memoryview or None, got {type(obj).__name__}; "
        "pass a serializer (e.g. aiostream_kafka.serde.str_serializer()) to send other types"
    )


def bytes_deserializer(data: bytes | None) -> bytes | None:
    """Return ``data`` unchanged (the consumer's default)."""
    return data


def str_serializer(encoding: str = "utf-8") -> Callable[[str | None], bytes | None]:
    """Return a serializer encoding ``str`` in ``encoding`` (UTF-8 by default).

    The serializer raises :class:`TypeError` for a non-``str`` and ``UnicodeEncodeError``
    for text the encoding cannot represent.
    """

    def serialize_str(obj: str | None) -> bytes | None:
        if obj is None:
            return None
        if not isinstance(obj, str):
            raise TypeError(f"str_serializer expects str or None, got {type(obj).__name__}")
        return obj.encode(encoding)

    return serialize_str


def str_deserializer(
    encoding: str = "utf-8", errors: str = "strict"
) -> Callable[[bytes | None], str | None]:
    """Return a deserializer decoding bytes as ``encoding`` (``errors`` as in
    :meth:`bytes.decode`); it raises ``UnicodeDecodeError`` on invalid input by default."""

    def deserialize_str(data: bytes | None) -> str | None:
        return None if data is None else bytes(data).decode(encoding, errors)

    return deserialize_str


def json_serializer(**dumps_options: Any) -> Callable[[Any], bytes | None]:
    """Return a serializer writing JSON as UTF-8 (``json.dumps`` with ``dumps_options``;
    compact separators unless given). ``None`` stays Kafka's null, not ``b"null"``.

    The serializer raises :class:`TypeError` for objects JSON cannot represent.
    """
    options: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False}
    options.update(dumps_options)

    def serialize_json(obj: Any) -> bytes | None:
        if obj is None:
            return None
        return json.dumps(obj, **options).encode("utf-8")

    return serialize_json


def json_deserializer(**loads_options: Any) -> Callable[[bytes | None], Any]:
    """Return a deserializer parsing UTF-8 JSON (``json.loads`` with ``loads_options``).

    Null stays ``None``. The deserializer raises :class:`ValueError`
    (``json.JSONDecodeError``) for bytes that are not JSON.
    """

    def deserialize_json(data: bytes | None) -> Any:
        if data is None:
            return None
        return json.loads(bytes(data), **loads_options)

    return deserialize_json


def serialize(serializer: Serializer | None, obj: Any, what: str) -> BytesLike | None:
    """Apply ``serializer`` to ``obj`` (or check that ``obj`` is bytes-like when there is
    none) and return the bytes; ``what`` ("key", "value") names it in errors.

    Raises:
        TypeError: no serializer and ``obj`` is not bytes-like or ``None``, or the
            serializer returned something that is not bytes-like or ``None``.
    """
    if serializer is None:
        if obj is None or isinstance(obj, bytes | bytearray | memoryview):
            return obj
        raise TypeError(
            f"{what} must be bytes, bytearray, memoryview or None without a {what}_serializer, "
            f"got {type(obj).__name__}; pass {what}_serializer= (e.g. "
            "aiostream_kafka.serde.str_serializer() or json_serializer())"
        )
    data = serializer(obj)
    if data is None or isinstance(data, bytes | bytearray | memoryview):
        return data
    raise TypeError(f"the {what}_serializer returned {type(data).__name__}, expected bytes or None")
