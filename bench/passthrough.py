"""A bare aiohttp pass-through proxy: the floor for any Python proxy hop.

    .venv/bin/python -m bench.passthrough --upstream http://127.0.0.1:8081 [--listen HOST:PORT]
                                          [--loop auto|uvloop|asyncio]

One process, one event loop (uvloop when installed, unless ``--loop asyncio``). Every request
is read whole and sent to ``--upstream`` + its path and query with its headers (hop-by-hop ones
dropped), through a pooled keep-alive connector; the app's status, headers and body go back.
No verification, no store, no logging: whatever webhook-sidecar spends above this is its own.
Prints one JSON line ``{"event": "listening", "listen": "HOST:PORT", "loop": …}`` on stdout
once it accepts connections. Used by ``bench.wrk``; not part of the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
from aiohttp import web

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})


def pick_loop(name: str) -> str:
    """Install uvloop's policy when asked (or, for ``auto``, when installed); the loop's name."""
    if name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise SystemExit("uvloop is not installed: .venv/bin/pip install uvloop") from None
            return "asyncio"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return f"uvloop {getattr(uvloop, '__version__', '')}".strip()
    return "asyncio"


async def serve(app: web.Application, listen: str, loop_name: str,
                on_start: Callable[[], Awaitable[None]] | None = None) -> None:
    """Serve ``app`` on ``listen`` until SIGTERM/SIGINT, announcing the bound address."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, int(port), backlog=1024, reuse_address=True)
    await site.start()
    if on_start is not None:
        await on_start()
    bound = runner.addresses[0]
    print(json.dumps({"event": "listening", "listen": f"{bound[0]}:{bound[1]}",
                      "loop": loop_name}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def build(upstream: str) -> tuple[web.Application, Callable[[], Coroutine[Any, Any, None]]]:
    base = upstream.rstrip("/")
    holder: dict[str, aiohttp.ClientSession] = {}

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        async with holder["session"].request(
            request.method, base + request.path_qs, data=body, headers=headers,
            allow_redirects=False,
        ) as answer:
            content = await answer.read()
            out = [(k, v) for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP]
            return web.Response(status=answer.status, body=content, headers=out)

    async def open_session() -> None:
        holder["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=100, keepalive_timeout=4),
            timeout=aiohttp.ClientTimeout(total=10), auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"))

    async def close_session(_: web.Application) -> None:
        if "session" in holder:
            await holder["session"].close()

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_cleanup.append(close_session)
    return app, open_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the app, http://HOST:PORT")
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    args = parser.parse_args()
    loop_name = pick_loop(args.loop)
    app, open_session = build(args.upstream)
    asyncio.run(serve(app, args.listen, loop_name, open_session))
    sys.exit(0)


if __name__ == "__main__":
    main()
