"""The composition root: the only module that names concrete adapters (the stores, the client
to the app). Whoever needs the parts wired — the server, the ``events`` and ``migrate``
commands, the test kit — asks here: ``open_store``, ``migrate_store``, ``build_forwarder``,
``build_pipeline``, ``operator_forwarder``, ``build_notifier``, ``open_notices``,
``build_apps``. Which store a URL opens is ``sidecar.runtime.stores``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from sidecar.config.keyring import Keyring
from sidecar.config.model import Config
from sidecar.core.errors import ConfigError, StoreError
from sidecar.core.known import KnownAnswers
from sidecar.core.notices import NoNotices, Notices
from sidecar.core.ports import DeliveryStore, EventStore, NoticeStore, Store
from sidecar.core.tracing import NO_TRACER, Tracer
from sidecar.core.workergroup import GroupHealth
from sidecar.delivery import Pipeline
from sidecar.forwarding.fanout import FanOut
from sidecar.forwarding.forwarder import Forwarder, Sender
from sidecar.forwarding.holds import Holds
from sidecar.forwarding.queueworker import QueueWorkers
from sidecar.forwarding.upstream import Upstreams
from sidecar.http.admin import admin_routes
from sidecar.http.appkeys import (
    CONFIG,
    FORWARDER,
    GROUP,
    HOLDS,
    METRICS,
    NOTICES,
    OWNER,
    PENDING,
    PIPELINE,
    PROVIDER_STATES,
    SIGNATURE_WATCH,
    STORE,
    TRACER,
)
from sidecar.http.listener import tracked
from sidecar.http.proxy import delivery_handler, unrouted
from sidecar.http.ui import PREFIX as INSPECTOR_PREFIX
from sidecar.http.ui import build_inspector
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics
from sidecar.obs.telemetry import DeliveryTelemetry
from sidecar.obs.tracing import build_tracer
from sidecar.ops.maintenance import Maintenance
from sidecar.ops.notify import Notifier, SignatureWatch
from sidecar.runtime.stores import open_store, partition_keeper

log = get_logger("sidecar.app")

# A graceful stop is one schedule, counted from SIGTERM (t) with T = shutdown_timeout:
#   t        stop accepting; idle connections closed; deliveries in progress go on
#   t+T      deliveries still in progress are cancelled (the provider retries them)
#   t+T+0.5  cancelled deliveries have unwound
#   t+T+1.0  result writes started before then have finished, or are abandoned (the row stays
#            `processing`; a redelivery after the lease forwards it again)
#   t+T+1.5  the app client and the store are closed
#   t+T+2.0  the process has exited (SHUTDOWN_OVERRUN; the chart's grace-period check uses it)
UNWIND_GRACE: Final = 0.5
WRITES_GRACE: Final = 1.0
CLOSE_GRACE: Final = 1.5
SHUTDOWN_OVERRUN: Final = 2.0
# Spans still queued at exit are exported for at most this long (and within CLOSE_GRACE): a
# collector that hangs delays the exit by no more.
TRACE_FLUSH_BOUND: Final = 1.0
# Notifications still queued or being sent at exit get at most this long (within CLOSE_GRACE).
NOTIFY_DRAIN_BOUND: Final = 1.0


@dataclass(slots=True)
class Shutdown:
    """The deadline of a graceful stop on the event loop's clock: None until it begins."""

    deadline: float | None = None
    on_begin: list[Callable[[], None]] = field(default_factory=list)  # e.g. stop taking work

    def begin(self, timeout: float) -> float:
        """Start the schedule (once): deliveries may run ``timeout`` more seconds."""
        if self.deadline is None:
            self.deadline = asyncio.get_running_loop().time() + timeout
            for hook in self.on_begin:
                hook()
        return self.deadline

    def left(self, grace: float) -> float:
        """Seconds until ``grace`` past the deadline."""
        assert self.deadline is not None
        return max(0.0, self.deadline + grace - asyncio.get_running_loop().time())


@dataclass(frozen=True, slots=True)
class Apps:
    proxy: web.Application  # bound to `listen`: provider routes only
    admin: web.Application  # bound to `admin_listen`: health, metrics, admin API, inspector
    shutdown: Shutdown  # set going by serve.stop; read by the proxy app's cleanup


def build_forwarder(store: EventStore, upstream: Sender | Mapping[str, Sender],
                    metrics: Metrics, pending: set[asyncio.Task[bool]], keyring: Keyring, *,
                    clock: Callable[[], float] = time.time,
                    tracer: Tracer = NO_TRACER) -> Forwarder:
    """The forwarder: sends one attempt to the app (``upstream``, or each provider's own by
    key), signed with the keyring's forward keys of its provider, and records its result on
    the row; result writes it starts are kept in ``pending``."""
    return Forwarder(store, upstream, metrics, pending, signing_keys=keyring.signing_keys,
                     clock=clock, tracer=tracer)


def build_pipeline(config: Config, store: DeliveryStore, forwarder: Forwarder,
                   keyring: Keyring, metrics: Metrics, *, owner: str,
                   clock: Callable[[], float] = time.time, known: KnownAnswers | None = None,
                   on_queued: Callable[[str], None] = lambda provider: None,
                   tracer: Tracer = NO_TRACER, holds: Holds | None = None) -> Pipeline:
    """The delivery pipeline, with the memory of known answers ``config.answer_cache`` asks
    for unless ``known`` is given."""
    return Pipeline(store=store, forwarder=forwarder, keyring=keyring, owner=owner,
                    observer=DeliveryTelemetry(metrics), clock=clock,
                    trusted_proxies=config.trusted_proxies,
                    known=known if known is not None else KnownAnswers(config.answer_cache),
                    on_queued=on_queued, tracer=tracer, holds=holds)


@contextlib.asynccontextmanager
async def operator_forwarder(config: Config, store: EventStore) -> AsyncIterator[Forwarder]:
    """A forwarder for an operator's re-drive (``events redrive``): its own clients to each
    provider's upstream, closed when the block ends."""
    upstream = Upstreams(config.app_routes)
    await upstream.start()
    try:
        yield build_forwarder(store, upstream, Metrics(), set(),
                              Keyring(config.routes, config.upstream.signing_secrets))
    finally:
        await upstream.close()


async def _first_read(holds: Holds) -> None:
    """Read the provider states before serving; a store that cannot answer yet is left to
    the background reads (the readiness probe reports the store)."""
    try:
        await holds.read()
    except StoreError as exc:
        log.warning("provider_states_unread", error=str(exc))


def build_notifier(config: Config, store: NoticeStore | None,
                   metrics: Metrics | None = None) -> Notifier | None:
    """The sender of ``config.notify``'s targets (None: no targets), claiming each message in
    ``store`` (once per condition and interval across replicas); ``start`` it on the loop."""
    if not config.notify.targets:
        return None
    return Notifier(config.notify, store, metrics or Metrics())


@contextlib.asynccontextmanager
async def open_notices(config: Config, store: NoticeStore,
                       metrics: Metrics | None = None) -> AsyncIterator[Notices]:
    """The ``Notices`` a command outside the server hands its notices to (``NoNotices``
    without targets): started here, and what it was given is sent (within
    ``NOTIFY_DRAIN_BOUND`` + the tries' own bounds, ``drain`` seconds at most) when the block
    ends."""
    notifier = build_notifier(config, store, metrics)
    if notifier is None:
        yield NoNotices()
        return
    notifier.start()
    try:
        yield notifier
    finally:
        await notifier.close(COMMAND_NOTIFY_DRAIN)


# A command (pause, resume) waits this long at most for its notices to be sent: the tries of a
# target that answers 5xx take ~8 s in all.
COMMAND_NOTIFY_DRAIN: Final = 15.0


def require_secrets(config: Config) -> None:
    """Refuse to serve a config loaded without its secrets (``Secrets.NONE`` or ``SIGNING``,
    as the ``events`` commands load it): its deliveries would be checked against no key, its
    forwards go out unsigned, its admin API have no token."""
    if config.unread_secrets:
        raise ConfigError("", "this configuration was loaded without its secrets ("
                          + ", ".join(sorted(config.unread_secrets)) + "): it cannot be served")


def build_apps(
    config: Config,
    *,
    store: Store | None = None,
    upstream: Upstreams | None = None,
    clock: Callable[[], float] | None = None,
    metrics: Metrics | None = None,
    store_upkeep: bool = True,
    group: GroupHealth | None = None,
    tracer: Tracer | None = None,
) -> Apps:
    """The two apps. ``store_upkeep=False``: no retention sweeps or stuck-row gauge in this
    process (with ``workers`` > 1 one worker runs them for the group); secret reloads run in
    every process, as each has its own keyring. ``group``: the worker group as its supervisor
    says (the worker serving the admin listener): in /healthz and /metrics. Refuses a config
    loaded without its secrets (``require_secrets``). ``tracer``: spans go there (a test's);
    by default the one ``config.tracing`` and the environment ask for (``obs.tracing``: a
    ``ConfigError`` if that needs the otel extra and it is missing), flushed at shutdown."""
    require_secrets(config)
    metrics = metrics or Metrics()
    otel = (build_tracer(config.tracing, metrics, db_system=config.store.kind.value)
            if tracer is None else None)
    tracer = tracer or otel or NO_TRACER
    proxy = web.Application(client_max_size=config.max_body_bytes + 1,
                            middlewares=[tracked, unrouted])
    shutdown = Shutdown()
    upstream = upstream or Upstreams(config.app_routes)
    keyring = Keyring(config.routes, config.upstream.signing_secrets)
    owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    pending: set[asyncio.Task[bool]] = set()
    proxy[CONFIG] = config
    proxy[METRICS] = metrics
    proxy[OWNER] = owner
    proxy[PENDING] = pending
    proxy[TRACER] = tracer
    if store is not None:
        proxy[STORE] = store
    if group is not None:
        proxy[GROUP] = group
        metrics.export_group(group)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        opened = store or await open_store(config.store, metrics)
        app[STORE] = opened
        app[PROVIDER_STATES] = opened
        notifier = build_notifier(config, opened, metrics)
        notices: Notices = notifier or NoNotices()
        app[NOTICES] = notices
        app[SIGNATURE_WATCH] = SignatureWatch(config.notify, notices)
        if notifier is not None:
            notifier.start()
        await upstream.start()
        forwarder = build_forwarder(opened, upstream, metrics, pending, keyring,
                                    clock=clock or time.time, tracer=tracer)
        app[FORWARDER] = forwarder
        holds = Holds(config.routes, opened, notices, metrics, owner)
        app[HOLDS] = holds
        await _first_read(holds)  # a paused provider is held from the first delivery
        fan_out = FanOut(opened, wake=lambda key: queue.wake(key))
        queue = QueueWorkers(config.routes, opened, forwarder, metrics, owner, pending,
                             notify=config.store.notify, clock=clock or time.time,
                             tracer=tracer, holds=holds, fan_out=fan_out)
        app[PIPELINE] = build_pipeline(config, opened, forwarder, keyring, metrics, owner=owner,
                                       clock=clock or time.time, on_queued=queue.wake,
                                       tracer=tracer, holds=holds)
        for warning in config.warnings:
            log.warning("config_warning", message=warning)
        upkeep = Maintenance(config, opened, metrics, keyring,
                             partitions=partition_keeper(config.store), notices=notices)
        background = ([asyncio.create_task(upkeep.run_store_upkeep(), name="store-upkeep")]
                      if store_upkeep else [])
        if store_upkeep:  # the process that serves /metrics: its queue gauges are current
            metrics.on_scrape = upkeep.refresh_queue_on_scrape
        background.append(asyncio.create_task(holds.run(), name="provider-states"))
        if keyring.watches_files:
            background.append(asyncio.create_task(upkeep.run_secret_reloads(),
                                                  name="secret-reloads"))
        queue.start()
        shutdown.on_begin.append(queue.stop)  # at SIGTERM: no new work taken
        try:
            yield
        finally:
            deadline = shutdown.begin(config.shutdown_timeout)  # begun by serve.stop, normally
            for task in background:
                task.cancel()
            # Queue forwards in flight may run until the deadline, like deliveries.
            await queue.finish(deadline)
            # Deliveries are done or cancelled by now; result writes they started go on.
            unfinished = set(pending)
            if unfinished:
                log.info("draining_result_writes", count=len(unfinished))
                _, abandoned = await asyncio.wait(unfinished,
                                                  timeout=shutdown.left(WRITES_GRACE))
                if abandoned:
                    log.warning("result_writes_abandoned", count=len(abandoned))
            try:
                async with asyncio.timeout(shutdown.left(CLOSE_GRACE)):
                    await asyncio.gather(*background, return_exceptions=True)
                    if notifier is not None:  # before the store its claims need is closed
                        await notifier.close(min(NOTIFY_DRAIN_BOUND,
                                                 shutdown.left(CLOSE_GRACE)))
                    await upstream.close()
                    if store is None:  # opened here, so closed here
                        await opened.close()
            except TimeoutError:
                log.warning("close_timed_out", timeout_s=CLOSE_GRACE)
            if otel is not None:  # the spans still queued, exported within the same bound
                await otel.shutdown(min(TRACE_FLUSH_BOUND, shutdown.left(CLOSE_GRACE)))

    proxy.cleanup_ctx.append(resources)
    for provider in config.providers:
        proxy.router.add_post(provider.path, delivery_handler(provider))

    admin = web.Application(middlewares=[tracked])  # its connections are bounded as well
    admin.add_routes(admin_routes(proxy))
    admin.add_subapp(INSPECTOR_PREFIX, build_inspector(proxy))  # the events inspector
    return Apps(proxy=proxy, admin=admin, shutdown=shutdown)
