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
from sidecar.delivery import Pipeline
from sidecar.forwarding import Forwarder
from sidecar.http.admin import admin_routes
from sidecar.http.appkeys import CONFIG, FORWARDER, METRICS, OWNER, PENDING, PIPELINE, STORE
from sidecar.http.proxy import delivery_handler, unrouted
from sidecar.maintenance import Maintenance
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics
from sidecar.obs.telemetry import DeliveryTelemetry
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
    metrics = metrics or Metrics()
    upstream = upstream or Upstream(config.upstream)
    keyring = Keyring(config.providers)
    owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    pending: set[asyncio.Task[bool]] = set()
    proxy[CONFIG] = config
    proxy[METRICS] = metrics
    proxy[OWNER] = owner
    proxy[PENDING] = pending
    if store is not None:
        proxy[STORE] = store

    async def resources(app: web.Application) -> AsyncIterator[None]:
        opened = store or await open_store(config.store)
        app[STORE] = opened
        await upstream.start()
        forwarder = Forwarder(opened, upstream, metrics, pending)
        app[FORWARDER] = forwarder
        app[PIPELINE] = Pipeline(store=opened, forwarder=forwarder, keyring=keyring, owner=owner,
                                 observer=DeliveryTelemetry(metrics), clock=clock or time.time)
        for warning in config.warnings:
            log.warning("config_warning", message=warning)
        upkeep = Maintenance(config, opened, metrics, keyring)
        background = [asyncio.create_task(upkeep.run_store_upkeep(), name="store-upkeep")]
        if keyring.watches_files:
            background.append(asyncio.create_task(upkeep.run_secret_reloads(),
                                                  name="secret-reloads"))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            # Handlers are done or cancelled by now; result writes they started still finish.
            unfinished = set(pending)
            if unfinished:
                log.info("draining_result_writes", count=len(unfinished))
                await asyncio.wait(unfinished, timeout=config.shutdown_timeout)
            await upstream.close()
            if store is None:  # opened here, so closed here
                await opened.close()

    proxy.cleanup_ctx.append(resources)
    for provider in config.providers:
        proxy.router.add_post(provider.path, delivery_handler(provider))

    admin = web.Application()
    admin.add_routes(admin_routes(proxy))
    return Apps(proxy=proxy, admin=admin)
