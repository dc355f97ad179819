"""``workers: N`` > 1: ``webhook-sidecar run`` becomes a small supervisor of N worker processes.

Each worker is ``python -m sidecar.runtime.worker_main SEAT``: the whole proxy (its own event loop,
store pool, app client, keyring and secret reloads) on a socket the supervisor bound for it.
What the supervisor does, and why:

- **The config, once.** The supervisor reads the config file once, and every worker, a
  replacement too, starts from those bytes (an anonymous in-memory file, inherited), whatever
  the file says by then: Kubernetes updates a mounted ConfigMap in place, and a group must not
  serve two configurations, nor stop because the file broke meanwhile. A changed file takes
  effect at the next start of the group. Secret files are read by each worker, and re-read
  while it runs (rotation), as in a single process.
- **Sockets.** It binds ``listen`` N times on one port with ``SO_REUSEPORT`` — the first socket
  picks the port when it is 0, the others bind the same one — and hands one socket to each
  worker (its *seat*). A socket starts listening when its worker opens its listener (accept
  queue ``SOMAXCONN``), so no connection waits on a seat whose worker never listened: the
  kernel spreads new connections over the listening sockets by a hash of the peer's address
  and port, evenly, so N workers take N shares of a pool of kept-alive connections too (on one
  shared socket the worker that wakes first accepts every connection queued). Binding here
  means a port conflict is reported once, before any worker starts, and port 0 works. It keeps
  its own copy of each socket while the group runs, so a worker that is replaced leaves the
  connections queued on its socket for its successor, and closes them all when the group
  stops. ``admin_listen`` is bound once and goes to worker 0 only.
- **Once for the group.** Worker 0 serves the admin listener (``/healthz``, ``/readyz``,
  ``/metrics``, ``/admin``) and runs the store upkeep (retention sweeps, the stuck-row gauge).
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
  (``worker_replaced``). Until then the seat is *down* and worker 0's ``/healthz`` answers 503.
  The rest of the group serves on throughout, which is why a silent worker is replaced rather
  than the group stopped (as gunicorn's arbiter does with its ``timeout``): stopping would
  refuse every connection until the orchestrator restarts the pod, and a provider that does not
  retry (GitHub) would lose far more deliveries than the silent worker's share. A replacement
  is not allowed to hide a loop: a fourth silence within ten minutes stops the group with exit
  1, as a crash does.
- **A worker cannot start** — the OS refuses to start its process (no more processes, no more
  files, the interpreter gone), or it exits before it listens (the store unavailable, say), or
  it has not said ready within ten ``worker_timeout``s (``core.workergroup.start_deadline``): at
  the group's start, the group stops (exit 1, or the worker's own status), as a single process
  that cannot start does. Later, while another worker serves, its seat becomes *vacant*
  (``worker_start_failed``, ``action: retry``): its socket is closed, so the kernel gives its
  share of connections to the other workers (during a store outage they answer 503, the
  documented outage answer, rather than leaving connections to hang), and the seat is tried
  again — a new socket, a new worker — after a backoff doubling from 1 s to twice
  ``worker_timeout``, for as long as it takes. A vacant seat is no reason for /healthz to fail
  (a restarted pod could not start either; it lists the seat); when no worker serves any more,
  the group stops (exit 1).
- **Stop.** SIGTERM or SIGINT (Ctrl-C reaches every process of the group; the workers ignore
  it): every worker gets SIGTERM and runs the single process's graceful stop
  (``sidecar.runtime.serve``); the group has exited ``shutdown_timeout`` + 2 s after the signal at
  most: a worker still running just before that is killed. Exit status 0.
- **A worker exits unexpectedly** after it listened (a crash, the OOM killer, SIGKILL from
  elsewhere): it is logged (``worker_exited``), the other workers are stopped gracefully as on
  SIGTERM, and the supervisor exits 1, so that Kubernetes (or systemd) restarts the whole pod
  and counts the restart where it is seen and alerted on, rather than a supervisor hiding a
  crash loop. A deployment runs several replicas; an event the lost worker had in flight is
  retried by its provider and taken over after its lease, as after any crash.
- **The supervisor is gone** (SIGKILL, the OOM killer): on Linux each worker is killed with it
  (``PR_SET_PDEATHSIG``), a stopped or wedged one too, so no orphan keeps a socket on the port;
  as when the supervisor is PID 1 of a container, whose end takes every process of the
  container with it. Elsewhere a worker reads end of file on its channel and stops as on
  SIGTERM. **The supervisor is silent** (stopped): worker 0's ``/healthz`` answers 503 past
  ``worker_timeout``, since no one would replace a silent worker.

Worker log lines carry ``worker`` (the index); the supervisor's do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import structlog

from sidecar.config.loader import load_config_text
from sidecar.config.model import Address, Config
from sidecar.core.workergroup import (
    READY,
    beat_interval,
    group_message,
    retry_delay,
    start_deadline,
)
from sidecar.obs.logs import configure_logging, get_logger
from sidecar.obs.metrics import MULTIPROC_ENV
from sidecar.runtime.serve import WorkerSeat, serve_worker
from sidecar.runtime.wiring import SHUTDOWN_OVERRUN, require_secrets

log = get_logger("sidecar.workers")

EXIT_WORKER_FAILED: Final = 1
# Stragglers are killed this long before the group's bound, so they are reaped within it.
KILL_MARGIN: Final = 0.25
# A worker silent for worker_timeout gets this much longer to be heard (see _Group._watch).
SILENCE_GRACE: Final = 0.25
# Silent workers replaced within REPLACEMENT_WINDOW seconds before the group stops instead.
REPLACEMENTS_ALLOWED: Final = 3
REPLACEMENT_WINDOW: Final = 600.0
PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
WORKER_MODULE: Final = "sidecar.runtime.worker_main"


def bind_listeners(address: Address, count: int, *, reuse_port: bool) -> list[socket.socket]:
    """``count`` sockets bound to ``address`` (the first address it resolves to), all on the
    port the first one gets (``reuse_port``, needed for more than one). They do not listen yet:
    each does once the worker it is handed to opens its listener."""
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
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _address(sock: socket.socket) -> Address:
    host, port = sock.getsockname()[:2]
    return Address(str(host), int(port))


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """The config file as the supervisor read it, once: its text, the path it was read from
    (named in messages) and the folder its relative paths are relative to."""

    text: str
    path: str
    folder: str


def _config_copy(text: str) -> int:
    """A file descriptor of an anonymous file holding ``text``, for the workers to inherit: in
    memory on Linux (memfd), an unlinked temporary file elsewhere; never a copy of the config,
    inline secrets and all, on disk under a name."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("webhook-sidecar-config", os.MFD_CLOEXEC)
    else:
        fd, path = tempfile.mkstemp(prefix="webhook-sidecar-config-")
        os.unlink(path)
    with open(fd, "wb", closefd=False) as copy:
        copy.write(text.encode())
    return fd


def _read_copy(fd: int) -> str:
    """What ``_config_copy`` wrote. Every worker shares the descriptor's offset, so it is read
    by position."""
    size = os.fstat(fd).st_size
    data = b""
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return data.decode()


def _die_with(parent: int) -> bool:
    """Have the kernel SIGKILL this process when its parent dies (Linux), so that a worker
    stopped or wedged cannot outlive its supervisor and keep its socket; then whether the
    parent is still ``parent`` (it may have died before). Elsewhere the worker stops when its
    channel reads end of file."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return os.getppid() == parent


def run_worker(seat_json: str) -> int:
    """A worker process (``python -m sidecar.runtime.worker_main SEAT``): the config its supervisor
    read, served on the sockets it bound; its log lines carry its index."""
    seat = WorkerSeat.from_json(seat_json)
    if not _die_with(seat.supervisor):
        print("webhook-sidecar: worker: the supervisor is gone", file=sys.stderr)
        return EXIT_WORKER_FAILED
    config = load_config_text(_read_copy(seat.config_fd), base_dir=Path(seat.config_folder),
                              source=seat.config_path)
    configure_logging(config.log_level, config.log_format)
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
    # Given up on (silent, or its start failed): killed if need be; its exit is no failure.
    dismissed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass(eq=False)
class _Seat:
    """A place in the group: its socket, and the worker serving it (or starting in it)."""

    index: int
    sock: socket.socket | None  # None: closed, while the seat is vacant until its next try
    worker: _Worker | None = None
    listening: bool = False  # a worker listened on the socket: connections queue on it
    lost_at: float | None = None  # when it lost its worker; None while it has one serving
    failures: int = 0  # its worker's starts that failed in a row
    retry: asyncio.TimerHandle | None = None

    @property
    def served(self) -> bool:
        return self.worker is not None and self.worker.ready

    @property
    def down(self) -> bool:
        """Connections wait on its socket for a worker that does not accept them (yet)."""
        return self.listening and not self.served


Happening = Literal["ready", "silent", "late", "exited", "retry", "stop"]
StartFailure = Literal["exited", "silent", "start_timeout", "spawn_error", "bind_error"]
# What a happening to a worker that has not said ready yet means.
_START_FAILURES: Final[dict[Happening, StartFailure]] = {
    "exited": "exited", "silent": "silent", "late": "start_timeout"}


class _Group:
    """The workers, one per seat, and what happens to them (a queue of happenings, taken in
    order by :meth:`run`)."""

    def __init__(self, config: Config, config_file: ConfigFile, config_fd: int,
                 listeners: list[socket.socket], admin: socket.socket, metrics_dir: str) -> None:
        self.config = config
        self.config_file = config_file
        self.config_fd = config_fd
        self.address = _address(listeners[0])  # as bound: a vacant seat binds it again
        self.seats = [_Seat(index, sock) for index, sock in enumerate(listeners)]
        self.admin = admin
        self.metrics_dir = metrics_dir
        self.env = {**os.environ, MULTIPROC_ENV: metrics_dir}
        self.everyone: list[_Worker] = []
        self.happenings: asyncio.Queue[tuple[Happening, _Worker | _Seat | None]] = \
            asyncio.Queue()
        self.up = False  # every seat was served once: the group is listening
        self.replaced = 0
        self.replacements: deque[float] = deque()

    async def spawn(self, seat: _Seat) -> OSError | None:
        """Start a worker in ``seat``; the OS's refusal (no more processes or files, the
        interpreter gone) is returned, for the caller to decide."""
        assert seat.sock is not None
        try:
            ours, theirs = socket.socketpair()
        except OSError as exc:
            return exc
        try:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        try:
            chair = WorkerSeat(index=seat.index, count=len(self.seats),
                               listen_fd=seat.sock.fileno(),
                               admin_fd=self.admin.fileno() if seat.index == 0 else None,
                               channel_fd=theirs.fileno(), metrics_dir=self.metrics_dir,
                               config_fd=self.config_fd, config_path=self.config_file.path,
                               config_folder=self.config_file.folder, supervisor=os.getpid())
            fds = [chair.listen_fd, chair.channel_fd, chair.config_fd]
            if chair.admin_fd is not None:
                fds.append(chair.admin_fd)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", WORKER_MODULE, chair.to_json(), pass_fds=fds,
                env=self.env, stdin=asyncio.subprocess.DEVNULL)
        except OSError as exc:
            writer.close()
            return exc
        except BaseException:
            writer.close()
            raise
        finally:
            theirs.close()  # the worker holds it now: its end of file is the worker's exit
        worker = _Worker(seat.index, proc, reader, writer)
        worker.tasks = [asyncio.create_task(self._watch(worker)),
                        asyncio.create_task(self._reap(worker))]
        seat.worker = worker
        self.everyone.append(worker)
        self.tell()
        return None

    async def _watch(self, worker: _Worker) -> None:
        """What the worker says: ``ready`` once, then its heartbeat. Silence past
        worker_timeout, once it has said anything, is a happening, and so is no ``ready``
        within the start deadline. Before its first word it is only starting (importing,
        reading its config), and its exit would tell."""
        loop = asyncio.get_running_loop()
        ready_by = loop.time() + start_deadline(self.config.worker_timeout)
        heard = said_ready = False
        while True:
            timeout = self.config.worker_timeout if heard else None
            if not said_ready:
                left = max(0.0, ready_by - loop.time())
                timeout = left if timeout is None else min(timeout, left)
            try:
                line = await _read_line(worker.reader, timeout)
            except TimeoutError:
                # One more look: after this process was itself stopped or starved, the timer
                # and the worker's words buffered meanwhile are due together, and the timer
                # must not win.
                try:
                    line = await _read_line(worker.reader, SILENCE_GRACE)
                except TimeoutError:
                    late = not said_ready and loop.time() >= ready_by
                    self.happenings.put_nowait(("late" if late else "silent", worker))
                    return
            if not line:
                return  # its end closed: it is exiting, and _reap tells
            heard = True
            if line == READY:
                said_ready = True
                self.happenings.put_nowait(("ready", worker))

    async def _reap(self, worker: _Worker) -> None:
        await worker.proc.wait()
        worker.writer.close()
        self.happenings.put_nowait(("exited", worker))

    def tell(self) -> None:
        """Worker 0's word on the group (its /healthz and /metrics), now."""
        first = self.seats[0].worker
        if first is not None and not first.dismissed and not first.writer.is_closing():
            down = [seat.index for seat in self.seats if seat.down]
            vacant = [seat.index for seat in self.seats if not seat.served and not seat.down]
            first.writer.write(group_message(down, vacant, self.replaced))

    async def announce(self) -> None:
        """Worker 0 hears from the supervisor at every heartbeat: silence means it is gone."""
        interval = beat_interval(self.config.worker_timeout)
        while True:
            await asyncio.sleep(interval)
            self.tell()

    def stop(self) -> None:
        self.happenings.put_nowait(("stop", None))

    async def run(self) -> int:
        """Until a signal, a worker's crash, silences too many, or no worker left serving;
        returns the exit status."""
        for seat in self.seats:
            refused = await self.spawn(seat)
            if refused is not None:
                self._start_failed(seat, None, "spawn_error", error=str(refused))
                return await self._stop(failed=True, crashed=[])
        announcing = asyncio.create_task(self.announce())
        try:
            failed, crashed = await self._until_done()
        finally:
            announcing.cancel()
        return await self._stop(failed, crashed)

    async def _until_done(self) -> tuple[bool, list[_Worker]]:
        """The happenings, in order, until the group stops: (whether it failed, the workers
        whose exit made it fail)."""
        loop = asyncio.get_running_loop()
        while True:
            what, subject = await self.happenings.get()
            if what == "stop":
                return False, []
            if isinstance(subject, _Seat):  # "retry"
                subject.retry = None
                if not await self._retry(subject):
                    return True, []
                continue
            assert subject is not None
            worker, seat = subject, self.seats[subject.seat]
            if seat.worker is not worker:  # given up on already
                if what == "exited":
                    self.everyone.remove(worker)  # and gone: nothing left to stop or reap
                continue
            if what == "ready":
                worker.ready = True
                self._ready(seat, worker, loop.time())
            elif worker.ready and what == "silent":
                if not await self._replace(seat, worker, loop.time()):
                    return True, []
            elif worker.ready and what == "exited":
                return True, [worker]  # a crash
            elif what == "exited" and not self.up:
                return True, [worker]  # the group's start failed: with the worker's status
            elif what in _START_FAILURES:
                cause = _START_FAILURES[what]
                timeout = (start_deadline(self.config.worker_timeout)
                           if cause == "start_timeout" else self.config.worker_timeout)
                details = {} if cause == "exited" else {"timeout_s": timeout}
                if not self._start_failed(seat, worker, cause, **details):
                    return True, []

    def _ready(self, seat: _Seat, worker: _Worker, now: float) -> None:
        seat.listening = True
        seat.failures = 0
        if seat.lost_at is not None:
            log.warning("worker_replaced", worker=seat.index, pid=worker.pid,
                        took_s=round(now - seat.lost_at, 3))
            seat.lost_at = None
        self.tell()
        if not self.up and all(other.served for other in self.seats):
            self.up = True
            self._log_listening()

    async def _replace(self, seat: _Seat, worker: _Worker, now: float) -> bool:
        """Kill a silent worker and start another in its seat; False: silences are too many,
        the group stops instead."""
        self._dismiss(worker)
        while self.replacements and now - self.replacements[0] > REPLACEMENT_WINDOW:
            self.replacements.popleft()
        allowed = len(self.replacements) < REPLACEMENTS_ALLOWED
        log.error("worker_unresponsive", worker=seat.index, pid=worker.pid,
                  timeout_s=self.config.worker_timeout,
                  action="replace" if allowed else "stop_group",
                  replaced_recently=len(self.replacements))
        if not allowed:
            return False
        self.replacements.append(now)
        self.replaced += 1
        seat.worker = None
        seat.lost_at = now
        refused = await self.spawn(seat)
        if refused is not None:
            return self._start_failed(seat, None, "spawn_error", error=str(refused))
        return True

    def _start_failed(self, seat: _Seat, worker: _Worker | None, cause: StartFailure,
                      **details: object) -> bool:
        """A worker did not come to serve ``seat``. At the group's start, or when no other
        worker serves, the group stops (False). Otherwise the seat is vacant — its socket
        closed, so no connection waits on it — and tried again after a backoff."""
        loop = asyncio.get_running_loop()
        if worker is not None:
            self._dismiss(worker)
            details["pid"] = worker.pid
            if cause == "exited" and worker.proc.returncode is not None:
                details.update(_status(worker.proc.returncode))
                self.everyone.remove(worker)  # gone: nothing left to stop or reap
        seat.worker = None
        if seat.sock is not None:
            seat.sock.close()  # connections queued on it are refused: none waits for no one
            seat.sock = None
            seat.listening = False
        seat.failures += 1
        if seat.lost_at is None:
            seat.lost_at = loop.time()
        if not self.up or not any(other.served for other in self.seats):
            log.error("worker_start_failed", worker=seat.index, cause=cause, **details,
                      action="stop_group")
            return False
        delay = retry_delay(seat.failures, self.config.worker_timeout)
        seat.retry = loop.call_later(delay, self.happenings.put_nowait, ("retry", seat))
        log.error("worker_start_failed", worker=seat.index, cause=cause, **details,
                  action="retry", retry_in_s=delay, failures=seat.failures)
        self.tell()
        return True

    async def _retry(self, seat: _Seat) -> bool:
        """A vacant seat's next try: a new socket on the group's port, a new worker."""
        try:
            seat.sock = bind_listeners(self.address, 1, reuse_port=True)[0]
        except OSError as exc:
            return self._start_failed(seat, None, "bind_error", error=str(exc))
        refused = await self.spawn(seat)
        if refused is not None:
            return self._start_failed(seat, None, "spawn_error", error=str(refused))
        return True

    @staticmethod
    def _dismiss(worker: _Worker) -> None:
        worker.dismissed = True
        if worker.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()

    def _log_listening(self) -> None:
        log.info("listening", listen=str(self.address),
                 admin_listen=str(_address(self.admin)), store=self.config.store.kind,
                 providers=[p.key for p in self.config.providers], workers=len(self.seats),
                 pids=[seat.worker.pid for seat in self.seats if seat.worker is not None])

    def _close_sockets(self) -> None:
        for seat in self.seats:
            if seat.retry is not None:
                seat.retry.cancel()
            if seat.sock is not None:
                seat.sock.close()
        self.admin.close()

    async def _stop(self, failed: bool, crashed: list[_Worker]) -> int:
        """Every worker stopped gracefully, within shutdown_timeout + 2 s of now."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Exits already known name their cause too (several workers that could not start).
        while crashed and not self.happenings.empty():
            what, subject = self.happenings.get_nowait()
            if what == "exited" and isinstance(subject, _Worker) and not subject.dismissed:
                crashed.append(subject)
        # No new connection waits on a socket whose worker is stopping.
        self._close_sockets()
        code = EXIT_WORKER_FAILED if failed else 0
        for worker in crashed:
            status = worker.proc.returncode
            assert status is not None
            log.error("worker_exited", worker=worker.seat, pid=worker.pid, **_status(status),
                      ready=worker.ready)
        if crashed:
            status = crashed[0].proc.returncode
            code = status if status is not None and status > 0 else EXIT_WORKER_FAILED
        if not failed and not self.up:
            log.info("shutting_down", timeout_s=self.config.shutdown_timeout, starting=True)
        elif not failed:
            log.info("shutting_down", timeout_s=self.config.shutdown_timeout)
        else:
            log.info("stopping_workers", timeout_s=self.config.shutdown_timeout)
        for worker in self.everyone:
            if worker.proc.returncode is None and not worker.dismissed:
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
            if (worker not in crashed and not worker.dismissed and status is not None
                    and status > 0):
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
        self._close_sockets()


async def _read_line(reader: asyncio.StreamReader, timeout: float | None) -> bytes:
    async with asyncio.timeout(timeout):
        try:
            return await reader.readline()
        except (ConnectionError, ValueError):  # reset, or a line too long: not a worker's word
            return b""


async def supervise(config: Config, config_file: ConfigFile) -> int:
    """Run ``config.workers`` workers until SIGTERM/SIGINT, until one of them crashes, until
    silences are too many, or until none serves any more (see the module docstring); each
    starts from ``config_file``'s text, which ``config`` was read from. Returns the exit
    status."""
    require_secrets(config)
    loop = asyncio.get_running_loop()
    listeners = bind_listeners(config.listen, config.workers, reuse_port=True)
    try:
        admin = bind_listeners(config.admin_listen, 1, reuse_port=False)[0]
    except BaseException:
        for sock in listeners:
            sock.close()
        raise
    config_fd = _config_copy(config_file.text)
    metrics_dir = tempfile.mkdtemp(prefix="webhook-sidecar-metrics-")
    group = _Group(config, config_file, config_fd, listeners, admin, metrics_dir)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, group.stop)
    try:
        return await group.run()
    finally:
        await group.close()
        os.close(config_fd)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _status(returncode: int) -> dict[str, object]:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-returncode).name}
        return {"signal": -returncode}
    return {"exit_code": returncode}
