"""A throwaway ``mariadbd`` for the benchmarks (bench.wrk, bench.chaos): the test suite's
(``tests.mariadbserver.ThrowawayServer``: a temp dir, a free loopback port, its own socket),
launched with settings fit to compare against PostgreSQL and to inject faults into.

Durability as PostgreSQL's ``synchronous_commit = on`` with ``fsync = on``: every commit's log
is written and fsynced before it is answered (``innodb_flush_log_at_trx_commit = 1``); the
binary log is off, as a fresh MariaDB has it, so ``sync_binlog`` does not apply. The process
dies with the harness (parent-death signal), and :meth:`paused` hangs it (SIGSTOP/SIGCONT).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.mariadbserver import START_TIMEOUT, MariaDBServerError, ThrowawayServer, probe
from tests.pgserver import run_sync

# The settings every benchmark server runs with, stated in the reports (settings()).
FLUSH_AT_COMMIT = 1
BUFFER_POOL = "256M"  # the data of a benchmark fits; PostgreSQL's shared_buffers is 128MB
LOG_FILE = "256M"  # a checkpoint is not forced by the redo log filling within a phase


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class BenchMariaDB(ThrowawayServer):
    """A private ``mariadbd`` (``start``, ``kill`` then ``start`` again, ``cleanup``); every
    commit durable."""

    def __init__(self) -> None:
        super().__init__(durable=True)

    @property
    def pid(self) -> int:
        assert self._proc is not None, "mariadbd is not running"
        return self._proc.pid

    @property
    def log(self) -> Path:
        return self._base / "mariadbd.log"

    def _launch(self, data: Path) -> None:
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [self._bin("mariadbd"), "--no-defaults", f"--datadir={data}",
                 "--bind-address=127.0.0.1", f"--port={self.port}",
                 f"--socket={self._base / 'mariadbd.sock'}",
                 f"--pid-file={self._base / 'pid'}", "--skip-name-resolve",
                 f"--innodb-buffer-pool-size={BUFFER_POOL}",
                 f"--innodb-log-file-size={LOG_FILE}", "--max-connections=500",
                 f"--innodb-flush-log-at-trx-commit={FLUSH_AT_COMMIT}", *self._user()],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT
        reason: str | None = "not started"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            reason = run_sync(probe(self.dsn))
            if reason is None:
                return
            time.sleep(0.2)  # polling the server's readiness, bounded by START_TIMEOUT
        tail = self.log.read_text(errors="replace")[-2000:]
        raise MariaDBServerError(f"mariadbd did not answer ({reason}): {tail}")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A hung server: SIGSTOP mariadbd (one process, all its threads), SIGCONT on the way
        out. Connections stay open and the kernel accepts new ones, but nothing answers."""
        pid = self.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


SETTINGS_SQL = ("SELECT @@version AS version, @@innodb_flush_log_at_trx_commit AS flush, "
                "@@log_bin AS log_bin, @@sync_binlog AS sync_binlog, "
                "@@innodb_buffer_pool_size AS pool")


def describe(row: dict[str, object]) -> str:
    """``SETTINGS_SQL``'s answer as the reports state it."""
    binlog = (f"binary log on, sync_binlog={row['sync_binlog']}" if int(str(row["log_bin"]))
              else "binary log off")
    return (f"MariaDB {str(row['version']).split('-')[0]} "
            f"(innodb_flush_log_at_trx_commit={row['flush']}, {binlog}, "
            f"buffer pool {int(str(row['pool'])) >> 20} MB)")
