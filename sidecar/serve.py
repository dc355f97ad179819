"""Running the two listeners, and stopping them gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sidecar.app import Apps, build_apps
from sidecar.config.model import Address, Config
from sidecar.obs.logs import get_logger

log = get_logger("sidecar.serve")


@dataclass(frozen=True, slots=True)
class Running:
    apps: Apps
    proxy_runner: web.AppRunner
    admin_runner: web.AppRunner
    listen: Address  # as bound (a configured port 0 becomes the real one)
    admin_listen: Address


async def start(config: Config, **build_kwargs: Any) -> Running:
    apps = build_apps(config, **build_kwargs)
    proxy_runner = web.AppRunner(apps.proxy, access_log=None,
                                 shutdown_timeout=config.shutdown_timeout)
    await proxy_runner.setup()  # opens the store: fails here, before listening, if it can't
    admin_runner = web.AppRunner(apps.admin, access_log=None, shutdown_timeout=1.0)
    await admin_runner.setup()
    try:
        listen = await _bind(proxy_runner, config.listen)
        admin = await _bind(admin_runner, config.admin_listen)
    except BaseException:
        await admin_runner.cleanup()
        await proxy_runner.cleanup()
        raise
    return Running(apps, proxy_runner, admin_runner, listen, admin)


async def _bind(runner: web.AppRunner, address: Address) -> Address:
    site = web.TCPSite(runner, address.host, address.port)
    await site.start()
    host, port = runner.addresses[-1][:2]
    return Address(str(host), int(port))


async def stop(running: Running) -> None:
    """Stop the admin listener (so no operator action starts against a closing store), then
    stop accepting deliveries, let in-flight ones finish and record (up to shutdown_timeout),
    and close the store."""
    await running.admin_runner.cleanup()
    await running.proxy_runner.cleanup()


async def serve(config: Config) -> int:
    running = await start(config)
    log.info("listening", listen=str(running.listen), admin_listen=str(running.admin_listen),
             store=config.store.kind, providers=[p.key for p in config.providers])
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    log.info("shutting_down", timeout_s=config.shutdown_timeout)
    await stop(running)
    log.info("stopped")
    return 0
