"""``HangingListener``: an address where TCP connects hang (neither accepted nor refused).

Like a host behind a firewall that drops packets, or a machine that is off: a ``connect()``
to it gets no answer, so the client waits for its own connect timeout (the kernel would
retry the SYN for about two minutes).

How, on loopback and without privileges: a listening socket with a backlog of 0 whose
accept queue is already filled by one connection the helper makes itself and never
accepts. Linux then drops further SYNs to that port (``ListenOverflows``), instead of
answering with RST as it does for a port nobody listens on.

Example::

    with HangingListener("127.0.0.2", broker_port) as dead:
        ... connect to dead.address: it hangs ...

The helper is synchronous (plain sockets, a fraction of a second to set up) and can be
used from async tests too.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
from types import TracebackType

__all__ = ["HangingListener"]


class HangingListener:
    """Listens on ``host:port`` (0: a free port) so that connects to it hang.

    :meth:`open` returns ``(host, port)``; :attr:`address` is ``"host:port"``. ``host``
    may be any loopback address (``127.0.0.2`` works on Linux without configuration), and
    ``port`` may be one that another process listens on at another address.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, probe_s: float = 0.2) -> None:
        self.host = host
        self.port = port
        self.probe_s = probe_s
        self._listener: socket.socket | None = None
        self._fillers: list[socket.socket] = []

    @property
    def address(self) -> str:
        """``"host:port"`` to connect to (after :meth:`open`)."""
        if self._listener is None:
            raise RuntimeError("the listener is not open")
        return f"{self.host}:{self.port}"

    def open(self) -> tuple[str, int]:
        """Listen and fill the accept queue; return ``(host, port)`` where connects hang.

        Raises:
            OSError: the address is taken.
            RuntimeError: the kernel still completes connects after 8 queued ones (not a
                Linux-like accept queue): the address would not hang.
        """
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((self.host, self.port))
            listener.listen(0)
            self.port = listener.getsockname()[1]
            self._listener = listener
            # Queue connections until one does not complete: from then on SYNs are dropped.
            for _ in range(8):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._fillers.append(sock)
                sock.setblocking(False)
                code = sock.connect_ex((self.host, self.port))
                if code not in (0, errno.EINPROGRESS):
                    raise OSError(code, f"cannot connect to {self.host}:{self.port}")
                if code == 0:
                    continue
                _, writable, _ = select.select([], [sock], [], self.probe_s)
                if not writable:
                    return self.host, self.port  # this one hangs: the queue is full
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, f"connect to {self.host}:{self.port} failed")
            raise RuntimeError(f"connects to {self.host}:{self.port} do not hang on this system")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the listener and the connections queued on it. Idempotent."""
        for sock in self._fillers:
            with contextlib.suppress(OSError):
                sock.close()
        self._fillers = []
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None

    def __enter__(self) -> HangingListener:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
