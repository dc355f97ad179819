"""The inspector's middleware, outermost first: the security headers on every answer; who may
use a route (``keys.Access``); the CSRF token of an action's form; and the error pages of what
a page or an action could not do. Why it is shaped so: docs/design.md, "The events inspector".
"""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from sidecar.core.errors import OperationError, StoreError
from sidecar.http.access import browser_refusal
from sidecar.http.appkeys import CONFIG, STORE
from sidecar.http.ui.auth import CSRF_FIELD, OPERATOR
from sidecar.http.ui.keys import AUTHENTICATOR, PROXY, RENDERER, Access, Handler, route_access
from sidecar.http.ui.paths import PREFIX, form_action
from sidecar.obs.logs import get_logger
from sidecar.ops import listing

log = get_logger("sidecar.ui")

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


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer under ``/ui/`` carries ``SECURITY_HEADERS``: pages, assets, redirects and
    errors, raised (``web.HTTPException``, aiohttp's 404 and 405 included) or returned. A
    header the handler set itself is kept (the assets' ``Cache-Control``)."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _secure(exc)
        raise
    _secure(response)
    return response


def _secure(response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


@web.middleware
async def admission(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Let in what the route's ``Access`` allows, first refusing what another website's page
    made the browser send (``access.browser_refusal``). A page or an action gets the operator
    under ``auth.OPERATOR``; without one a GET goes to the login form (with a token
    configured), anything else is a 403 page."""
    rule = route_access(request)
    if rule is None or rule is Access.OPEN:
        return await handler(request)
    auth = request.app[AUTHENTICATOR]
    if rule is Access.LOGIN and not auth.needs_login:
        return await handler(request)  # no token, no login: the handler sends the browser on
    refused = _foreign(request)
    if refused is not None:
        return refused
    if rule is Access.LOGIN:
        return await handler(request)
    operator = auth.operator(request)
    if operator is None:
        return _no_operator(request)
    request[OPERATOR] = operator
    return await handler(request)


def _foreign(request: web.Request) -> web.Response | None:
    """A 403 page for what another website's page made the browser send, else None."""
    refusal = browser_refusal(request, token_configured=request.app[AUTHENTICATOR].needs_login,
                              admin_host=request.app[CONFIG].admin_listen.host)
    if refusal is None:
        return None
    log.warning("ui_refused", path=request.path, peer=request.remote, reason=refusal.reason,
                host=request.headers.get("Host"), origin=request.headers.get("Origin"),
                fetch_site=request.headers.get("Sec-Fetch-Site"))
    return request.app[RENDERER].problem(request, 403, "Refused", refusal.message)


def _no_operator(request: web.Request) -> web.Response:
    problem = request.app[RENDERER].problem
    if not request.app[AUTHENTICATOR].needs_login:
        log.warning("ui_refused", path=request.path, peer=request.remote,
                    reason="admin_token_required")
        return problem(request, 403, "Loopback only",
                       "Without admin_token the inspector answers only on this host "
                       "(loopback), and not through a proxy in front of it. Set "
                       "admin_token to use it from elsewhere.")
    if request.method == "GET":
        raise web.HTTPSeeOther(PREFIX + "login?" + urlencode({"next": request.path_qs}))
    return problem(request, 403, "Log in first",
                   "This action needs a session: log in and try again.")


@web.middleware
async def csrf(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An action is done only when its form carries the CSRF token of its operator and its
    path (``auth.Authenticator.csrf``); else nothing is done and a 403 page says so."""
    if route_access(request) is not Access.ACTION:
        return await handler(request)
    operator = request[OPERATOR]
    form = await request.post()
    given = form.get(CSRF_FIELD)
    if request.app[AUTHENTICATOR].csrf_valid(operator, form_action(request),
                                    given if isinstance(given, str) else None):
        return await handler(request)
    log.warning("ui_csrf_refused", path=request.path, token=operator.fingerprint,
                peer=operator.peer, present=given is not None)
    return request.app[RENDERER].problem(
        request, 403, "Refused: the form's token is missing or stale",
        "Nothing was done. Reload the page you came from and try again (a form "
        "shown before the proxy restarted, or from another site, is refused).")


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page's or an action's answer; what it could not do, a page saying why: the proxy
    still starting (503), a verb's refusal (its status), the store unavailable (503). A bug is
    a 500 page and a ``ui_failed`` line with its traceback, never passed off as something
    else. Redirects (``web.HTTPException``) go through."""
    if route_access(request) not in (Access.PAGE, Access.ACTION):
        return await handler(request)
    problem = request.app[RENDERER].problem
    if STORE not in request.app[PROXY]:  # the proxy app opens its store as it starts
        return problem(request, 503, "Starting", "The proxy is starting: reload in a moment.",
                       headers={"Retry-After": "1"})
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except OperationError as exc:
        return problem(request, exc.status, _title(request, exc.status), str(exc),
                       headers=listing.answer_headers(exc))
    except StoreError as exc:
        return problem(request, 503, "Store unavailable", str(exc),
                       headers={"Retry-After": "5"})
    except Exception:
        operator = request[OPERATOR]
        log.exception("ui_failed", path=request.path, token=operator.fingerprint,
                      peer=operator.peer)
        return problem(request, 500, "Something went wrong",
                       "This page failed; the proxy's log has the details (ui_failed).")


def _title(request: web.Request, status: int) -> str:
    if request.method == "POST":
        return "Not done"
    return {404: "Not found", 429: "Busy"}.get(status, "Bad request")
