"""One connection of a listener (:class:`BoundedConnection`): aiohttp's connection handler with
the header and idle timeouts, the staged close of a refused body (``LINGER``), and the JSON 400
with one ``rejected`` line for a request aiohttp's parser refuses."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from aiohttp import web
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

from sidecar.core.answers import refuse
from sidecar.http.listener.bounds import Bounds
from sidecar.http.listener.response import ProviderResponse, Timed
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.listener")

LINGER: Final = 1.0  # seconds a refused sender may go on sending (dropped) before the close

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


def _unspellable_expect(request: web.BaseRequest, exc: BaseException | None) -> bool:
    """``exc`` is aiohttp's 417 for an ``Expect`` value that is not UTF-8, failing to encode."""
    expect = request.headers.get("Expect")
    return (isinstance(exc, UnicodeEncodeError) and expect is not None
            and expect.lower() != "100-continue")


def malformed_reason(exc: BaseException | None) -> str:
    """A stable name for what was wrong with a request; the exception's message is not used,
    as it quotes the request."""
    return next((reason for kind, reason in _MALFORMED if isinstance(exc, kind)),
                "malformed_request")


class ConnectionOwner(Protocol):
    """What a connection tells the listener that accepted it (``server.Listener``)."""

    @property
    def bounds(self) -> Bounds: ...

    def admit(self, connection: BoundedConnection) -> bool:
        """Whether the new ``connection`` is served (the listener's cap)."""
        ...

    def started(self, connection: BoundedConnection) -> None: ...

    def answered(self, connection: BoundedConnection) -> None: ...

    def forget(self, connection: BoundedConnection) -> None: ...

    def track(self, task: asyncio.Task[Any]) -> None: ...


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
    """aiohttp's connection handler with the listener's bounds (see the package's docstring)."""

    def __init__(self, manager: web.Server, listener: ConnectionOwner, *,
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
        # Event-loop time of the first byte not yet part of a request (the next request's
        # first byte), and of the current request's.
        self._next_first_byte: float | None = None
        self._first_byte = 0.0
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
        if not self._busy and self._next_first_byte is None:
            # Outside a request, a byte starts the next one (inside, it is the body's).
            self._next_first_byte = time.monotonic()
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
        # No byte noted: the request was pipelined, its bytes in before the previous answer
        # was out (they were read as that one's); it is timed from here.
        first_byte, self._next_first_byte = self._next_first_byte, None
        self._first_byte = first_byte if first_byte is not None else time.monotonic()
        self._busy = True
        self._idle = False
        self._listener.started(self)
        task = asyncio.current_task()
        if task is not None:
            self._listener.track(task)

    @property
    def first_byte(self) -> float:
        """``time.monotonic()`` at the current request's first byte. Not the event loop's
        clock: uvloop's counts whole milliseconds, from the start of the loop's turn."""
        return self._first_byte

    def _peer(self) -> str | None:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return str(peer[0]) if isinstance(peer, tuple) and peer else None

    # -- answers -------------------------------------------------------------------------------

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        try:
            try:
                result = await super().finish_response(request, resp, start_time)
            finally:  # written, or its write failed: the answer's last byte is behind us
                if isinstance(resp, Timed):
                    resp.written(time.monotonic() - self._first_byte)
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
        if status >= 500 and _unspellable_expect(request, exc):
            # aiohttp refuses an Expect other than 100-continue with a 417 that quotes it, and
            # cannot encode that text when the value is not UTF-8: the same 417, without it.
            status, exc = 417, None
            log.info("rejected", status=status, reason="unknown_expect", peer=self._peer())
            answer = refuse("malformed_request", "unknown_expect", status=status)
            self._malformed = True
        elif status >= 500:
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
