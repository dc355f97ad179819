"""What the inspector's middleware, pages and actions share: the sub-application's typed keys,
set once by ``app.build_inspector``, and the access each route declares. The config is under
the shell's own ``sidecar.http.appkeys.CONFIG``; the operator a request comes from under
``auth.OPERATOR``."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from sidecar.core.events import QueueStats
from sidecar.core.ports import AdminStore
from sidecar.http.appkeys import STORE
from sidecar.http.ui.auth import Authenticator
from sidecar.http.ui.masking import Masker
from sidecar.http.ui.overview import Cached, CounterHistory
from sidecar.http.ui.templating import Renderer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Access(enum.Enum):
    """Who may use a route; ``middleware`` applies it before the handler runs."""

    OPEN = "open"  # anyone: the stylesheet and the icon, the login form, /ui itself
    LOGIN = "login"  # the login form's POST: refused only when another site's page sent it
    PAGE = "page"  # an operator (``auth.Authenticator.operator``), not sent by another site's page
    ACTION = "action"  # a page's rule, and the form's CSRF token


# The proxy app: its store, forwarder and provider states exist once it has started.
PROXY = web.AppKey("proxy", web.Application)
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
RENDERER = web.AppKey("renderer", Renderer)
MASKER = web.AppKey("masker", Masker)
# The stylesheet and the icon: name -> (body, content type).
ASSETS: web.AppKey[Mapping[str, tuple[bytes, str]]] = web.AppKey("assets")
# The overview's numbers: counter samples, and the store's counts cached for a few seconds.
HISTORY = web.AppKey("history", CounterHistory)
STUCK: web.AppKey[Cached[dict[str, int]]] = web.AppKey("stuck")
QUEUES: web.AppKey[Cached[dict[str, QueueStats]]] = web.AppKey("queues")
# Every route's handler and who may use it.
ACCESS: web.AppKey[Mapping[Handler, Access]] = web.AppKey("access")


def route_access(request: web.Request) -> Access | None:
    """Who may use the route ``request`` reached, as ``app.ROUTES`` says: a route missing there
    gets the strictest, ``ACTION`` (it fails closed). None when it reached no route (aiohttp
    answers 404 or 405)."""
    if request.match_info.http_exception is not None:
        return None
    return request.app[ACCESS].get(request.match_info.handler, Access.ACTION)


def store(request: web.Request) -> AdminStore:
    """The proxy app's store (``middleware.error_pages`` has checked it is open)."""
    return request.app[PROXY][STORE]
