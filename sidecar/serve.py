"""Running the two listeners, and stopping them gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import resource
import signal
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from sidecar.app import CLOSE_GRACE, UNWIND_GRACE, Apps, build_apps
from sidecar.config.model import Address, Config
from sidecar.http.listener import Listener
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.serve")

# aiohttp's own wait for handlers when a runner is cleaned up. The listener has drained the
# provider-facing one already; the admin one only answers probes and operator calls.
_RUNNER_SHUTDOWN_TIMEOUT: Final = 0.25
# The last resort past CLOSE_GRACE, should the app's own cleanup overrun its deadlines.
_CLEANUP_MARGIN: Final = 0.25
# Open files the process needs besides provider connections (store, logs, listeners…).
_SPARE_FILES: Final = 64


@dataclass(frozen=True, slots=True)
class Running:
    apps: Apps
    config: Config
    proxy_runner: web.AppRunner
    listener: Listener
    admin_runner: web.AppRunner
    listen: Address  # as bound (a configured port 0 becomes the real one)
    admin_listen: Address


async def start(config: Config, **build_kwargs: Any) -> Running:
    apps = build_apps(config, **build_kwargs)
    proxy_runner = web.AppRunner(apps.proxy, access_log=None,
                                 shutdown_timeout=_RUNNER_SHUTDOWN_TIMEOUT)
    await proxy_runner.setup()  # opens the store: fails here, before listening, if it can't
    admin_runner = web.AppRunner(apps.admin, access_log=None,
                                 shutdown_timeout=_RUNNER_SHUTDOWN_TIMEOUT)
    await admin_runner.setup()
    listener = Listener(proxy_runner, config)
    try:
        listen = await listener.open(config.listen)
        admin = await _bind(admin_runner, config.admin_listen)
    except BaseException:
        listener.close()
        await admin_runner.cleanup()
        await proxy_runner.cleanup()
        raise
    return Running(apps, config, proxy_runner, listener, admin_runner, listen, admin)


async def _bind(runner: web.AppRunner, address: Address) -> Address:
    site = web.TCPSite(runner, address.host, address.port)
    await site.start()
    host, port = runner.addresses[-1][:2]
    return Address(str(host), int(port))


async def stop(running: Running) -> None:
    """Stop on one schedule (``sidecar.app``): stop accepting on both listeners, let
    deliveries in progress finish until shutdown_timeout, cancel the rest, let their result
    writes finish briefly, close the app client and the store. Returns at most
    CLOSE_GRACE + _CLEANUP_MARGIN seconds after shutdown_timeout."""
    shutdown = running.apps.shutdown
    deadline = shutdown.begin(running.config.shutdown_timeout)
    running.listener.close()
    # The admin listener stops too, so no operator action starts against a closing store.
    admin = asyncio.create_task(_within(running.admin_runner.cleanup(),
                                        shutdown.left(UNWIND_GRACE), "admin_listener"))
    cancelled = await running.listener.drain(deadline, UNWIND_GRACE)
    if cancelled:
        log.warning("deliveries_cancelled", count=cancelled,
                    timeout_s=running.config.shutdown_timeout)
    await admin
    # Result writes, then the app client and the store (their own deadlines, sidecar.app).
    await _within(running.proxy_runner.cleanup(), shutdown.left(CLOSE_GRACE) + _CLEANUP_MARGIN,
                  "proxy_listener")


async def _within(step: Awaitable[None], seconds: float, name: str) -> None:
    try:
        async with asyncio.timeout(seconds):
            await step
    except TimeoutError:
        log.warning("shutdown_step_timed_out", step=name, timeout_s=round(seconds, 3))


def _check_open_files(config: Config) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = (config.max_connections + config.upstream.max_connections
              + config.store.pool_max_size + _SPARE_FILES)
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning("open_file_limit_low", limit=soft, needed=needed,
                    max_connections=config.max_connections)


async def serve(config: Config) -> int:
    running = await start(config)
    log.info("listening", listen=str(running.listen), admin_listen=str(running.admin_listen),
             store=config.store.kind, providers=[p.key for p in config.providers])
    _check_open_files(config)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    log.info("shutting_down", timeout_s=config.shutdown_timeout)
    await stop(running)
    log.info("stopped")
    return 0
