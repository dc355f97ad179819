"""The group: its seats, the workers it spawned into them, and what happens to them — messages
in an inbox that the supervisor's loop (``supervisor``) takes in order. Spawning a worker in a
seat, and listening to its channel (``ready``, then heartbeats), are here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections import deque
from enum import StrEnum
from typing import Final

from sidecar.config.model import Address, Config
from sidecar.core.workergroup import READY, group_message, start_deadline
from sidecar.obs.metrics import MULTIPROC_ENV, forget_process
from sidecar.runtime.serve import WorkerSeat
from sidecar.runtime.workers.config_copy import ConfigFile
from sidecar.runtime.workers.seats import Seat, Worker, address_of, close_all

EXIT_WORKER_FAILED: Final = 1
# A worker silent for worker_timeout gets this much longer to be heard (see Group._watch).
SILENCE_GRACE: Final = 0.25
WORKER_MODULE: Final = "sidecar.cli.worker_main"



class Message(StrEnum):
    """What the supervisor's loop is told, in order (``Group.inbox``)."""

    READY = "ready"  # a worker listens
    SILENT = "silent"  # a worker's heartbeat stopped for worker_timeout
    LATE = "late"  # a starting worker did not listen within its start deadline
    EXITED = "exited"  # a worker's process ended
    RETRY = "retry"  # a vacant seat's next try to start a worker is due
    STOP = "stop"  # SIGTERM or SIGINT: stop the group


class StartFailure(StrEnum):
    """Why a worker could not start: the ``cause`` of ``worker_start_failed``."""

    EXITED = "exited"
    SILENT = "silent"
    START_TIMEOUT = "start_timeout"
    SPAWN_ERROR = "spawn_error"
    BIND_ERROR = "bind_error"


class Group:
    """The workers, one per seat, and what happens to them (an inbox of messages, taken in
    order by ``supervisor.run``)."""

    def __init__(self, config: Config, config_file: ConfigFile, config_fd: int,
                 listeners: list[list[socket.socket]], admin: list[socket.socket],
                 metrics_dir: str) -> None:
        self.config = config
        self.config_file = config_file
        self.config_fd = config_fd
        self.address = address_of(listeners[0][0])  # as bound (its port: a port 0's)
        # What a vacant seat binds again: every address of ``listen``, on the group's port.
        self.rebind_address = Address(config.listen.host, self.address.port)
        self.seats = [Seat(index, sockets) for index, sockets in enumerate(listeners)]
        self.admin = admin
        self.metrics_dir = metrics_dir
        self.env = {**os.environ, MULTIPROC_ENV: metrics_dir}
        # Every worker spawned whose exit is not yet known to be handled: to stop and reap.
        self.workers: list[Worker] = []
        self.inbox: asyncio.Queue[tuple[Message, Worker | Seat | None]] = asyncio.Queue()
        self.up = False  # every seat was served once: the group is listening
        self.replaced = 0
        self.replacements: deque[float] = deque()

    async def spawn(self, seat: Seat) -> OSError | None:
        """Start a worker in ``seat``; the OS's refusal (no more processes or files, the
        interpreter gone) is returned, for the caller to decide."""
        assert seat.sockets is not None
        try:
            parent_end, child_end = socket.socketpair()
        except OSError as exc:
            return exc
        try:
            reader, writer = await asyncio.open_unix_connection(sock=parent_end)
        except BaseException:
            parent_end.close()
            child_end.close()
            raise
        try:
            admin_fds = [sock.fileno() for sock in self.admin] if seat.index == 0 else None
            handed = WorkerSeat(index=seat.index, count=len(self.seats),
                                listen_fds=[sock.fileno() for sock in seat.sockets],
                                admin_fds=admin_fds,
                                channel_fd=child_end.fileno(), metrics_dir=self.metrics_dir,
                                config_fd=self.config_fd, config_path=self.config_file.path,
                                config_folder=self.config_file.folder, supervisor=os.getpid())
            fds = [*handed.listen_fds, handed.channel_fd, handed.config_fd, *(admin_fds or [])]
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", WORKER_MODULE, handed.to_json(), pass_fds=fds,
                env=self.env, stdin=asyncio.subprocess.DEVNULL)
        except OSError as exc:
            writer.close()
            return exc
        except BaseException:
            writer.close()
            raise
        finally:
            child_end.close()  # the worker holds it now: its end of file is the worker's exit
        worker = Worker(seat.index, proc, reader, writer)
        worker.watching = asyncio.create_task(self._watch(worker))
        worker.reaping = asyncio.create_task(self._reap(worker))
        seat.fill(worker)
        self.workers.append(worker)
        self.tell()
        return None

    async def _watch(self, worker: Worker) -> None:
        """What the worker says: ``ready`` once, then its heartbeat. Silence past
        worker_timeout, once it has said anything, is a message, and so is no ``ready``
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
                    self.inbox.put_nowait((Message.LATE if late else Message.SILENT, worker))
                    return
            if not line:
                return  # its end closed: it is exiting, and _reap tells
            heard = True
            if line == READY:
                said_ready = True
                self.inbox.put_nowait((Message.READY, worker))

    async def _reap(self, worker: Worker) -> None:
        await worker.proc.wait()
        worker.writer.close()
        forget_process(self.metrics_dir, worker.pid)
        self.inbox.put_nowait((Message.EXITED, worker))

    def tell(self) -> None:
        """Worker 0's word on the group (its /healthz and /metrics), now."""
        first = self.seats[0].worker
        if first is not None and not first.dismissed and not first.writer.is_closing():
            down = [seat.index for seat in self.seats if seat.down]
            vacant = [seat.index for seat in self.seats if not seat.served and not seat.down]
            first.writer.write(group_message(down, vacant, self.replaced))

    def stop(self) -> None:
        self.inbox.put_nowait((Message.STOP, None))

    def retry_later(self, seat: Seat, delay: float) -> None:
        """A ``retry`` message for the vacant ``seat`` in ``delay`` seconds."""
        loop = asyncio.get_running_loop()
        seat.retry_at(loop.call_later(delay, self.inbox.put_nowait, (Message.RETRY, seat)))

    def forget(self, worker: Worker) -> None:
        """``worker``, given up on, has exited: nothing is left to stop or reap."""
        self.workers.remove(worker)

    @staticmethod
    def dismiss(worker: Worker) -> None:
        worker.dismissed = True
        if worker.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()

    def close_sockets(self) -> None:
        for seat in self.seats:
            seat.close()
        close_all(self.admin)


async def _read_line(reader: asyncio.StreamReader, timeout: float | None) -> bytes:
    async with asyncio.timeout(timeout):
        try:
            return await reader.readline()
        except (ConnectionError, ValueError):  # reset, or a line too long: not a worker's word
            return b""

