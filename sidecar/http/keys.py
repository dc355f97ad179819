"""Typed application keys shared by the HTTP shell and the composition root."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from sidecar.config.keyring import Keyring
from sidecar.config.model import Config
from sidecar.core.ports import Store
from sidecar.forwarding import Forwarder
from sidecar.obs.metrics import Metrics
from sidecar.upstream import Upstream

CONFIG = web.AppKey("config", Config)
STORE = web.AppKey("store", Store)
UPSTREAM = web.AppKey("upstream", Upstream)
METRICS = web.AppKey("metrics", Metrics)
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")
OWNER = web.AppKey("owner", str)
KEYRING = web.AppKey("keyring", Keyring)
FORWARDER = web.AppKey("forwarder", Forwarder)
# Result writes still running; awaited on shutdown so no recorded outcome is lost.
PENDING: web.AppKey[set[asyncio.Task[bool]]] = web.AppKey("pending")
