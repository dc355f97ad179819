"""Answers on the provider listener, without aiohttp's ``Server`` header."""

from __future__ import annotations

from aiohttp import hdrs, web


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
