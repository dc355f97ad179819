"""The headers every answer under ``/ui/`` carries, pages, redirects and errors alike: a strict
Content-Security-Policy (no script, no framing, forms only to this origin), never cached."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    # Not no-referrer: with it a browser sends "Origin: null" on the page's own form POSTs,
    # which access.browser_refusal must refuse (a sandboxed page sends that too). same-origin
    # still keeps the inspector's URLs (event ids) from every other site.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def secured(response: web.StreamResponse) -> web.StreamResponse:
    response.headers.update(SECURITY_HEADERS)
    return response


def all_secured(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler``'s answers with the security headers, the redirects and errors it raises
    (``web.HTTPException``) included."""

    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return secured(await handler(request))
        except web.HTTPException as exc:
            exc.headers.update(SECURITY_HEADERS)
            raise

    return run
