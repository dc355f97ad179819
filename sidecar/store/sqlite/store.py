"""``SQLiteStore``: the verbs on SQLite, each call a job on the store's worker thread within the
deadline."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sidecar.core.errors import StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued
from sidecar.store import migrations
from sidecar.store.coalesce import MAX_BATCH, Coalescer, fresh
from sidecar.store.observer import StoreObserver, Unobserved
from sidecar.store.rows import Params
from sidecar.store.sqlite import transactions
from sidecar.store.sqlite.connection import (
    DIALECT,
    execute,
    open_connection,
    rollback,
    run_script,
)
from sidecar.store.verbs import SQLStore

T = TypeVar("T")


class SQLiteStore(SQLStore):
    """``sidecar.core.ports.Store`` on a SQLite file. Create with :meth:`open`. The verbs are
    :class:`~sidecar.store.verbs.SQLStore`'s; this class holds the connection, its worker thread
    and the writes run together (:mod:`~sidecar.store.sqlite.transactions` runs the verbs of
    more than one statement)."""

    def __init__(self, path: str, con: sqlite3.Connection, executor: ThreadPoolExecutor,
                 deadline: float = 5.0, write_batch: int = MAX_BATCH,
                 observer: StoreObserver | None = None) -> None:
        self._path = path
        self._con = con
        self._executor = executor
        self._closed = False
        # Every call, queue time included, answers within this bound (StoreError after it),
        # so a held write lock turns into prompt 503s instead of an ever longer queue.
        self._deadline = deadline
        # Concurrent claims, result writes, nonce binds, enqueues and settles run together
        # (write_batch <= 1: never); the observer hears of each statement's size.
        self._observer = observer or Unobserved()
        self._claims = self._writes(
            "claim", lambda params: self._call("claim", transactions.claim, self._con, params),
            transactions.claims, write_batch)
        self._completes = self._writes(
            "complete",
            lambda params: self._call("complete", transactions.complete, self._con, params),
            transactions.completes,
            write_batch)
        self._binds = self._writes(
            "bind_nonce", lambda params: self._rows("bind_nonce", params), transactions.binds,
            write_batch)
        self._enqueues = self._writes(
            "enqueue",
            lambda params: self._call("enqueue", transactions.enqueue, self._con, params),
            transactions.enqueues, write_batch)
        self._settles = self._writes(
            "settle_queued",
            lambda params: self._call("settle_queued", transactions.settle_queued, self._con,
                                      params),
            transactions.settles, write_batch)

    def __repr__(self) -> str:
        return f"<SQLiteStore {self._path!r}>"

    @property
    def path(self) -> str:
        return self._path

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, busy_timeout: float = 5.0,
                   write_batch: int = MAX_BATCH,
                   observer: StoreObserver | None = None) -> SQLiteStore:
        """Open (creating if needed) and migrate the database file at ``path``.

        ``busy_timeout`` bounds how long a statement waits for another process's write lock.
        ``write_batch`` bounds how many concurrent claims (or result writes, or nonce binds)
        share one transaction; 1 runs each alone. ``observer`` hears of each coalesced
        write's statements (default: no one). Raises ``StoreError`` if the file cannot be
        opened or migrated.
        """
        filename = os.fspath(path)
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecar-sqlite")
        loop = asyncio.get_running_loop()
        try:
            con = await loop.run_in_executor(
                executor, functools.partial(open_connection, filename, busy_timeout)
            )
        except (sqlite3.Error, OSError) as exc:
            executor.shutdown(wait=False)
            raise StoreError(f"cannot open SQLite database {filename!r}: {exc}") from exc
        except BaseException:
            executor.shutdown(wait=False)
            raise
        # Past SQLite's own busy timeout, so a statement waiting on a lock fails cleanly (and
        # changes nothing) before the caller stops waiting for it.
        store = cls(filename, con, executor, deadline=busy_timeout + 0.5,
                    write_batch=write_batch, observer=observer)
        try:
            await migrations.migrate(DIALECT, _MigrationSession(store))
        except BaseException as exc:
            await store.close()
            if isinstance(exc, StoreError):
                raise StoreError(f"cannot open SQLite database {filename!r}: {exc}") from exc
            raise
        return store

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

    # -- the verbs' statements --------------------------------------------------------------

    async def _rows(self, name: str, params: Params) -> list[sqlite3.Row]:
        # A single statement is its own transaction: SQLite takes the write lock before an
        # UPDATE … RETURNING reads, so the guard in its WHERE clause cannot be raced.
        return await self._call(name, execute, self._con, name, params)

    async def _claim(self, params: Params) -> Claim:
        return await self._together(self._claims, "claim", params)

    async def _complete(self, params: Params) -> list[sqlite3.Row]:
        return await self._together(self._completes, "complete", params)

    async def _bind_nonce(self, params: Params) -> list[sqlite3.Row]:
        return await self._together(self._binds, "bind_nonce", params)

    async def _enqueue(self, params: Params) -> Enqueued:
        return await self._together(self._enqueues, "enqueue", params)

    async def _take_queued(self, params: Params, *, ordered: bool = False
                           ) -> list[dict[str, Any]]:
        # One writer at a time (BEGIN IMMEDIATE): takes never run together, ordered or not.
        return await self._call("take_queued", transactions.take_queued, self._con, params)

    async def _settle_queued(self, params: Params) -> list[sqlite3.Row]:
        return await self._together(self._settles, "settle_queued", params)

    async def _requeue_dead(self, params: Params) -> list[sqlite3.Row]:
        return await self._call("requeue_dead", transactions.requeue_dead, self._con, params)

    # -- concurrent writes, run together ---------------------------------------------------

    def _writes(self, name: str, one: Callable[[Params], Awaitable[T]],
                many: Callable[[sqlite3.Connection, Sequence[Params]], list[T]],
                write_batch: int) -> Coalescer[Params, T]:
        """``name``'s calls, run together while one is in flight: ``one`` alone, ``many`` in
        one transaction."""
        return Coalescer(one, lambda items: self._many(name, many, items),
                         max_batch=write_batch, wait=self._deadline,
                         sent=functools.partial(self._observer.statement_sent, name))

    async def _together(self, coalescer: Coalescer[Params, T], name: str, params: Params) -> T:
        try:
            return await coalescer(params)
        except TimeoutError as exc:  # only a waiting call's: _call translates its own
            raise StoreError(f"{name}: no answer within {self._deadline:g}s (database busy)") \
                from exc

    async def _many(self, name: str, fn: Callable[[sqlite3.Connection, Sequence[Params]], list[T]],
                    items: Sequence[Params]) -> list[T | BaseException]:
        """``fn(items)`` on the worker thread: every item's answer, or the same failure for
        each (the transaction was rolled back: nothing of it was written)."""
        try:
            return list(await self._call(name, fn, self._con, items))
        except StoreError as exc:
            return [fresh(exc) for _ in items]

    # -- running on the worker thread -------------------------------------------------------

    async def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreClosed(f"{what}: the SQLite store is closed")
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, functools.partial(fn, *args))
        try:
            # A job still queued when the deadline passes never runs; one already running
            # finishes on the worker thread, and its outcome is unknown to the caller.
            # (asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
            # that arrives as the job finishes, and a cancelled caller would carry on.)
            async with asyncio.timeout(self._deadline):
                return await job
        except TimeoutError as exc:
            raise StoreError(f"{what}: no answer within {self._deadline:g}s (database busy)") \
                from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{what}: {type(exc).__name__}: {exc}") from exc
        except RuntimeError as exc:  # the executor was shut down by a concurrent close()
            if self._closed:
                raise StoreClosed(f"{what}: the SQLite store is closed") from exc
            raise


class _MigrationSession:
    """``migrations.Session`` on the store's connection, each step a call on its worker thread.
    The lock is SQLite's write lock, taken up front by ``BEGIN IMMEDIATE``, so that two processes
    opening a fresh file at once apply each migration exactly once."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        con = self._store._con
        await self._store._call("migrate", con.execute, "BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            await self._store._call("migrate", rollback, con)
            raise
        await self._store._call("migrate", con.execute, "COMMIT")

    async def rows(self, name: str, params: Params) -> list[sqlite3.Row]:
        return await self._store._rows(name, params)

    async def script(self, sql: str) -> None:
        await self._store._call("migrate", run_script, self._store._con, sql)
