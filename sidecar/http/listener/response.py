"""Answers on the provider listener, without aiohttp's ``Server`` header."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import hdrs, web


class ProviderResponse(web.Response):
    """A response on the provider listener: without aiohttp's ``Server: Python/3.x aiohttp/x.y``
    (versions tell a scanner which advisories apply; providers need none of it).

    aiohttp adds the header in ``_prepare_headers`` when the response has none, and offers no
    switch; an empty value would still be a header. So it is removed right after, before the
    headers are written. (``on_response_prepare`` would do it for routed requests only, not for
    :meth:`BoundedConnection.handle_error`'s answers.) A test pins it against aiohttp changes.

    ``when_written(report)``: on a :class:`BoundedConnection`, ``report`` is called once with the
    seconds from the request's first byte received to this answer's last byte handed to the
    transport (or to the moment its write failed: the sender went away).
    """

    _report: Callable[[float], None] | None = None

    def when_written(self, report: Callable[[float], None]) -> None:
        self._report = report

    def written(self, seconds: float) -> None:
        """The answer is out (see ``when_written``); reports once."""
        report, self._report = self._report, None
        if report is not None:
            report(seconds)

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)
