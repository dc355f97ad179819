"""The listening sockets of one listener (:class:`Listener`), which it accepts on itself
(``accept``): its open connections, the one idle longest first, and the cap that closes it to
make room for a new one; the requests in progress on them, and its part of the graceful
stop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from sidecar.config.model import Address
from sidecar.http.listener.accept import AcceptFailures, Accepting
from sidecar.http.listener.binding import bind_sockets, close_all
from sidecar.http.listener.bounds import Bounds, ThrottledCount
from sidecar.http.listener.connection import BoundedConnection

# The accept queue of a listener on its own addresses (asyncio's default for create_server);
# a worker's sockets get SOMAXCONN (see Listener.open).
_BACKLOG: Final = 100


class Listener:
    """Owns a listening socket of a set-up ``web.AppRunner``: its connections and the requests
    in progress on them."""

    def __init__(self, runner: web.AppRunner, bounds: Bounds,
                 failures: AcceptFailures | None = None) -> None:
        self._runner = runner
        self.bounds = bounds
        self.failures = AcceptFailures() if failures is None else failures
        self._accepting: list[Accepting] = []
        # Accepted connections being handed to the loop (connect_accepted_socket).
        self._handing: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._connection: Callable[[], BoundedConnection] | None = None
        self._connections: set[BoundedConnection] = set()
        # Those not inside a request, the one idle longest first: at the cap the first gives
        # way, found at once however many are busy.
        self._idle: dict[BoundedConnection, None] = {}
        self._requests: set[asyncio.Task[Any]] = set()
        self._refused = ThrottledCount("connection_refused", "refused")
        self._made_room = ThrottledCount("idle_connections_closed", "closed")

    async def open(self, address: Address | list[socket.socket]) -> Address:
        """Listen on ``address`` (every address it resolves to, on one port), or on sockets
        bound already (a worker's, from its supervisor, with an accept queue of ``SOMAXCONN``
        as the kernel caps it: connections that arrive while no worker accepts on them wait
        there). The first address as bound (a port 0 becomes the real one)."""
        manager = self._runner.server
        if manager is None:
            raise RuntimeError("AppRunner.setup() was not awaited")
        loop = asyncio.get_running_loop()

        def connection() -> BoundedConnection:
            return BoundedConnection(manager, self, loop=loop)

        self._connection = connection
        if isinstance(address, Address):
            sockets, backlog = bind_sockets(address)[0], _BACKLOG
        else:
            sockets, backlog = address, socket.SOMAXCONN
        try:
            for sock in sockets:
                sock.listen(backlog)
        except BaseException:
            if isinstance(address, Address):
                close_all(sockets)
            raise
        self._accepting = [Accepting(sock, self.bounds.name, self.failures, self._connected,
                                     loop) for sock in sockets]
        for accepting in self._accepting:
            accepting.start()
        host, port = sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    def _connected(self, conn: socket.socket) -> None:
        """An accepted connection, handed to the event loop as a transport with its
        ``BoundedConnection``."""
        loop = asyncio.get_running_loop()
        assert self._connection is not None
        task = loop.create_task(loop.connect_accepted_socket(self._connection, conn))
        self._handing.add(task)
        task.add_done_callback(lambda done: self._handed(done, conn))

    def _handed(self, task: asyncio.Task[Any], conn: socket.socket) -> None:
        self._handing.discard(task)
        if task.cancelled() or task.exception() is not None:
            conn.close()  # closed with the listener, or the peer was gone already

    def admit(self, connection: BoundedConnection) -> bool:
        """Whether a new connection is served; at the cap, the connection idle longest is
        closed to make room for it, unless every one is inside a request."""
        if self._closed:
            return False  # accepted just before the listener closed
        if len(self._connections) >= self.bounds.max_connections:
            if not self._idle:
                self._refused.add(self.bounds, reason="too_many_connections")
                return False
            idle = next(iter(self._idle))
            self.forget(idle)
            idle.force_close()
            self._made_room.add(self.bounds)
        self._connections.add(connection)
        self._idle[connection] = None  # silent since it opened
        return True

    def started(self, connection: BoundedConnection) -> None:
        """``connection`` is inside a request: it does not give way."""
        self._idle.pop(connection, None)

    def answered(self, connection: BoundedConnection) -> None:
        """``connection`` is idle from now: the last to give way."""
        if connection in self._connections:  # not closed meanwhile
            self._idle.pop(connection, None)
            self._idle[connection] = None

    def forget(self, connection: BoundedConnection) -> None:
        self._connections.discard(connection)
        self._idle.pop(connection, None)

    def track(self, task: asyncio.Task[Any]) -> None:
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    def close(self) -> None:
        """Stop accepting. Idle connections are closed now; busy ones after their answer."""
        self._closed = True
        for accepting in self._accepting:
            accepting.close()
        for task in list(self._handing):
            task.cancel()
        for connection in list(self._connections):
            connection.stop()

    async def drain(self, deadline: float, grace: float) -> int:
        """Let requests in progress finish until ``deadline`` (event-loop time), then cancel
        the rest and give them ``grace`` seconds to unwind; close every connection. Returns
        how many were cancelled."""
        loop = asyncio.get_running_loop()
        if self._requests:
            await asyncio.wait(set(self._requests), timeout=max(0.0, deadline - loop.time()))
        late = set(self._requests)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=grace)
        for connection in list(self._connections):
            connection.force_close()
        return len(late)
