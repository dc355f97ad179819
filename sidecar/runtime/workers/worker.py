"""What a worker process does before it serves: it dies with its supervisor, reads the config its
supervisor read (``config_copy``) and tags its log lines with its index."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Final

import structlog

from sidecar.config.loader import load_config_text
from sidecar.obs.logs import configure_logging
from sidecar.runtime import loop as event_loop
from sidecar.runtime.serve import WorkerSeat, serve_worker
from sidecar.runtime.workers.config_copy import read_copy
from sidecar.runtime.workers.group import EXIT_WORKER_FAILED

PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


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
    """A worker process (``python -m sidecar.cli.worker_main SEAT``): the config its supervisor
    read, served on the sockets it bound; its log lines carry its index."""
    seat = WorkerSeat.from_json(seat_json)
    if not _die_with(seat.supervisor):
        print("webhook-sidecar: worker: the supervisor is gone", file=sys.stderr)
        return EXIT_WORKER_FAILED
    config = load_config_text(read_copy(seat.config_fd), base_dir=Path(seat.config_folder),
                              source=seat.config_path)
    configure_logging(config.log_level, config.log_format)
    # Bound before the event loop starts, so every task and thread (copies of this context)
    # and every library's line carry it.
    structlog.contextvars.bind_contextvars(worker=seat.index)
    return event_loop.run(serve_worker(config, seat))
