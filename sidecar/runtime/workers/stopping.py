"""Stopping the group: every worker gets SIGTERM and runs the single process's graceful stop, and
the group has exited within ``shutdown_timeout`` + 2 s (a worker still running just before is
killed); after an error in the supervisor, no worker is left running."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Final

from sidecar.obs.logs import get_logger
from sidecar.runtime.wiring import SHUTDOWN_OVERRUN
from sidecar.runtime.workers.group import EXIT_WORKER_FAILED, Group, Message
from sidecar.runtime.workers.seats import Worker

log = get_logger("sidecar.workers")

# Stragglers are killed this long before the group's bound, so they are reaped within it.
KILL_MARGIN: Final = 0.25


async def stop_workers(group: Group, failed: bool, crashed: list[Worker]) -> int:
    """Every worker stopped gracefully, within shutdown_timeout + 2 s of now."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    # Exits already known name their cause too (several workers that could not start).
    while crashed and not group.inbox.empty():
        what, subject = group.inbox.get_nowait()
        if what is Message.EXITED and isinstance(subject, Worker) and not subject.dismissed:
            crashed.append(subject)
    # No new connection waits on a socket whose worker is stopping.
    group.close_sockets()
    code = EXIT_WORKER_FAILED if failed else 0
    for worker in crashed:
        status = worker.proc.returncode
        assert status is not None
        log.error("worker_exited", worker=worker.seat, pid=worker.pid, **how_it_ended(status),
                  ready=worker.ready)
    if crashed:
        status = crashed[0].proc.returncode
        code = status if status is not None and status > 0 else EXIT_WORKER_FAILED
    if not failed and not group.up:
        log.info("shutting_down", timeout_s=group.config.shutdown_timeout, starting=True)
    elif not failed:
        log.info("shutting_down", timeout_s=group.config.shutdown_timeout)
    else:
        log.info("stopping_workers", timeout_s=group.config.shutdown_timeout)
    for worker in group.workers:
        if worker.proc.returncode is None and not worker.dismissed:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
    reaping = {worker.reaping: worker for worker in group.workers}
    running = [task for task in reaping if not task.done()]
    if running:
        bound = group.config.shutdown_timeout + SHUTDOWN_OVERRUN - KILL_MARGIN
        _, late = await asyncio.wait(running, timeout=max(0.0, started + bound - loop.time()))
        for task in late:
            worker = reaping[task]
            log.warning("worker_killed", worker=worker.seat, pid=worker.pid,
                        timeout_s=round(bound, 3))
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
        if late:
            await asyncio.wait(late)
    for worker in group.workers:
        status = worker.proc.returncode
        if (worker not in crashed and not worker.dismissed and status is not None
                and status > 0):
            log.error("worker_failed", worker=worker.seat, pid=worker.pid, exit_code=status)
            code = code or status
    log.info("stopped", exit_code=code)
    return code


async def close_group(group: Group) -> None:
    """After the supervisor's loop (an error in it too): no worker left running. Then every
    task and file."""
    for worker in group.workers:
        if worker.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
            await worker.proc.wait()
        worker.watching.cancel()
        worker.reaping.cancel()
        worker.writer.close()
    group.close_sockets()


def how_it_ended(returncode: int) -> dict[str, object]:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return {"signal": signal.Signals(-returncode).name}
        return {"signal": -returncode}
    return {"exit_code": returncode}
