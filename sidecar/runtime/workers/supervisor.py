"""The supervisor's loop: it binds the group's sockets, spawns a worker in every seat, then
takes the group's messages in order — a worker ready, silent, late or gone, a vacant seat's
retry, a signal — until the group stops (``stopping``). What it does with each, and why, is the
package's docstring."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from typing import Final, assert_never

from sidecar.config.model import Config
from sidecar.core.workergroup import beat_interval, retry_delay, start_deadline
from sidecar.obs.logs import get_logger
from sidecar.runtime import loop as event_loop
from sidecar.runtime.wiring import require_secrets
from sidecar.runtime.workers.config_copy import ConfigFile, config_copy
from sidecar.runtime.workers.group import Group, Message, StartFailure
from sidecar.runtime.workers.seats import Seat, Worker, address_of, bind_listeners, close_all
from sidecar.runtime.workers.stopping import close_group, how_it_ended, stop_workers

log = get_logger("sidecar.workers")

# Silent workers replaced within REPLACEMENT_WINDOW seconds before the group stops instead.
REPLACEMENTS_ALLOWED: Final = 3
REPLACEMENT_WINDOW: Final = 600.0


async def supervise(config: Config, config_file: ConfigFile) -> int:
    """Run ``config.workers`` workers until SIGTERM/SIGINT, until one of them crashes, until
    silences are too many, or until none serves any more (see the package's docstring); each
    starts from ``config_file``'s text, which ``config`` was read from. Returns the exit
    status."""
    require_secrets(config)
    loop = asyncio.get_running_loop()
    listeners = bind_listeners(config.listen, config.workers, reuse_port=True)
    try:
        admin = bind_listeners(config.admin_listen, 1, reuse_port=False)[0]
    except BaseException:
        close_all(sock for sockets in listeners for sock in sockets)
        raise
    config_fd = config_copy(config_file.text)
    metrics_dir = tempfile.mkdtemp(prefix="webhook-sidecar-metrics-")
    group = Group(config, config_file, config_fd, listeners, admin, metrics_dir)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, group.stop)
    try:
        return await run(group)
    finally:
        await close_group(group)
        os.close(config_fd)
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def run(group: Group) -> int:
    """Until a signal, a worker's crash, silences too many, or no worker left serving;
    returns the exit status."""
    for seat in group.seats:
        if not await _spawn(group, seat):  # the group's start failed
            return await stop_workers(group, failed=True, crashed=[])
    announcing = asyncio.create_task(_announce(group))
    try:
        failed, crashed = await _until_done(group)
    finally:
        announcing.cancel()
    return await stop_workers(group, failed, crashed)


async def _announce(group: Group) -> None:
    """Worker 0 hears from the supervisor at every heartbeat: silence means it is gone."""
    interval = beat_interval(group.config.worker_timeout)
    while True:
        await asyncio.sleep(interval)
        group.tell()


async def _until_done(group: Group) -> tuple[bool, list[Worker]]:
    """The messages, in order, until the group stops: (whether it failed, the workers
    whose exit made it fail)."""
    loop = asyncio.get_running_loop()
    while True:
        what, subject = await group.inbox.get()
        match what:
            case Message.STOP:
                return False, []
            case Message.RETRY:
                assert isinstance(subject, Seat)
                if not await _retry(group, subject):
                    return True, []
                continue
            case Message.READY | Message.SILENT | Message.LATE | Message.EXITED:
                assert isinstance(subject, Worker)  # taken below
            case _:
                assert_never(what)
        worker, seat = subject, group.seats[subject.seat]
        if seat.worker is not worker:  # given up on already
            if what is Message.EXITED:
                group.forget(worker)
            continue
        timeout = group.config.worker_timeout
        match what:
            case Message.READY:
                _ready(group, seat, loop.time())
            case Message.SILENT if worker.ready:
                if not await _replace(group, seat, worker, loop.time()):
                    return True, []
            case Message.EXITED if worker.ready:
                return True, [worker]  # a crash
            case Message.EXITED if not group.up:
                return True, [worker]  # the group's start failed: with the worker's status
            case Message.EXITED:
                if not _start_failed(group, seat, worker, StartFailure.EXITED):
                    return True, []
            case Message.SILENT:
                if not _start_failed(group, seat, worker, StartFailure.SILENT,
                                     timeout_s=timeout):
                    return True, []
            case Message.LATE:
                if not _start_failed(group, seat, worker, StartFailure.START_TIMEOUT,
                                     timeout_s=start_deadline(timeout)):
                    return True, []
            case _:
                assert_never(what)


def _ready(group: Group, seat: Seat, now: float) -> None:
    took = seat.serve(now)
    if took is not None:
        assert seat.worker is not None
        log.warning("worker_replaced", worker=seat.index, pid=seat.worker.pid,
                    took_s=round(took, 3))
    group.tell()
    if not group.up and all(other.served for other in group.seats):
        group.up = True
        _log_listening(group)


async def _replace(group: Group, seat: Seat, worker: Worker, now: float) -> bool:
    """Kill a silent worker and start another in its seat; False: silences are too many,
    the group stops instead."""
    group.dismiss(worker)
    while group.replacements and now - group.replacements[0] > REPLACEMENT_WINDOW:
        group.replacements.popleft()
    allowed = len(group.replacements) < REPLACEMENTS_ALLOWED
    log.error("worker_unresponsive", worker=seat.index, pid=worker.pid,
              timeout_s=group.config.worker_timeout,
              action="replace" if allowed else "stop_group",
              replaced_recently=len(group.replacements))
    if not allowed:
        return False
    group.replacements.append(now)
    group.replaced += 1
    seat.lose(now)
    return await _spawn(group, seat)


def _start_failed(group: Group, seat: Seat, worker: Worker | None, cause: StartFailure,
                  **details: object) -> bool:
    """A worker did not come to serve ``seat``. At the group's start, or when no other
    worker serves, the group stops (False). Otherwise the seat is vacant — its sockets
    closed, so no connection waits on it — and tried again after a backoff."""
    if worker is not None:
        group.dismiss(worker)
        details["pid"] = worker.pid
        if cause is StartFailure.EXITED and worker.proc.returncode is not None:
            details.update(how_it_ended(worker.proc.returncode))
            group.forget(worker)
    seat.vacate(asyncio.get_running_loop().time())
    if not group.up or not any(other.served for other in group.seats):
        log.error("worker_start_failed", worker=seat.index, cause=cause, **details,
                  action="stop_group")
        return False
    delay = retry_delay(seat.failures, group.config.worker_timeout)
    group.retry_later(seat, delay)
    log.error("worker_start_failed", worker=seat.index, cause=cause, **details,
              action="retry", retry_in_s=delay, failures=seat.failures)
    group.tell()
    return True


async def _retry(group: Group, seat: Seat) -> bool:
    """A vacant seat's next try: new sockets on the group's port, a new worker."""
    try:
        sockets = bind_listeners(group.rebind_address, 1, reuse_port=True)[0]
    except OSError as exc:
        return _start_failed(group, seat, None, StartFailure.BIND_ERROR, error=str(exc))
    seat.rebind(sockets)
    return await _spawn(group, seat)


async def _spawn(group: Group, seat: Seat) -> bool:
    """A worker started in ``seat``, or the OS's refusal taken as a start that failed
    (``_start_failed``: False when the group stops)."""
    refused = await group.spawn(seat)
    if refused is not None:
        return _start_failed(group, seat, None, StartFailure.SPAWN_ERROR, error=str(refused))
    return True


def _log_listening(group: Group) -> None:
    log.info("listening", listen=str(group.address),
             admin_listen=str(address_of(group.admin[0])), store=group.config.store.kind,
             providers=[p.key for p in group.config.providers], workers=len(group.seats),
             pids=[seat.worker.pid for seat in group.seats if seat.worker is not None],
             loop=event_loop.running())
