"""An aiohttp "hello world": reads the request body and answers 200 ``ok``.

    .venv/bin/python -m bench.hello [--listen HOST:PORT] [--loop auto|uvloop|asyncio]

The cost of aiohttp's server alone (accept, parse, read the body, answer) in one process,
uvloop when installed: the part of any aiohttp proxy's CPU that no proxy logic can remove.
Prints the same ``listening`` JSON line as ``bench.passthrough``. Used by ``bench.wrk``.
"""

from __future__ import annotations

import argparse
import asyncio

from aiohttp import web

from bench.passthrough import pick_loop, serve


async def hello(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text="ok\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    args = parser.parse_args()
    loop_name = pick_loop(args.loop)
    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", hello)
    asyncio.run(serve(app, args.listen, loop_name))


if __name__ == "__main__":
    main()
