"""Test-only, never shipped: Python imports this at start-up (as ``sitecustomize``) in a proxy
process started with this folder on ``PYTHONPATH`` (``tests/acceptance/test_workers.py``).

Two faults a worker of a group (``workers`` > 1) cannot be made to show from the outside:

- ``BLOCK_LOOP_WORKER=INDEX``: the provider listener gets one more route,
  ``POST /test-only/block-loop``, whose handler makes a synchronous call — ``time.sleep`` — on
  the worker's event loop, as a handler with a blocking call would by mistake: the loop, and
  with it that worker's heartbeat, stops. Only the worker whose index is ``INDEX`` blocks (it
  logs ``event_loop_blocked_by_test`` first); the others answer 409, so a test can aim at one
  worker over new connections.
- ``STALL_START_WORKER=INDEX``: the worker with that index stalls in its start-up, before it
  opens its store or listens (it logs ``worker_start_stalled_by_test`` first).
  ``STALL_START_SYNC=1``: the stall is a synchronous sleep, so the worker's event loop stops
  before it sends its first heartbeat; otherwise the loop runs (the heartbeat goes on) and the
  start waits. ``STALL_START_WHILE=PATH``: only a worker starting while PATH exists stalls, and
  only until PATH is removed — so a test can let the first worker in a seat start and stall
  its successor.
- ``LOCALHOST_BOTH_LOOPBACKS=1``: ``localhost`` resolves to ``::1`` and ``127.0.0.1``, in
  that order, as on a machine whose ``/etc/hosts`` lists both (this one may list only one).

The proxy's own code has no such route, stall or switch: this module wraps
``sidecar.runtime.serve.build_apps`` and ``sidecar.runtime.serve.start`` from the outside.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

import sidecar.runtime.serve

BLOCKED_FOR = 60.0  # longer than any test waits: the supervisor must end it
STALL_POLL = 0.05  # how often a stalled start looks whether its file is gone

_build_apps = sidecar.runtime.serve.build_apps
_start = sidecar.runtime.serve.start


def _worker() -> str:
    return str(structlog.contextvars.get_contextvars().get("worker"))


async def _block_loop(_: web.Request) -> web.Response:
    worker = _worker()
    if worker != os.environ.get("BLOCK_LOOP_WORKER"):
        return web.json_response({"worker": worker}, status=409)
    structlog.get_logger("tests.hooks").warning("event_loop_blocked_by_test", pid=os.getpid())
    time.sleep(BLOCKED_FOR)  # noqa: ASYNC251 -- the fault under test: the loop blocked
    return web.json_response({"worker": worker})


def _with_blocking_route(*args: Any, **kwargs: Any) -> sidecar.runtime.serve.Apps:
    apps = _build_apps(*args, **kwargs)
    apps.proxy.router.add_post("/test-only/block-loop", _block_loop)
    return apps


def _stalls() -> bool:
    """Whether this worker's start stalls (now: the gate, if any, is still there)."""
    gate = os.environ.get("STALL_START_WHILE")
    return (_worker() == os.environ.get("STALL_START_WORKER")
            and (gate is None or Path(gate).exists()))


async def _stalling_start(*args: Any, **kwargs: Any) -> sidecar.runtime.serve.Running:
    if _stalls():
        structlog.get_logger("tests.hooks").warning("worker_start_stalled_by_test",
                                                    pid=os.getpid())
        if os.environ.get("STALL_START_SYNC") == "1":
            time.sleep(BLOCKED_FOR)  # noqa: ASYNC251 -- the fault under test
        while _stalls():  # noqa: ASYNC110 -- a file the test removes: nothing to await
            await asyncio.sleep(STALL_POLL)
    return await _start(*args, **kwargs)


sidecar.runtime.serve.build_apps = _with_blocking_route
sidecar.runtime.serve.start = _stalling_start


_getaddrinfo = socket.getaddrinfo


def _both_loopbacks(host: Any, port: Any, family: int = 0, type: int = 0,
                    proto: int = 0, flags: int = 0) -> list[Any]:
    if host != "localhost":
        return _getaddrinfo(host, port, family, type, proto, flags)
    return [found for kind, loopback in ((socket.AF_INET6, "::1"), (socket.AF_INET, "127.0.0.1"))
            if family in (0, kind)
            for found in _getaddrinfo(loopback, port, kind, type, proto, flags)]


if os.environ.get("LOCALHOST_BOTH_LOOPBACKS") == "1":
    socket.getaddrinfo = _both_loopbacks
