"""Size-prefixed framing of the Kafka wire protocol, sans-IO.

Every Kafka request and response travels as a frame: a 4-byte big-endian signed size,
then that many bytes. :class:`FrameDecoder` turns a byte stream cut at arbitrary points
into whole frames; :func:`encode_frame` does the reverse.
"""

from __future__ import annotations

import struct

from aiostream_kafka.errors import ProtocolError

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FrameDecoder", "encode_frame"]

_SIZE = struct.Struct(">i")

#: Default bound on one frame: Kafka's own ``socket.request.max.bytes`` default (100 MiB).
#: A Fetch response is bounded by the request's ``max_bytes``, so a client can size this.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Return ``payload`` preceded by its 4-byte big-endian size."""
    return _SIZE.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental decoder of size-prefixed frames.

    Feed it bytes as they arrive, split anywhere; it returns every frame completed so
    far, without the size prefix. Data is appended to one internal ``bytearray`` and
    consumed from its front (which CPython does in O(1)), so a frame that arrives in
    many small pieces costs linear time, not quadratic.

    A declared size that is negative or larger than ``max_frame_bytes`` raises
    :class:`ProtocolError` as soon as its 4 size bytes are in, before any of the frame is
    buffered. After an error the decoder is broken: the stream has lost its framing,
    and every further :meth:`feed` raises again.
    """

    __slots__ = ("_buf", "_error", "_max_frame_bytes", "_need")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError(f"max_frame_bytes must be >= 0, got {max_frame_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # size of the frame whose prefix was read, or -1 between frames
        self._error: ProtocolError | None = None

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame size this decoder accepts."""
        return self._max_frame_bytes

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet form a whole frame (size prefix included)."""
        return len(self._buf) + (4 if self._need >= 0 else 0)

    @property
    def at_frame_boundary(self) -> bool:
        """Whether no partial frame is buffered (a clean place for the stream to end)."""
        return self._need < 0 and not self._buf

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data`` and return the frames it completes, oldest first.

        Raises :class:`ProtocolError` for a negative or oversized frame size.
        """
        if self._error is not None:
            raise self._error
        buf = self._buf
        buf += data
        spans: list[tuple[int, int]] = []
        pos = 0
        end = len(buf)
        need = self._need
        while True:
            if need < 0:
                if end - pos < 4:
                    break
                (need,) = _SIZE.unpack_from(buf, pos)
                pos += 4
                if need < 0 or need > self._max_frame_bytes:
                    self._error = ProtocolError(
                        f"frame size {need} is outside 0..{self._max_frame_bytes}"
                    )
                    buf.clear()
                    self._need = -1
                    raise self._error
            if end - pos < need:
                break
            spans.append((pos, pos + need))
            pos += need
            need = -1
        self._need = need
        frames: list[bytes] = []
        if spans:
            # One copy per frame, through a view that is released before the buffer shrinks.
            with memoryview(buf) as view:
                frames = [view[start:stop].tobytes() for start, stop in spans]
        if pos:
            del buf[:pos]
        return frames
