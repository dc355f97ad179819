"""The listening sockets: aiohttp's HTTP/1.1 server with the bounds a public endpoint needs,
which aiohttp leaves open or long by default. Both listeners have them: ``listen`` (providers)
and ``admin_listen`` (probes, Prometheus, operators), each with its own connection cap, so
connections held to one cannot use up the files the other needs.

- Bodies are never decompressed (the signature covers the bytes as sent): a ``Content-Encoding``
  is refused by the shell before the body is read, so a compressed bomb costs nothing.
- Headers come in time: a connection must complete its request's headers within
  ``header_read_timeout`` of opening, or of the first byte after its previous answer; a
  kept-alive connection may stay silent ``idle_timeout``. Past either it is closed, unanswered.
- At most ``max_connections`` (``admin_max_connections``) are open. At the cap a new connection
  takes the place of the one idle longest — kept alive since its last answer, or silent since
  it opened — which is closed: connections held open cannot lock out the next sender (a probe,
  a provider). Only while every connection is inside a request is the new one closed instead,
  as soon as it is accepted.
- A failed accept (out of files: EMFILE, ENFILE; or of kernel memory) is counted, and logged as
  one ``accept_failed`` line per burst (:class:`AcceptFailures`), where asyncio would log each
  one with a traceback — up to a hundred per turn of the loop.
- A refused body is not drained: the answer goes out, the write side is closed, and whatever
  the sender still sends is dropped unread for at most ``LINGER`` seconds — the staged close of
  RFC 9112 §9.6, so the sender can read the answer — then the connection is closed.
- A request aiohttp's parser refuses (bad request line, over-long or invalid header, bad
  framing) gets the proxy's JSON 400 and ONE ``rejected`` log line naming a reason; never a
  traceback, and never the request's bytes (which may hold a signature).
- On shutdown: stop accepting, close idle connections, let requests in progress finish until
  a deadline, then cancel them.
- Answers to providers carry no ``Server`` header (:class:`ProviderResponse`): the public
  endpoint does not announce its Python and aiohttp versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    ContentLengthError,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
    TransferEncodingError,
)
from multidict import CIMultiDict

from sidecar.config.model import Address, Config
from sidecar.core.answers import refuse
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.listener")

LINGER: Final = 1.0  # seconds a refused sender may go on sending (dropped) before the close
# Seconds between two `connection_refused` (or `idle_connections_closed`) lines of a listener.
REFUSALS_LOGGED_EVERY: Final = 10.0
# asyncio tries a failed accept again after 1 s (ACCEPT_RETRY_DELAY): a listener that has not
# failed for longer than this is accepting again, and its burst is over.
ACCEPT_BURST_QUIET: Final = 2.5
# The message asyncio's accept loop reports a failed accept with (selector_events.py).
_ACCEPT_FAILED: Final = "socket.accept() out of system resource"

# The reason a refused request is logged and answered with; the first match wins.
_MALFORMED: Final[tuple[tuple[type[HttpProcessingError], str], ...]] = (
    (LineTooLong, "line_too_long"),
    (BadHttpMethod, "bad_method"),
    (BadStatusLine, "bad_request_line"),
    (InvalidHeader, "invalid_header"),
    (InvalidURLError, "bad_url"),
    (TransferEncodingError, "bad_transfer_encoding"),
    (ContentLengthError, "bad_content_length"),
)


def malformed_reason(exc: BaseException | None) -> str:
    """A stable name for what was wrong with a request; the exception's message is not used,
    as it quotes the request."""
    return next((reason for kind, reason in _MALFORMED if isinstance(exc, kind)),
                "malformed_request")


class ProviderResponse(web.Response):
    """A response on the provider listener: without aiohttp's ``Server: Python/3.x aiohttp/x.y``
    (versions tell a scanner which advisories apply; providers need none of it).

    aiohttp adds the header in ``_prepare_headers`` when the response has none, and offers no
    switch; an empty value would still be a header. So it is removed right after, before the
    headers are written. (``on_response_prepare`` would do it for routed requests only, not for
    :meth:`BoundedConnection.handle_error`'s answers.) A test pins it against aiohttp changes.
    """

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one listener allows its connections; ``name`` is its key, named in its lines."""

    name: str
    header_read_timeout: float
    idle_timeout: float
    max_connections: int

    @classmethod
    def provider(cls, config: Config) -> Bounds:
        return cls("listen", config.header_read_timeout, config.idle_timeout,
                   config.max_connections)

    @classmethod
    def admin(cls, config: Config) -> Bounds:
        return cls("admin_listen", config.header_read_timeout, config.idle_timeout,
                   config.admin_max_connections)


@dataclass(slots=True)
class _Tally:
    """Connections a listener refused (or closed to make room), logged as one line at most
    every ``REFUSALS_LOGGED_EVERY`` seconds, with the count since the previous line."""

    event: str
    counted: str  # the field the count is logged as
    count: int = 0
    logged: float | None = None

    def add(self, bounds: Bounds, **fields: object) -> None:
        self.count += 1
        now = asyncio.get_running_loop().time()
        if self.logged is None or now - self.logged >= REFUSALS_LOGGED_EVERY:
            log.warning(self.event, listener=bounds.name, max_connections=bounds.max_connections,
                        **{self.counted: self.count}, **fields)
            self.count = 0
            self.logged = now


class Listener:
    """Owns a listening socket of a set-up ``web.AppRunner``: its connections and the requests
    in progress on them."""

    def __init__(self, runner: web.AppRunner, bounds: Bounds) -> None:
        self._runner = runner
        self.bounds = bounds
        self._server: asyncio.Server | None = None
        # Open connections, the one idle longest first (moved last after each answer).
        self._connections: dict[BoundedConnection, None] = {}
        self._requests: set[asyncio.Task[Any]] = set()
        self._refused = _Tally("connection_refused", "refused")
        self._made_room = _Tally("idle_connections_closed", "closed")

    async def open(self, address: Address | socket.socket) -> Address:
        """Listen on ``address``, or on a socket bound already (a worker's, from its
        supervisor), with an accept queue of ``SOMAXCONN`` (as the kernel caps it): connections
        that arrive while no worker accepts on it wait there. The address as bound (a port 0
        becomes the real one)."""
        manager = self._runner.server
        if manager is None:
            raise RuntimeError("AppRunner.setup() was not awaited")
        loop = asyncio.get_running_loop()

        def connection() -> BoundedConnection:
            return BoundedConnection(manager, self, loop=loop)

        if isinstance(address, socket.socket):
            self._server = await loop.create_server(connection, sock=address,
                                                    backlog=socket.SOMAXCONN)
        else:
            self._server = await loop.create_server(connection, address.host, address.port)
        host, port = self._server.sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    def owns(self, sock: object) -> bool:
        """Whether ``sock`` (a socket, or asyncio's view of one) is this listener's."""
        fileno = getattr(sock, "fileno", None)
        return (self._server is not None and callable(fileno)
                and any(own.fileno() == fileno() for own in self._server.sockets))

    def admit(self, connection: BoundedConnection) -> bool:
        """Whether a new connection is served; at the cap, the connection idle longest is
        closed to make room for it, unless every one is inside a request."""
        if len(self._connections) >= self.bounds.max_connections:
            idle = next((other for other in self._connections if not other.busy), None)
            if idle is None:
                self._refused.add(self.bounds, reason="too_many_connections")
                return False
            del self._connections[idle]
            idle.force_close()
            self._made_room.add(self.bounds)
        self._connections[connection] = None
        return True

    def answered(self, connection: BoundedConnection) -> None:
        """``connection`` is idle from now: the last to give way."""
        if connection in self._connections:  # not closed meanwhile
            del self._connections[connection]
            self._connections[connection] = None

    def forget(self, connection: BoundedConnection) -> None:
        self._connections.pop(connection, None)

    def track(self, task: asyncio.Task[Any]) -> None:
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    def close(self) -> None:
        """Stop accepting. Idle connections are closed now; busy ones after their answer."""
        if self._server is not None:
            self._server.close()
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


@web.middleware
async def tracked(request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  ) -> web.StreamResponse:
    """Marks the request's headers as complete (its connection's header timer stops) and its
    task as in progress (awaited, then cancelled, on shutdown)."""
    connection = request.protocol
    if isinstance(connection, BoundedConnection):
        connection.request_started()
    return await handler(request)


class BoundedConnection(web.RequestHandler):
    """aiohttp's connection handler with the listener's bounds (see the module docstring)."""

    def __init__(self, manager: web.Server, listener: Listener, *,
                 loop: asyncio.AbstractEventLoop) -> None:
        options: dict[str, Any] = {
            "keepalive_timeout": listener.bounds.idle_timeout,
            "lingering_time": 0.0,  # never drain a body nobody reads (see _linger)
            "auto_decompress": False,
            "access_log": None,  # the shell writes one line per delivery
        }
        super().__init__(manager, loop=loop, **options)
        self._event_loop = loop
        self._listener = listener
        self._admitted = False
        self._busy = False  # a request's headers are in; until its answer is written
        self._idle = False  # an answer was written; the next byte starts a new request
        self._header_timer: asyncio.TimerHandle | None = None
        self._discarding = False
        self._malformed = False  # the parser refused what was sent: the rest is not a request
        self._lost: asyncio.Future[None] = loop.create_future()

    # -- the connection's life ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._listener.admit(self):
            transport.close()
            return
        self._admitted = True
        super().connection_made(transport)
        self._expect_headers()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
        if not self._admitted:
            return
        self._listener.forget(self)
        self._stop_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return  # a refused sender still sending: dropped, never parsed
        if self._idle and data:
            self._idle = False
            self._expect_headers()
        super().data_received(data)

    @property
    def busy(self) -> bool:
        """Inside a request: from its complete headers to the end of its answer."""
        return self._busy

    def stop(self) -> None:
        """Shutdown: no further request on this connection."""
        if self._busy:
            self.close()  # after the answer in progress
        else:
            self.force_close()

    # -- header timer --------------------------------------------------------------------------

    def _expect_headers(self) -> None:
        self._stop_header_timer()
        self._header_timer = self._event_loop.call_later(
            self._listener.bounds.header_read_timeout, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._busy or self.transport is None:
            return
        log.info("connection_closed", reason="header_timeout", listener=self._listener.bounds.name,
                 peer=self._peer())
        self.force_close()

    def request_started(self) -> None:
        self._stop_header_timer()
        self._busy = True
        self._idle = False
        task = asyncio.current_task()
        if task is not None:
            self._listener.track(task)

    def _peer(self) -> str | None:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) and peer else None

    # -- answers -------------------------------------------------------------------------------

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        try:
            result = await super().finish_response(request, resp, start_time)
            unread = self._malformed or not request.content.is_eof()
            if unread and not resp.keep_alive and not result[1]:
                await self._linger()
            return result
        finally:
            self._busy = False
            self._idle = True
            self._listener.answered(self)

    async def _linger(self) -> None:
        """Close in stages: the answer is out; stop sending, drop what the sender still sends
        without reading it, and let the connection close when the sender closes its side, or
        after ``LINGER`` seconds."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._discarding = True
        with contextlib.suppress(OSError, RuntimeError):
            transport.write_eof()
            transport.resume_reading()
        await asyncio.wait([self._lost], timeout=LINGER)

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's answer to a request its parser refused (status < 500) or to an exception
        that escaped the handlers (a bug): the proxy's JSON error, the connection closed."""
        self.request_started()
        if status >= 500:
            log.error("unhandled_error", status=status, exc_info=exc)
            answer = refuse("internal_error")
        else:
            reason = malformed_reason(exc)
            log.info("rejected", status=status, reason=reason, peer=self._peer())
            answer = refuse("malformed_request", reason, status=status)
            self._malformed = True
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already being written")
        response = ProviderResponse(status=answer.status, body=answer.body,
                                    headers=CIMultiDict(answer.headers))
        response.force_close()
        return response


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
    the handler it replaced. A listener's burst is over when it has not failed for
    ``ACCEPT_BURST_QUIET`` seconds: its line is logged then, or every ``REFUSALS_LOGGED_EVERY``
    seconds while it lasts (``ongoing: true``, ``count`` since the previous line)."""

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
        if context.get("message") != _ACCEPT_FAILED or not isinstance(exc, OSError):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        listener = next((own for own in self._listeners if own.owns(context.get("socket"))),
                        None)
        name = listener.bounds.name if listener is not None else "unknown"
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
