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
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from tests.mariadbserver import ThrowawayServer

# The settings every benchmark server runs with, stated in the reports (settings()).
FLUSH_AT_COMMIT = 1
BUFFER_POOL = "256M"  # the data of a benchmark fits; PostgreSQL's shared_buffers is 128MB
LOG_FILE = "256M"  # a checkpoint is not forced by the redo log filling within a phase


class BenchMariaDB(ThrowawayServer):
    """A private ``mariadbd`` (``start``, ``kill`` then ``start`` again, ``cleanup``); every
    commit durable."""

    def __init__(self) -> None:
        super().__init__(durable=True, die_with_parent=True, options=(
            f"--innodb-buffer-pool-size={BUFFER_POOL}", f"--innodb-log-file-size={LOG_FILE}",
            f"--innodb-flush-log-at-trx-commit={FLUSH_AT_COMMIT}"))

    @property
    def pid(self) -> int:
        assert self._proc is not None, "mariadbd is not running"
        return self._proc.pid

    @property
    def log(self) -> Path:
        return self._base / "mariadbd.log"

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
