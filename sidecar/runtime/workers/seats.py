"""The group's places: the sockets the supervisor binds for them (one a *seat*, all on one port
with ``SO_REUSEPORT``), and the worker serving each seat, or starting in it."""

from __future__ import annotations

import asyncio
import contextlib
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
    ready: bool = False  # it said ready: set by Seat.serve
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
    """A place in the group: its sockets (one for each address ``listen`` resolves to), and the
    worker serving it or starting in it. Its fields change only through its transitions:

    - ``fill``: a worker started in it, on its sockets;
    - ``serve``: its worker said ready: it listens, and a seat that had lost its worker is
      served again;
    - ``lose``: its serving worker was given up on (silent); the sockets stay, so the
      connections queued on them wait for its successor;
    - ``vacate``: a start in it failed: no worker, its sockets closed, so no connection waits
      on it for no one;
    - ``retry_at`` then ``rebind``: a vacant seat's next try is due, with new sockets;
    - ``close``: the group stops (the seat is not used again).

    Invariants, checked after each transition (``_check``): ``sockets`` is None exactly when
    the seat is *vacant*, and a vacant seat has no worker and nothing listening; ``lost_at`` is
    None while its worker serves."""

    index: int
    sockets: list[socket.socket] | None
    worker: Worker | None = None
    listening: bool = False  # a worker listened on its sockets: connections queue on them
    lost_at: float | None = None  # when it lost its worker; None while it has one serving
    failures: int = 0  # its worker's starts that failed in a row
    retry: asyncio.TimerHandle | None = None  # a vacant seat's next try

    @property
    def vacant(self) -> bool:
        return self.sockets is None

    @property
    def served(self) -> bool:
        return self.worker is not None and self.worker.ready

    @property
    def down(self) -> bool:
        """Connections wait on its sockets for a worker that does not accept them (yet)."""
        return self.listening and not self.served

    def fill(self, worker: Worker) -> None:
        assert self.worker is None and not self.vacant, "a worker starts in an empty bound seat"
        self.worker = worker
        self._check()

    def serve(self, now: float) -> float | None:
        """Its worker is ready. Returns how long the seat was without a serving worker when it
        had lost one (a replacement, or a vacant seat filled again), else None."""
        assert self.worker is not None
        self.worker.ready = True
        self.listening = True
        self.failures = 0
        took = None if self.lost_at is None else now - self.lost_at
        self.lost_at = None
        self._check()
        return took

    def lose(self, now: float) -> None:
        self.worker = None
        self.lost_at = now
        self._check()

    def vacate(self, now: float) -> None:
        self.worker = None
        if self.sockets is not None:
            for sock in self.sockets:
                # Out of the port's group at once: a worker just killed may hold the socket
                # until its exit is complete, and new connections would queue on it meanwhile,
                # to be reset.
                with contextlib.suppress(OSError):  # ENOTCONN: no worker listened on it
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()  # connections queued on it are refused: none waits for no one
            self.sockets = None
            self.listening = False
        self.failures += 1
        if self.lost_at is None:
            self.lost_at = now
        self._check()

    def retry_at(self, handle: asyncio.TimerHandle) -> None:
        """``handle`` says when the vacant seat's next try is due."""
        assert self.vacant
        self.retry = handle

    def rebind(self, sockets: list[socket.socket]) -> None:
        """The next try is due: the seat's new sockets, for the worker started next."""
        assert self.vacant
        self.retry = None
        self.sockets = sockets
        self._check()

    def close(self) -> None:
        if self.retry is not None:
            self.retry.cancel()
        if self.sockets is not None:
            close_all(self.sockets)

    def _check(self) -> None:
        if self.vacant:
            assert self.worker is None and not self.listening, f"vacant seat {self.index} used"
        assert not self.served or self.lost_at is None, f"seat {self.index} served and lost"
