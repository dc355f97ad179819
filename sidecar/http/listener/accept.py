"""Failed accepts, counted: one ``accept_failed`` line a burst (:class:`AcceptFailures`)."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sidecar.http.listener.bounds import REFUSALS_LOGGED_EVERY
from sidecar.http.listener.server import Listener
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.listener")

# asyncio tries a failed accept again after 1 s (ACCEPT_RETRY_DELAY): a listener that has not
# failed for longer than this is accepting again, and its burst is over.
ACCEPT_BURST_QUIET: Final = 2.5
# What a failed accept runs out of: asyncio's accept loop reports these (and only these) to the
# exception handler, with the listening socket, and tries again later (selector_events.py).
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


@dataclass(slots=True)
class _Burst:
    error: str
    started: float
    last: float
    logged: float
    count: int = 0


ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


class AcceptFailures:
    """Failed accepts on this process's listeners, counted: one ``accept_failed`` line a burst.

    asyncio's accept loop reports a failed accept (EMFILE, ENFILE, ENOBUFS, ENOMEM) to the
    event loop's exception handler, which logs it with a traceback; then it goes on to the next
    connection waiting, up to the backlog (100) in one turn of the loop, and schedules a retry
    a second later for each failure. Out of files, that is thousands of lines a second, each a
    cost to a process that is short of resources already. Installed as the loop's exception
    handler, this counts those reports per listener instead and passes every other one on to
    the handler it replaced. A report is a failed accept by what the listener sees — one of its
    own sockets, and an error that is a lack of resources — whatever asyncio's message says.
    A listener's burst is over when it has not failed for ``ACCEPT_BURST_QUIET`` seconds: its
    line is logged then, or every ``REFUSALS_LOGGED_EVERY`` seconds while it lasts
    (``ongoing: true``, ``count`` since the previous line)."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self._listeners = listeners
        self._bursts: dict[str, _Burst] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: ExceptionHandler | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._previous = loop.get_exception_handler()
        loop.set_exception_handler(self._report)

    def close(self) -> None:
        """Log the bursts in progress, and give the loop its previous handler back."""
        for name in list(self._bursts):
            self._end(name)
        if self._loop is not None:
            self._loop.set_exception_handler(self._previous)
            self._loop = None

    def _report(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        listener = next((own for own in self._listeners if own.owns(context.get("socket"))),
                        None)
        if (listener is None or not isinstance(exc, OSError)
                or exc.errno not in _OUT_OF_RESOURCES):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        name = listener.bounds.name
        now = loop.time()
        burst = self._bursts.get(name)
        if burst is None:
            error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            burst = self._bursts[name] = _Burst(error, started=now, last=now, logged=now)
            self._timers[name] = loop.call_later(ACCEPT_BURST_QUIET, self._check, name)
        burst.count += 1
        burst.last = now

    def _check(self, name: str) -> None:
        assert self._loop is not None
        burst = self._bursts[name]
        now = self._loop.time()
        if now - burst.last >= ACCEPT_BURST_QUIET:
            self._end(name)
            return
        if now - burst.logged >= REFUSALS_LOGGED_EVERY:
            self._log(name, burst, ongoing=True)
            burst.count = 0
            burst.logged = now
        self._timers[name] = self._loop.call_later(burst.last + ACCEPT_BURST_QUIET - now,
                                                   self._check, name)

    def _end(self, name: str) -> None:
        self._timers.pop(name).cancel()
        burst = self._bursts.pop(name)
        if burst.count or burst.logged != burst.started:  # its end, after `ongoing` lines
            self._log(name, burst, ongoing=False)

    @staticmethod
    def _log(name: str, burst: _Burst, *, ongoing: bool) -> None:
        log.warning("accept_failed", listener=name, error=burst.error, count=burst.count,
                    seconds=round(burst.last - burst.started, 3), ongoing=ongoing)
