"""Typed ``web.AppKey``s shared by the HTTP shell and the composition root."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sidecar.config.model import Config
from sidecar.core.notices import Notices
from sidecar.core.ports import AdminStore, ProviderStateStore
from sidecar.core.tracing import Tracer
from sidecar.core.workergroup import GroupHealth
from sidecar.delivery import Pipeline
from sidecar.forwarding.forwarder import Forwarder
from sidecar.forwarding.holds import Holds
from sidecar.obs.metrics import Metrics
from sidecar.ops.notify import SignatureWatch

CONFIG = web.AppKey("config", Config)
STORE = web.AppKey("store", AdminStore)  # the admin API's; the pipeline gets its own
METRICS = web.AppKey("metrics", Metrics)
OWNER = web.AppKey("owner", str)
FORWARDER = web.AppKey("forwarder", Forwarder)
PIPELINE = web.AppKey("pipeline", Pipeline)
# With workers > 1, in the worker serving the admin listener: the group as its supervisor says.
GROUP = web.AppKey("group", GroupHealth)
# Result writes still running; awaited on shutdown so no recorded outcome is lost.
PENDING: web.AppKey[set[asyncio.Task[bool]]] = web.AppKey("pending")
# Spans of deliveries (``core.tracing``; the no-op tracer when tracing is off).
TRACER: web.AppKey[Tracer] = web.AppKey("tracer")
# Providers paused or held by their breaker: the store's states (the admin API's pause and
# resume), this process's cached view of them (/healthz), and where their notices go.
PROVIDER_STATES: web.AppKey[ProviderStateStore] = web.AppKey("provider_states")
HOLDS = web.AppKey("holds", Holds)
NOTICES: web.AppKey[Notices] = web.AppKey("notices")
SIGNATURE_WATCH = web.AppKey("signature_watch", SignatureWatch)
