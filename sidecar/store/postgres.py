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
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from sidecar.core.errors import SchemaError, StoreError
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    StoredRequest,
)
from sidecar.store import migrations
from sidecar.store.rows import event_row, result_values
from sidecar.store.sqlfiles import query

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


def _q(name: str) -> str:
    return query(DIALECT, name)


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


class PostgresStore:
    """``sidecar.core.ports.Store`` on PostgreSQL. Create with :meth:`connect`."""

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
            pool = await asyncio.wait_for(
                asyncpg.create_pool(
                    dsn,
                    min_size=min_size,
                    max_size=max_size,
                    command_timeout=command_timeout,
                    statement_cache_size=statement_cache_size,
                    server_settings=server_settings,
                    timeout=connect_timeout,
                    reset=_no_session_state,
                ),
                # create_pool opens min_size connections concurrently; bound the whole of it.
                timeout=connect_timeout + 1.0,
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
        applied = await self.applied_migrations()
        needed = migrations.load_migrations(DIALECT)
        if migrations.pending(needed, applied):
            have = migrations.applied_version(applied)
            want = migrations.latest_version(needed)
            raise SchemaError(
                f"database schema is at version {have}, this release needs {want}: "
                "run `webhook-sidecar migrate`"
            )

    async def applied_migrations(self) -> set[str]:
        """Names of the migrations recorded in the database (empty for a fresh database)."""
        present = await self._fetchval("migrations_exist")
        if not present:
            return set()
        return {r["name"] for r in await self._fetch("migrations_applied")}

    # -- the Store verbs -------------------------------------------------------------------

    async def claim(
        self,
        provider: str,
        event_id: str,
        body_sha256: bytes,
        lease_seconds: float,
        owner: str,
        payload: StoredRequest | None = None,
    ) -> Claim:
        args = (
            provider, event_id, body_sha256, float(lease_seconds), owner,
            payload.body if payload else None, payload.meta_json() if payload else None,
        )
        for _ in range(3):
            try:
                records = await self._fetch("claim", *args)
            except StoreError as exc:
                # A unique violation can escape ON CONFLICT while the primary key is being
                # rebuilt concurrently (REINDEX CONCURRENTLY): someone else holds the key.
                if not isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                    raise
                records = []
            if records:
                record = records[0]
                return Claim(won=bool(record["won"]), row=event_row(record))
            # The competing insert committed after this statement's snapshot: read it anew.
            existing = await self._fetchrow("get", provider, event_id)
            if existing is not None:
                return Claim(won=False, row=event_row(existing))
            # The competitor rolled back or the row was purged in between: claim again.
        raise StoreError(f"claim of {provider}:{event_id} did not settle after 3 tries")

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        attempt = await self._fetchval("take_over", provider, event_id, float(lease_seconds), owner)
        return int(attempt) if attempt is not None else None

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        values = result_values(result)
        written = await self._fetchval(
            "complete", provider, event_id, attempt, values["state"], values["outcome"],
            values["response_status"], values["response_headers"], values["response_body"],
            values["latency_ms"])
        return written is not None

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        record = await self._fetchrow("get", provider, event_id)
        return event_row(record) if record is not None else None

    async def list_events(
        self,
        provider: str | None = None,
        state: EventState | None = None,
        limit: int = 100,
        older_than_seconds: float | None = None,
    ) -> list[EventRow]:
        state_value = EventState(state).value if state is not None else None
        older = float(older_than_seconds) if older_than_seconds is not None else None
        records = await self._fetch("list_events", provider, state_value, limit, older)
        return [event_row(r) for r in records]

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        record = await self._fetchrow("get_payload", provider, event_id)
        if record is None or record["payload_request"] is None:
            return None
        return StoredRequest.from_stored(bytes(record["payload_body"] or b""),
                                         record["payload_request"])

    async def stuck_counts(self) -> dict[str, int]:
        return {r["provider"]: int(r["stuck"]) for r in await self._fetch("stuck_counts")}

    async def release(self, provider: str, event_id: str) -> bool:
        return await self._fetchval("release", provider, event_id) is not None

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        deleted = await self._fetchval("purge", provider, float(older_than_seconds), batch_size)
        return int(deleted or 0)

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> bytes:
        for _ in range(3):
            bound = await self._fetchval("bind_nonce", provider, nonce, body_sha256)
            if bound is None:  # the competing insert committed after our snapshot
                bound = await self._fetchval("get_nonce", provider, nonce)
            if bound is not None:
                return bytes(bound)
        raise StoreError(f"nonce of {provider} did not settle after 3 tries")

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        deleted = await self._fetchval("purge_nonces", provider, float(older_than_seconds),
                                       batch_size)
        return int(deleted or 0)

    async def ping(self) -> None:
        await self._fetchval("ping")

    async def close(self) -> None:
        """Close the pool, waiting a bounded time for borrowed connections, then abort them."""
        if self._pool.is_closing():
            return
        try:
            await asyncio.wait_for(self._pool.close(), timeout=_CLOSE_GRACE)
        except _CLOSE_ERRORS:
            self._pool.terminate()

    # -- one statement on one pooled connection ---------------------------------------------

    async def _fetch(self, name: str, *args: object) -> list[asyncpg.Record]:
        return await self._run(name, "fetch", args)  # type: ignore[no-any-return]

    async def _fetchrow(self, name: str, *args: object) -> asyncpg.Record | None:
        return await self._run(name, "fetchrow", args)

    async def _fetchval(self, name: str, *args: object) -> Any:
        return await self._run(name, "fetchval", args)

    async def _run(self, name: str, method: str, args: Sequence[object]) -> Any:
        sql = _q(name)
        try:
            conn = await self._pool.acquire(timeout=self._acquire_timeout)
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"{name}: no database connection: {_describe(exc)}") from exc
        try:
            return await getattr(conn, method)(sql, *args)
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
            await asyncio.wait_for(conn.close(), timeout=connect_timeout)
        except _CLOSE_ERRORS:
            conn.terminate()


async def migrate_postgres(dsn: str, *, connect_timeout: float = 10.0) -> list[str]:
    """Apply the pending numbered migrations, each in its own transaction under a transaction
    advisory lock (so concurrent runs are safe: the second waits, then finds nothing to do).
    Returns the names applied, in order; empty when the database is up to date."""
    applied: list[str] = []
    async with _single_connection(dsn, connect_timeout) as conn:
        try:
            await _apply_migrations(conn, applied)
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"migration failed: {_describe(exc)}") from exc
    return applied


async def _apply_migrations(conn: asyncpg.Connection, applied: list[str]) -> None:
    """Each pending migration in its own transaction; ``applied`` collects the names."""
    for migration in migrations.load_migrations(DIALECT):
        async with conn.transaction():
            await conn.execute(_q("migration_lock"))
            await conn.execute(_q("migrations_table"))
            done = {r["name"] for r in await conn.fetch(_q("migrations_applied"))}
            if migration.name in done:
                continue
            await conn.execute(migration.sql)
            await conn.execute(_q("migration_record"), migration.name)
        applied.append(migration.name)


async def pending_postgres_migrations(dsn: str, *, connect_timeout: float = 10.0) -> list[str]:
    """Names of the migrations ``migrate_postgres`` would apply (read only)."""
    done: set[str] = set()
    async with _single_connection(dsn, connect_timeout) as conn:
        try:
            if await conn.fetchval(_q("migrations_exist")):
                done = {r["name"] for r in await conn.fetch(_q("migrations_applied"))}
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"cannot read the schema version: {_describe(exc)}") from exc
    return [m.name for m in migrations.pending(migrations.load_migrations(DIALECT), done)]
