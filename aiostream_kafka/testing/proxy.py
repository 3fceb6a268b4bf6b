"""``FaultProxy``: an asyncio TCP proxy that injects network faults between a client and a
broker.

It forwards bytes both ways between clients and one target address, and on demand:

* :meth:`cut` -- resets every open connection at once (RST, like a crashed peer or a
  pulled cable), while new connections are still accepted;
* :meth:`blackhole` -- stops forwarding in both directions without closing anything (a
  partition: requests vanish, nothing answers) until :meth:`restore`;
* ``delay_s`` -- holds every chunk that long before forwarding it;
* :meth:`refuse` -- resets new connections as soon as they are accepted.

Counters (``connections``, ``bytes_up``, ``bytes_down``) let a test check that traffic
really went through the proxy. It lives on the event loop that started it; every task it
starts is owned and awaited by :meth:`close`.

Example::

    async with FaultProxy("127.0.0.1", broker_port) as proxy:
        ... connect to proxy.port ...
        await proxy.cut()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from types import TracebackType

log = logging.getLogger(__name__)

__all__ = ["FaultProxy"]

_CHUNK = 256 * 1024


class _Link:
    """One proxied client connection: two sockets and the two pumps between them."""

    __slots__ = ("client", "tasks", "upstream")

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.tasks: list[asyncio.Task[None]] = []

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()  # RST: whatever is in flight is lost


class FaultProxy:
    """Forwards ``listen_host:listen_port`` (0: a free port) to ``target_host:target_port``."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.delay_s = 0.0
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._refusing = False

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def address(self) -> str:
        """``"host:port"`` to connect to."""
        return f"{self.listen_host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Client connections currently proxied."""
        return len(self._links)

    async def start(self) -> None:
        """Start listening.

        Raises:
            OSError: the listen address is taken.
        """
        self._server = await asyncio.start_server(
            self._accept, self.listen_host, self.listen_port, reuse_address=True
        )

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Served by a task of our own (not asyncio's handler task), which close() may
        # cancel without asyncio logging the cancellation as an error.
        task = asyncio.create_task(self._serve(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError as exc:
            log.info("proxy: cannot reach %s:%d: %s", self.target_host, self.target_port, exc)
            writer.transport.abort()
            return
        for w in (writer, up_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, up=True)),
            asyncio.create_task(self._pump(up_reader, writer, up=False)),
        ]
        try:
            # When one direction ends, the other is pointless: tear the link down.
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            link.abort()
            for task in link.tasks:
                task.cancel()
            await asyncio.gather(*link.tasks, return_exceptions=True)
            self._links.discard(link)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool
    ) -> None:
        try:
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    return
                if self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                await self._flowing.wait()  # a blackhole holds the bytes (and the reader)
                if writer.transport.is_closing():
                    return
                writer.write(data)
                await writer.drain()
                if up:
                    self.bytes_up += len(data)
                else:
                    self.bytes_down += len(data)
        except (ConnectionError, OSError):
            return

    async def cut(self) -> int:
        """Reset every open connection now; return how many were cut."""
        links = list(self._links)
        for link in links:
            link.abort()
        if links:
            log.info("proxy %s: cut %d connection(s)", self.address, len(links))
        await asyncio.sleep(0)  # let the pumps see it
        return len(links)

    def blackhole(self) -> None:
        """Stop forwarding (both ways) without closing connections."""
        self._flowing.clear()

    def restore(self) -> None:
        """Forward again after :meth:`blackhole`, and accept connections after :meth:`refuse`."""
        self._flowing.set()
        self._refusing = False

    def refuse(self) -> None:
        """Reset new connections as soon as they are accepted (existing ones continue)."""
        self._refusing = True

    async def close(self) -> None:
        """Stop listening, reset every connection and await every task."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._flowing.set()
        for link in list(self._links):
            link.abort()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        if handlers:
            await asyncio.gather(*handlers, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(OSError):
                await server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
