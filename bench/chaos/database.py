"""The private database server of one chaos run, PostgreSQL or MariaDB, behind the few verbs
the harness needs: start it with an empty database, hang it, crash and restart it, open a
plain session on it (the faults' and the checker's), and tear it down.

PostgreSQL: an ``initdb`` cluster (``tests.pgserver.ThrowawayCluster``), fsync on only where
it is crashed. MariaDB: a ``mariadbd`` (``bench.mariadbd``), every commit fsynced in every
scenario. Neither ever touches a shared server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncmy
import asyncpg
from asyncmy.cursors import DictCursor

from bench.chaos.settings import DATABASE
from bench.mariadbd import SETTINGS_SQL, BenchMariaDB, describe
from tests.mariadbserver import create_database as create_mariadb_database
from tests.pgserver import ThrowawayCluster, create_database

STORES = ("postgres", "mariadb")

# "Now" in each store's terms: PostgreSQL's lease_until is a timestamptz, MariaDB's a
# DECIMAL of epoch seconds (docs/design.md, "MySQL and MariaDB").
NOW = {"postgres": "clock_timestamp()", "mariadb": "UNIX_TIMESTAMP(NOW(6))"}


class Session:
    """One plain connection, autocommitted unless in :meth:`transaction`; parameters as the
    driver spells them (``$1`` on PostgreSQL, ``%s`` on MariaDB)."""

    def __init__(self, store: str, conn: Any) -> None:
        self.store, self.conn = store, conn

    async def fetch(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        if self.store == "postgres":
            return [tuple(r) for r in await self.conn.fetch(sql, *args)]
        async with self.conn.cursor() as cur:
            await cur.execute(sql, args or None)
            return [tuple(r) for r in await cur.fetchall()]

    async def value(self, sql: str, *args: object) -> Any:
        rows = await self.fetch(sql, *args)
        return rows[0][0] if rows else None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A transaction rolled back on the way out (the faults only hold locks)."""
        if self.store == "postgres":
            tx = self.conn.transaction()
            await tx.start()
            try:
                yield
            finally:
                await tx.rollback()
            return
        await self.conn.begin()
        try:
            yield
        finally:
            with contextlib.suppress(asyncmy.errors.Error, OSError):
                await self.conn.rollback()

    async def close(self) -> None:
        if self.store == "postgres":
            await self.conn.close()
        else:
            self.conn.close()


class Database:
    """The run's server and its database ``sidecar_chaos`` (empty: the run migrates it)."""

    def __init__(self, store: str, tmp: Path, *, fsync: bool) -> None:
        self.store = store
        self.cluster: ThrowawayCluster | None = None
        self.server: BenchMariaDB | None = None
        if store == "postgres":
            self.cluster = ThrowawayCluster(tmp / "pg", fsync=fsync)
        else:
            self.server = BenchMariaDB()
        self.dsn = ""
        self.description = ""  # MariaDB: its version and durability settings, once started

    async def start(self) -> str:
        """Start the server, create the database; its DSN."""
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.start)
            self.dsn = await create_database(self.cluster.dsn, DATABASE)
        else:
            assert self.server is not None
            await asyncio.to_thread(self.server.start)
            self.dsn = await create_mariadb_database(self.server.dsn, DATABASE)
            session = await self.session("chaos-version")
            try:
                async with session.conn.cursor(DictCursor) as cur:
                    await cur.execute(SETTINGS_SQL)
                    self.description = describe(await cur.fetchone())
            finally:
                await session.close()
        return self.dsn

    def processes(self) -> int:
        """How many processes a hang stops (the postmaster and its children; mariadbd)."""
        return len(self.cluster.pids()) if self.cluster is not None else 1

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP the server's processes, SIGCONT them on the way out."""
        server = self.cluster if self.cluster is not None else self.server
        assert server is not None
        with server.paused():
            yield

    async def crash(self) -> None:
        """A crash, no checkpoint: ``pg_ctl stop -m immediate``; SIGKILL of mariadbd."""
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.stop, "immediate")
        else:
            assert self.server is not None
            await asyncio.to_thread(self.server.kill)

    async def restart(self) -> None:
        """Start again on the same data and port (crash recovery)."""
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.start)
        else:
            assert self.server is not None
            await asyncio.to_thread(self.server.start)

    async def session(self, name: str) -> Session:
        """A connection to the database, named ``name`` where the server keeps names."""
        if self.store == "postgres":
            conn = await asyncpg.connect(self.dsn, timeout=5,
                                         server_settings={"application_name": name})
            return Session(self.store, conn)
        assert self.server is not None
        conn = await asyncmy.connect(host="127.0.0.1", port=self.server.port, user="root",
                                     db=DATABASE, autocommit=True, connect_timeout=5)
        return Session(self.store, conn)

    async def cleanup(self) -> None:
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.cleanup)
        if self.server is not None:
            await asyncio.to_thread(self.server.cleanup)
