"""``workers: N`` > 1: ``webhook-sidecar run`` becomes a small supervisor of N worker processes.

Each worker is ``python -m sidecar run --config FILE --worker SEAT``: the whole proxy (its own
event loop, store pool, app client, keyring and secret reloads) on a listening socket the
supervisor bound for it. What the supervisor does, and why:

- **Sockets.** It binds ``listen`` N times on one port with ``SO_REUSEPORT`` — the first socket
  picks the port when it is 0, the others bind the same one — and hands one socket to each
  worker. The kernel spreads new connections over the sockets by a hash of the peer's address
  and port, evenly, so N workers take N shares of a pool of kept-alive connections too (on one
  shared socket the worker that wakes first accepts every connection queued). Binding here
  means a port conflict is reported once, before any worker starts, and port 0 works. It closes
  its own copies once the workers have them: the sockets live as long as their worker does,
  so a worker that is gone takes no more connections. ``admin_listen`` is bound once and goes
  to worker 0 only.
- **Once for the group.** Worker 0 serves the admin listener (``/healthz``, ``/readyz``,
  ``/metrics``, ``/admin``) and runs the store upkeep (retention sweeps, the stuck-row gauge).
  Every worker re-reads secret files: each has its own keyring.
- **Metrics.** The workers write their metrics to files in a private directory the supervisor
  creates and removes (prometheus_client's multiprocess mode, ``$PROMETHEUS_MULTIPROC_DIR`` in
  the workers' environment); worker 0's ``/metrics`` renders the sum over all workers.
- **Readiness.** Each worker writes its index on a pipe once it listens; the ``listening`` line
  is logged here, once, with the real addresses, when all N have.
- **Stop.** SIGTERM or SIGINT: every worker gets SIGTERM and runs the single process's graceful
  stop (``sidecar.serve``); the group has exited ``shutdown_timeout`` + 2 s after the signal at
  most: a worker still running just before that is killed. Exit status 0.
- **A worker exits unexpectedly** (a crash, the OOM killer, SIGKILL): it is logged
  (``worker_exited``), the other workers are stopped gracefully as on SIGTERM, and the
  supervisor exits 1, so that Kubernetes (or systemd) restarts the whole pod and counts the
  restart where it is seen and alerted on, rather than a supervisor hiding a crash loop. A
  deployment runs several replicas; an event the lost worker had in flight is retried by its
  provider and taken over after its lease, as after any crash.
- **The supervisor is gone** (SIGKILL): each worker reads end of file on a pipe only the
  supervisor held open, and stops as on SIGTERM.

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
from typing import Final

import structlog

from sidecar.app import SHUTDOWN_OVERRUN
from sidecar.config.model import Address, Config
from sidecar.obs.logs import get_logger
from sidecar.obs.metrics import MULTIPROC_ENV
from sidecar.serve import WorkerSeat, serve_worker

log = get_logger("sidecar.workers")

EXIT_WORKER_FAILED: Final = 1
# Stragglers are killed this long before the group's bound, so they are reaped within it.
KILL_MARGIN: Final = 0.25
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


class _Readiness:
    """Reads worker indexes off the ready pipe; done when all have reported or the pipe is
    closed by every worker (some exited before they were ready)."""

    def __init__(self, fd: int, count: int) -> None:
        self._fd = fd
        self._buffer = b""
        self.ready: set[int] = set()
        self._count = count
        self.done = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(fd, self._read)

    def _read(self) -> None:
        data = os.read(self._fd, 4096)
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        self.ready.update(int(line) for line in lines if line.strip())
        if (len(self.ready) >= self._count or not data) and not self.done.done():
            self.done.set_result(len(self.ready) >= self._count)
        if not data or self.done.done():
            self.close()

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self._fd)


async def supervise(config: Config, config_path: str) -> int:
    """Run ``config.workers`` workers until SIGTERM/SIGINT or one of them exits (see the module
    docstring); returns the exit status."""
    count = config.workers
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    listeners = bind_listeners(config.listen, count, reuse_port=True)
    try:
        admin = bind_listeners(config.admin_listen, 1, reuse_port=False)[0]
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    listen_address, admin_address = _address(listeners[0]), _address(admin)
    metrics_dir = tempfile.mkdtemp(prefix="webhook-sidecar-metrics-")
    ready_r, ready_w = os.pipe()
    lifeline_r, lifeline_w = os.pipe()  # the write end stays here: its close is our exit
    procs: list[asyncio.subprocess.Process] = []
    env = {**os.environ, MULTIPROC_ENV: metrics_dir}
    try:
        try:
            for index, listener in enumerate(listeners):
                seat = WorkerSeat(index=index, count=count, listen_fd=listener.fileno(),
                                  admin_fd=admin.fileno() if index == 0 else None,
                                  ready_fd=ready_w, lifeline_fd=lifeline_r,
                                  metrics_dir=metrics_dir)
                fds = [seat.listen_fd, ready_w, lifeline_r]
                if seat.admin_fd is not None:
                    fds.append(seat.admin_fd)
                procs.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "sidecar", "run", "--config", config_path,
                    "--worker", seat.to_json(), pass_fds=fds, env=env,
                    stdin=asyncio.subprocess.DEVNULL))
        finally:
            # The workers hold their copies now: a socket lives as long as its worker.
            for sock in (*listeners, admin):
                sock.close()
            os.close(ready_w)
            os.close(lifeline_r)
        return await _run_group(config, procs, ready_r, stopping, listen_address,
                                admin_address)
    finally:
        for proc in procs:  # only after an error in here: _run_group reaps them all
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        os.close(ready_r)
        os.close(lifeline_w)
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _run_group(config: Config, procs: list[asyncio.subprocess.Process], ready_fd: int,
                     stopping: asyncio.Event, listen: Address, admin: Address) -> int:
    loop = asyncio.get_running_loop()
    exits = {asyncio.create_task(proc.wait()): index for index, proc in enumerate(procs)}
    stop = asyncio.create_task(stopping.wait())
    readiness = _Readiness(ready_fd, len(procs))
    try:
        done, _ = await asyncio.wait({readiness.done, stop, *exits},
                                     return_when=asyncio.FIRST_COMPLETED)
        if readiness.done in done and readiness.done.result() and not stopping.is_set():
            log.info("listening", listen=str(listen), admin_listen=str(admin),
                     store=config.store.kind, providers=[p.key for p in config.providers],
                     workers=len(procs), pids=[proc.pid for proc in procs])
            done, _ = await asyncio.wait({stop, *exits}, return_when=asyncio.FIRST_COMPLETED)
        elif readiness.done in done and not readiness.done.result():
            # Every worker closed the ready pipe unready: they are exiting. The pipe's end can
            # be read before the first exit is reaped; wait for it, so it is named as the cause.
            done, _ = await asyncio.wait({stop, *exits}, return_when=asyncio.FIRST_COMPLETED)
        # A signal, or a worker that exited on its own (while starting, or later).
        started = loop.time()
        failed = [task for task in exits if task.done()] if not stopping.is_set() else []
        code = 0
        for task in failed:
            index = exits[task]
            status = task.result()
            log.error("worker_exited", worker=index, pid=procs[index].pid,
                      **_status(status), ready=index in readiness.ready)
            code = code or (status if status > 0 else EXIT_WORKER_FAILED)
        if not failed and not readiness.done.done():
            log.info("shutting_down", timeout_s=config.shutdown_timeout, starting=True)
        elif not failed:
            log.info("shutting_down", timeout_s=config.shutdown_timeout)
        else:
            log.info("stopping_workers", timeout_s=config.shutdown_timeout)
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        running = [task for task in exits if not task.done()]
        if running:
            bound = config.shutdown_timeout + SHUTDOWN_OVERRUN - KILL_MARGIN
            _, late = await asyncio.wait(running, timeout=max(0.0, started + bound - loop.time()))
            for task in late:
                index = exits[task]
                log.warning("worker_killed", worker=index, pid=procs[index].pid,
                            timeout_s=round(bound, 3))
                with contextlib.suppress(ProcessLookupError):
                    procs[index].kill()
            if late:
                await asyncio.wait(late)
        for task, index in exits.items():
            status = task.result()
            if task not in failed and status > 0:
                log.error("worker_failed", worker=index, pid=procs[index].pid, exit_code=status)
                code = code or status
        log.info("stopped", exit_code=code)
        return code
    finally:
        readiness.close()
        stop.cancel()
        for task in exits:
            task.cancel()


def _status(returncode: int) -> dict[str, object]:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-returncode).name}
        return {"signal": -returncode}
    return {"exit_code": returncode}
