"""The composition root: the only module that names concrete adapters."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from sidecar.config.keyring import Keyring
from sidecar.config.model import Config, StoreConfig
from sidecar.core.ports import Store
from sidecar.forwarding import Forwarder
from sidecar.http.admin import admin_routes
from sidecar.http.keys import (
    CLOCK,
    CONFIG,
    FORWARDER,
    KEYRING,
    METRICS,
    OWNER,
    PENDING,
    STORE,
    UPSTREAM,
)
from sidecar.http.proxy import delivery_handler, unrouted
from sidecar.maintenance import Maintenance
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore
from sidecar.upstream import Upstream

log = get_logger("sidecar.app")


@dataclass(frozen=True, slots=True)
class Apps:
    proxy: web.Application  # bound to `listen`: provider routes only
    admin: web.Application  # bound to `admin_listen`: health, readiness, metrics


async def open_store(config: StoreConfig) -> Store:
    if config.kind == "sqlite":
        return await SQLiteStore.open(config.sqlite_path)
    return await PostgresStore.connect(
        config.url,
        min_size=config.pool_min_size,
        max_size=config.pool_max_size,
        acquire_timeout=config.acquire_timeout,
        statement_timeout=config.statement_timeout,
        lock_timeout=config.lock_timeout,
        command_timeout=config.statement_timeout + 1.0,
        statement_cache_size=config.statement_cache_size,
        session_settings=config.session_settings,
    )


def build_apps(
    config: Config,
    *,
    store: Store | None = None,
    upstream: Upstream | None = None,
    clock: Callable[[], float] | None = None,
    metrics: Metrics | None = None,
) -> Apps:
    proxy = web.Application(client_max_size=config.max_body_bytes + 1, middlewares=[unrouted])
    proxy[CONFIG] = config
    proxy[UPSTREAM] = upstream or Upstream(config.upstream)
    proxy[METRICS] = metrics or Metrics()
    proxy[CLOCK] = clock or time.time
    proxy[OWNER] = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    proxy[PENDING] = set()
    proxy[KEYRING] = Keyring(config.providers)
    if store is not None:
        proxy[STORE] = store

    async def resources(app: web.Application) -> AsyncIterator[None]:
        owns_store = store is None
        if owns_store:
            app[STORE] = await open_store(config.store)
        await app[UPSTREAM].start()
        app[FORWARDER] = Forwarder(app[STORE], app[UPSTREAM], app[METRICS], app[PENDING])
        for warning in config.warnings:
            log.warning("config_warning", message=warning)
        upkeep = Maintenance(config, app[STORE], app[METRICS], app[KEYRING])
        background = [asyncio.create_task(upkeep.run_store_upkeep(), name="store-upkeep")]
        if app[KEYRING].watches_files:
            background.append(asyncio.create_task(upkeep.run_secret_reloads(),
                                                  name="secret-reloads"))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            # Handlers are done or cancelled by now; result writes they started still finish.
            tasks = app[PENDING]
            unfinished = set(tasks)
            if unfinished:
                log.info("draining_result_writes", count=len(unfinished))
                await asyncio.wait(unfinished, timeout=config.shutdown_timeout)
            await app[UPSTREAM].close()
            if owns_store:
                await app[STORE].close()

    proxy.cleanup_ctx.append(resources)
    for provider in config.providers:
        proxy.router.add_post(provider.path, delivery_handler(provider))

    admin = web.Application()
    admin.add_routes(admin_routes(proxy))
    return Apps(proxy=proxy, admin=admin)
