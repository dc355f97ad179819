"""PostgreSQL adapter (asyncpg): the production store, shared by any number of proxy replicas.

Every verb is one short autocommitted statement on a connection held only for that statement
(``claim`` may need a second, plain read). Invariants are enforced by the database: the primary
key arbitrates claims, guarded ``UPDATE … RETURNING`` statements arbitrate takeovers and fence
result writes by attempt, and every time comes from the database clock (``clock_timestamp()``).

The schema is applied by :func:`migrate_postgres` (``webhook-sidecar migrate``);
:meth:`PostgresStore.connect` only checks it and refuses a database that is behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from sidecar.core.errors import StoreError
from sidecar.core.events import Claim
from sidecar.store import migrations
from sidecar.store.rows import Params, event_row
from sidecar.store.sqlfiles import statement
from sidecar.store.verbs import SQLStore

DIALECT = "postgres"

# Everything the driver or the network can throw at us; translated to StoreError at the edge.
# (asyncio.TimeoutError is TimeoutError, an OSError; ConnectionError is an OSError too.)
_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)
_CLOSE_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *_DRIVER_ERRORS)
_CLOSE_GRACE = 10.0  # seconds close() waits for borrowed connections before aborting them


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


def _ms(seconds: float) -> str:
    return str(max(0, round(seconds * 1000)))


async def _no_session_state(conn: asyncpg.Connection) -> None:
    """The pool's per-release reset. The store never changes session state (no SET, LISTEN,
    cursors, session advisory locks, open transactions), so asyncpg's default reset query
    (``RESET ALL; UNLISTEN *; …``) would only add a round trip to every call."""


class PostgresStore(SQLStore):
    """``sidecar.core.ports.Store`` on PostgreSQL. Create with :meth:`connect`. The verbs are
    :class:`~sidecar.store.verbs.SQLStore`'s; this class holds the pool and the claim race."""

    def __init__(self, pool: asyncpg.Pool, *, acquire_timeout: float) -> None:
        self._pool = pool
        self._acquire_timeout = acquire_timeout

    def __repr__(self) -> str:  # never shows the DSN (it may carry a password)
        return f"<PostgresStore pool={self._pool.get_size()}/{self._pool.get_max_size()}>"

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        acquire_timeout: float = 2.0,
        statement_timeout: float = 5.0,
        lock_timeout: float = 2.0,
        command_timeout: float = 5.0,
        statement_cache_size: int = 100,
        connect_timeout: float = 5.0,
        idle_in_transaction_timeout: float = 10.0,
        session_settings: bool = True,
    ) -> PostgresStore:
        """Create the pool and check the schema version (never migrates).

        ``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_timeout`` are sent as
        connection startup parameters. Behind pgbouncer in transaction mode pass
        ``session_settings=False`` (pgbouncer rejects them; set them with ``ALTER ROLE`` instead)
        and ``statement_cache_size=0``.

        Raises ``SchemaError`` if the database lacks migrations this release needs, and
        ``StoreError`` if it cannot be reached within ``connect_timeout``.
        """
        server_settings: dict[str, str] = {"application_name": "webhook-sidecar"}
        if session_settings:
            server_settings |= {
                "statement_timeout": _ms(statement_timeout),
                "lock_timeout": _ms(lock_timeout),
                "idle_in_transaction_session_timeout": _ms(idle_in_transaction_timeout),
                # ON CONFLICT DO NOTHING waits-then-skips only at READ COMMITTED; higher levels
                # raise serialization failures instead. Pin it against a changed server default.
                "default_transaction_isolation": "read committed",
            }
        try:
            # create_pool opens min_size connections concurrently; bound the whole of it.
            async with asyncio.timeout(connect_timeout + 1.0):
                pool = await asyncpg.create_pool(
                    dsn,
                    min_size=min_size,
                    max_size=max_size,
                    command_timeout=command_timeout,
                    statement_cache_size=statement_cache_size,
                    server_settings=server_settings,
                    timeout=connect_timeout,
                    reset=_no_session_state,
                )
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {_describe(exc)}") from exc
        store = cls(pool, acquire_timeout=acquire_timeout)
        try:
            await store.check_schema()
        except BaseException:
            await store.close()
            raise
        return store

    async def check_schema(self) -> None:
        """Raise ``SchemaError`` unless every migration this release ships has been applied."""
        migrations.check_current(DIALECT, await self.applied_migrations())

    async def close(self) -> None:
        """Close the pool, waiting a bounded time for borrowed connections, then abort them."""
        if self._pool.is_closing():
            return
        try:
            async with asyncio.timeout(_CLOSE_GRACE):
                await self._pool.close()
        except _CLOSE_ERRORS:
            self._pool.terminate()

    # -- the claim race --------------------------------------------------------------------

    async def _claim(self, params: Params) -> Claim:
        for _ in range(3):
            try:
                records = await self._rows("claim", params)
            except StoreError as exc:
                # A unique violation can escape ON CONFLICT while the primary key is being
                # rebuilt concurrently (REINDEX CONCURRENTLY): someone else holds the key.
                if not isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                    raise
                records = []
            if records:
                return Claim(won=bool(records[0]["won"]), row=event_row(records[0]))
            # The competing insert committed after this statement's snapshot: read it anew.
            existing = await self._rows("get", params)
            if existing:
                return Claim(won=False, row=event_row(existing[0]))
            # The competitor rolled back or the row was purged in between: claim again.
        key = f"{params['provider']}:{params['event_id']}"
        raise StoreError(f"claim of {key} did not settle after 3 tries")

    # -- one statement on one pooled connection ---------------------------------------------

    async def _rows(self, name: str, params: Params) -> list[asyncpg.Record]:
        try:
            conn = await self._pool.acquire(timeout=self._acquire_timeout)
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"{name}: no database connection: {_describe(exc)}") from exc
        try:
            return await _fetch(conn, name, params)
        except BaseException as exc:
            if _connection_is_suspect(exc):
                # Broken socket or protocol trouble: drop the connection, so that the next
                # acquire opens a fresh one (how the pool serves again after a restart).
                conn.terminate()
            # On cancellation or command_timeout asyncpg has sent the server a cancel request;
            # release() below waits (bounded) for it and terminates the connection if it fails.
            if isinstance(exc, _DRIVER_ERRORS):
                raise StoreError(f"{name}: {_describe(exc)}") from exc
            raise
        finally:
            try:
                await self._pool.release(conn)
            except _DRIVER_ERRORS:
                conn.terminate()


async def _fetch(conn: asyncpg.Connection, name: str, params: Params) -> list[asyncpg.Record]:
    """Run ``sql/postgres/<name>.sql`` on ``conn``, its named parameters sent as ``$n``."""
    stmt = statement(DIALECT, name)
    records: list[asyncpg.Record] = await conn.fetch(stmt.sql, *stmt.positional(params))
    return records


def _connection_is_suspect(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.PostgresConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError | TimeoutError | asyncio.CancelledError):
        return False  # the server answered, or asyncpg is cancelling the statement cleanly
    return isinstance(exc, _DRIVER_ERRORS)


@asynccontextmanager
async def _single_connection(dsn: str, connect_timeout: float) -> AsyncIterator[asyncpg.Connection]:
    """One connection outside any pool (for migrations), closed within the timeout or aborted."""
    try:
        conn = await asyncpg.connect(
            dsn, timeout=connect_timeout,
            server_settings={"application_name": "webhook-sidecar migrate"},
        )
    except _DRIVER_ERRORS as exc:
        raise StoreError(f"cannot connect to PostgreSQL: {_describe(exc)}") from exc
    try:
        yield conn
    finally:
        try:
            async with asyncio.timeout(connect_timeout):
                await conn.close()
        except _CLOSE_ERRORS:
            conn.terminate()


async def migrate_postgres(dsn: str, *, connect_timeout: float = 10.0) -> list[str]:
    """Apply the pending numbered migrations, each in its own transaction under a transaction
    advisory lock (so concurrent runs are safe: the second waits, then finds nothing to do).
    Returns the names applied, in order; empty when the database is up to date."""
    async with _single_connection(dsn, connect_timeout) as conn:
        try:
            return await migrations.migrate(DIALECT, _MigrationSession(conn))
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"migration failed: {_describe(exc)}") from exc


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
        return await _fetch(self._conn, name, params)

    async def script(self, sql: str) -> None:
        await self._conn.execute(sql)  # no arguments: the simple protocol, several statements
