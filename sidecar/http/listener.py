"""The provider-facing socket: aiohttp's HTTP/1.1 server with the bounds a public endpoint needs,
which aiohttp leaves open or long by default.

- Bodies are never decompressed (the signature covers the bytes as sent): a ``Content-Encoding``
  is refused by the shell before the body is read, so a compressed bomb costs nothing.
- Headers come in time: a connection must complete its request's headers within
  ``header_read_timeout`` of opening, or of the first byte after its previous answer; a
  kept-alive connection may stay silent ``idle_timeout``. Past either it is closed, unanswered.
- At most ``max_connections`` are open; one more is closed as soon as it is accepted.
- A refused body is not drained: the answer goes out, the write side is closed, and whatever
  the sender still sends is dropped unread for at most ``LINGER`` seconds — the staged close of
  RFC 9112 §9.6, so the sender can read the answer — then the connection is closed.
- A request aiohttp's parser refuses (bad request line, over-long or invalid header, bad
  framing) gets the proxy's JSON 400 and ONE ``rejected`` log line naming a reason; never a
  traceback, and never the request's bytes (which may hold a signature).
- On shutdown: stop accepting, close idle connections, let requests in progress finish until
  a deadline, then cancel them.
- Answers carry no ``Server`` header (:class:`ProviderResponse`): the public endpoint does not
  announce its Python and aiohttp versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
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
REFUSALS_LOGGED_EVERY: Final = 10.0  # seconds between two `connection_refused` lines

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
    :meth:`ProviderConnection.handle_error`'s answers.) A test pins it against aiohttp changes.
    """

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)


class Listener:
    """Owns the provider-facing socket of a set-up ``web.AppRunner``: its connections and the
    requests in progress on them."""

    def __init__(self, runner: web.AppRunner, config: Config) -> None:
        self._runner = runner
        self.config = config
        self._server: asyncio.Server | None = None
        self._connections: set[ProviderConnection] = set()
        self._requests: set[asyncio.Task[Any]] = set()
        self._refused = 0
        self._refusal_logged: float | None = None

    async def open(self, address: Address | socket.socket) -> Address:
        """Listen on ``address``, or accept on a listening socket bound already (a worker's,
        from its supervisor); the address as bound (a port 0 becomes the real one)."""
        manager = self._runner.server
        if manager is None:
            raise RuntimeError("AppRunner.setup() was not awaited")
        loop = asyncio.get_running_loop()

        def connection() -> ProviderConnection:
            return ProviderConnection(manager, self, loop=loop)

        if isinstance(address, socket.socket):
            self._server = await loop.create_server(connection, sock=address)
        else:
            self._server = await loop.create_server(connection, address.host, address.port)
        host, port = self._server.sockets[0].getsockname()[:2]
        return Address(str(host), int(port))

    def admit(self, connection: ProviderConnection) -> bool:
        if len(self._connections) < self.config.max_connections:
            self._connections.add(connection)
            return True
        self._refused += 1
        now = asyncio.get_running_loop().time()
        if self._refusal_logged is None or now - self._refusal_logged >= REFUSALS_LOGGED_EVERY:
            log.warning("connection_refused", reason="too_many_connections",
                        max_connections=self.config.max_connections, refused=self._refused)
            self._refused = 0
            self._refusal_logged = now
        return False

    def forget(self, connection: ProviderConnection) -> None:
        self._connections.discard(connection)

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
    if isinstance(connection, ProviderConnection):
        connection.request_started()
    return await handler(request)


class ProviderConnection(web.RequestHandler):
    """aiohttp's connection handler with the listener's bounds (see the module docstring)."""

    def __init__(self, manager: web.Server, listener: Listener, *,
                 loop: asyncio.AbstractEventLoop) -> None:
        options: dict[str, Any] = {
            "keepalive_timeout": listener.config.idle_timeout,
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
            self._listener.config.header_read_timeout, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._busy or self.transport is None:
            return
        log.info("connection_closed", reason="header_timeout", peer=self._peer())
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
