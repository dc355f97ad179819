"""SQLite adapter (stdlib ``sqlite3``): the embedded default store, correct on one host.

One connection, used from one dedicated worker thread (every call goes through a single-thread
executor), in WAL mode with ``synchronous=FULL`` so an acknowledged claim survives a crash.
Several processes on the same host may share the file: writes wait up to ``busy_timeout`` for
the lock, single statements are atomic, and the one read-after-write sequence (``claim``) runs
inside ``BEGIN IMMEDIATE``. Not for a network filesystem, nor for replicas on several hosts.

Times are REAL seconds since the Unix epoch from SQLite's clock (millisecond resolution).
The store applies its own migrations when opened.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from sidecar.core.errors import StoreError
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

DIALECT = "sqlite"

T = TypeVar("T")


def _q(name: str) -> str:
    return query(DIALECT, name)


@contextmanager
def _immediate(con: sqlite3.Connection) -> Iterator[None]:
    """An explicit write transaction: takes the database write lock up front (waiting up to the
    busy timeout), so that what is read inside it cannot change before the commit."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


class SQLiteStore:
    """``sidecar.core.ports.Store`` on a SQLite file. Create with :meth:`open`."""

    def __init__(self, path: str, con: sqlite3.Connection, executor: ThreadPoolExecutor,
                 deadline: float = 5.0) -> None:
        self._path = path
        self._con = con
        self._executor = executor
        self._closed = False
        # Every call, queue time included, answers within this bound (StoreError after it),
        # so a held write lock turns into prompt 503s instead of an ever longer queue.
        self._deadline = deadline

    def __repr__(self) -> str:
        return f"<SQLiteStore {self._path!r}>"

    @property
    def path(self) -> str:
        return self._path

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, busy_timeout: float = 5.0) -> SQLiteStore:
        """Open (creating if needed) and migrate the database file at ``path``.

        ``busy_timeout`` bounds how long a statement waits for another process's write lock.
        Raises ``StoreError`` if the file cannot be opened or migrated.
        """
        filename = os.fspath(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar-sqlite")
        loop = asyncio.get_running_loop()
        try:
            con = await loop.run_in_executor(
                executor, functools.partial(_open_sync, filename, busy_timeout)
            )
        except (sqlite3.Error, OSError) as exc:
            executor.shutdown(wait=False)
            raise StoreError(f"cannot open SQLite database {filename!r}: {exc}") from exc
        except BaseException:
            executor.shutdown(wait=False)
            raise
        # Past SQLite's own busy timeout, so a statement waiting on a lock fails cleanly (and
        # changes nothing) before the caller stops waiting for it.
        return cls(filename, con, executor, deadline=busy_timeout + 0.5)

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
        params = {
            "provider": provider,
            "event_id": event_id,
            "body_sha256": body_sha256,
            "lease_seconds": float(lease_seconds),
            "owner": owner,
            "payload_body": payload.body if payload else None,
            "payload_request": payload.meta_json() if payload else None,
        }
        return await self._call("claim", self._claim_sync, params)

    def _claim_sync(self, params: dict[str, Any]) -> Claim:
        con = self._con
        with _immediate(con):
            inserted = con.execute(_q("claim"), params).fetchall()
            if inserted:
                return Claim(won=True, row=event_row(inserted[0]))
            existing = con.execute(_q("get"), params).fetchall()
        if not existing:  # impossible under the write lock; never report a claim we lack
            key = f"{params['provider']}:{params['event_id']}"
            raise sqlite3.IntegrityError(f"claim of {key} found no row")
        return Claim(won=False, row=event_row(existing[0]))

    async def take_over(
        self, provider: str, event_id: str, lease_seconds: float, owner: str
    ) -> int | None:
        params = {
            "provider": provider,
            "event_id": event_id,
            "lease_seconds": float(lease_seconds),
            "owner": owner,
        }
        rows = await self._call("take_over", self._write_sync, "take_over", params)
        return int(rows[0]["attempt"]) if rows else None

    async def complete(
        self, provider: str, event_id: str, attempt: int, result: AttemptResult
    ) -> bool:
        params = {"provider": provider, "event_id": event_id, "attempt": attempt,
                  **result_values(result)}
        rows = await self._call("complete", self._write_sync, "complete", params)
        return bool(rows)

    async def get(self, provider: str, event_id: str) -> EventRow | None:
        params = {"provider": provider, "event_id": event_id}
        rows = await self._call("get", self._read_sync, "get", params)
        return event_row(rows[0]) if rows else None

    async def list_events(
        self,
        provider: str | None = None,
        state: EventState | None = None,
        limit: int = 100,
        older_than_seconds: float | None = None,
    ) -> list[EventRow]:
        params = {
            "provider": provider,
            "state": EventState(state).value if state is not None else None,
            "limit": limit,
            "older_than": float(older_than_seconds) if older_than_seconds is not None else None,
        }
        rows = await self._call("list_events", self._read_sync, "list_events", params)
        return [event_row(r) for r in rows]

    async def get_payload(self, provider: str, event_id: str) -> StoredRequest | None:
        params = {"provider": provider, "event_id": event_id}
        rows = await self._call("get_payload", self._read_sync, "get_payload", params)
        if not rows or rows[0]["payload_request"] is None:
            return None
        return StoredRequest.from_stored(bytes(rows[0]["payload_body"] or b""),
                                         rows[0]["payload_request"])

    async def stuck_counts(self) -> dict[str, int]:
        rows = await self._call("stuck_counts", self._read_sync, "stuck_counts", {})
        return {str(r["provider"]): int(r["stuck"]) for r in rows}

    async def release(self, provider: str, event_id: str) -> bool:
        params = {"provider": provider, "event_id": event_id}
        rows = await self._call("release", self._write_sync, "release", params)
        return bool(rows)

    async def purge(self, provider: str, older_than_seconds: float, batch_size: int) -> int:
        params = {
            "provider": provider,
            "older_than": float(older_than_seconds),
            "batch_size": batch_size,
        }
        return await self._call("purge", self._purge_sync, params)

    def _purge_sync(self, params: dict[str, Any]) -> int:
        cursor = self._con.execute(_q("purge"), params)
        return max(cursor.rowcount, 0)

    async def bind_nonce(self, provider: str, nonce: str, body_sha256: bytes) -> bytes:
        params = {"provider": provider, "nonce": nonce, "body_sha256": body_sha256}
        return await self._call("bind_nonce", self._bind_nonce_sync, params)

    def _bind_nonce_sync(self, params: dict[str, Any]) -> bytes:
        with _immediate(self._con):
            self._con.execute(_q("bind_nonce"), params)
            (bound,) = self._con.execute(_q("get_nonce"), params).fetchone()
        return bytes(bound)

    async def purge_nonces(self, provider: str, older_than_seconds: float,
                           batch_size: int) -> int:
        params = {"provider": provider, "older_than": float(older_than_seconds),
                  "batch_size": batch_size}
        return await self._call("purge_nonces", self._purge_nonces_sync, params)

    def _purge_nonces_sync(self, params: dict[str, Any]) -> int:
        return max(self._con.execute(_q("purge_nonces"), params).rowcount, 0)

    async def ping(self) -> None:
        await self._call("ping", self._read_sync, "ping", {})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._con.close)
        except sqlite3.Error as exc:
            raise StoreError(f"closing the SQLite database: {exc}") from exc
        finally:
            self._executor.shutdown(wait=False)

    # -- running on the worker thread -------------------------------------------------------

    def _read_sync(self, name: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        return self._con.execute(_q(name), params).fetchall()

    def _write_sync(self, name: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        # A single UPDATE … RETURNING is its own transaction: SQLite takes the write lock before
        # the statement reads, so the guard in its WHERE clause cannot be raced.
        return self._con.execute(_q(name), params).fetchall()

    async def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreError(f"{what}: the SQLite store is closed")
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, functools.partial(fn, *args))
        try:
            # A job still queued when the deadline passes never runs; one already running
            # finishes on the worker thread, and its outcome is unknown to the caller.
            return await asyncio.wait_for(job, self._deadline)
        except TimeoutError as exc:
            raise StoreError(f"{what}: no answer within {self._deadline:g}s (database busy)") \
                from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{what}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:  # the executor was shut down by a concurrent close()
            if self._closed:
                raise StoreError(f"{what}: the SQLite store is closed") from exc
            raise


def _open_sync(filename: str, busy_timeout: float) -> sqlite3.Connection:
    con = sqlite3.connect(
        filename,
        timeout=busy_timeout,  # sets SQLite's busy timeout
        isolation_level=None,  # autocommit; explicit BEGIN IMMEDIATE where needed
        check_same_thread=True,
    )
    try:
        con.row_factory = sqlite3.Row
        mode = _enable_wal(con, busy_timeout)
        if str(mode).lower() != "wal" and filename != ":memory:":
            raise sqlite3.OperationalError(
                f"could not switch {filename!r} to WAL mode (got {mode!r}); "
                "a network filesystem is not supported"
            )
        for statement in migrations.split_sqlite_script(_q("session")):
            con.execute(statement).fetchall()
        _migrate_sync(con)
    except BaseException:
        con.close()
        raise
    return con


def _enable_wal(con: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL (a persistent property of the file). Changing the journal mode needs an
    exclusive lock and SQLite answers SQLITE_BUSY at once, without its busy handler, while another
    connection opens the same fresh file: retry until the busy timeout is spent."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = con.execute(_q("journal_mode")).fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            busy = (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


def _migrate_sync(con: sqlite3.Connection) -> list[str]:
    """Apply pending migrations, one ``BEGIN IMMEDIATE`` transaction each, so that two processes
    opening a fresh file at once apply each migration exactly once."""
    applied: list[str] = []
    for migration in migrations.load_migrations(DIALECT):
        with _immediate(con):
            con.execute(_q("migrations_table"))
            done = {r["name"] for r in con.execute(_q("migrations_applied")).fetchall()}
            if migration.name in done:
                continue
            for statement in migrations.split_sqlite_script(migration.sql):
                con.execute(statement).fetchall()
            con.execute(_q("migration_record"), {"name": migration.name})
        applied.append(migration.name)
    return applied
