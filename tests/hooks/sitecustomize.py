"""Test-only, never shipped: Python imports this at start-up (as ``sitecustomize``) in a proxy
process started with this folder on ``PYTHONPATH`` (``tests/acceptance/test_workers.py``).

It gives the provider listener one more route, ``POST /test-only/block-loop``, whose handler
makes a synchronous call — ``time.sleep`` — on the worker's event loop, as a handler with a
blocking call would by mistake: the loop, and with it that worker's heartbeat, stops. Only the
worker whose index is ``$BLOCK_LOOP_WORKER`` blocks (it logs ``event_loop_blocked_by_test``
first); the others answer 409, so a test can aim at one worker over new connections. The
proxy's own code has no such route and no switch for it: this module wraps
``sidecar.serve.build_apps`` from the outside.
"""

from __future__ import annotations

import os
import time
from typing import Any

import structlog
from aiohttp import web

import sidecar.serve

BLOCKED_FOR = 60.0  # longer than any test waits: the supervisor must end it

_build_apps = sidecar.serve.build_apps


async def _block_loop(_: web.Request) -> web.Response:
    worker = structlog.contextvars.get_contextvars().get("worker")
    if str(worker) != os.environ.get("BLOCK_LOOP_WORKER"):
        return web.json_response({"worker": worker}, status=409)
    structlog.get_logger("tests.hooks").warning("event_loop_blocked_by_test", pid=os.getpid())
    time.sleep(BLOCKED_FOR)  # noqa: ASYNC251 -- the fault under test: the loop blocked
    return web.json_response({"worker": worker})


def _with_blocking_route(*args: Any, **kwargs: Any) -> sidecar.serve.Apps:
    apps = _build_apps(*args, **kwargs)
    apps.proxy.router.add_post("/test-only/block-loop", _block_loop)
    return apps


sidecar.serve.build_apps = _with_blocking_route
