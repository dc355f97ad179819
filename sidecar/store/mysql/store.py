"""``MySQLStore``: the verbs on MySQL 8 / MariaDB 10.6+ (one server, or a Galera cluster's
nodes) over an asyncmy pool.

MySQL has no ``RETURNING`` on ``UPDATE`` (MariaDB neither; MySQL on nothing), so a verb that
writes and answers is a short transaction of a few statements: a guarded write whose matched-row
count decides (the connections ask for found rows, ``CLIENT_FOUND_ROWS``: an ``UPDATE`` counts
the rows its ``WHERE`` matched, not the rows whose values changed), then a read of what it
wrote. An insert that must not overwrite is a plain ``INSERT`` whose duplicate-key error
(ER_DUP_ENTRY, 1062) means "the key exists"; never ``INSERT IGNORE`` (it turns other errors
into warnings) nor an affected-row count of ``ON DUPLICATE KEY UPDATE`` (1, 2 or 0, and 1 for
an unchanged row under found rows). The semantics, verb by verb: docs/design.md, "MySQL and
MariaDB". The verbs' statements are in ``event_writes``, ``provider_writes`` and
``queue_writes``; this class holds the pool and runs each call: within its deadline, again
when it lost a deadlock or (Galera) a certification, its errors as ``StoreError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncmy
from asyncmy.cursors import DictCursor

from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued, Replayed
from sidecar.store import migrations
from sidecar.store.coalesce import Coalescer
from sidecar.store.mysql import event_writes, provider_writes, queue_writes
from sidecar.store.mysql.connections import check, derived, open_pool, pin
from sidecar.store.mysql.galera import Cluster
from sidecar.store.mysql.migrate import migrate_mysql, split_script
from sidecar.store.mysql.outage import Outage
from sidecar.store.mysql.session import DIALECT, RUN_PRIVILEGES, Target, parse_url
from sidecar.store.mysql.tx import DEADLOCK, LOCK_WAIT, RETRIES, Row, Step, Tx, describe
from sidecar.store.observer import StoreObserver, Unobserved
from sidecar.store.rows import Params
from sidecar.store.verbs import SQLStore

T = TypeVar("T")

__all__ = ["MySQLStore", "migrate_mysql", "split_script"]  # the last two: mysql/migrate.py


class MySQLStore(SQLStore):
    """``sidecar.core.ports.Store`` on MySQL 8 or MariaDB 10.6+. Create with :meth:`connect`;
    the schema is applied by :func:`migrate_mysql` (``webhook-sidecar migrate``)."""

    def __init__(self, pool: Any, target: Target, *, deadline: float, lock_timeout: float,
                 acquire_timeout: float, observer: StoreObserver | None = None,
                 write_batch: int = 1) -> None:
        self._pool = pool
        self._target = target
        self._deadline = deadline
        self._lock_timeout = lock_timeout
        self._acquire_timeout = acquire_timeout
        self._observer = observer or Unobserved()
        self._outage = Outage(self._observer)
        self._closed = False
        self._pinned: weakref.WeakSet[Any] = weakref.WeakSet()
        self.cluster = Cluster(galera=False)  # what the server is, read by connect()
        # Concurrent claims, result writes and nonce binds, each kind in one transaction of
        # its own with one commit, when write_batch > 1 (opt-in; see event_writes.together).
        self._claims = self._coalescer("claim", event_writes.claim, write_batch)
        self._completes = self._coalescer("complete", event_writes.complete, write_batch)
        self._binds = self._coalescer("bind_nonce", event_writes.bind_nonce, write_batch)
        # The verbs whose SQL files write: each is a few statements here (no RETURNING).
        self._writes: dict[str, tuple[bool, Step]] = {
            "take_over": (True, event_writes.take_over),
            "release": (False, event_writes.release),
            "purge": (False, event_writes.deleting("purge")),
            "purge_nonces": (False, event_writes.deleting("purge_nonces")),
            "take_tokens": (False, provider_writes.take_tokens),
            "return_tokens": (False, provider_writes.return_tokens),
            "take_permits": (False, provider_writes.take_permits),
            "release_permits": (False, provider_writes.release_permits),
            "claim_notice": (False, provider_writes.claim_notice),
            "pause_provider": (False, provider_writes.pause_provider),
            "resume_provider": (True, provider_writes.guarded_state("resume_provider")),
            "breaker_failure": (False, provider_writes.breaker_failure),
            "take_probe": (True, provider_writes.guarded_state("take_probe")),
            "end_probe": (True, provider_writes.guarded_state("end_probe")),
        }

    def __repr__(self) -> str:
        return f"<MySQLStore {self._target!r} ({self.cluster})>"

    @classmethod
    async def connect(cls, url: str, *, min_size: int = 1, max_size: int = 10,
                      acquire_timeout: float = 2.0, statement_timeout: float = 5.0,
                      lock_timeout: float = 2.0, connect_timeout: float = 5.0,
                      observer: StoreObserver | None = None, write_batch: int = 1,
                      check_schema: bool = True) -> MySQLStore:
        """A pool on ``url`` (``mysql://`` or ``mariadb://``), after checking the server (its
        version, the settings pinned on each connection, binary logging; on a Galera node its
        rules too), the privileges the proxy needs, and (``check_schema``) that every migration
        of this release is applied. ``write_batch`` bounds how many concurrent claims (or
        result writes, or nonce binds) share one transaction; 1 (the default) sends each alone,
        on its own connection: on MySQL that is faster (docs/design.md, "MySQL and MariaDB").
        Raises ``StoreError`` saying what to change."""
        try:
            target = parse_url(url)
        except ValueError as exc:
            raise StoreError(f"store.url: {exc}") from exc
        pool = await open_pool(target, min_size, max_size,
                               target.connect_timeout or connect_timeout)
        store = cls(pool, target, deadline=statement_timeout or 3600.0,
                    lock_timeout=lock_timeout, acquire_timeout=acquire_timeout,
                    observer=observer, write_batch=write_batch)
        try:
            async with store._session("connect") as tx:
                store.cluster = await check(tx, RUN_PRIVILEGES, target)
            if check_schema:
                applied = await store.applied_migrations()
                migrations.check_current(DIALECT, applied)
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        await self._pool.wait_closed()

    # -- the verbs' statements --------------------------------------------------------------

    async def _rows(self, name: str, params: Params) -> list[Row]:
        write = self._writes.get(name)
        if write is None:
            return await self._run(name, lambda tx: tx.rows(name, derived(name, params)))
        in_transaction, step = write
        return await self._run(name, lambda tx: step(tx, params), transaction=in_transaction)

    async def _claim(self, params: Params) -> Claim | Replayed:
        claim: Claim | Replayed = await self._write(self._claims, "claim", params)
        return claim

    async def _complete(self, params: Params) -> list[Row]:
        written: list[Row] = await self._write(self._completes, "complete", params)
        return written

    async def _bind_nonce(self, params: Params) -> list[Row]:
        bound: list[Row] = await self._write(self._binds, "bind_nonce", params)
        return bound

    async def _enqueue(self, params: Params) -> Enqueued:
        return await self._run("enqueue", lambda tx: queue_writes.enqueue(tx, params),
                               transaction=True)

    async def _take_queued(self, params: Params, *, ordered: bool = False) -> list[Row]:
        if ordered and not self.cluster.galera:
            return await self._run("take_queued", lambda tx: queue_writes.
                                   take_queued_under_named_lock(tx, params, self._lock_timeout))
        take = queue_writes.take_queued_under_lock_row if ordered else queue_writes.take_queued
        return await self._run("take_queued", lambda tx: take(tx, params), transaction=True)

    async def _settle_queued(self, params: Params) -> list[Row]:
        return await self._run("settle_queued",
                               lambda tx: queue_writes.settle_queued(tx, params),
                               transaction=True)

    async def _requeue_dead(self, params: Params) -> list[Row]:
        return await self._run("requeue_dead", lambda tx: queue_writes.requeue_dead(tx, params),
                               transaction=True)

    # -- concurrent writes, run together ---------------------------------------------------

    def _coalescer(self, verb: str, step: Callable[[Tx, Params], Awaitable[Any]],
                   write_batch: int) -> Coalescer[Params, Any]:
        async def alone(params: Params) -> Any:
            return await self._run(verb, lambda tx: step(tx, params), transaction=True)

        async def together(batch: Sequence[Params]) -> list[Any]:
            return await self._run(verb,
                                   lambda tx: event_writes.together(tx, step, batch, verb),
                                   transaction=True)

        return Coalescer(alone, together, max_batch=write_batch, wait=self._deadline,
                         sent=lambda calls: self._observer.statement_sent(verb, calls))

    async def _write(self, coalescer: Coalescer[Params, Any], verb: str,
                     params: Params) -> Any:
        try:
            return await coalescer(params)
        except TimeoutError as exc:  # only a waiting call's: _run translates its own
            raise StoreError(f"{verb}: no answer within {self._deadline:g}s") from exc

    # -- connections ------------------------------------------------------------------------

    async def _run(self, what: str, work: Callable[[Tx], Awaitable[T]], *,
                   transaction: bool = False) -> T:
        """``work`` on a pooled connection within the deadline, in a transaction if asked
        (run again when it was rolled back as a deadlock's victim, or as the loser of a Galera
        certification); driver errors as ``StoreError``. An outage is reported to the
        observer once, and its end."""
        return await self._outage.told(self._attempt(what, work, transaction=transaction))

    async def _attempt(self, what: str, work: Callable[[Tx], Awaitable[T]], *,
                       transaction: bool) -> T:
        if self._closed:
            raise StoreClosed(f"{what}: the MySQL store is closed")
        try:
            async with asyncio.timeout(self._deadline):
                for run in range(1, RETRIES + 1):
                    try:
                        async with self._session(what, transaction=transaction) as tx:
                            return await work(tx)
                    except asyncmy.errors.OperationalError as exc:
                        if not (exc.args and exc.args[0] == DEADLOCK) or run == RETRIES:
                            raise
        except TimeoutError as exc:
            raise StoreError(f"{what}: no answer within {self._deadline:g}s") from exc
        except StoreError:
            raise
        except (asyncmy.errors.Error, OSError) as exc:
            if self._closed:
                raise StoreClosed(f"{what}: the MySQL store is closed") from exc
            if isinstance(exc, asyncmy.errors.OperationalError) and exc.args \
                    and exc.args[0] == LOCK_WAIT:
                # Another session held a row past innodb_lock_wait_timeout: as on PostgreSQL,
                # the row is busy (the caller answers "in flight"), the store is not down.
                raise RowLocked(f"{what}: a row is locked by another session "
                                "(innodb_lock_wait_timeout)") from exc
            raise StoreError(f"{what}: {describe(exc)}") from exc
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _session(self, what: str, *, transaction: bool = False) -> AsyncIterator[Tx]:
        try:
            async with asyncio.timeout(self._acquire_timeout):
                conn = await self._pool.acquire()
        except TimeoutError as exc:
            raise StoreError(f"{what}: no database connection within "
                             f"{self._acquire_timeout:g}s") from exc
        if self._closed:
            self._pool.release(conn)
            raise StoreClosed(f"{what}: the MySQL store is closed")
        done = False
        try:
            if conn not in self._pinned:
                await pin(conn, self._lock_timeout)
                self._pinned.add(conn)
            async with conn.cursor(DictCursor) as cursor:
                tx = Tx(cursor)
                if transaction:
                    await conn.begin()
                    try:
                        yield tx
                    except (asyncmy.errors.Error, StoreError):
                        # The server answered (an error): the connection can roll back. A
                        # cancelled or timed-out call may have a statement in flight: it is
                        # closed instead (below), which ends its transaction on the server.
                        with contextlib.suppress(asyncmy.errors.Error, OSError):
                            await conn.rollback()
                        raise
                    await conn.commit()
                else:
                    yield tx
            done = True
        finally:
            if not done:  # cancelled or failed mid-statement: the connection is not reused
                conn.close()
            self._pool.release(conn)

