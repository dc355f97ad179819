"""The MariaDB store of the webhook-sidecar phases: a private ``mariadbd`` (bench/mariadbd.py:
every commit fsynced, as PostgreSQL's), and per phase a fresh database on it, migrated as an
operator would. Only that server is ever started, read or stopped; the shared :3306 is never
touched."""

from __future__ import annotations

import contextlib
from typing import Any

import asyncmy
from asyncmy.cursors import DictCursor

from bench.mariadbd import SETTINGS_SQL, BenchMariaDB, describe
from bench.wrk.procs import BenchError, cpu_us

# The COMMITs sent (the store's write transactions; a statement autocommitted alone, such as
# a read, is not counted, where PostgreSQL's xact_commit counts it), and the fsyncs InnoDB made
# (its redo log's and data files'): fewer fsyncs than commits is group commit at work.
COUNTERS = ("Com_commit", "Innodb_data_fsyncs")


class MariaStore:
    """A private mariadbd and, per phase, a database ``bench_wrk`` made afresh on it."""

    name = "bench_wrk"

    def __init__(self) -> None:
        self.server: BenchMariaDB | None = None
        self.conn: Any = None
        self.version = ""
        self.created = False

    def dsn(self, name: str) -> str:
        assert self.server is not None
        return f"{self.server.dsn}{name}"

    async def open(self) -> None:
        server = self.server = BenchMariaDB()
        try:
            # Not in a thread: mariadbd's parent-death signal follows the thread that forks it.
            server.start()
        except Exception as exc:  # MariaDBServerError, or no binaries at all
            raise BenchError(f"could not start a private mariadbd: {exc} (Debian: apt-get "
                             "install -y mariadb-server)", 2) from None
        self.conn = await asyncmy.connect(host="127.0.0.1", port=server.port, user="root",
                                          autocommit=True)
        [row] = await self._rows(SETTINGS_SQL)
        self.version = describe(row)

    async def _rows(self, sql: str) -> list[dict[str, Any]]:
        async with self.conn.cursor(DictCursor) as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())

    async def fresh(self) -> str:
        """An empty database for the next phase (the caller migrates it)."""
        await self.drop()
        await self._rows(f"CREATE DATABASE `{self.name}` CHARACTER SET utf8mb4")
        self.created = True
        return self.dsn(self.name)

    async def drop(self) -> None:
        if self.created:  # (IF EXISTS would log a warning when it does not)
            await self._rows(f"DROP DATABASE `{self.name}`")
            self.created = False

    async def counters(self) -> dict[str, int]:
        rows = await self._rows("SHOW GLOBAL STATUS WHERE Variable_name IN ("
                                + ", ".join(f"'{c}'" for c in COUNTERS) + ")")
        return {r["Variable_name"]: int(r["Value"]) for r in rows}

    async def cpu(self) -> dict[int, float]:
        """CPU µs of mariadbd (one process: every connection is a thread of it)."""
        assert self.server is not None
        return {self.server.pid: cpu_us(self.server.pid)}

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.drop()
            self.conn.close()
        if self.server is not None:
            self.server.cleanup()
