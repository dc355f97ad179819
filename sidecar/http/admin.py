"""The admin listener: /healthz, /readyz, /metrics, the event admin API and its OpenAPI
description. Never served on the provider listener."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sidecar.config.model import Config
from sidecar.core.durations import parse_duration
from sidecar.core.errors import ConfigError, OperationError, StoreError
from sidecar.http.access import (
    TokenForm,
    browser_refusal,
    client_gone,
    fingerprint,
    from_loopback,
    presents,
)
from sidecar.http.appkeys import (
    CONFIG,
    FORWARDER,
    GROUP,
    HOLDS,
    METRICS,
    NOTICES,
    OWNER,
    PROVIDER_STATES,
    STORE,
)
from sidecar.http.openapi import description
from sidecar.obs.logs import get_logger
from sidecar.ops import events as operations
from sidecar.ops import listing
from sidecar.ops import providers as provider_ops
from sidecar.ops.routes import named_key

log = get_logger("sidecar.admin")

AdminHandler = Callable[[web.Request], Awaitable[Any]]
CHALLENGE = 'Bearer realm="webhook-sidecar admin"'  # with every 401 (RFC 9110 §11.6.1)


def admin_routes(proxy_app: web.Application) -> list[web.RouteDef]:
    """Routes reading the proxy app's store and metrics (the admin app is a separate
    ``web.Application`` bound to ``admin_listen``)."""

    async def healthz(_: web.Request) -> web.Response:
        # Alive means the event loop answers; it never touches the database. With workers > 1
        # the whole group's: every worker sends its heartbeat (as the supervisor says), and the
        # supervisor itself is heard from.
        group = proxy_app.get(GROUP)
        problem = group.problem(asyncio.get_running_loop().time()) if group is not None else None
        if problem is not None:
            return web.json_response({"status": "unavailable", **problem}, status=503)
        return web.json_response({"status": "ok", **(group.details() if group else {}),
                                  **_held(proxy_app)})

    async def readyz(_: web.Request) -> web.Response:
        if STORE not in proxy_app:  # the proxy app opens its store as it starts
            return web.json_response({"status": "starting"}, status=503)
        try:
            await proxy_app[STORE].ping()
        except StoreError as exc:
            return web.json_response({"status": "unavailable", "store": str(exc)}, status=503)
        return web.json_response({"status": "ready"})

    async def metrics(_: web.Request) -> web.Response:
        body = await proxy_app[METRICS].scrape()
        return web.Response(body=body, headers={"Content-Type": proxy_app[METRICS].content_type})

    described = description()

    async def openapi(_: web.Request) -> web.Response:
        # Open, like /healthz: the document is the repository's docs/openapi.json, holding no
        # secret and nothing about this deployment; tools fetch it without credentials.
        return web.Response(body=described, content_type="application/json")

    def guarded(handler: AdminHandler) -> Callable[[web.Request], Awaitable[web.Response]]:
        """JSON in and out; the admin token checked when configured, and without one only a
        request from this host itself is served (in a pod, the admin port is on the pod IP for
        probes and Prometheus; release and re-drive must not be open to the cluster, nor to a
        proxy in front: ``access.from_loopback``); what another website's page makes a browser
        send is refused (``access.browser_refusal``); store trouble is 503."""

        async def run(request: web.Request) -> web.Response:
            config = proxy_app[CONFIG]
            token = config.admin_token
            refusal = browser_refusal(request, token_configured=token is not None,
                                      admin_host=config.admin_listen.host)
            if refusal is not None:
                log.warning("admin_refused", path=request.path, peer=request.remote,
                            reason=refusal.reason, host=request.headers.get("Host"),
                            origin=request.headers.get("Origin"),
                            fetch_site=request.headers.get("Sec-Fetch-Site"))
                return web.json_response({"error": refusal.message, "reason": refusal.reason},
                                         status=403)
            if token is None and not from_loopback(request, config.trusted_proxies):
                log.warning("admin_refused", path=request.path, peer=request.remote,
                            reason="admin_token_required")
                return web.json_response({
                    "error": "without admin_token the admin API answers only on loopback, and "
                             "not through a proxy in front of it: set admin_token (sent as "
                             "'Authorization: Bearer …') to use it from elsewhere",
                    "reason": "admin_token_required"}, status=403)
            if token is not None:
                presented = presents(request.headers.get("Authorization", ""), token)
                if presented is None:
                    return web.json_response({"error": "admin token required"}, status=401,
                                             headers={"WWW-Authenticate": CHALLENGE})
                if presented is TokenForm.BARE:
                    log.warning("admin_token_without_scheme", path=request.path,
                                message="send 'Authorization: Bearer <token>': the token "
                                        "without a scheme is deprecated")
            if STORE not in proxy_app:
                return web.json_response({"error": "the proxy is starting"}, status=503,
                                         headers={"Retry-After": "1"})
            try:
                response = web.json_response(await handler(request))
            except OperationError as exc:
                response = web.json_response({"error": str(exc)}, status=exc.status,
                                             headers=listing.answer_headers(exc))
            except StoreError as exc:
                response = web.json_response({"error": f"store unavailable: {exc}"},
                                             status=503, headers={"Retry-After": "5"})
            if request.method == "POST":  # who changed what: each action is attributable
                log.info("admin_action", path=request.path, status=response.status,
                         token=fingerprint(token), peer=request.remote)
            elif "event_id" in request.match_info:  # who read a stored payload (personal data)
                log.info("admin_read", path=request.path, status=response.status,
                         provider=request.match_info["provider"],
                         destination=request.query.get("destination") or None,
                         event_id=request.match_info["event_id"], token=fingerprint(token),
                         peer=request.remote)
            return response

        return run

    async def list_events(request: web.Request) -> Any:
        # Every configured queue unless one is named: the listing walks each one's index.
        return await operations.list_page(
            proxy_app[STORE], operations.listing_query(proxy_app[CONFIG], request.query),
            gone=lambda: client_gone(request))

    async def show(request: web.Request) -> Any:
        config = proxy_app[CONFIG]
        return await operations.show(config, proxy_app[STORE], *_key(request, config))

    async def release(request: web.Request) -> Any:
        force = request.query.get("force", "false").lower()
        if force not in ("true", "false", "1", "0"):
            raise OperationError(400, "force must be true or false")
        config = proxy_app[CONFIG]
        return await operations.release(config, proxy_app[STORE], *_key(request, config),
                                        force=force in ("true", "1"))

    async def redrive(request: web.Request) -> Any:
        config = proxy_app[CONFIG]
        result = await operations.redrive(
            config, proxy_app[STORE], proxy_app[FORWARDER], proxy_app[OWNER],
            *_key(request, config))
        if isinstance(result, operations.Requeued):  # a dead event, back in its queue
            return {"action": "requeued", "state": "queued", **result.as_json()}
        return {"action": "forwarded", "attempt": result.attempt, "state": result.state,
                "status": result.status, "outcome": result.outcome}

    async def redrive_dead(request: web.Request) -> Any:
        older, limit = _age_and_limit(request, default_limit=operations.REDRIVE_LIMIT)
        result = await operations.redrive_dead(
            proxy_app[CONFIG], proxy_app[STORE], _provider(request, proxy_app[CONFIG]),
            older_than=older, limit=limit)
        return result.as_json()

    async def list_providers(_: web.Request) -> Any:
        return {"providers": await provider_ops.status(proxy_app[CONFIG],
                                                       proxy_app[PROVIDER_STATES])}

    async def pause_provider(request: web.Request) -> Any:
        body = await _json_body(request)
        reason, force = body.get("reason", ""), body.get("force", False)
        if not isinstance(reason, str) or not isinstance(force, bool):
            raise OperationError(400, "reason must be a string and force true or false")
        return await provider_ops.pause(
            proxy_app[CONFIG], proxy_app[PROVIDER_STATES], proxy_app[NOTICES],
            _provider(request, proxy_app[CONFIG]), by=_who(request, proxy_app), reason=reason,
            force=force, metrics=proxy_app[METRICS])

    async def resume_provider(request: web.Request) -> Any:
        return await provider_ops.resume(
            proxy_app[CONFIG], proxy_app[PROVIDER_STATES], proxy_app[NOTICES],
            _provider(request, proxy_app[CONFIG]), by=_who(request, proxy_app),
            metrics=proxy_app[METRICS])

    return [
        web.get("/admin/providers", guarded(list_providers)),
        web.post("/admin/providers/{provider}/pause", guarded(pause_provider)),
        web.post("/admin/providers/{provider}/resume", guarded(resume_provider)),
        web.get("/healthz", healthz),
        web.get("/readyz", readyz),
        web.get("/metrics", metrics),
        web.get("/admin/openapi.json", openapi),
        web.get("/admin/events", guarded(list_events)),
        web.get("/admin/events/{provider}/{event_id}", guarded(show)),
        web.post("/admin/events/{provider}/{event_id}/release", guarded(release)),
        web.post("/admin/events/{provider}/{event_id}/redrive", guarded(redrive)),
        web.post("/admin/queue/{provider}/redrive-dead", guarded(redrive_dead)),
    ]


def _age_and_limit(request: web.Request, *, default_limit: int) -> tuple[float | None, int]:
    """``older_than`` (a duration, optional) and ``limit`` from the query string."""
    query = request.query
    try:
        older = (parse_duration(query["older_than"], "older_than")
                 if "older_than" in query else None)
        limit = int(query.get("limit", str(default_limit)))
    except (ConfigError, ValueError) as exc:
        raise OperationError(
            400, "older_than must be a duration (600, 10m, 2h) and limit a number") from exc
    return older, limit


MAX_JSON_BODY = 4096  # bytes of a pause's JSON body


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or {} without a body; 400 when it is not one."""
    raw = await request.content.read(MAX_JSON_BODY + 1)
    if not raw.strip():
        return {}
    try:
        if len(raw) > MAX_JSON_BODY:
            raise ValueError("too large")
        body = json.loads(raw)
    except ValueError as exc:
        raise OperationError(400, f"the body must be a JSON object of at most "
                                  f"{MAX_JSON_BODY} bytes") from exc
    if not isinstance(body, dict):
        raise OperationError(400, "the body must be a JSON object")
    return body


def _who(request: web.Request, proxy_app: web.Application) -> str:
    """Who made a change through the admin API, as far as it can tell: the token's
    fingerprint, or the loopback peer."""
    token = proxy_app[CONFIG].admin_token
    if token is not None:
        return f"admin api (token {fingerprint(token)})"
    return f"admin api ({request.remote})"


def _held(proxy_app: web.Application) -> dict[str, Any]:
    """/healthz's view of each provider's hold (this process's copy, at most ~1 s old): only
    once the proxy has started; alive is still alive while a provider is held."""
    holds = proxy_app.get(HOLDS)
    if holds is None:
        return {}
    providers: dict[str, Any] = {}
    for provider in proxy_app[CONFIG].routes:  # each destination is held on its own
        state = holds.state(provider.key)
        providers[provider.key] = {
            "paused": state.paused is not None,
            "breaker": (state.breaker.value if provider.delivery.breaker.failures is not None
                        else "off")}
    return {"providers": providers}


def _provider(request: web.Request, config: Config) -> str:
    """The path's provider, or its ``destination`` (a query parameter): that destination's
    key, ``stripe.billing``."""
    return named_key(config, request.match_info["provider"], request.query.get("destination"))


def _key(request: web.Request, config: Config) -> tuple[str, str]:
    return _provider(request, config), request.match_info["event_id"]
