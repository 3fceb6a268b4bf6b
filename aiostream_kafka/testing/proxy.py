"""``FaultProxy``: an asyncio TCP proxy that injects network faults between a client and a
broker.

It forwards bytes both ways between clients and one target address, and on demand:

* :meth:`cut` -- resets every open connection at once (RST, like a crashed peer or a
  pulled cable), while new connections are still accepted;
* :meth:`blackhole` -- stops forwarding in both directions without closing anything (a
  partition: requests vanish, nothing answers) until :meth:`restore`;
* ``delay_s`` -- holds every chunk that long before forwarding it;
* :meth:`refuse` -- resets new connections as soon as they are accepted;
* :meth:`stall` -- stops reading what clients send (client->broker only; answers still
  flow) until :meth:`restore`: a peer that stops reading. With ``rcvbuf`` (or
  :meth:`set_receive_buffer`) the proxy's kernel receive buffer is small too, so that a
  client's socket send buffer and then its transport's write buffer really fill up
  (loopback buffers otherwise absorb megabytes).

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

from aiostream_kafka.concurrency import Crash, TaskScope

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

    def pause_client(self) -> None:
        """Stop reading the client's socket (its bytes stay in the kernel buffers)."""
        transport = self.client.transport
        if isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.pause_reading()

    def resume_client(self) -> None:
        transport = self.client.transport
        if isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.resume_reading()

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()  # RST: whatever is in flight is lost


class FaultProxy:
    """Forwards ``listen_host:listen_port`` (0: a free port) to ``target_host:target_port``.

    ``rcvbuf`` (bytes): ``SO_RCVBUF`` of the listening socket, which the accepted client
    sockets inherit (and with it a small TCP window scale); the kernel doubles the value
    and enforces a minimum of a few KB. Meant for :meth:`stall`.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        rcvbuf: int | None = None,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.rcvbuf = rcvbuf
        self.delay_s = 0.0
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        # The tasks serving the connections (one per link).
        self._scope = TaskScope("fault proxy")
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._reading = asyncio.Event()  # cleared by stall(): client bytes are not read
        self._reading.set()
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

    @property
    def stalled(self) -> bool:
        """True between :meth:`stall` and :meth:`restore`."""
        return not self._reading.is_set()

    async def start(self) -> None:
        """Start listening.

        Raises:
            OSError: the listen address is taken.
        """
        if self.rcvbuf is None:
            self._server = await asyncio.start_server(
                self._accept, self.listen_host, self.listen_port, reuse_address=True
            )
            return
        # SO_RCVBUF must be on the listening socket before clients connect: the window
        # scale of an accepted connection is chosen from it during the handshake.
        infos = await asyncio.get_running_loop().getaddrinfo(
            self.listen_host, self.listen_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, type_, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, type_, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
            sock.bind(sockaddr)
            sock.setblocking(False)
            self._server = await asyncio.start_server(self._accept, sock=sock)
        except BaseException:
            sock.close()
            raise

    def set_receive_buffer(self, nbytes: int) -> None:
        """Set ``SO_RCVBUF`` of the listening socket now (for a proxy someone else
        created, such as those of ``KafkaCluster(proxied=True)``): connections accepted
        from now on inherit it; open ones get it too, though their window scale was
        already agreed on."""
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        self.rcvbuf = nbytes
        for sock in self._server.sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, nbytes)
        for link in self._links:
            sock = link.client.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, nbytes)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._scope.spawn(self._serve(reader, writer), name="proxy link", crash=Crash.LOG)

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
        if self.stalled:
            link.pause_client()
        pumps = TaskScope("proxy link")
        link.tasks = [
            pumps.spawn(
                self._pump(reader, up_writer, up=True, link=link), name="up", crash=Crash.LOG
            ),
            pumps.spawn(
                self._pump(up_reader, writer, up=False, link=link), name="down", crash=Crash.LOG
            ),
        ]
        try:
            # When one direction ends, the other is pointless: tear the link down.
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            link.abort()
            await pumps.aclose()
            self._links.discard(link)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, up: bool, link: _Link
    ) -> None:
        try:
            while True:
                if up and self.stalled:
                    await self._reading.wait()
                data = await reader.read(_CHUNK)
                if not data:
                    return
                if up and self.stalled:
                    # Read while stall() began (the read may also have resumed the
                    # transport): hold the chunk and stop reading again.
                    link.pause_client()
                    await self._reading.wait()
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

    def stall(self) -> None:
        """Stop reading from clients (client->broker direction) without closing anything:
        a peer that stops reading. What clients send piles up in the proxy's kernel
        receive buffer (see ``rcvbuf``), then in the client's socket send buffer, then in
        the client's transport write buffer, where ``drain()`` waits. Answers to requests
        sent before still reach the client. New connections are accepted and stalled too.
        Undone by :meth:`restore`."""
        self._reading.clear()
        for link in self._links:
            link.pause_client()

    def restore(self) -> None:
        """Forward again after :meth:`blackhole` or :meth:`stall`, and accept connections
        after :meth:`refuse`."""
        self._flowing.set()
        self._refusing = False
        if self.stalled:
            for link in self._links:
                link.resume_client()
            self._reading.set()

    def refuse(self) -> None:
        """Reset new connections as soon as they are accepted (existing ones continue)."""
        self._refusing = True

    async def close(self) -> None:
        """Stop listening, reset every connection and await every task."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._flowing.set()
        self._reading.set()
        for link in list(self._links):
            link.abort()
        # Served by tasks of our own (not asyncio's handler tasks), which may be cancelled
        # here without asyncio logging the cancellation as an error.
        await self._scope.aclose()
        self._scope = TaskScope("fault proxy")  # start() may serve again
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
