"""The inspector's pages and actions, served by the admin listener under ``/ui/``.

Server-rendered HTML (Jinja2, autoescaped), no script. Each page answers with a strict
Content-Security-Policy and is never cached; each action is a POST with a CSRF token, logged
with the operator's token fingerprint and peer, and answered with a redirect to the page that
shows its effect (so reloading does not repeat it). The verbs are ``sidecar.ops.events``',
with the CLI's guards. Every answer under ``/ui/`` carries the security headers, redirects
included; requests another website's page makes an operator's browser send are refused
(``sidecar.http.access.browser_refusal``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web

from sidecar.config.model import Config, Mode
from sidecar.core.errors import OperationError, StoreError
from sidecar.core.events import QueueStats
from sidecar.core.ports import AdminStore
from sidecar.http.access import browser_refusal, client_gone
from sidecar.http.appkeys import (
    CONFIG,
    FORWARDER,
    METRICS,
    NOTICES,
    OWNER,
    PROVIDER_STATES,
    STORE,
)
from sidecar.http.ui.auth import CSRF_FIELD, Gate, Operator, end_session
from sidecar.http.ui.eventview import request_view, response_view
from sidecar.http.ui.masking import Masker
from sidecar.http.ui.overview import Cached, CounterHistory
from sidecar.http.ui.paths import PREFIX, event_key, event_path, form_action, local
from sidecar.http.ui.security import SECURITY_HEADERS, all_secured, secured
from sidecar.http.ui.templating import environment, notice
from sidecar.http.ui.timeline import timeline
from sidecar.obs.logs import get_logger
from sidecar.ops import events as operations
from sidecar.ops import listing
from sidecar.ops import providers as provider_ops

if TYPE_CHECKING:
    import jinja2

log = get_logger("sidecar.ui")

ASSETS = {"inspector.css": "text/css", "favicon.svg": "image/svg+xml"}

Page = Callable[[web.Request, Operator], Awaitable[web.StreamResponse]]


class Inspector:
    """The pages, bound to the proxy app's parts (read at request time: the store is opened
    when the proxy app starts)."""

    def __init__(self, proxy_app: web.Application) -> None:
        self._proxy = proxy_app
        config: Config = proxy_app[CONFIG]
        self._config = config
        self._providers = tuple(provider.key for provider in config.providers)
        self._gate = Gate(config.admin_token, trusted=config.trusted_proxies)
        self._masker = Masker(config)
        self._env: jinja2.Environment | None = None  # made at the first page (templating)
        folder = resources.files("sidecar.http.ui").joinpath("static")
        self._assets = {name: (folder.joinpath(name).read_bytes(), kind)
                        for name, kind in ASSETS.items()}
        self._history = CounterHistory(proxy_app[METRICS])
        self._stuck: Cached[dict[str, int]] = Cached(lambda: self._store().stuck_counts())
        self._queues: Cached[dict[str, QueueStats]] = Cached(
            lambda: self._store().queue_stats())

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/ui", self._to_events),
            web.get(PREFIX, self._page(self.events)),
            web.get(PREFIX + "events/{provider}/{event_id}", self._page(self.event)),
            web.get(PREFIX + "overview", self._page(self.overview)),
            web.get(PREFIX + "static/{name}", self.asset),
            web.get(PREFIX + "login", self.login_form),
            web.post(PREFIX + "login", self.login),
            web.post(PREFIX + "logout", self._action(self.logout)),
            web.post(PREFIX + "events/{provider}/{event_id}/redrive", self._action(self.redrive)),
            web.post(PREFIX + "events/{provider}/{event_id}/release", self._action(self.release)),
            web.post(PREFIX + "queue/{provider}/redrive-dead", self._action(self.redrive_dead)),
            web.post(PREFIX + "providers/{provider}/pause", self._action(self.pause)),
            web.post(PREFIX + "providers/{provider}/resume", self._action(self.resume)),
        ]

    async def sampling(self, _: web.Application) -> AsyncIterator[None]:
        """The admin app's cleanup context: the counter history is sampled while it runs."""
        task = asyncio.create_task(self._history.run(), name="inspector-counter-samples")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # --- plumbing --------------------------------------------------------------------------

    def _store(self) -> AdminStore:
        return self._proxy[STORE]

    def _render(self, request: web.Request, template: str, *, status: int = 200,
                operator: Operator | None = None, **values: Any) -> web.Response:
        def csrf(action: str) -> str:
            assert operator is not None
            return self._gate.csrf(operator, action)

        if self._env is None:
            self._env = environment()
        html = self._env.get_template(template).render(
            operator=operator, csrf=csrf, csrf_field=CSRF_FIELD, notice=notice(request.query),
            logout=self._gate.needs_login and operator is not None, **values)
        return web.Response(text=html, status=status, content_type="text/html",
                            charset="utf-8")

    def _problem(self, request: web.Request, status: int, title: str, message: str,
                 operator: Operator | None = None, *,
                 headers: Mapping[str, str] | None = None) -> web.Response:
        response = self._render(request, "problem.html", status=status, operator=operator,
                                title=title, message=message)
        response.headers.update(headers or {})
        return response

    def _foreign(self, request: web.Request) -> web.Response | None:
        """A 403 for what another website's page made the browser send, else None."""
        refusal = browser_refusal(request, token_configured=self._gate.needs_login,
                                  admin_host=self._config.admin_listen.host)
        if refusal is None:
            return None
        log.warning("ui_refused", path=request.path, peer=request.remote, reason=refusal.reason,
                    host=request.headers.get("Host"), origin=request.headers.get("Origin"),
                    fetch_site=request.headers.get("Sec-Fetch-Site"))
        return self._problem(request, 403, "Refused", refusal.message)

    def _refused(self, request: web.Request) -> web.Response:
        if not self._gate.needs_login:
            log.warning("ui_refused", path=request.path, peer=request.remote,
                        reason="admin_token_required")
            return self._problem(request, 403, "Loopback only",
                                 "Without admin_token the inspector answers only on this host "
                                 "(loopback), and not through a proxy in front of it. Set "
                                 "admin_token to use it from elsewhere.")
        if request.method == "GET":
            target = request.path_qs
            raise web.HTTPSeeOther(PREFIX + "login?" + urlencode({"next": target}),
                                   headers=SECURITY_HEADERS)
        return self._problem(request, 403, "Log in first",
                             "This action needs a session: log in and try again.")

    def _admitted(self, request: web.Request) -> Operator | web.StreamResponse:
        """The operator a request comes from, or the answer refusing it (a foreign browser
        request, or no session)."""
        foreign = self._foreign(request)
        if foreign is not None:
            return foreign
        operator = self._gate.operator(request)
        return operator if operator is not None else self._refused(request)

    def _page(self, handler: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        @all_secured
        async def run(request: web.Request) -> web.StreamResponse:
            operator = self._admitted(request)
            if isinstance(operator, web.StreamResponse):
                return operator
            return await self._served(handler, request, operator)

        return run

    def _action(self, handler: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """A POST: the operator let in, then the form's CSRF token checked, before anything
        is done."""

        @all_secured
        async def run(request: web.Request) -> web.StreamResponse:
            operator = self._admitted(request)
            if isinstance(operator, web.StreamResponse):
                return operator
            form = await request.post()
            given = form.get(CSRF_FIELD)
            if not self._gate.csrf_valid(operator, form_action(request),
                                         given if isinstance(given, str) else None):
                log.warning("ui_csrf_refused", path=request.path, token=operator.fingerprint,
                            peer=operator.peer, present=given is not None)
                return self._problem(
                    request, 403, "Refused: the form's token is missing or stale",
                    "Nothing was done. Reload the page you came from and try again (a form "
                    "shown before the proxy restarted, or from another site, is refused).",
                    operator)
            return await self._served(handler, request, operator)

        return run

    async def _served(self, handler: Page, request: web.Request,
                      operator: Operator) -> web.StreamResponse:
        """``handler``'s answer; what it could not do as a page saying why. A bug is a 500
        page and an ``ui_failed`` line with its traceback, never passed off as something
        else."""
        if STORE not in self._proxy:  # the proxy app opens its store as it starts
            return self._problem(request, 503, "Starting", "The proxy is starting: reload in "
                                 "a moment.", operator, headers={"Retry-After": "1"})
        try:
            return await handler(request, operator)
        except web.HTTPException:
            raise  # a redirect
        except OperationError as exc:
            return self._problem(request, exc.status, _title(request, exc.status), str(exc),
                                 operator, headers=listing.answer_headers(exc))
        except StoreError as exc:
            return self._problem(request, 503, "Store unavailable", str(exc), operator,
                                 headers={"Retry-After": "5"})
        except Exception:
            log.exception("ui_failed", path=request.path, token=operator.fingerprint,
                          peer=operator.peer)
            return self._problem(request, 500, "Something went wrong",
                                 "This page failed; the proxy's log has the details "
                                 "(ui_failed).", operator)

    def _logged(self, action: str, request: web.Request, operator: Operator,
                **fields: Any) -> None:
        log.info("ui_action", action=action, path=request.path, token=operator.fingerprint,
                 peer=operator.peer, **fields)

    # --- pages -----------------------------------------------------------------------------

    async def _to_events(self, _: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect(PREFIX, headers=SECURITY_HEADERS)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        """The stylesheet and the icon, shipped in the wheel (no login: nothing in them)."""
        found = self._assets.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(headers=SECURITY_HEADERS)
        body, kind = found
        response = web.Response(body=body, content_type=kind)
        response.headers.update({**SECURITY_HEADERS, "Cache-Control": "max-age=300"})
        return response

    async def events(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        """Newest first, filtered, one page at a time (keyset: ``cursor`` is the previous
        page's last row)."""
        query = operations.query_from(request.query, self._providers)
        page = await operations.list_page(self._store(), query,
                                          gone=lambda: client_gone(request))
        filters = {name: request.query.get(name, "")
                   for name in ("provider", "state", "since", "until", "id_prefix", "status",
                                "outcome", "limit")}
        older = None
        if page["next"] is not None:
            kept = {name: value for name, value in filters.items() if value}
            older = PREFIX + "?" + urlencode({**kept, "cursor": page["next"]})
        return self._render(request, "events.html", operator=operator, events=page["events"],
                            filters=filters, providers=self._providers, states=listing.STATES,
                            status_classes=listing.STATUS_CLASSES,
                            outcomes=listing.OUTCOMES, older=older,
                            paged="cursor" in request.query,
                            default_limit=listing.PAGE_LIMIT)

    async def event(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        provider, event_id = event_key(request)
        data = await operations.show(self._store(), provider, event_id)
        # Reading a stored payload (personal data, signatures) is logged like an action.
        log.info("ui_read", path=request.path, provider=provider, event_id=event_id,
                 payload_stored=data["payload_stored"], token=operator.fingerprint,
                 peer=operator.peer)
        config = self._config.provider(provider)
        queue_mode = config is not None and config.mode is Mode.QUEUE
        state = data["state"]
        return self._render(
            request, "event.html", operator=operator, event=data, timeline=timeline(data),
            request_view=request_view(self._masker, data.get("request")),
            response_view=response_view(self._masker, data),
            can_redrive=(state == "dead" and queue_mode) or state == "failed"
            or (state == "processing" and not data["lease_live"] and not queue_mode),
            can_release=state == "failed" and data["queue"] is None,
            base=event_path(provider, event_id))

    async def overview(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        stuck, queues, holds = await asyncio.gather(
            self._stuck.get(), self._queues.get(),
            provider_ops.status(self._config, self._proxy[PROVIDER_STATES]))
        rates = self._history.rates()
        rows = []
        for provider, hold in zip(self._config.providers, holds, strict=True):
            key = provider.key
            queue = queues.get(key)
            rows.append({
                "hold": hold, "needs_force": provider_ops.refuses_pause(provider) is not None,
                "provider": key, "mode": provider.mode.value,
                "counts": rates.counts.get(key), "stuck": stuck.get(key, 0),
                "depth": queue.pending if queue else 0,
                "oldest": queue.oldest_pending_seconds if queue else 0.0,
                "dead": queue.dead if queue else 0,
                "queue_mode": provider.mode is Mode.QUEUE,
            })
        return self._render(request, "overview.html", operator=operator, rows=rows,
                            per_minute=rates.per_minute)

    # --- login -----------------------------------------------------------------------------

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        if not self._gate.needs_login:
            raise web.HTTPSeeOther(PREFIX, headers=SECURITY_HEADERS)
        return secured(self._render(request, "login.html", error=None,
                                     next=local(request.query.get("next"))))

    async def login(self, request: web.Request) -> web.StreamResponse:
        """The token, presented once: answered with a session cookie derived from it."""
        if not self._gate.needs_login:
            raise web.HTTPSeeOther(PREFIX, headers=SECURITY_HEADERS)
        foreign = self._foreign(request)
        if foreign is not None:
            return secured(foreign)
        form = await request.post()
        token, target = form.get("token"), local(_text(form.get("next")))
        if not isinstance(token, str) or not self._gate.token_matches(token):
            log.warning("ui_login_refused", peer=request.remote)
            return secured(self._render(request, "login.html", status=401, next=target,
                                         error="That is not the admin token."))
        log.info("ui_login", token=self._gate.fingerprint, peer=request.remote)
        response = web.HTTPSeeOther(target, headers=SECURITY_HEADERS)
        self._gate.set_session(response, request)
        raise response

    async def logout(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        self._logged("logout", request, operator)
        response = web.HTTPSeeOther(PREFIX + "login?notice=logged_out")
        end_session(response)
        raise response

    # --- actions ---------------------------------------------------------------------------

    async def redrive(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        provider, event_id = event_key(request)
        try:
            result = await operations.redrive(
                self._config, self._store(), self._proxy[FORWARDER], self._proxy[OWNER],
                provider, event_id)
        except OperationError as exc:
            self._logged("redrive", request, operator, provider=provider, event_id=event_id,
                         refused=str(exc))
            raise
        if isinstance(result, operations.Requeued):
            self._logged("redrive", request, operator, provider=provider, event_id=event_id,
                         result="requeued")
            notice = "requeued"
        else:
            self._logged("redrive", request, operator, provider=provider, event_id=event_id,
                         result="forwarded", attempt=result.attempt, state=result.state)
            notice = "forwarded"
        raise web.HTTPSeeOther(event_path(provider, event_id) + f"?notice={notice}")

    async def release(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        provider, event_id = event_key(request)
        try:
            await operations.release(self._store(), provider, event_id)
        except OperationError as exc:
            self._logged("release", request, operator, provider=provider, event_id=event_id,
                         refused=str(exc))
            raise
        self._logged("release", request, operator, provider=provider, event_id=event_id)
        raise web.HTTPSeeOther(event_path(provider, event_id) + "?notice=released")

    async def redrive_dead(self, request: web.Request,
                           operator: Operator) -> web.StreamResponse:
        provider = request.match_info["provider"]
        try:
            result = await operations.redrive_dead(self._config, self._store(), provider)
        except OperationError as exc:
            self._logged("redrive_dead", request, operator, provider=provider,
                         refused=str(exc))
            raise
        self._logged("redrive_dead", request, operator, provider=provider,
                     count=len(result.event_ids))
        raise web.HTTPSeeOther(PREFIX + "overview?" + urlencode(
            {"notice": "bulk", "count": len(result.event_ids)}))


    async def pause(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        provider = request.match_info["provider"]
        form = await request.post()
        reason, force = _text(form.get("reason")) or "", form.get("force") == "yes"
        try:
            await provider_ops.pause(
                self._config, self._proxy[PROVIDER_STATES], self._proxy[NOTICES], provider,
                by=f"inspector (token {operator.fingerprint})", reason=reason, force=force,
                metrics=self._proxy[METRICS])
        except OperationError as exc:
            self._logged("pause", request, operator, provider=provider, refused=str(exc))
            raise
        self._logged("pause", request, operator, provider=provider, reason=reason, force=force)
        raise web.HTTPSeeOther(PREFIX + "overview?notice=paused")

    async def resume(self, request: web.Request, operator: Operator) -> web.StreamResponse:
        provider = request.match_info["provider"]
        await provider_ops.resume(
            self._config, self._proxy[PROVIDER_STATES], self._proxy[NOTICES], provider,
            by=f"inspector (token {operator.fingerprint})", metrics=self._proxy[METRICS])
        self._logged("resume", request, operator, provider=provider)
        raise web.HTTPSeeOther(PREFIX + "overview?notice=resumed")


def install(admin: web.Application, proxy_app: web.Application) -> None:
    """Serve the inspector on the admin app (``admin_listen``)."""
    inspector = Inspector(proxy_app)
    admin.add_routes(inspector.routes())
    admin.cleanup_ctx.append(inspector.sampling)


def _title(request: web.Request, status: int) -> str:
    if request.method == "POST":
        return "Not done"
    return {404: "Not found", 429: "Busy"}.get(status, "Bad request")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
