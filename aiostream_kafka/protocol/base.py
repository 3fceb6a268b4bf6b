"""Base classes of the generated Kafka messages.

Every generated struct (a request, a response, a header, a data schema, or a struct
nested in one of those) is a ``__slots__`` class with a typed ``__init__`` (keyword
defaults from the schema) that derives from :class:`Message`; equality and ``repr``
cover every slot, like a dataclass. The generator attaches to each class one encoder and
one decoder function per version; :meth:`Message.encode` and :meth:`Message.decode` look
the version up once in a dict and call straight-line code for it -- there is no schema
interpreter at run time.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Self

from aiostream_kafka.errors import ProtocolError, UnsupportedVersionError

__all__ = [
    "API_VERSIONS_API_KEY",
    "MISSING",
    "DataMessage",
    "FieldInfo",
    "Header",
    "Message",
    "Request",
    "Response",
]

#: ApiVersions is special: its response always uses response header v0 (KIP-511), so a
#: client can read the answer of a broker that does not know the version it asked for.
API_VERSIONS_API_KEY = 18

# What a generated decoder may raise on malformed input besides ProtocolError; all of it
# is turned into ProtocolError at the entry points below (zero-cost in CPython 3.11
# unless raised). UnicodeDecodeError is a ValueError.
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, MemoryError, RecursionError)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


#: Default of generated ``__init__`` parameters whose default is a fresh list, dict or
#: struct (``None`` cannot serve: it means null in nullable fields).
MISSING: Any = _Missing()

_VERSION = struct.Struct(">h")

Encoder = Callable[[Any, bytearray], None]
Decoder = Callable[[memoryview, int], tuple[Any, int]]


class FieldInfo(NamedTuple):
    """Schema facts about one field of a generated struct (``Message.FIELDS``).

    Version ranges are inclusive ``(low, high)`` pairs clipped to the versions the struct
    exists in; ``None`` means "in no version".
    """

    #: Python attribute name (snake_case).
    name: str
    #: Field name in the Kafka schema (CamelCase).
    kafka_name: str
    #: Schema type: ``int32``, ``string``, ``[]int32``, ``[]FetchTopic``, ``records``...
    kafka_type: str
    #: The generated class of a struct or struct-array field, else ``None``.
    struct: type[Message] | None
    #: Versions in which the field is on the wire.
    versions: tuple[int, int] | None
    #: Versions in which the field may be null (``None``).
    nullable_versions: tuple[int, int] | None
    #: Versions in which the field is a tagged field.
    tagged_versions: tuple[int, int] | None
    #: The tag of a tagged field.
    tag: int | None
    #: Whether a non-default value may be silently dropped by versions without the field.
    ignorable: bool
    #: Whether the decoder returns a memoryview into the frame instead of a copy.
    zero_copy: bool


class Message:
    """A generated Kafka struct with a per-version codec.

    Subclasses are dataclasses with one attribute per schema field plus
    ``unknown_tagged_fields: dict[int, bytes]``, which keeps tagged fields this code does
    not know so that a decode/encode round trip loses nothing.
    """

    #: Lowest and highest version this struct can be encoded in.
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    #: First flexible version (KIP-482: compact strings/arrays, tagged fields), or None.
    FLEXIBLE_MIN_VERSION: ClassVar[int | None]
    #: Schema facts about each field, in wire order.
    FIELDS: ClassVar[tuple[FieldInfo, ...]] = ()
    _ENCODERS: ClassVar[dict[int, Encoder]] = {}
    _DECODERS: ClassVar[dict[int, Decoder]] = {}

    __slots__ = ()
    unknown_tagged_fields: dict[int, bytes]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._slot_names())

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._slot_names())
        return f"{type(self).__qualname__}({values})"

    def _slot_names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = type(self).__slots__
        return names

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Return whether ``version`` is a flexible version of this struct."""
        flexible = cls.FLEXIBLE_MIN_VERSION
        return flexible is not None and version >= flexible

    @classmethod
    def supports_version(cls, version: int) -> bool:
        """Return whether this struct can be encoded and decoded in ``version``."""
        return version in cls._ENCODERS

    def encode(self, version: int) -> bytes:
        """Return the encoding of this struct in ``version``.

        Raises :class:`UnsupportedVersionError` if the struct has no such version or if a
        field that ``version`` lacks holds a non-default value and is not ignorable, and
        :class:`ValueError` (or :class:`TypeError`) for a value that does not fit its
        field (an int out of range, ``None`` in a non-nullable field, a string longer
        than 32767 UTF-8 bytes).
        """
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int) -> None:
        """Append the encoding of this struct in ``version`` to ``out``.

        Raises like :meth:`encode`; ``out`` may then hold a partial encoding.
        """
        try:
            encoder = self._ENCODERS[version]
        except KeyError:
            raise self._no_such_version(version) from None
        try:
            encoder(self, out)
        except struct.error as exc:
            raise ValueError(f"cannot encode {type(self).__qualname__} v{version}: {exc}") from exc
        except UnsupportedVersionError as exc:
            raise UnsupportedVersionError(
                f"cannot encode {type(self).__qualname__} v{version}: {exc}"
            ) from None
        except ValueError as exc:
            raise ValueError(f"cannot encode {type(self).__qualname__} v{version}: {exc}") from exc

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode a struct encoded in ``version`` that fills all of ``buf``.

        Record fields (and ``zeroCopy`` bytes fields) of the result are memoryviews into
        ``buf``. Raises :class:`ProtocolError` for any malformed input, including trailing
        bytes, and :class:`UnsupportedVersionError` if the struct has no such version.
        """
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        obj, pos = cls.decode_from(view, 0, version)
        if pos != len(view):
            raise ProtocolError(
                f"{len(view) - pos} trailing bytes after {cls.__qualname__} v{version}"
            )
        return obj

    @classmethod
    def decode_from(cls, buf: memoryview, pos: int, version: int) -> tuple[Self, int]:
        """Decode a struct encoded in ``version`` at offset ``pos`` of a byte memoryview.

        Returns ``(struct, offset just past it)``. Raises :class:`ProtocolError` for any
        malformed input and :class:`UnsupportedVersionError` for an unknown version.
        """
        decoder = cls._DECODERS.get(version)
        if decoder is None:
            raise cls._no_such_version(version)
        try:
            result: tuple[Self, int] = decoder(buf, pos)
        except _DECODE_ERRORS as exc:
            raise ProtocolError(
                f"malformed {cls.__qualname__} v{version}: {type(exc).__name__}: {exc}"
            ) from None
        return result

    @classmethod
    def _no_such_version(cls, version: int) -> UnsupportedVersionError:
        return UnsupportedVersionError(
            f"{cls.__qualname__} has no version {version} "
            f"(this client knows versions {cls.MIN_VERSION}-{cls.MAX_VERSION})"
        )


class Request(Message):
    """A request body. ``RESPONSE_TYPE`` is the class of its response."""

    __slots__ = ()

    API_KEY: ClassVar[int]
    #: Highest version brokers advertise without ``unstable.api.versions.enable``.
    MAX_STABLE_VERSION: ClassVar[int]
    RESPONSE_TYPE: ClassVar[type[Response]]

    @classmethod
    def header_version(cls, version: int) -> int:
        """Return the request header version to send with ``version`` of this request.

        Request header v0 was removed in Kafka 4.0: v2 for flexible versions, else v1.
        """
        return 2 if cls.is_flexible(version) else 1


class Response(Message):
    """A response body. ``REQUEST_TYPE`` is the class of its request."""

    __slots__ = ()

    API_KEY: ClassVar[int]
    REQUEST_TYPE: ClassVar[type[Request]]

    @classmethod
    def header_version(cls, version: int) -> int:
        """Return the response header version that precedes ``version`` of this response.

        v1 for flexible versions, else v0 -- except ApiVersions, whose response header is
        always v0.
        """
        if cls.API_KEY == API_VERSIONS_API_KEY:
            return 0
        return 1 if cls.is_flexible(version) else 0


class Header(Message):
    """A request or response header."""

    __slots__ = ()


class DataMessage(Message):
    """A versioned struct carried inside other payloads, after an int16 version.

    Consumer group member metadata (``ConsumerProtocolSubscription``), assignments
    (``ConsumerProtocolAssignment``) and control records (``ControlRecordTypeSchema``,
    ``EndTxnMarker``) travel as ``int16 version`` + struct.
    """

    __slots__ = ()

    def encode_versioned(self, version: int) -> bytes:
        """Return the int16 ``version`` followed by this struct encoded in it."""
        out = bytearray(_VERSION.pack(version))
        self.encode_into(out, version)
        return bytes(out)

    @classmethod
    def decode_versioned(cls, buf: bytes | bytearray | memoryview) -> tuple[Self, int]:
        """Decode ``int16 version`` + struct; return ``(struct, version on the wire)``.

        A version newer than this client knows is read as the newest known one and the
        bytes after it are ignored, as Kafka does: newer versions only append fields.
        Raises :class:`ProtocolError` for malformed input or a version below
        ``MIN_VERSION``.
        """
        view = buf if isinstance(buf, memoryview) else memoryview(buf)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        if len(view) < 2:
            raise ProtocolError(f"{cls.__qualname__}: {len(view)} bytes hold no version")
        (version,) = _VERSION.unpack_from(view, 0)
        if version < cls.MIN_VERSION:
            raise ProtocolError(f"{cls.__qualname__}: unsupported version {version}")
        if version > cls.MAX_VERSION:
            return cls.decode_from(view, 2, cls.MAX_VERSION)[0], version
        obj, end = cls.decode_from(view, 2, version)
        if end != len(view):
            raise ProtocolError(
                f"{len(view) - end} trailing bytes after {cls.__qualname__} v{version}"
            )
        return obj, version
