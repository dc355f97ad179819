"""The inspector as an aiohttp sub-application, for the admin app to mount at ``PREFIX``:
its parts set once under its keys, its middleware, its routes with who may use each, and the
overview's counter sampling while it runs (docs/design.md, "The events inspector")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from aiohttp import web

from sidecar.http.appkeys import CONFIG, METRICS, STORE
from sidecar.http.ui import actions, pages
from sidecar.http.ui.auth import Authenticator
from sidecar.http.ui.keys import (
    ACCESS,
    ASSETS,
    AUTHENTICATOR,
    HISTORY,
    MASKER,
    PROXY,
    QUEUES,
    RENDERER,
    STUCK,
    Access,
    Handler,
)
from sidecar.http.ui.masking import Masker
from sidecar.http.ui.middleware import admission, csrf, error_pages, security_headers
from sidecar.http.ui.overview import Cached, CounterHistory
from sidecar.http.ui.templating import Renderer

# Paths under the prefix ("" is /ui itself). A GET route answers HEAD as well.
ROUTES: tuple[tuple[str, str, Handler, Access], ...] = (
    ("GET", "", pages.to_events, Access.OPEN),
    ("GET", "/", pages.events, Access.PAGE),
    ("GET", "/events/{provider}/{event_id}", pages.event, Access.PAGE),
    ("GET", "/overview", pages.overview, Access.PAGE),
    ("GET", "/static/{name}", pages.asset, Access.OPEN),
    ("GET", "/login", pages.login_form, Access.OPEN),
    ("POST", "/login", actions.login, Access.LOGIN),
    ("POST", "/logout", actions.logout, Access.ACTION),
    ("POST", "/events/{provider}/{event_id}/redrive", actions.redrive, Access.ACTION),
    ("POST", "/events/{provider}/{event_id}/release", actions.release, Access.ACTION),
    ("POST", "/queue/{provider}/redrive-dead", actions.redrive_dead, Access.ACTION),
    ("POST", "/providers/{provider}/pause", actions.pause, Access.ACTION),
    ("POST", "/providers/{provider}/resume", actions.resume, Access.ACTION),
)
ASSET_TYPES = {"inspector.css": "text/css", "favicon.svg": "image/svg+xml"}


def build_inspector(proxy: web.Application) -> web.Application:
    """The inspector reading ``proxy``'s config, metrics and (once it has started) its store;
    mount it with ``admin.add_subapp(PREFIX, …)``."""
    config = proxy[CONFIG]
    auth = Authenticator(config.admin_token, trusted=config.trusted_proxies)
    ui = web.Application(middlewares=[security_headers, admission, csrf, error_pages])
    ui[CONFIG] = config
    ui[PROXY] = proxy
    ui[AUTHENTICATOR] = auth
    ui[RENDERER] = Renderer(auth)
    ui[MASKER] = Masker(config)
    folder = resources.files("sidecar.http.ui").joinpath("static")
    ui[ASSETS] = {name: (folder.joinpath(name).read_bytes(), kind)
                  for name, kind in ASSET_TYPES.items()}
    ui[HISTORY] = CounterHistory(proxy[METRICS])
    ui[STUCK] = Cached(lambda: proxy[STORE].stuck_counts())
    ui[QUEUES] = Cached(lambda: proxy[STORE].queue_stats())
    for method, path, handler, _ in ROUTES:
        if method == "GET":
            ui.router.add_get(path, handler)
        else:
            ui.router.add_route(method, path, handler)
    ui[ACCESS] = {handler: who for _, _, handler, who in ROUTES}
    ui.cleanup_ctx.append(_sampling)
    return ui


async def _sampling(ui: web.Application) -> AsyncIterator[None]:
    """The counter history is sampled while the inspector runs."""
    task = asyncio.create_task(ui[HISTORY].run(), name="inspector-counter-samples")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
