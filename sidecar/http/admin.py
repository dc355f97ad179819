"""The admin listener: /healthz, /readyz and /metrics. Never served on the provider listener."""

from __future__ import annotations

from aiohttp import web

from sidecar.core.errors import StoreError
from sidecar.http.keys import METRICS, STORE


def admin_routes(proxy_app: web.Application) -> list[web.RouteDef]:
    """Routes reading the proxy app's store and metrics (the admin app is a separate
    ``web.Application`` bound to ``admin_listen``)."""

    async def healthz(_: web.Request) -> web.Response:
        # Alive means the event loop answers; it never touches the database.
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        try:
            await proxy_app[STORE].ping()
        except StoreError as exc:
            return web.json_response({"status": "unavailable", "store": str(exc)}, status=503)
        except KeyError:
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ready"})

    async def metrics(_: web.Request) -> web.Response:
        body = proxy_app[METRICS].render()
        return web.Response(body=body, headers={"Content-Type": proxy_app[METRICS].content_type})

    return [web.get("/healthz", healthz), web.get("/readyz", readyz),
            web.get("/metrics", metrics)]
