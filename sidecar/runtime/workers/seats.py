"""The group's places: the sockets the supervisor binds for them (one a *seat*, all on one port
with ``SO_REUSEPORT``), and the worker serving each seat, or starting in it."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field

from sidecar.config.model import Address
from sidecar.http.listener.binding import bind_sockets
from sidecar.http.listener.binding import close_all as close_all  # the group closes them


def bind_listeners(address: Address, count: int, *,
                   reuse_port: bool) -> list[list[socket.socket]]:
    """``count`` sets of sockets, each set bound to every address ``address`` resolves to (as a
    single process's listener binds: ``localhost`` is ``127.0.0.1`` and ``::1``), all on the
    port the first one gets (``reuse_port``, needed for more than one set). They do not listen
    yet: each does once the worker it is handed to opens its listener."""
    return bind_sockets(address, count, reuse_port=reuse_port)


def address_of(sock: socket.socket) -> Address:
    host, port = sock.getsockname()[:2]
    return Address(str(host), int(port))


@dataclass(eq=False)
class Worker:
    """A worker process in its seat, and the supervisor's end of its channel."""

    seat: int
    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ready: bool = False
    # Given up on (silent, or its start failed): killed if need be; its exit is no failure.
    dismissed: bool = False
    # Set by Group.spawn: reading its channel (Group._watch), and awaiting its exit (_reap).
    watching: asyncio.Task[None] = field(init=False)
    reaping: asyncio.Task[None] = field(init=False)

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass(eq=False)
class Seat:
    """A place in the group: its sockets (one for each address ``listen`` resolves to), and
    the worker serving it (or starting in it)."""

    index: int
    sockets: list[socket.socket] | None  # None: closed, while vacant until its next try
    worker: Worker | None = None
    listening: bool = False  # a worker listened on its sockets: connections queue on them
    lost_at: float | None = None  # when it lost its worker; None while it has one serving
    failures: int = 0  # its worker's starts that failed in a row
    retry: asyncio.TimerHandle | None = None

    @property
    def served(self) -> bool:
        return self.worker is not None and self.worker.ready

    @property
    def down(self) -> bool:
        """Connections wait on its sockets for a worker that does not accept them (yet)."""
        return self.listening and not self.served

