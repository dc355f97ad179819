"""The inspector's pages (GETs): the events, one event with its attempts, the overview, the
login form, and the stylesheet and icon. They run after the middleware has let them in (the
operator is under ``auth.OPERATOR``); what they show is made in ``viewmodels``."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sidecar.http.access import client_gone
from sidecar.http.appkeys import CONFIG, PROVIDER_STATES
from sidecar.http.ui import viewmodels
from sidecar.http.ui.auth import OPERATOR
from sidecar.http.ui.keys import (
    ASSETS,
    AUTHENTICATOR,
    HISTORY,
    MASKER,
    PROXY,
    QUEUES,
    RENDERER,
    STUCK,
    store,
)
from sidecar.http.ui.paths import PREFIX, event_key, local
from sidecar.obs.logs import get_logger
from sidecar.ops import events as operations
from sidecar.ops import providers as provider_ops

log = get_logger("sidecar.ui")


async def to_events(_: web.Request) -> web.StreamResponse:
    """``/ui``: the events page is ``/ui/``."""
    raise web.HTTPPermanentRedirect(PREFIX)


async def asset(request: web.Request) -> web.StreamResponse:
    """The stylesheet and the icon, shipped in the wheel (no login: nothing in them)."""
    found = request.app[ASSETS].get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, kind = found
    return web.Response(body=body, content_type=kind, headers={"Cache-Control": "max-age=300"})


async def events(request: web.Request) -> web.StreamResponse:
    """Newest first, filtered, one page at a time (keyset: ``cursor`` is the previous
    page's last row). The provider filter offers every queue: each provider's and each
    destination's (``stripe.billing``); ``destination`` with ``provider`` is read as the
    destination's key, which the filter then shows."""
    config = request.app[CONFIG]
    query = operations.listing_query(config, request.query)
    shown = dict(request.query)
    if shown.pop("destination", None):
        shown["provider"] = query.providers[0]
    page = await operations.list_page(store(request), query,
                                      gone=lambda: client_gone(request))
    providers = tuple(route.key for route in config.routes)
    return request.app[RENDERER].page(
        request, "events.html", **viewmodels.events_page(shown, page, providers))


async def event(request: web.Request) -> web.StreamResponse:
    provider, event_id = event_key(request)
    data = await operations.show(request.app[CONFIG], store(request), provider, event_id)
    operator = request[OPERATOR]
    # Reading a stored payload (personal data, signatures) is logged like an action.
    log.info("ui_read", path=request.path, provider=provider, event_id=event_id,
             payload_stored=data["payload_stored"], token=operator.fingerprint,
             peer=operator.peer)
    shown = viewmodels.event_page(request.app[CONFIG], request.app[MASKER], provider,
                                  event_id, data)
    return request.app[RENDERER].page(request, "event.html", **shown)


async def overview(request: web.Request) -> web.StreamResponse:
    ui, config = request.app, request.app[CONFIG]
    stuck, queues, holds = await asyncio.gather(
        ui[STUCK].get(), ui[QUEUES].get(),
        provider_ops.status(config, ui[PROXY][PROVIDER_STATES]))
    shown = viewmodels.overview_page(config, holds, stuck, queues, ui[HISTORY].rates())
    return ui[RENDERER].page(request, "overview.html", **shown)


async def login_form(request: web.Request) -> web.StreamResponse:
    if not request.app[AUTHENTICATOR].needs_login:
        raise web.HTTPSeeOther(PREFIX)
    return request.app[RENDERER].page(request, "login.html", error=None,
                                      next=local(request.query.get("next")))
