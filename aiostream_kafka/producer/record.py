"""``ProducerRecord`` and the checks of a record's parts that the per-record calls
(:meth:`Producer.send`, :meth:`Producer.enqueue`) and the batch calls
(:mod:`aiostream_kafka.producer.batch_calls`) share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiostream_kafka.producer.accumulator import HeaderList

__all__ = ["BYTES", "ProducerRecord", "check_headers"]

#: What a key or value may be without a serializer (besides None).
BYTES = (bytes, bytearray, memoryview)


@dataclass(slots=True)
class ProducerRecord:
    """A record to send, for :meth:`Producer.pipe` (and :meth:`Producer.send_record`)."""

    topic: str
    value: Any = None
    key: Any = None
    headers: Sequence[tuple[str, bytes | None]] | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    #: Anything the caller wants carried along (not sent).
    context: Any = field(default=None, compare=False)


def check_headers(headers: Any) -> HeaderList:
    """``headers`` as a list, after checking it is a sequence of ``(str, bytes | None)``
    pairs.

    Raises:
        TypeError: not a sequence of such pairs, naming the first item that is not one.
    """
    try:
        items = list(headers)
    except TypeError:
        raise TypeError(
            f"headers must be a sequence of (str, bytes | None) pairs, got {type(headers).__name__}"
        ) from None
    for item in items:
        if (
            not isinstance(item, tuple)
            or len(item) != 2
            or not isinstance(item[0], str | bytes)
            or not (item[1] is None or isinstance(item[1], BYTES))
        ):
            raise TypeError(f"a header must be a (str, bytes | None) pair, got {item!r}")
    return items
