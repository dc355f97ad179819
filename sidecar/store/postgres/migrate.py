"""Applying the schema (``webhook-sidecar migrate``), on a connection of its own: the store itself
only checks it (``PostgresStore.check_schema``) and refuses a database that is behind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import asyncpg

from sidecar.core.errors import StoreError
from sidecar.store import migrations
from sidecar.store.postgres.connections import DIALECT, close_within
from sidecar.store.postgres.faults import DRIVER_ERRORS, describe
from sidecar.store.rows import Params
from sidecar.store.sqlfiles import statement


async def migrate_postgres(dsn: str, *, connect_timeout: float = 10.0) -> list[str]:
    """Apply the pending numbered migrations, each in its own transaction under a transaction
    advisory lock (so concurrent runs are safe: the second waits, then finds nothing to do).
    Returns the names applied, in order; empty when the database is up to date."""
    async with single_connection(dsn, connect_timeout, "webhook-sidecar migrate") as conn:
        try:
            return await migrations.migrate(DIALECT, _MigrationSession(conn))
        except DRIVER_ERRORS as exc:
            raise StoreError(f"migration failed: {describe(exc)}") from exc


@asynccontextmanager
async def single_connection(dsn: str, connect_timeout: float, application_name: str, *,
                            statement_cache_size: int = 100,
                            server_settings: Mapping[str, str] | None = None,
                            ) -> AsyncIterator[asyncpg.Connection]:
    """One connection outside any pool, closed within the timeout or aborted; with the store's
    ``statement_cache_size`` and startup ``server_settings`` (behind pgbouncer in transaction
    mode: 0, and none but the application name)."""
    try:
        conn = await asyncpg.connect(
            dsn, timeout=connect_timeout, statement_cache_size=statement_cache_size,
            server_settings={**(server_settings or {}), "application_name": application_name},
        )
    except DRIVER_ERRORS as exc:
        raise StoreError(f"cannot connect to PostgreSQL: {describe(exc)}") from exc
    try:
        yield conn
    finally:
        await close_within(conn, connect_timeout)


class _MigrationSession:
    """``migrations.Session`` on one connection: the lock is a transaction advisory lock,
    released at commit or rollback (so it is safe behind a pooler)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with self._conn.transaction():
            await self.rows("migration_lock", {})
            yield

    async def rows(self, name: str, params: Params) -> list[asyncpg.Record]:
        """Run ``sql/postgres/<name>.sql`` on the connection, its named parameters as ``$n``."""
        stmt = statement(DIALECT, name)
        records: list[asyncpg.Record] = await self._conn.fetch(stmt.sql,
                                                               *stmt.positional(params))
        return records

    async def script(self, sql: str) -> None:
        await self._conn.execute(sql)  # no arguments: the simple protocol, several statements
