"""``CountingProxy``: a Kafka-aware TCP proxy that measures every client the same way.

It sits between a client and the brokers and counts, per run:

* Fetch requests -- by reading the api_key of every request header in the client->broker
  stream (``api_key`` 1);
* bytes of Fetch responses -- the whole response frames the broker sent back for those
  requests (matched by correlation id), and every byte in each direction.

So that the client talks to *every* broker through it (not only to the bootstrap address),
it rewrites the broker addresses in Metadata (api_key 3) and FindCoordinator (api_key 10)
responses to addresses of its own: one listener per broker, opened the first time a
response names that broker. Nothing else is touched. The byte pumps are
:class:`aiostream_kafka.testing.proxy.FaultProxy`'s idea; this one parses frames, so it is
a class of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

API_FETCH = 1
API_METADATA = 3
API_FIND_COORDINATOR = 10
_CHUNK = 256 * 1024


@dataclass
class Counters:
    requests: dict[int, int] = field(default_factory=dict)  # api_key -> count
    fetch_response_bytes: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    connections: int = 0

    @property
    def fetch_requests(self) -> int:
        return self.requests.get(API_FETCH, 0)

    def as_dict(self) -> dict[str, object]:
        return {
            "fetch_requests": self.fetch_requests,
            "fetch_response_bytes": self.fetch_response_bytes,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "connections": self.connections,
            "requests_by_api_key": {str(k): v for k, v in sorted(self.requests.items())},
        }


# -- wire helpers ---------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def int16(self) -> int:
        (v,) = struct.unpack_from(">h", self.buf, self.pos)
        self.pos += 2
        return int(v)

    def int32(self) -> int:
        (v,) = struct.unpack_from(">i", self.buf, self.pos)
        self.pos += 4
        return int(v)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.pos += self.uvarint()  # size, then the data


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw


Rewrite = Callable[[str, int], tuple[str, int]]


def rewrite_metadata(frame: bytes, version: int, new_address: Rewrite) -> bytes:
    """``frame``: a Metadata response without its size prefix. Returns it with every
    broker's host and port replaced by ``new_address(host, port)``."""
    flexible = version >= 9
    r = _Reader(frame, 4)  # correlation id
    if flexible:
        r.skip_tags()
    if version >= 3:
        r.pos += 4  # throttle_time_ms
    head = frame[: r.pos]
    count = r.uvarint() - 1 if flexible else r.int32()
    brokers = bytearray(_uvarint(count + 1) if flexible else struct.pack(">i", count))
    for _ in range(max(count, 0)):
        node_id = r.int32()
        host = r.string(flexible) or ""
        port = r.int32()
        rest_start = r.pos
        if version >= 1:
            r.string(flexible)  # rack
        if flexible:
            r.skip_tags()
        new_host, new_port = new_address(host, port)
        brokers += struct.pack(">i", node_id) + _string(new_host, flexible)
        brokers += struct.pack(">i", new_port) + frame[rest_start : r.pos]
    return bytes(head) + bytes(brokers) + frame[r.pos :]


def rewrite_find_coordinator(frame: bytes, version: int, new_address: Rewrite) -> bytes:
    """``frame``: a FindCoordinator response without its size prefix; the coordinator
    address(es) replaced by ``new_address(host, port)``."""
    flexible = version >= 3
    r = _Reader(frame, 4)
    if flexible:
        r.skip_tags()
    if version >= 1:
        r.pos += 4  # throttle_time_ms
    if version < 4:
        r.pos += 2  # error_code
        if version >= 1:
            r.string(flexible)  # error_message
        r.pos += 4  # node_id
        start = r.pos
        host = r.string(flexible) or ""
        port = r.int32()
        new_host, new_port = new_address(host, port)
        return (
            frame[:start]
            + _string(new_host, flexible)
            + struct.pack(">i", new_port)
            + frame[r.pos :]
        )
    out = bytearray(frame[: r.pos])
    count = r.uvarint() - 1
    out += _uvarint(count + 1)
    for _ in range(max(count, 0)):
        start = r.pos
        r.string(True)  # key
        r.pos += 4  # node_id
        out += frame[start : r.pos]
        host = r.string(True) or ""
        port = r.int32()
        new_host, new_port = new_address(host, port)
        out += _string(new_host, True) + struct.pack(">i", new_port)
        start = r.pos
        r.pos += 2  # error_code
        r.string(True)  # error_message
        r.skip_tags()
        out += frame[start : r.pos]
    return bytes(out) + frame[r.pos :]


# -- the proxy ------------------------------------------------------------------------------


class _Link:
    """One client connection: parses requests up, responses down."""

    def __init__(self, proxy: CountingProxy) -> None:
        self.proxy = proxy
        self.inflight: dict[int, tuple[int, int]] = {}  # correlation id -> (key, version)
        self.up_head = bytearray()
        self.up_skip = 0
        self.down_head = bytearray()
        self.down_skip = 0
        self.down_fetch = False
        self.down_hold: bytearray | None = None  # a response frame being rewritten
        self.down_hold_api = (0, 0)

    def up(self, data: bytes) -> None:
        counters = self.proxy.counters
        counters.bytes_up += len(data)
        i, n = 0, len(data)
        while i < n:
            if self.up_skip:
                step = min(self.up_skip, n - i)
                self.up_skip -= step
                i += step
                continue
            step = min(12 - len(self.up_head), n - i)
            self.up_head += data[i : i + step]
            i += step
            if len(self.up_head) == 12:
                size, key, version, correlation = struct.unpack(">ihhi", self.up_head)
                self.up_head.clear()
                self.up_skip = size - 8
                counters.requests[key] = counters.requests.get(key, 0) + 1
                self.inflight[correlation] = (key, version)

    def down(self, data: bytes) -> bytes:
        counters = self.proxy.counters
        out = bytearray()
        i, n = 0, len(data)
        while i < n:
            if self.down_hold is not None:
                step = min(self.down_skip, n - i)
                self.down_hold += data[i : i + step]
                self.down_skip -= step
                i += step
                if not self.down_skip:
                    key, version = self.down_hold_api
                    frame = bytes(self.down_hold)
                    self.down_hold = None
                    rewrite = rewrite_metadata if key == API_METADATA else rewrite_find_coordinator
                    try:
                        frame = rewrite(frame, version, self.proxy.address_for)
                    except (IndexError, struct.error, UnicodeDecodeError):
                        pass  # leave an unparsable response as it was
                    out += struct.pack(">i", len(frame)) + frame
                continue
            if self.down_skip:
                step = min(self.down_skip, n - i)
                out += data[i : i + step]
                if self.down_fetch:
                    counters.fetch_response_bytes += step
                self.down_skip -= step
                i += step
                continue
            step = min(8 - len(self.down_head), n - i)
            self.down_head += data[i : i + step]
            i += step
            if len(self.down_head) == 8:
                size, correlation = struct.unpack(">ii", self.down_head)
                key, version = self.inflight.pop(correlation, (-1, 0))
                head = bytes(self.down_head)
                self.down_head.clear()
                self.down_skip = size - 4
                self.down_fetch = key == API_FETCH
                if key in (API_METADATA, API_FIND_COORDINATOR):
                    self.down_hold = bytearray(head[4:])
                    self.down_hold_api = (key, version)
                else:
                    out += head
                    if self.down_fetch:
                        counters.fetch_response_bytes += 8
        counters.bytes_down += len(out)
        return bytes(out)


class CountingProxy:
    """Proxies the brokers behind ``bootstrap`` ("host:port[,...]") on ``listen_host``."""

    def __init__(self, bootstrap: str, listen_host: str = "127.0.0.1") -> None:
        self.listen_host = listen_host
        self.counters = Counters()
        self._targets = [
            (hp.rsplit(":", 1)[0], int(hp.rsplit(":", 1)[1])) for hp in bootstrap.split(",")
        ]
        self._listeners: dict[tuple[str, int], int] = {}  # target -> our port
        self._servers: list[asyncio.Server] = []
        self._pending: set[asyncio.Task[object]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.listen_host}:{self._listeners[t]}" for t in self._targets)

    def reset(self) -> None:
        self.counters = Counters()

    async def start(self) -> None:
        for target in self._targets:
            self.address_for(*target)
        await asyncio.gather(*self._pending)

    def address_for(self, host: str, port: int) -> tuple[str, int]:
        """Our address for broker ``host:port``; opens a listener the first time."""
        target = (host, port)
        if target not in self._listeners:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.listen_host, 0))
            sock.listen(128)  # connections wait in the backlog until the server runs
            self._listeners[target] = sock.getsockname()[1]

            def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                task = asyncio.create_task(self._serve(r, w, target))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

            task = asyncio.ensure_future(asyncio.start_server(accept, sock=sock))
            task.add_done_callback(self._started)
            self._pending.add(task)
        return self.listen_host, self._listeners[target]

    def _started(self, task: asyncio.Task[asyncio.Server]) -> None:
        self._pending.discard(task)  # type: ignore[arg-type]
        if not task.cancelled() and task.exception() is None:
            self._servers.append(task.result())

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: tuple[str, int]
    ) -> None:
        self.counters.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.transport.abort()
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(self)

        async def pump_up() -> None:
            while data := await reader.read(_CHUNK):
                link.up(data)
                up_writer.write(data)
                await up_writer.drain()

        async def pump_down() -> None:
            while data := await up_reader.read(_CHUNK):
                out = link.down(data)
                if out:
                    writer.write(out)
                    await writer.drain()

        pumps = [asyncio.create_task(pump_up()), asyncio.create_task(pump_down())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                w.transport.abort()

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(OSError):
                await server.wait_closed()

    async def __aenter__(self) -> CountingProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
