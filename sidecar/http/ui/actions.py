"""The inspector's actions (POSTs): log in and out, re-drive, release, re-queue a provider's
dead events, pause and resume a provider. The verbs are ``sidecar.ops``', with the CLI's
guards. Each runs after the middleware has let it in and checked its form's CSRF token (the
login excepted: it has no session yet); each is logged with the operator's token fingerprint
and peer, and answered with a redirect to the page showing its effect, so reloading does not
repeat it."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from sidecar.core.errors import OperationError
from sidecar.http.appkeys import CONFIG, FORWARDER, METRICS, NOTICES, OWNER, PROVIDER_STATES
from sidecar.http.ui.auth import OPERATOR, end_session
from sidecar.http.ui.keys import AUTHENTICATOR, PROXY, RENDERER, store
from sidecar.http.ui.paths import PREFIX, event_key, event_path, local
from sidecar.obs.logs import get_logger
from sidecar.ops import events as operations
from sidecar.ops import providers as provider_ops

log = get_logger("sidecar.ui")


async def login(request: web.Request) -> web.StreamResponse:
    """The token, presented once: answered with a session cookie derived from it."""
    auth = request.app[AUTHENTICATOR]
    if not auth.needs_login:
        raise web.HTTPSeeOther(PREFIX)
    form = await request.post()
    token, target = form.get("token"), local(_text(form.get("next")))
    if not isinstance(token, str) or not auth.token_matches(token):
        log.warning("ui_login_refused", peer=request.remote)
        return request.app[RENDERER].page(request, "login.html", status=401, next=target,
                                          error="That is not the admin token.")
    log.info("ui_login", token=auth.fingerprint, peer=request.remote)
    response = web.HTTPSeeOther(target)
    auth.set_session(response, request)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    _logged("logout", request)
    response = web.HTTPSeeOther(PREFIX + "login?notice=logged_out")
    end_session(response)
    raise response


async def redrive(request: web.Request) -> web.StreamResponse:
    provider, event_id = event_key(request)
    proxy = request.app[PROXY]
    try:
        result = await operations.redrive(request.app[CONFIG], store(request), proxy[FORWARDER],
                                          proxy[OWNER], provider, event_id)
    except OperationError as exc:
        _logged("redrive", request, provider=provider, event_id=event_id, refused=str(exc))
        raise
    if isinstance(result, operations.Requeued):
        _logged("redrive", request, provider=provider, event_id=event_id, result="requeued")
        notice = "requeued"
    else:
        _logged("redrive", request, provider=provider, event_id=event_id, result="forwarded",
                attempt=result.attempt, state=result.state)
        notice = "forwarded"
    raise web.HTTPSeeOther(event_path(provider, event_id) + f"?notice={notice}")


async def release(request: web.Request) -> web.StreamResponse:
    provider, event_id = event_key(request)
    try:
        await operations.release(request.app[CONFIG], store(request), provider, event_id)
    except OperationError as exc:
        _logged("release", request, provider=provider, event_id=event_id, refused=str(exc))
        raise
    _logged("release", request, provider=provider, event_id=event_id)
    raise web.HTTPSeeOther(event_path(provider, event_id) + "?notice=released")


async def redrive_dead(request: web.Request) -> web.StreamResponse:
    provider = request.match_info["provider"]
    try:
        result = await operations.redrive_dead(request.app[CONFIG], store(request), provider)
    except OperationError as exc:
        _logged("redrive_dead", request, provider=provider, refused=str(exc))
        raise
    _logged("redrive_dead", request, provider=provider, count=len(result.event_ids))
    raise web.HTTPSeeOther(PREFIX + "overview?" + urlencode(
        {"notice": "bulk", "count": len(result.event_ids)}))


async def pause(request: web.Request) -> web.StreamResponse:
    provider = request.match_info["provider"]
    form = await request.post()
    reason, force = _text(form.get("reason")) or "", form.get("force") == "yes"
    proxy = request.app[PROXY]
    try:
        await provider_ops.pause(
            request.app[CONFIG], proxy[PROVIDER_STATES], proxy[NOTICES], provider,
            by=_by(request), reason=reason, force=force, metrics=proxy[METRICS])
    except OperationError as exc:
        _logged("pause", request, provider=provider, refused=str(exc))
        raise
    _logged("pause", request, provider=provider, reason=reason, force=force)
    raise web.HTTPSeeOther(PREFIX + "overview?notice=paused")


async def resume(request: web.Request) -> web.StreamResponse:
    provider = request.match_info["provider"]
    proxy = request.app[PROXY]
    await provider_ops.resume(request.app[CONFIG], proxy[PROVIDER_STATES], proxy[NOTICES],
                              provider, by=_by(request), metrics=proxy[METRICS])
    _logged("resume", request, provider=provider)
    raise web.HTTPSeeOther(PREFIX + "overview?notice=resumed")


def _by(request: web.Request) -> str:
    """Who a provider's hold names as having set it."""
    return f"inspector (token {request[OPERATOR].fingerprint})"


def _logged(action: str, request: web.Request, **fields: Any) -> None:
    operator = request[OPERATOR]
    log.info("ui_action", action=action, path=request.path, token=operator.fingerprint,
             peer=operator.peer, **fields)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
