"""``workers: N`` > 1: ``webhook-sidecar run`` becomes a small supervisor of N worker processes.

Each worker is ``python -m sidecar run --config FILE --worker SEAT``: the whole proxy (its own
event loop, store pool, app client, keyring and secret reloads) on a listening socket the
supervisor bound for it. What the supervisor does, and why:

- **Sockets.** It binds ``listen`` N times on one port with ``SO_REUSEPORT`` — the first socket
  picks the port when it is 0, the others bind the same one — and hands one socket to each
  worker (its *seat*). The kernel spreads new connections over the sockets by a hash of the
  peer's address and port, evenly, so N workers take N shares of a pool of kept-alive
  connections too (on one shared socket the worker that wakes first accepts every connection
  queued). Binding here means a port conflict is reported once, before any worker starts, and
  port 0 works. It keeps its own copy of each socket while the group runs, so a worker that is
  replaced leaves its connections queued for its successor, and closes them all when the group
  stops. ``admin_listen`` is bound once and goes to worker 0 only.
- **Once for the group.** Worker 0 serves the admin listener (``/healthz``, ``/readyz``,
  ``/metrics``, ``/admin``) and runs the store upkeep (retention sweeps, the stuck-row gauge).
  Every worker re-reads secret files: each has its own keyring.
- **Metrics.** The workers write their metrics to files in a private directory the supervisor
  creates and removes (prometheus_client's multiprocess mode, ``$PROMETHEUS_MULTIPROC_DIR`` in
  the workers' environment); worker 0's ``/metrics`` renders the sum over all workers.
- **The channel.** Each worker has a socket pair to the supervisor
  (``sidecar.core.workergroup``): it says ``ready`` once it listens, and sends a heartbeat every
  fifth of ``worker_timeout`` from its event loop. The ``listening`` line is logged here, once,
  with the real addresses, when all N are ready. Worker 0 hears from the supervisor at the same
  pace how the group is, for its ``/healthz`` and ``/metrics``.
- **A worker falls silent** (its event loop blocked by a synchronous call or a deadlock, its
  process stopped or starved): past ``worker_timeout`` since its last heartbeat it is logged
  (``worker_unresponsive``), counted (``webhook_workers_replaced_total``), killed (SIGKILL: a
  blocked loop cannot run a graceful stop) and replaced by a new worker in its seat, on the same
  socket: the connections that queued for it meanwhile are accepted by its successor
  (``worker_replaced``). Until then worker 0's ``/healthz`` answers 503. The rest of the group
  serves on throughout, which is why a silent worker is replaced rather than the group stopped
  (as gunicorn's arbiter does with its ``timeout``): stopping would refuse every connection
  until the orchestrator restarts the pod, and a provider that does not retry (GitHub) would
  lose far more deliveries than the silent worker's share. A replacement is not allowed to hide
  a loop: a fourth silence within ten minutes stops the group with exit 1, as a crash does.
- **Stop.** SIGTERM or SIGINT: every worker gets SIGTERM and runs the single process's graceful
  stop (``sidecar.serve``); the group has exited ``shutdown_timeout`` + 2 s after the signal at
  most: a worker still running just before that is killed. Exit status 0.
- **A worker exits unexpectedly** (a crash, the OOM killer, SIGKILL from elsewhere): it is
  logged (``worker_exited``), the other workers are stopped gracefully as on SIGTERM, and the
  supervisor exits 1, so that Kubernetes (or systemd) restarts the whole pod and counts the
  restart where it is seen and alerted on, rather than a supervisor hiding a crash loop. A
  deployment runs several replicas; an event the lost worker had in flight is retried by its
  provider and taken over after its lease, as after any crash.
- **The supervisor is gone** (SIGKILL): each worker reads end of file on its channel and stops
  as on SIGTERM. **The supervisor is silent** (stopped): worker 0's ``/healthz`` answers 503
  past ``worker_timeout``, since no one would replace a silent worker.

Worker log lines carry ``worker`` (the index); the supervisor's do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal

import structlog

from sidecar.app import SHUTDOWN_OVERRUN
from sidecar.config.model import Address, Config
from sidecar.core.workergroup import READY, beat_interval, group_message
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import MULTIPROC_ENV
from sidecar.serve import WorkerSeat, serve_worker

log = get_logger("sidecar.workers")

EXIT_WORKER_FAILED: Final = 1
# Stragglers are killed this long before the group's bound, so they are reaped within it.
KILL_MARGIN: Final = 0.25
# A worker silent for worker_timeout gets this much longer to be heard (see _Group._watch).
SILENCE_GRACE: Final = 0.25
# Silent workers replaced within REPLACEMENT_WINDOW seconds before the group stops instead.
REPLACEMENTS_ALLOWED: Final = 3
REPLACEMENT_WINDOW: Final = 600.0
_BACKLOG: Final = 100  # asyncio's default for create_server


def bind_listeners(address: Address, count: int, *, reuse_port: bool) -> list[socket.socket]:
    """``count`` listening sockets on ``address`` (the first address it resolves to), all on the
    port the first one gets (``reuse_port``, needed for more than one)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        address.host, address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # as asyncio binds: IPv6 only
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(sockaddr)
            sockaddr = sock.getsockname()  # a port 0 is now the port the others bind
            sock.listen(_BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _address(sock: socket.socket) -> Address:
    host, port = sock.getsockname()[:2]
    return Address(str(host), int(port))


def run_worker(config: Config, seat_json: str) -> int:
    """A worker process (``run --worker SEAT``): its log lines carry its index."""
    seat = WorkerSeat.from_json(seat_json)
    # Bound before the event loop starts, so every task and thread (copies of this context)
    # and every library's line carry it.
    structlog.contextvars.bind_contextvars(worker=seat.index)
    return asyncio.run(serve_worker(config, seat))


@dataclass(eq=False)
class _Worker:
    """A worker process in its seat, and the supervisor's end of its channel."""

    seat: int
    proc: asyncio.subprocess.Process
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    ready: bool = False
    silent: bool = False  # killed for missing its heartbeat: its exit is no failure
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid


Happening = Literal["ready", "silent", "exited", "stop"]


class _Group:
    """The workers, one per seat, and what happens to them (a queue of happenings, taken in
    order by :meth:`run`)."""

    def __init__(self, config: Config, config_path: str, listeners: list[socket.socket],
                 admin: socket.socket, metrics_dir: str) -> None:
        self.config = config
        self.config_path = config_path
        self.listeners = listeners
        self.admin = admin
        self.metrics_dir = metrics_dir
        self.env = {**os.environ, MULTIPROC_ENV: metrics_dir}
        self.seats: list[_Worker | None] = [None] * len(listeners)
        self.everyone: list[_Worker] = []
        self.happenings: asyncio.Queue[tuple[Happening, _Worker | None]] = asyncio.Queue()
        self.down: dict[int, float] = {}  # seat → when its worker was found silent
        self.replaced = 0
        self.replacements: deque[float] = deque()

    async def spawn(self, seat: int) -> None:
        ours, theirs = socket.socketpair()
        try:
            chair = WorkerSeat(index=seat, count=len(self.seats),
                               listen_fd=self.listeners[seat].fileno(),
                               admin_fd=self.admin.fileno() if seat == 0 else None,
                               channel_fd=theirs.fileno(), metrics_dir=self.metrics_dir)
            fds = [chair.listen_fd, chair.channel_fd]
            if chair.admin_fd is not None:
                fds.append(chair.admin_fd)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sidecar", "run", "--config", self.config_path,
                "--worker", chair.to_json(), pass_fds=fds, env=self.env,
                stdin=asyncio.subprocess.DEVNULL)
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker holds it now: its end of file is the worker's exit
        worker = _Worker(seat, proc, reader, writer)
        worker.tasks = [asyncio.create_task(self._watch(worker)),
                        asyncio.create_task(self._reap(worker))]
        self.seats[seat] = worker
        self.everyone.append(worker)
        if seat == 0:
            self.tell()

    async def _watch(self, worker: _Worker) -> None:
        """What the worker says: ``ready`` once, then its heartbeat. Silence past
        worker_timeout, once it has said anything, is a happening. Before that it is only
        starting (importing, reading its config), and its exit would tell."""
        timeout: float | None = None
        while True:
            try:
                line = await _read_line(worker.reader, timeout)
            except TimeoutError:
                # One more look: after this process was itself stopped or starved, the timer
                # and the worker's words buffered meanwhile are due together, and the timer
                # must not win.
                try:
                    line = await _read_line(worker.reader, SILENCE_GRACE)
                except TimeoutError:
                    self.happenings.put_nowait(("silent", worker))
                    return
            if not line:
                return  # its end closed: it is exiting, and _reap tells
            timeout = self.config.worker_timeout
            if line == READY:
                self.happenings.put_nowait(("ready", worker))

    async def _reap(self, worker: _Worker) -> None:
        await worker.proc.wait()
        worker.writer.close()
        self.happenings.put_nowait(("exited", worker))

    def tell(self) -> None:
        """Worker 0's word on the group (its /healthz and /metrics), now."""
        first = self.seats[0]
        if first is not None and not first.silent and not first.writer.is_closing():
            first.writer.write(group_message(list(self.down), self.replaced))

    async def announce(self) -> None:
        """Worker 0 hears from the supervisor at every heartbeat: silence means it is gone."""
        interval = beat_interval(self.config.worker_timeout)
        while True:
            await asyncio.sleep(interval)
            self.tell()

    def stop(self) -> None:
        self.happenings.put_nowait(("stop", None))

    async def run(self) -> int:
        """Until a signal, a worker's exit, or silences too many; returns the exit status."""
        loop = asyncio.get_running_loop()
        for seat in range(len(self.seats)):
            await self.spawn(seat)
        announcing = asyncio.create_task(self.announce())
        listening = False
        failed: list[_Worker] = []
        try:
            while True:
                what, worker = await self.happenings.get()
                if what == "stop":
                    break
                assert worker is not None
                current = self.seats[worker.seat] is worker
                if what == "ready" and current:
                    worker.ready = True
                    self._ready(worker, loop.time())
                    if not listening and all(w is not None and w.ready for w in self.seats):
                        listening = True
                        self._log_listening()
                elif what == "silent" and current and worker.proc.returncode is None:
                    if not await self._replace(worker, loop.time()):
                        failed.append(worker)
                        break
                elif what == "exited" and not worker.silent:
                    failed.append(worker)
                    break
        finally:
            announcing.cancel()
        return await self._stop(failed, listening)

    def _ready(self, worker: _Worker, now: float) -> None:
        found = self.down.pop(worker.seat, None)
        if found is not None:
            log.warning("worker_replaced", worker=worker.seat, pid=worker.pid,
                        took_s=round(now - found, 3))
            self.tell()

    async def _replace(self, worker: _Worker, now: float) -> bool:
        """Kill a silent worker and start another in its seat; False: silences are too many,
        the group stops instead."""
        worker.silent = True
        with contextlib.suppress(ProcessLookupError):
            worker.proc.kill()
        while self.replacements and now - self.replacements[0] > REPLACEMENT_WINDOW:
            self.replacements.popleft()
        allowed = len(self.replacements) < REPLACEMENTS_ALLOWED
        log.error("worker_unresponsive", worker=worker.seat, pid=worker.pid,
                  timeout_s=self.config.worker_timeout,
                  action="replace" if allowed else "stop_group",
                  replaced_recently=len(self.replacements))
        if not allowed:
            return False
        self.replacements.append(now)
        self.replaced += 1
        self.down[worker.seat] = now
        self.tell()
        await self.spawn(worker.seat)
        return True

    def _log_listening(self) -> None:
        log.info("listening", listen=str(_address(self.listeners[0])),
                 admin_listen=str(_address(self.admin)), store=self.config.store.kind,
                 providers=[p.key for p in self.config.providers], workers=len(self.seats),
                 pids=[w.pid for w in self.seats if w is not None])

    async def _stop(self, failed: list[_Worker], listening: bool) -> int:
        """Every worker stopped gracefully, within shutdown_timeout + 2 s of now."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Exits already known name their cause too (several workers that could not start).
        while failed and not self.happenings.empty():
            what, worker = self.happenings.get_nowait()
            if what == "exited" and worker is not None and not worker.silent:
                failed.append(worker)
        # No new connection waits on a socket whose worker is stopping.
        for sock in (*self.listeners, self.admin):
            sock.close()
        code = 0
        for worker in failed:
            if worker.silent:  # silent once too often: killed already
                code = code or EXIT_WORKER_FAILED
                continue
            status = worker.proc.returncode
            assert status is not None
            log.error("worker_exited", worker=worker.seat, pid=worker.pid, **_status(status),
                      ready=worker.ready)
            code = code or (status if status > 0 else EXIT_WORKER_FAILED)
        if not failed and not listening:
            log.info("shutting_down", timeout_s=self.config.shutdown_timeout, starting=True)
        elif not failed:
            log.info("shutting_down", timeout_s=self.config.shutdown_timeout)
        else:
            log.info("stopping_workers", timeout_s=self.config.shutdown_timeout)
        for worker in self.everyone:
            if worker.proc.returncode is None and not worker.silent:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGTERM)
        reaping = {worker.tasks[1]: worker for worker in self.everyone}
        running = [task for task in reaping if not task.done()]
        if running:
            bound = self.config.shutdown_timeout + SHUTDOWN_OVERRUN - KILL_MARGIN
            _, late = await asyncio.wait(running, timeout=max(0.0, started + bound - loop.time()))
            for task in late:
                worker = reaping[task]
                log.warning("worker_killed", worker=worker.seat, pid=worker.pid,
                            timeout_s=round(bound, 3))
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
            if late:
                await asyncio.wait(late)
        for worker in self.everyone:
            status = worker.proc.returncode
            if worker not in failed and not worker.silent and status is not None and status > 0:
                log.error("worker_failed", worker=worker.seat, pid=worker.pid, exit_code=status)
                code = code or status
        log.info("stopped", exit_code=code)
        return code

    async def close(self) -> None:
        """After an error in here: no worker left running. Then every task and file."""
        for worker in self.everyone:
            if worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                await worker.proc.wait()
            for task in worker.tasks:
                task.cancel()
            worker.writer.close()
        for sock in (*self.listeners, self.admin):
            sock.close()


async def _read_line(reader: asyncio.StreamReader, timeout: float | None) -> bytes:
    async with asyncio.timeout(timeout):
        try:
            return await reader.readline()
        except (ConnectionError, ValueError):  # reset, or a line too long: not a worker's word
            return b""


async def supervise(config: Config, config_path: str) -> int:
    """Run ``config.workers`` workers until SIGTERM/SIGINT, until one of them exits, or until
    silences are too many (see the module docstring); returns the exit status."""
    loop = asyncio.get_running_loop()
    listeners = bind_listeners(config.listen, config.workers, reuse_port=True)
    try:
        admin = bind_listeners(config.admin_listen, 1, reuse_port=False)[0]
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    metrics_dir = tempfile.mkdtemp(prefix="webhook-sidecar-metrics-")
    group = _Group(config, config_path, listeners, admin, metrics_dir)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, group.stop)
    try:
        return await group.run()
    finally:
        await group.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _status(returncode: int) -> dict[str, object]:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-returncode).name}
        return {"signal": -returncode}
    return {"exit_code": returncode}
