"""Direct database access beside a store under test: aging rows, holding locks."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import asyncpg
import pytest

from sidecar.core.ports import Store
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore


class Backdoor:
    """Direct database access beside the store under test."""

    async def backdate(self, provider: str, event_id: str, seconds: float) -> None:
        raise NotImplementedError

    def hold_write_lock(self, provider: str, event_id: str) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def backdate_nonces(self, provider: str, seconds: float) -> None:
        """Every nonce (and body-replay guard entry) of ``provider`` made ``seconds`` older."""
        raise NotImplementedError

    async def impatient_store(self) -> Store:
        """A second store on the same database that gives up on locks after ~0.2 s."""
        raise NotImplementedError


class PgBackdoor(Backdoor):
    def __init__(self, dsn: str, partition_interval: float | None = None) -> None:
        self.dsn = dsn
        self.partition_interval = partition_interval

    async def backdate(self, provider: str, event_id: str, seconds: float) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(
                "UPDATE webhook_event SET received_at = received_at - make_interval(secs => $3)"
                " WHERE provider = $1 AND event_id = $2",
                provider,
                event_id,
                float(seconds),
            )
        finally:
            await conn.close()

    async def backdate_nonces(self, provider: str, seconds: float) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(
                "UPDATE webhook_nonce SET received_at = received_at - make_interval(secs => $2)"
                " WHERE provider = $1", provider, float(seconds))
        finally:
            await conn.close()

    @asynccontextmanager
    async def hold_write_lock(self, provider: str, event_id: str) -> AsyncIterator[None]:
        conn = await asyncpg.connect(self.dsn)
        try:
            async with conn.transaction():
                locked = await conn.fetch(
                    "SELECT event_id FROM webhook_event"
                    " WHERE provider = $1 AND event_id = $2 FOR UPDATE",
                    provider,
                    event_id,
                )
                assert len(locked) == 1
                yield
        finally:
            await conn.close()

    async def impatient_store(self) -> Store:
        return await PostgresStore.connect(self.dsn, lock_timeout=0.2, statement_timeout=2.0,
                                           partition_interval=self.partition_interval)


class SqliteBackdoor(Backdoor):
    def __init__(self, path: str) -> None:
        self.path = path

    def _execute(self, sql: str, params: tuple[object, ...]) -> None:
        con = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            con.execute(sql, params)
        finally:
            con.close()

    async def backdate(self, provider: str, event_id: str, seconds: float) -> None:
        await asyncio.to_thread(
            self._execute,
            "UPDATE webhook_event SET received_at = received_at - ?"
            " WHERE provider = ? AND event_id = ?",
            (float(seconds), provider, event_id),
        )

    async def backdate_nonces(self, provider: str, seconds: float) -> None:
        await asyncio.to_thread(
            self._execute, "UPDATE webhook_nonce SET received_at = received_at - ?"
            " WHERE provider = ?", (float(seconds), provider))

    @asynccontextmanager
    async def hold_write_lock(self, provider: str, event_id: str) -> AsyncIterator[None]:
        # SQLite locks the whole database for writing; another connection's open write
        # transaction is what a second process would hold.
        con = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
        try:
            await asyncio.to_thread(con.execute, "BEGIN IMMEDIATE")
            try:
                yield
            finally:
                await asyncio.to_thread(con.execute, "ROLLBACK")
        finally:
            await asyncio.to_thread(con.close)

    async def impatient_store(self) -> Store:
        return await SQLiteStore.open(self.path, busy_timeout=0.2)


PART_INTERVAL = 60.0  # the partitioned test store's partitions: a minute each (conftest.py)
PART_AHEAD = 3


def pg_backdoor(request: pytest.FixtureRequest) -> PgBackdoor:
    """The backdoor to the server database of the test's ``store`` parameter: the partitioned
    one for ``[postgres_part]``, MariaDB's for ``[mariadb]``, else ``pg_dsn``'s."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "mariadb" in callspec.params.values():
        from tests.mariadbserver import MariaDBBackdoor

        door: PgBackdoor = MariaDBBackdoor(request.getfixturevalue("mariadb_dsn"))  # type: ignore[assignment]
        return door
    if callspec is not None and "postgres_part" in callspec.params.values():
        return PgBackdoor(request.getfixturevalue("pg_part_dsn"), PART_INTERVAL)
    return PgBackdoor(request.getfixturevalue("pg_dsn"))

