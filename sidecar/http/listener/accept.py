"""Accepting connections on a listening socket, by the listener itself and alike on every event
loop (:class:`Accepting`); failed accepts counted, one ``accept_failed`` line a burst
(:class:`AcceptFailures`)."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sidecar.http.listener.bounds import REFUSALS_LOGGED_EVERY
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.listener")

# Out of resources, a listening socket is not read for this long, then tried again (as
# asyncio's own accept loop waits, ACCEPT_RETRY_DELAY).
ACCEPT_RETRY_DELAY: Final = 1.0
# A listener that has not failed for longer than this is accepting again: its burst is over.
ACCEPT_BURST_QUIET: Final = 2.5
# Connections accepted in one wake-up at most, so one busy socket cannot hold the loop (asyncio
# accepts up to its backlog, 100 by default, in one turn).
ACCEPTS_PER_WAKEUP: Final = 100
# What a failed accept runs out of: files (the process's, the system's) or kernel memory.
OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(slots=True)
class _Burst:
    error: str
    started: float
    last: float
    logged: float
    count: int = 0


class AcceptFailures:
    """Failed accepts on this process's listeners, counted per listener: one ``accept_failed``
    line a burst, rather than a line (and a traceback) for each, which would cost a process
    that is short of resources already. A listener's burst is over when it has not failed for
    ``ACCEPT_BURST_QUIET`` seconds: its line is logged then, or every ``REFUSALS_LOGGED_EVERY``
    seconds while it lasts (``ongoing: true``, ``count`` since the previous line)."""

    def __init__(self) -> None:
        self._bursts: dict[str, _Burst] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def failed(self, listener: str, error: int) -> None:
        """An accept on ``listener`` failed with ``error`` (an errno)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        burst = self._bursts.get(listener)
        if burst is None:
            name = errno.errorcode.get(error, str(error))
            burst = self._bursts[listener] = _Burst(name, started=now, last=now, logged=now)
            self._timers[listener] = loop.call_later(ACCEPT_BURST_QUIET, self._check,
                                                     listener, loop)
        burst.count += 1
        burst.last = now

    def close(self) -> None:
        """Log the bursts in progress."""
        for name in list(self._bursts):
            self._end(name)

    def _check(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        burst = self._bursts[name]
        now = loop.time()
        if now - burst.last >= ACCEPT_BURST_QUIET:
            self._end(name)
            return
        if now - burst.logged >= REFUSALS_LOGGED_EVERY:
            self._log(name, burst, ongoing=True)
            burst.count = 0
            burst.logged = now
        self._timers[name] = loop.call_later(burst.last + ACCEPT_BURST_QUIET - now,
                                             self._check, name, loop)

    def _end(self, name: str) -> None:
        self._timers.pop(name).cancel()
        burst = self._bursts.pop(name)
        if burst.count or burst.logged != burst.started:  # its end, after `ongoing` lines
            self._log(name, burst, ongoing=False)

    @staticmethod
    def _log(name: str, burst: _Burst, *, ongoing: bool) -> None:
        log.warning("accept_failed", listener=name, error=burst.error, count=burst.count,
                    seconds=round(burst.last - burst.started, 3), ongoing=ongoing)


class Accepting:
    """Accepts on one listening socket, read by the event loop (``add_reader``): up to
    ``ACCEPTS_PER_WAKEUP`` connections a wake-up, each handed to ``connected``. Out of
    resources (``OUT_OF_RESOURCES``) the failure is counted, the socket is not read for
    ``ACCEPT_RETRY_DELAY`` seconds and then tried again: the listener never closes on a failed
    accept, whichever loop runs it (see ``docs/design.md``, "The event loop")."""

    def __init__(self, sock: socket.socket, listener: str, failures: AcceptFailures,
                 connected: Callable[[socket.socket], None],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._listener = listener
        self._failures = failures
        self._connected = connected
        self._loop = loop
        self._retry: asyncio.TimerHandle | None = None
        self._reading = False
        self._closed = False

    @property
    def sock(self) -> socket.socket:
        return self._sock

    def start(self) -> None:
        self._sock.setblocking(False)
        self._read()

    def close(self) -> None:
        """Stop accepting and close the socket (connections queued on it are refused)."""
        if self._closed:
            return
        self._closed = True
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._sock.close()

    def _read(self) -> None:
        self._retry = None
        if not self._closed and not self._reading:
            self._loop.add_reader(self._fd, self._accept)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left waiting
            except ConnectionAbortedError:
                continue  # reset by its peer while it waited: the next one
            except OSError as exc:
                if exc.errno not in OUT_OF_RESOURCES:
                    raise  # the loop logs it; the socket stays read
                self._failures.failed(self._listener, exc.errno)
                self._pause()
                self._retry = self._loop.call_later(ACCEPT_RETRY_DELAY, self._read)
                return
            conn.setblocking(False)
            self._connected(conn)
