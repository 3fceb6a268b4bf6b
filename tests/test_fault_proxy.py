"""The fault-injection helpers themselves, without Kafka: ``FaultProxy.stall`` really backs
up a client's writes, and ``HangingListener`` really makes connects hang (not refused)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import select
import socket
import time

import pytest

from aiostream_kafka.testing.blackhole import HangingListener
from aiostream_kafka.testing.proxy import FaultProxy


class _Sink:
    """A TCP server that reads and counts everything it is sent."""

    def __init__(self) -> None:
        self.received = 0
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> _Sink:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._read(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                self.received += len(data)
        except ConnectionError:
            pass
        finally:
            writer.transport.abort()

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()


async def _fill(writer: asyncio.StreamWriter, chunk: bytes, until_s: float) -> int:
    """Write ``chunk`` while the transport's buffer stays empty-ish; return its size after
    ``until_s`` of writing (without ever awaiting drain)."""
    deadline = time.monotonic() + until_s
    while time.monotonic() < deadline:
        if writer.transport.get_write_buffer_size() < 4 * len(chunk):
            writer.write(chunk)
        await asyncio.sleep(0.01)
    return writer.transport.get_write_buffer_size()


async def test_stall_backs_up_the_clients_write_buffer_and_restore_drains_it() -> None:
    chunk = b"x" * 65536
    async with _Sink() as sink, FaultProxy("127.0.0.1", sink.port, rcvbuf=4096) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            # Flowing: a megabyte goes through and the write buffer empties.
            for _ in range(16):
                writer.write(chunk)
            await asyncio.wait_for(writer.drain(), 5)
            while sink.received < 16 * len(chunk):  # noqa: ASYNC110
                await asyncio.sleep(0.01)

            proxy.stall()
            assert proxy.stalled
            before = sink.received
            # The kernel buffers on both sides fill first (a few hundred KB at most with a
            # 4 KB receive buffer), then the transport's own buffer grows.
            size = await _fill(writer, chunk, until_s=1.0)
            assert size >= 2 * len(chunk), size
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(writer.drain(), 0.5)
            assert sink.received - before <= 2 * 1024 * 1024  # nothing flows but in-flight bytes
            stalled_at = sink.received
            await asyncio.sleep(0.2)
            assert sink.received == stalled_at

            proxy.restore()
            await asyncio.wait_for(writer.drain(), 10)
            assert writer.transport.get_write_buffer_size() == 0
            while sink.received <= stalled_at:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        finally:
            writer.transport.abort()
            del reader


async def test_stall_applies_to_connections_accepted_while_stalled() -> None:
    chunk = b"y" * 65536
    async with _Sink() as sink, FaultProxy("127.0.0.1", sink.port) as proxy:
        proxy.stall()
        proxy.set_receive_buffer(4096)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            size = await _fill(writer, chunk, until_s=1.0)
            assert size >= 2 * len(chunk), size
            assert sink.received == 0
            proxy.restore()
            await asyncio.wait_for(writer.drain(), 10)
        finally:
            writer.transport.abort()
            del reader


async def test_stall_still_forwards_answers() -> None:
    """Only the client->server direction stops: an echo sent before the stall comes back."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        await asyncio.sleep(0.3)  # answer after the proxy stalled
        writer.write(data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        async with FaultProxy("127.0.0.1", port) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"ping")
            await writer.drain()
            await asyncio.sleep(0.1)
            proxy.stall()
            assert await asyncio.wait_for(reader.read(100), 5) == b"ping"
            writer.transport.abort()
    finally:
        server.close()
        await server.wait_closed()


def test_hanging_listener_connects_hang_and_are_not_refused() -> None:
    with HangingListener("127.0.0.2") as dead:
        host, port = dead.host, dead.port
        assert dead.address == f"127.0.0.2:{port}"
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            assert sock.connect_ex((host, port)) == errno.EINPROGRESS
            # Neither connected nor refused after a second: the SYN is dropped.
            _, writable, _ = select.select([], [sock], [], 1.0)
            assert not writable
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        finally:
            sock.close()
    # Closed: the port is refused now (proof the hang came from the full queue).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(2)
        with pytest.raises(ConnectionRefusedError):
            sock.connect((host, port))
    finally:
        sock.close()


async def test_hanging_listener_on_a_port_another_address_listens_on() -> None:
    """127.0.0.2:P hangs while 127.0.0.1:P (a live server) answers: the set-up of the
    happy-eyeballs tests."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        with HangingListener("127.0.0.2", port):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.open_connection("127.0.0.2", port), 1.0)
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
