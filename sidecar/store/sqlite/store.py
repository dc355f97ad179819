"""``SQLiteStore``: the verbs on SQLite, each call a job on the store's worker thread within the
deadline."""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sidecar.core.errors import StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued, Replayed
from sidecar.store import migrations
from sidecar.store.coalesce import MAX_BATCH, Coalescer
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
    and the writes run together: one coalescer for claims, result writes and nonce binds alike,
    since the worker thread runs one transaction at a time whatever its kind
    (:mod:`~sidecar.store.sqlite.transactions` runs the verbs of more than one statement)."""

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
        # Concurrent claims, result writes, nonce binds, enqueues and settles run together,
        # whatever their kinds, in one transaction (write_batch <= 1: never); the observer
        # hears of each kind's part.
        self._observer = observer or Unobserved()
        self._together: Coalescer[transactions.Write, Any] = Coalescer(
            self._write_alone, self._write_together, max_batch=write_batch, wait=deadline)
        self._claims = SentCounts()
        self._completes = SentCounts()
        self._binds = SentCounts()
        self._enqueues = SentCounts()
        self._settles = SentCounts()
        self._counts = {"claim": self._claims, "complete": self._completes,
                        "bind_nonce": self._binds, "enqueue": self._enqueues,
                        "settle_queued": self._settles}

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

    async def _claim(self, params: Params) -> Claim | Replayed:
        claim: Claim | Replayed = await self._write("claim", params)
        return claim

    async def _complete(self, params: Params) -> list[sqlite3.Row]:
        written: list[sqlite3.Row] = await self._write("complete", params)
        return written

    async def _bind_nonce(self, params: Params) -> list[sqlite3.Row]:
        bound: list[sqlite3.Row] = await self._write("bind_nonce", params)
        return bound

    async def _enqueue(self, params: Params) -> Enqueued:
        enqueued: Enqueued = await self._write("enqueue", params)
        return enqueued

    async def _take_queued(self, params: Params, *, ordered: bool = False
                           ) -> list[dict[str, Any]]:
        # One writer at a time (BEGIN IMMEDIATE): takes never run together, ordered or not.
        return await self._call("take_queued", transactions.take_queued, self._con, params)

    async def _settle_queued(self, params: Params) -> list[sqlite3.Row]:
        settled: list[sqlite3.Row] = await self._write("settle_queued", params)
        return settled

    async def _requeue_dead(self, params: Params) -> list[sqlite3.Row]:
        return await self._call("requeue_dead", transactions.requeue_dead, self._con, params)

    # -- concurrent writes, run together ---------------------------------------------------

    async def _write(self, verb: str, params: Params) -> Any:
        try:
            return await self._together(transactions.Write(verb, params))
        except TimeoutError as exc:  # only a waiting call's: _call translates its own
            raise StoreError(f"{verb}: no answer within {self._deadline:g}s (database busy)") \
                from exc

    async def _write_alone(self, write: transactions.Write) -> Any:
        """One write with nothing waiting beside it: its own statement(s), at once."""
        verb, params = write
        self._counts[verb].singles += 1
        self._observer.statement_sent(verb, 1)
        if verb == "claim":
            return await self._call(verb, transactions.claim, self._con, params)
        if verb == "complete":
            return await self._call(verb, transactions.complete, self._con, params)
        if verb == "enqueue":
            return await self._call(verb, transactions.enqueue, self._con, params)
        if verb == "settle_queued":
            return await self._call(verb, transactions.settle_queued, self._con, params)
        return await self._rows(verb, params)  # bind_nonce.sql, a statement of its own

    async def _write_together(self, writes: Sequence[transactions.Write]) -> list[Any]:
        """The writes that waited, in one transaction on the worker thread: each one's answer,
        its own failure (rolled back alone), or the same failure for each (the transaction was
        lost: nothing of it was written)."""
        verbs = collections.Counter(verb for verb, _ in writes)
        for verb, calls in verbs.items():
            counts = self._counts[verb]
            counts.batches += 1
            counts.batched += calls
            self._observer.statement_sent(verb, calls)
        try:
            answers = await self._call("+".join(verbs), transactions.together, self._con,
                                       writes)
        except StoreError as exc:  # each caller hears it as its own verb's
            reason = str(exc).partition(": ")[2]
            return [_named(type(exc)(f"{verb}: {reason}"), exc.__cause__) for verb, _ in writes]
        return [_failure(verb, answer) if isinstance(answer, sqlite3.Error) else answer
                for (verb, _), answer in zip(writes, answers, strict=True)]

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


class SentCounts:
    """How one kind of coalesced write went out: calls alone (``singles``), the shared
    transactions it had a part in (``batches``) and its calls in them (``batched``)."""

    def __init__(self) -> None:
        self.singles = 0
        self.batches = 0
        self.batched = 0


def _failure(verb: str, exc: sqlite3.Error) -> StoreError:
    """A write that failed alone inside a shared transaction, as ``_call`` would say it."""
    return _named(StoreError(f"{verb}: {type(exc).__name__}: {exc}"), exc)


def _named(error: StoreError, cause: BaseException | None) -> StoreError:
    error.__cause__ = cause
    return error


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
