"""SQLite adapter (stdlib ``sqlite3``): the embedded default store, correct on one host.

One connection, used from one dedicated worker thread (every call goes through a single-thread
executor), in WAL mode with ``synchronous=FULL`` so an acknowledged claim survives a crash.
Several processes on the same host may share the file: writes wait up to ``busy_timeout`` for
the lock, single statements are atomic, and the read-after-write sequences (``claim``, and
nonce binds run together) run inside ``BEGIN IMMEDIATE``. Not for a network filesystem, nor for
replicas on several hosts.
Claims, result writes and nonce binds that arrive while one of their kind is in flight are run
together when it returns, in one ``BEGIN IMMEDIATE`` transaction with one commit (one WAL fsync)
for all of them (:mod:`sidecar.store.coalesce`), each answered as if it had run alone.

Queue mode writes the event row and its queue entry together; SQLite writes one table per
statement, so each of those verbs runs a few statements (``enqueue_*.sql``, ``take_queued_*.sql``,
``settle_queued_*.sql``, ``requeue_dead_*.sql``) inside one ``BEGIN IMMEDIATE`` transaction:
nothing changes between them, and they commit or roll back together. There are no
notifications: ``listen_queue`` waits until cancelled, and workers poll.

Times are REAL seconds since the Unix epoch from SQLite's clock (millisecond resolution).
The store applies its own migrations when opened.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from sidecar.core.errors import StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued
from sidecar.store import migrations
from sidecar.store.coalesce import MAX_BATCH, Coalescer, fresh
from sidecar.store.rows import Params, event_row
from sidecar.store.sqlfiles import query, statement
from sidecar.store.verbs import SQLStore

DIALECT = "sqlite"

T = TypeVar("T")


@contextmanager
def _immediate(con: sqlite3.Connection) -> Iterator[None]:
    """An explicit write transaction: takes the database write lock up front (waiting up to the
    busy timeout), so that what is read inside it cannot change before the commit."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        _rollback(con)
        raise


def _rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        con.execute("ROLLBACK")


class SQLiteStore(SQLStore):
    """``sidecar.core.ports.Store`` on a SQLite file. Create with :meth:`open`. The verbs are
    :class:`~sidecar.store.verbs.SQLStore`'s; this class holds the connection, its worker thread
    and the claim race."""

    def __init__(self, path: str, con: sqlite3.Connection, executor: ThreadPoolExecutor,
                 deadline: float = 5.0, write_batch: int = MAX_BATCH) -> None:
        self._path = path
        self._con = con
        self._executor = executor
        self._closed = False
        # Every call, queue time included, answers within this bound (StoreError after it),
        # so a held write lock turns into prompt 503s instead of an ever longer queue.
        self._deadline = deadline
        # Concurrent claims, result writes and nonce binds run together (write_batch <= 1:
        # never).
        self._claims: Coalescer[Params, Claim] = Coalescer(
            lambda params: self._call("claim", self._claim_sync, params),
            lambda items: self._many("claim", self._claims_sync, items),
            max_batch=write_batch, wait=deadline)
        self._completes: Coalescer[Params, list[sqlite3.Row]] = Coalescer(
            lambda params: self._call("complete", self._execute, "complete", params),
            lambda items: self._many("complete", self._completes_sync, items),
            max_batch=write_batch, wait=deadline)
        self._binds: Coalescer[Params, list[sqlite3.Row]] = Coalescer(
            lambda params: self._call("bind_nonce", self._execute, "bind_nonce", params),
            lambda items: self._many("bind_nonce", self._binds_sync, items),
            max_batch=write_batch, wait=deadline)

    def __repr__(self) -> str:
        return f"<SQLiteStore {self._path!r}>"

    @property
    def path(self) -> str:
        return self._path

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, busy_timeout: float = 5.0,
                   write_batch: int = MAX_BATCH) -> SQLiteStore:
        """Open (creating if needed) and migrate the database file at ``path``.

        ``busy_timeout`` bounds how long a statement waits for another process's write lock.
        ``write_batch`` bounds how many concurrent claims (or result writes, or nonce binds)
        share one transaction; 1 runs each alone. Raises ``StoreError`` if the file cannot be
        opened or migrated.
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
        store = cls(filename, con, executor, deadline=busy_timeout + 0.5,
                    write_batch=write_batch)
        try:
            await migrations.migrate(DIALECT, _MigrationSession(store))
        except BaseException as exc:
            await store.close()
            if isinstance(exc, StoreError):
                raise StoreError(f"cannot open SQLite database {filename!r}: {exc}") from exc
            raise
        return store

    # -- the claim race --------------------------------------------------------------------

    async def _claim(self, params: Params) -> Claim:
        return await self._together(self._claims, "claim", params)

    def _claim_sync(self, params: Params) -> Claim:
        with _immediate(self._con):
            return self._claim_in_transaction(params)

    def _claims_sync(self, items: Sequence[Params]) -> list[Claim]:
        """Several claims in one transaction, in order: a later claim of a key an earlier one
        inserted finds its row and loses, as the second of two concurrent claims would."""
        with _immediate(self._con):
            return [self._claim_in_transaction(params) for params in items]

    def _claim_in_transaction(self, params: Params) -> Claim:
        inserted = self._execute("claim", params)
        if inserted:
            return Claim(won=True, row=event_row(inserted[0]))
        existing = self._execute("get", params)
        if not existing:  # impossible under the write lock; never report a claim we lack
            key = f"{params['provider']}:{params['event_id']}"
            raise sqlite3.IntegrityError(f"claim of {key} found no row")
        return Claim(won=False, row=event_row(existing[0]))

    # -- result writes ---------------------------------------------------------------------

    async def _complete(self, params: Params) -> list[sqlite3.Row]:
        return await self._together(self._completes, "complete", params)

    def _completes_sync(self, items: Sequence[Params]) -> list[list[sqlite3.Row]]:
        """Several result writes in one transaction, each fenced as complete.sql is alone."""
        with _immediate(self._con):
            return [self._execute("complete", params) for params in items]

    # -- queue mode: the row and its entry, in one transaction --------------------------------

    async def _enqueue(self, params: Params) -> Enqueued:
        return await self._call("enqueue", self._enqueue_sync, params)

    def _enqueue_sync(self, params: Params) -> Enqueued:
        with _immediate(self._con):
            if self._execute("enqueue_event", params):
                self._execute("enqueue_entry", params)
                return Enqueued(accepted=True, row=None)
            # Nothing inserted: under the write lock, either the key is there (answered as it
            # is, full queue or not) or the queue is full.
            existing = self._execute("get", params)
        if existing:
            return Enqueued(accepted=False, row=event_row(existing[0]))
        return Enqueued(accepted=False, row=None, full=True)

    async def _take_queued(self, params: Params, *, ordered: bool = False
                           ) -> list[dict[str, Any]]:
        # One writer at a time (BEGIN IMMEDIATE): takes never run together, ordered or not.
        return await self._call("take_queued", self._take_queued_sync, params)

    def _take_queued_sync(self, params: Params) -> list[dict[str, Any]]:
        """The picks, each taken (entry, then row), answered in the order picked."""
        taken: list[dict[str, Any]] = []
        with _immediate(self._con):
            for pick in self._execute("take_queued_pick", params):
                key = {**params, "event_id": pick["event_id"]}
                (entry,) = self._execute("take_queued_entry", key)
                (row,) = self._execute("take_queued_event", key)
                taken.append({
                    "event_id": row["event_id"],
                    "attempt": row["attempt"],
                    "tries": entry["tries"],
                    "round_attempts": row["attempt"] - entry["base_attempt"],
                    "queued_at": entry["queued_at"],
                    "now": row["now"],
                    "payload_body": row["payload_body"],
                    "payload_request": row["payload_request"],
                })
        return taken

    async def _settle_queued(self, params: Params) -> list[sqlite3.Row]:
        return await self._call("settle_queued", self._settle_queued_sync, params)

    def _settle_queued_sync(self, params: Params) -> list[sqlite3.Row]:
        """The fenced write of the row; only if it was written, the entry's (removed when
        done)."""
        with _immediate(self._con):
            written = self._execute("settle_queued_event", params)
            if written:
                step = "settle_queued_done" if params["state"] == "done" else "settle_queued_entry"
                self._execute(step, params)
        return written

    async def _requeue_dead(self, params: Params) -> list[sqlite3.Row]:
        return await self._call("requeue_dead", self._requeue_dead_sync, params)

    def _requeue_dead_sync(self, params: Params) -> list[sqlite3.Row]:
        """The entries re-driven, then each one's row; answered in order of acceptance."""
        with _immediate(self._con):
            entries = sorted(self._execute("requeue_dead_entries", params),
                             key=lambda entry: int(entry["seq"]))
            for entry in entries:
                self._execute("requeue_dead_event", {**params, "event_id": entry["event_id"]})
        return entries

    # -- nonce binds -----------------------------------------------------------------------

    async def _bind_nonce(self, params: Params) -> list[sqlite3.Row]:
        return await self._together(self._binds, "bind_nonce", params)

    def _binds_sync(self, items: Sequence[Params]) -> list[list[sqlite3.Row]]:
        """Several binds in one transaction, in order, each answered with the bound hash: a
        later bind of a nonce an earlier one bound gets the earlier one's hash back, as the
        second of two concurrent binds would. Under the write lock the nonce a bind did not
        insert is there to read (get_nonce.sql)."""
        with _immediate(self._con):
            return [self._execute("bind_nonce", params) or self._execute("get_nonce", params)
                    for params in items]

    # -- concurrent writes, run together ---------------------------------------------------

    async def _together(self, coalescer: Coalescer[Params, T], name: str, params: Params) -> T:
        try:
            return await coalescer(params)
        except TimeoutError as exc:  # only a waiting call's: _call translates its own
            raise StoreError(f"{name}: no answer within {self._deadline:g}s (database busy)") \
                from exc

    async def _many(self, name: str, fn: Callable[[Sequence[Params]], list[T]],
                    items: Sequence[Params]) -> list[T | BaseException]:
        """``fn(items)`` on the worker thread: every item's answer, or the same failure for
        each (the transaction was rolled back: nothing of it was written)."""
        try:
            return list(await self._call(name, fn, items))
        except StoreError as exc:
            return [fresh(exc) for _ in items]

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

    async def _rows(self, name: str, params: Params) -> list[sqlite3.Row]:
        # A single statement is its own transaction: SQLite takes the write lock before an
        # UPDATE … RETURNING reads, so the guard in its WHERE clause cannot be raced.
        return await self._call(name, self._execute, name, params)

    def _execute(self, name: str, params: Params) -> list[sqlite3.Row]:
        return self._con.execute(statement(DIALECT, name).sql, params).fetchall()

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
        for sql in migrations.split_sqlite_script(query(DIALECT, "session")):
            con.execute(sql).fetchall()
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
            (mode,) = con.execute(query(DIALECT, "journal_mode")).fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            busy = (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)


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
            await self._store._call("migrate", _rollback, con)
            raise
        await self._store._call("migrate", con.execute, "COMMIT")

    async def rows(self, name: str, params: Params) -> list[sqlite3.Row]:
        return await self._store._rows(name, params)

    async def script(self, sql: str) -> None:
        await self._store._call("migrate", _run_script, self._store._con, sql)


def _run_script(con: sqlite3.Connection, sql: str) -> None:
    """Statement by statement, inside the open transaction (``executescript`` would commit)."""
    for each in migrations.split_sqlite_script(sql):
        con.execute(each).fetchall()
