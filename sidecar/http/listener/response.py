"""Answers on the provider listener, without aiohttp's ``Server`` header: built by aiohttp
(:class:`ProviderResponse`), or written as bytes made once (:class:`PreparedResponse`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Final

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import rfc822_formatted_time

from sidecar.core.answers import Encoded

# The characters aiohttp refuses in a header (``http_writer._FORBIDDEN_HEADER_CHARS_RE``).
_FORBIDDEN: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers aiohttp sets or drops itself: an answer naming one is left to it. A recorded response
# never has them (``core.hops.replayable_headers`` drops them).
_SET_BY_AIOHTTP: Final = frozenset({"content-length", "transfer-encoding", "connection", "date",
                                    "server"})
# Up to the transport's default high-water mark: written in one call without waiting for the
# peer to read (aiohttp would drain after it too); a longer answer goes the general way.
MAX_PREPARED_BYTES: Final = 64 * 1024
_REASONS: Final = {status.value: status.phrase for status in HTTPStatus}


class Timed:
    """``when_written(report)``: on a :class:`BoundedConnection`, ``report`` is called once with
    the seconds from the request's first byte received to this answer's last byte handed to the
    transport (or to the moment its write failed: the sender went away)."""

    _report: Callable[[float], None] | None = None

    def when_written(self, report: Callable[[float], None]) -> None:
        self._report = report

    def written(self, seconds: float) -> None:
        """The answer is out (see ``when_written``); reports once."""
        report, self._report = self._report, None
        if report is not None:
            report(seconds)


class ProviderResponse(Timed, web.Response):
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


def prepared(status: int, headers: Sequence[tuple[str, str]], body: bytes,
             encoded: Encoded) -> PreparedResponse | None:
    """The answer as :class:`PreparedResponse`, its bytes made at the first call and kept in
    ``encoded`` for the next; ``None`` if aiohttp must write it (see :func:`_parts`). Only for an
    HTTP/1.1 request whose connection stays open (the caller checks)."""
    parts = encoded.parts
    if parts is None:
        parts = encoded.parts = _parts(status, headers, body) or False
    if not isinstance(parts, tuple):  # False: aiohttp writes it, this time and every time
        return None
    return PreparedResponse(status, parts, body)


def _parts(status: int, headers: Sequence[tuple[str, str]], body: bytes
           ) -> tuple[bytes, bytes] | None:
    """The bytes aiohttp would write for this answer to an HTTP/1.1 keep-alive POST, split
    around the ``Date`` line: the status line, the headers in order, then ``Content-Length``,
    ``Content-Type`` when none is given and there is a body, ``Date`` — and no ``Server``
    (:class:`ProviderResponse`). ``None`` where aiohttp would decide more than that: a status
    without a body (1xx, 204, 304), a header it sets itself, a character it refuses (it answers
    500), an answer too long to write without draining."""
    if status < 200 or status in (204, 304) or len(body) > MAX_PREPARED_BYTES:
        return None
    names = {name.lower() for name, _ in headers}
    if names & _SET_BY_AIOHTTP:
        return None
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append(f"Content-Length: {len(body)}")
    if body and "content-type" not in names:
        lines.append("Content-Type: application/octet-stream")
    if any(_FORBIDDEN.search(line) for line in lines):
        return None
    return ("\r\n".join(lines) + "\r\nDate: ").encode(), b"\r\n\r\n"


class PreparedResponse(Timed, web.StreamResponse):
    """An answer whose bytes were made before (:func:`prepared`), written to the connection's
    transport in one call: none of aiohttp's header building, serialising or payload writer,
    only the ``Date`` of this second spliced in. The connection stays open, as aiohttp's
    answer to an HTTP/1.1 keep-alive request would keep it; the app's ``on_response_prepare``
    signals are not sent (the provider app has none)."""

    def __init__(self, status: int, parts: tuple[bytes, bytes], body: bytes) -> None:
        super().__init__(status=status)
        self._parts = parts
        self._body_bytes = body
        self._keep_alive = True

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        head, tail = self._parts
        transport.write(b"".join((head, rfc822_formatted_time().encode(), tail,
                                  self._body_bytes)))
        self._eof_sent = True  # nothing more to write: write_eof returns at once
        self._body_length = len(self._body_bytes)
        # A peer that sends (pipelined) requests but reads no answers must not pile them up in
        # the transport's buffer: past its high-water mark, wait until it drains, as aiohttp's
        # own writer does after an answer. (One flag check when it is not paused.)
        protocol = request.protocol
        if protocol.writing_paused:
            await protocol._drain_helper()
        return None
