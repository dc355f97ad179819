"""Running the two listeners, and stopping them gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
from collections.abc import Awaitable
from dataclasses import asdict, dataclass
from typing import Any, Final

from aiohttp import web

from sidecar.config.model import Address, Config
from sidecar.core.workergroup import BEAT, READY, GroupHealth, beat_interval
from sidecar.http.listener import AcceptFailures, Bounds, Listener
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import Metrics
from sidecar.runtime import loop as event_loop
from sidecar.runtime.wiring import CLOSE_GRACE, UNWIND_GRACE, Apps, build_apps

log = get_logger("sidecar.serve")

# aiohttp's own wait for handlers when a runner is cleaned up. The listener has drained the
# provider-facing one already; the admin one only answers probes and operator calls.
_RUNNER_SHUTDOWN_TIMEOUT: Final = 0.25
# The last resort past CLOSE_GRACE, should the app's own cleanup overrun its deadlines.
_CLEANUP_MARGIN: Final = 0.25
# Open files the process needs besides provider connections (store, logs, listeners…).
_SPARE_FILES: Final = 64


@dataclass(frozen=True, slots=True)
class WorkerSeat:
    """What a worker process gets from its supervisor (``sidecar.runtime.workers``), as
    inherited file descriptors: its sockets, one for each address ``listen`` resolves to (and
    the admin ones, for the first worker), its end of the channel to the supervisor
    (``sidecar.core.workergroup``: it says ready and sends its heartbeat there; end of file
    means the supervisor is gone) and the config file's text as the supervisor read it (with
    the path it came from and the folder its relative paths are relative to); and the
    directory the group's metrics are kept in, and the supervisor's pid."""

    index: int
    count: int
    listen_fds: list[int]
    admin_fds: list[int] | None
    channel_fd: int
    metrics_dir: str
    config_fd: int
    config_path: str
    config_folder: str
    supervisor: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerSeat:
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class Running:
    apps: Apps
    config: Config
    proxy_runner: web.AppRunner
    listener: Listener
    admin_runner: web.AppRunner
    admin_listener: Listener | None  # None: this worker serves no admin listener
    accept_failures: AcceptFailures
    listen: Address  # as bound (a configured port 0 becomes the real one)
    admin_listen: Address | None


async def start(config: Config, *, listen_sockets: list[socket.socket] | None = None,
                admin_sockets: list[socket.socket] | None = None, serve_admin: bool = True,
                **build_kwargs: Any) -> Running:
    """Open the store and both listeners, each with its bounds (``sidecar.http.listener``): on
    ``config``'s addresses, or on sockets bound already (a worker's, from
    ``sidecar.runtime.workers``).
    ``serve_admin=False``: no admin listener (a worker other than the first);
    ``admin_listen`` is then None."""
    apps = build_apps(config, **build_kwargs)
    proxy_runner = web.AppRunner(apps.proxy, access_log=None,
                                 shutdown_timeout=_RUNNER_SHUTDOWN_TIMEOUT)
    await proxy_runner.setup()  # opens the store: fails here, before listening, if it can't
    admin_runner = web.AppRunner(apps.admin, access_log=None,
                                 shutdown_timeout=_RUNNER_SHUTDOWN_TIMEOUT)
    await admin_runner.setup()
    accept_failures = AcceptFailures()
    listener = Listener(proxy_runner, Bounds.provider(config), accept_failures)
    admin_listener = (Listener(admin_runner, Bounds.admin(config), accept_failures)
                      if serve_admin else None)
    listeners = [listener] if admin_listener is None else [listener, admin_listener]
    try:
        listen = await listener.open(listen_sockets or config.listen)
        admin = (await admin_listener.open(admin_sockets or config.admin_listen)
                 if admin_listener is not None else None)
    except BaseException:
        for opened in listeners:
            opened.close()
        await admin_runner.cleanup()
        await proxy_runner.cleanup()
        raise
    return Running(apps, config, proxy_runner, listener, admin_runner, admin_listener,
                   accept_failures, listen, admin)


async def stop(running: Running) -> None:
    """Stop on one schedule (``sidecar.runtime.wiring``): stop accepting on both listeners, let
    deliveries in progress finish until shutdown_timeout, cancel the rest, let their result
    writes finish briefly, close the app client and the store. Returns at most
    CLOSE_GRACE + _CLEANUP_MARGIN seconds after shutdown_timeout."""
    shutdown = running.apps.shutdown
    deadline = shutdown.begin(running.config.shutdown_timeout)
    running.listener.close()
    # The admin listener stops too, so no operator action starts against a closing store.
    if running.admin_listener is not None:
        running.admin_listener.close()
    admin = asyncio.create_task(_within(running.admin_runner.cleanup(),
                                        shutdown.left(UNWIND_GRACE), "admin_listener"))
    cancelled = await running.listener.drain(deadline, UNWIND_GRACE)
    if cancelled:
        log.warning("deliveries_cancelled", count=cancelled,
                    timeout_s=running.config.shutdown_timeout)
    await admin
    # Result writes, then the app client and the store (their own deadlines,
    # sidecar.runtime.wiring).
    await _within(running.proxy_runner.cleanup(), shutdown.left(CLOSE_GRACE) + _CLEANUP_MARGIN,
                  "proxy_listener")
    running.accept_failures.close()


async def _within(step: Awaitable[None], seconds: float, name: str) -> None:
    try:
        async with asyncio.timeout(seconds):
            await step
    except TimeoutError:
        log.warning("shutdown_step_timed_out", step=name, timeout_s=round(seconds, 3))


def _check_open_files(running: Running) -> None:
    """Warn when this process's connection caps (each listener's, the app's, the store's) and
    its own files could need more than its open-file limit: past it, accepts fail."""
    config = running.config
    admin = config.admin_max_connections if running.admin_listener is not None else 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    apps = sum(upstream.max_connections  # one pool per distinct upstream (``Upstreams``)
               for upstream in {p.upstream for p in config.app_routes})
    needed = (config.max_connections + admin + apps
              + config.store.pool_max_size + _SPARE_FILES)
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning("open_file_limit_low", limit=soft, needed=needed,
                    max_connections=config.max_connections, admin_max_connections=admin)


async def serve(config: Config) -> int:
    """The proxy in this process, until SIGTERM or SIGINT (``workers: 1``)."""
    running = await start(config)
    log.info("listening", listen=str(running.listen), admin_listen=str(running.admin_listen),
             store=config.store.kind, providers=[p.key for p in config.providers],
             loop=event_loop.running())
    return await _until_stopped(running, asyncio.Event())


async def serve_worker(config: Config, worker: WorkerSeat) -> int:
    """One of ``workers`` > 1 processes (``sidecar.runtime.workers``): the proxy on the listening
    socket its supervisor bound; the first worker also serves the admin listener (its /healthz
    reflecting the group, as the supervisor says) and runs the store upkeep (retention, the
    stuck-row gauge) for the group. Sends its heartbeat from its event loop from the start,
    says ready once it listens, and stops, as on SIGTERM, when the supervisor is gone (its
    channel reads end of file)."""
    first = worker.index == 0
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_unix_connection(
        sock=socket.socket(fileno=worker.channel_fd))
    heartbeat = asyncio.create_task(_beat(writer, beat_interval(config.worker_timeout)),
                                    name="heartbeat")
    group = GroupHealth(config.worker_timeout, heard_at=loop.time()) if first else None
    listen = [socket.socket(fileno=fd) for fd in worker.listen_fds]
    admin = ([socket.socket(fileno=fd) for fd in worker.admin_fds]
             if worker.admin_fds is not None else None)
    stopping = asyncio.Event()
    orphaned = False

    async def supervisor() -> None:
        """The supervisor's word on the group (to the first worker), until it is gone."""
        nonlocal orphaned
        with contextlib.suppress(ConnectionError):
            async for line in reader:
                if group is not None:
                    group.heard(line, loop.time())
        log.warning("supervisor_gone")
        orphaned = True
        stopping.set()

    try:
        running = await start(config, listen_sockets=listen, admin_sockets=admin,
                              serve_admin=first, store_upkeep=first, group=group,
                              metrics=Metrics(multiprocess_dir=worker.metrics_dir))
        log.debug("worker_ready", pid=os.getpid())
        writer.write(READY)
        listening = asyncio.create_task(supervisor(), name="supervisor")
        try:
            # SIGINT (Ctrl-C reaches the whole group) is ignored: the supervisor stops the group.
            code = await _until_stopped(running, stopping, signals=(signal.SIGTERM,))
        finally:
            listening.cancel()
    finally:
        heartbeat.cancel()
        writer.close()
    if orphaned:  # the supervisor did not live to remove it (files stay open until exit)
        shutil.rmtree(worker.metrics_dir, ignore_errors=True)
    return code


async def _beat(channel: asyncio.StreamWriter, interval: float) -> None:
    """The heartbeat: from the event loop itself, so a blocked loop or a stopped process
    cannot send it (``sidecar.runtime.workers`` replaces a worker that falls silent)."""
    while not channel.is_closing():
        channel.write(BEAT)
        await asyncio.sleep(interval)


async def _until_stopped(running: Running, stopping: asyncio.Event,
                         signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
                         ) -> int:
    _check_open_files(running)
    loop = asyncio.get_running_loop()
    for signum in signals:
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()
    log.info("shutting_down", timeout_s=running.config.shutdown_timeout)
    await stop(running)
    log.info("stopped")
    return 0
