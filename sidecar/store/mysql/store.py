"""``MySQLStore``: the verbs on MySQL 8 / MariaDB 10.6+ over an asyncmy pool.

MySQL has no ``RETURNING`` on ``UPDATE`` (MariaDB neither; MySQL on nothing), so a verb that
writes and answers is a short transaction of a few statements: a guarded write whose matched-row
count decides (the connections ask for found rows, ``CLIENT_FOUND_ROWS``: an ``UPDATE`` counts
the rows its ``WHERE`` matched, not the rows whose values changed), then a read of what it
wrote. An insert that must not overwrite is a plain ``INSERT`` whose duplicate-key error
(ER_DUP_ENTRY, 1062) means "the key exists"; never ``INSERT IGNORE`` (it turns other errors
into warnings) nor an affected-row count of ``ON DUPLICATE KEY UPDATE`` (1, 2 or 0, and 1 for
an unchanged row under found rows). The semantics, verb by verb: docs/design.md, "MySQL and
MariaDB".
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import asyncmy
from asyncmy.constants.CLIENT import FOUND_ROWS
from asyncmy.cursors import DictCursor

from sidecar.core.errors import RowLocked, SchemaError, StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued, Replayed
from sidecar.store import migrations
from sidecar.store.coalesce import Coalescer
from sidecar.store.mysql.outage import Outage
from sidecar.store.mysql.session import (
    DIALECT,
    MIGRATE_PRIVILEGES,
    RUN_PRIVILEGES,
    SQL_MODE,
    Target,
    check_privileges,
    check_server,
    parse_url,
)
from sidecar.store.observer import StoreObserver, Unobserved
from sidecar.store.rows import Params, event_row, nonce_binding
from sidecar.store.sqlfiles import statement
from sidecar.store.verbs import SQLStore

DUP_ENTRY: Final = 1062  # ER_DUP_ENTRY: the key exists
DEADLOCK: Final = 1213  # ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back
LOCK_WAIT: Final = 1205  # ER_LOCK_WAIT_TIMEOUT: the statement was rolled back
RETRIES: Final = 3  # runs of a transaction InnoDB chose as a deadlock victim

# Columns that are VARBINARY in the schema (compared byte for byte) but text to the core.
_TEXT_KEYS: Final = frozenset({"provider", "event_id", "order_key"})

Row = dict[str, Any]
T = TypeVar("T")


class Duplicate(Exception):
    """A statement met ER_DUP_ENTRY (the key exists)."""


class Tx:
    """The statements of one verb on one connection (in a transaction, or autocommitted)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    async def rows(self, name: str, params: Params) -> list[Row]:
        """Run ``sql/mysql/<name>.sql``; its rows (the keys decoded to text)."""
        await self._run(name, params)
        records = await self._cursor.fetchall()
        return [_decoded(r) for r in records]

    async def count(self, name: str, params: Params) -> int:
        """Run ``sql/mysql/<name>.sql``; the rows it matched (found rows)."""
        await self._run(name, params)
        return int(self._cursor.rowcount)

    async def insert(self, name: str, params: Params) -> int:
        """Run an ``INSERT``; the rows inserted. Raises ``Duplicate`` on ER_DUP_ENTRY."""
        try:
            return await self.count(name, params)
        except asyncmy.errors.IntegrityError as exc:
            if exc.args and exc.args[0] == DUP_ENTRY:
                raise Duplicate(name) from exc
            raise

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """The statements inside, in one transaction (the connection is otherwise
        autocommitted): for a verb whose first statement must not hold its locks longer."""
        await self.count("begin", {})
        try:
            yield
        except (asyncmy.errors.Error, StoreError):  # else the connection is closed: see _session
            with contextlib.suppress(asyncmy.errors.Error, OSError):
                await self.count("rollback", {})
            raise
        await self.count("commit", {})

    async def _run(self, name: str, params: Params) -> None:
        stmt = statement(DIALECT, name)
        await self._cursor.execute(stmt.sql, {n: params[n] for n in stmt.names})


def _decoded(record: Row) -> Row:
    return {k: (v.decode() if k in _TEXT_KEYS and isinstance(v, bytes) else v)
            for k, v in record.items()}


Step = Callable[[Tx, Params], Awaitable[list[Row]]]


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
        # Concurrent claims, result writes and nonce binds, each kind in one transaction of
        # its own with one commit, when write_batch > 1 (opt-in; see _together).
        self._claims = self._coalescer("claim", _claim, write_batch)
        self._completes = self._coalescer("complete", _complete, write_batch)
        self._binds = self._coalescer("bind_nonce", _bind_nonce, write_batch)
        # The verbs whose SQL files write: each is a few statements here (no RETURNING).
        self._writes: dict[str, tuple[bool, Step]] = {
            "take_over": (True, _take_over),
            "release": (False, _release),
            "purge": (False, _deleting("purge")),
            "purge_nonces": (False, _deleting("purge_nonces")),
            "take_tokens": (False, _take_tokens),
            "return_tokens": (False, _return_tokens),
            "take_permits": (False, _take_permits),
            "release_permits": (False, _release_permits),
            "claim_notice": (False, _claim_notice),
            "pause_provider": (False, _pause_provider),
            "resume_provider": (True, _guarded_state("resume_provider")),
            "breaker_failure": (False, _breaker_failure),
            "take_probe": (True, _guarded_state("take_probe")),
            "end_probe": (True, _guarded_state("end_probe")),
        }

    def __repr__(self) -> str:
        return f"<MySQLStore {self._target!r}>"

    @classmethod
    async def connect(cls, url: str, *, min_size: int = 1, max_size: int = 10,
                      acquire_timeout: float = 2.0, statement_timeout: float = 5.0,
                      lock_timeout: float = 2.0, connect_timeout: float = 5.0,
                      observer: StoreObserver | None = None, write_batch: int = 1,
                      check_schema: bool = True) -> MySQLStore:
        """A pool on ``url`` (``mysql://`` or ``mariadb://``), after checking the server (its
        version, the settings pinned on each connection, binary logging), the privileges the
        proxy needs, and (``check_schema``) that every migration of this release is applied.
        ``write_batch`` bounds how many concurrent claims (or result writes, or nonce binds)
        share one transaction; 1 (the default) sends each alone, on its own connection: on
        MySQL that is faster (docs/design.md, "MySQL and MariaDB"). Raises ``StoreError``
        saying what to change."""
        try:
            target = parse_url(url)
        except ValueError as exc:
            raise StoreError(f"store.url: {exc}") from exc
        pool = await _open_pool(target, min_size, max_size,
                                target.connect_timeout or connect_timeout)
        store = cls(pool, target, deadline=statement_timeout or 3600.0,
                    lock_timeout=lock_timeout, acquire_timeout=acquire_timeout,
                    observer=observer, write_batch=write_batch)
        try:
            async with store._session("connect") as tx:
                await _check(tx, RUN_PRIVILEGES, target)
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
            return await self._run(name, lambda tx: tx.rows(name, _derived(name, params)))
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

    # -- concurrent writes, run together ---------------------------------------------------

    def _coalescer(self, verb: str, step: Callable[[Tx, Params], Awaitable[Any]],
                   write_batch: int) -> Coalescer[Params, Any]:
        async def alone(params: Params) -> Any:
            return await self._run(verb, lambda tx: step(tx, params), transaction=True)

        async def together(batch: Sequence[Params]) -> list[Any]:
            return await self._run(verb, lambda tx: _together(tx, step, batch, verb),
                                   transaction=True)

        return Coalescer(alone, together, max_batch=write_batch, wait=self._deadline,
                         sent=lambda calls: self._observer.statement_sent(verb, calls))

    async def _write(self, coalescer: Coalescer[Params, Any], verb: str,
                     params: Params) -> Any:
        try:
            return await coalescer(params)
        except TimeoutError as exc:  # only a waiting call's: _run translates its own
            raise StoreError(f"{verb}: no answer within {self._deadline:g}s") from exc

    async def _enqueue(self, params: Params) -> Enqueued:
        return await self._run("enqueue", lambda tx: _enqueue(tx, params), transaction=True)

    async def _take_queued(self, params: Params, *, ordered: bool = False) -> list[Row]:
        if not ordered:
            return await self._run("take_queued", lambda tx: _take_queued(tx, params),
                                   transaction=True)

        async def one_at_a_time(tx: Tx) -> list[Row]:
            # A provider with an order key: its takes run one after another (a named lock,
            # taken before the transaction begins), so each sees the previous one's commit.
            lock = {"provider": params["provider"], "wait": self._lock_timeout}
            [held] = await tx.rows("take_lock", lock)
            if not held["locked"]:
                raise StoreError("take_queued: another take of this provider held on")
            try:
                async with tx.transaction():
                    return await _take_queued(tx, params)
            finally:
                await tx.rows("take_unlock", lock)

        return await self._run("take_queued", one_at_a_time)

    async def _settle_queued(self, params: Params) -> list[Row]:
        return await self._run("settle_queued", lambda tx: _settle_queued(tx, params),
                               transaction=True)

    async def _requeue_dead(self, params: Params) -> list[Row]:
        return await self._run("requeue_dead", lambda tx: _requeue_dead(tx, params),
                               transaction=True)

    # -- connections ------------------------------------------------------------------------

    async def _run(self, what: str, work: Callable[[Tx], Awaitable[T]], *,
                   transaction: bool = False) -> T:
        """``work`` on a pooled connection within the deadline, in a transaction if asked
        (run again when InnoDB picks it as a deadlock's victim); driver errors as
        ``StoreError``. An outage is reported to the observer once, and its end."""
        try:
            value = await self._attempt(what, work, transaction=transaction)
        except StoreError as exc:
            self._outage.failed(exc)
            raise
        self._outage.succeeded()
        return value

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
            raise StoreError(f"{what}: {_describe(exc)}") from exc
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
                await _pin(conn, self._lock_timeout)
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


async def _open_pool(target: Target, min_size: int, max_size: int, timeout: float) -> Any:
    try:
        return await asyncmy.create_pool(
            minsize=min_size, maxsize=max_size, **_connect_args(target, timeout))
    except (asyncmy.errors.Error, OSError, TimeoutError) as exc:
        raise StoreError(f"cannot connect to {target!r}: {_describe(exc)}") from exc


def _connect_args(target: Target, timeout: float) -> dict[str, Any]:
    args: dict[str, Any] = {
        "host": target.host, "port": target.port, "user": target.user,
        "password": target.password, "db": target.database, "autocommit": True,
        "charset": "utf8mb4", "connect_timeout": timeout, "client_flag": FOUND_ROWS,
    }
    if target.unix_socket:
        args["unix_socket"] = target.unix_socket
    if target.ssl:
        import ssl

        args["ssl"] = ssl.create_default_context()
    return args


async def _pin(conn: Any, lock_timeout: float) -> None:
    """The session settings the SQL files are written for (``session.py``)."""
    async with conn.cursor() as cursor:
        tx = Tx(cursor)
        await tx.count("session", {"sql_mode": SQL_MODE,
                                   "lock_wait": max(1, round(lock_timeout))})
        await tx.count("isolation", {})


async def _check(tx: Tx, needed: frozenset[str], target: Target) -> None:
    [server] = await tx.rows("server", {})
    check_server(server)
    held = [str(r["privilege_type"]) for r in await tx.rows("privileges", {})]
    check_privileges(held, needed, str(server["user_name"]), target.database)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _derived(name: str, params: Params) -> Params:
    """Values a statement needs that MySQL cannot compute where they stand (LIMIT takes a
    number, not an expression)."""
    if name in ("list_page", "list_page_queue"):
        return {**params, "limit_and_one": int(str(params["limit"])) + 1}
    return params


# -- the verbs of more than one statement -------------------------------------------------------


async def _together(tx: Tx, step: Callable[[Tx, Params], Awaitable[Any]],
                    batch: Sequence[Params], verb: str) -> list[Any]:
    """Writes of one kind that waited, in arrival order in the caller's one transaction, each
    answered as if it had run alone at its place (a later claim of a key an earlier one
    inserted finds that row and loses). Each runs inside a savepoint: one that fails with a
    statement error is rolled back alone and answered with it; a failure of the transaction
    itself (a deadlock, a lost connection) raises, and _run sends the whole batch again or
    fails every call of it."""
    answers: list[Any] = []
    for params in batch:
        await tx.count("savepoint", {})
        try:
            answers.append(await step(tx, params))
        except (asyncmy.errors.IntegrityError, asyncmy.errors.DataError,
                asyncmy.errors.ProgrammingError, asyncmy.errors.OperationalError,
                StoreError) as exc:
            if isinstance(exc, asyncmy.errors.OperationalError) and not (
                    exc.args and exc.args[0] == LOCK_WAIT):
                raise  # the transaction is lost (a deadlock, the connection): every call
            await tx.count("rollback_to_savepoint", {})
            error = StoreError(f"{verb}: {_describe(exc)}")
            error.__cause__ = exc
            answers.append(error)
        await tx.count("release_savepoint", {})
    return answers



async def _claim(tx: Tx, params: Params) -> Claim | Replayed:
    """The guard (if any) bound first, then the row inserted, or the existing one read with a
    shared lock (so that it is the committed row, under any isolation level)."""
    binding = None
    if params["guard_key"] is not None:
        guard = {"provider": params["provider"], "nonce": params["guard_key"],
                 "body_sha256": params["guard_digest"]}
        try:
            await tx.insert("bind_nonce", guard)
        except Duplicate:
            pass
        bound = await tx.rows("get_nonce", guard)
        if not bound:
            raise StoreError("claim: the guard was purged while it was bound")
        binding = nonce_binding(bound[0])
        if binding.digest != params["guard_digest"]:
            return Replayed(binding)
    try:
        inserted = await tx.insert("claim", params)
    except Duplicate:
        existing = await tx.rows("get_locked", params)
        if not existing:  # the shared lock of the duplicate holds the row: never
            raise StoreError("claim: the existing row vanished") from None
        return Claim(won=False, row=event_row(existing[0]), binding=binding)
    if inserted != 1:
        raise StoreError("claim: the guard changed under its lock")
    [row] = await tx.rows("get", params)
    return Claim(won=True, row=event_row(row), binding=binding)


async def _take_over(tx: Tx, params: Params) -> list[Row]:
    if not await tx.count("take_over", params):
        return []
    return await tx.rows("attempt_of", params)


async def _release(tx: Tx, params: Params) -> list[Row]:
    return [{"released": 1}] if await tx.count("release", params) else []


async def _complete(tx: Tx, params: Params) -> list[Row]:
    """The row locked under the fence, written, and its attempt recorded in the timeline."""
    locked = await tx.rows("complete_lock", params)
    if not locked:
        return []
    await tx.count("complete", params)
    await tx.insert("record_attempt", {**params, "lease_owner": locked[0]["lease_owner"],
                                       "error": None})
    return [{"attempt": params["attempt"]}]


async def _bind_nonce(tx: Tx, params: Params) -> list[Row]:
    """Inserted, or bound already (by a committed insert, or by an earlier bind of the same
    batch): either way the binding as get_nonce.sql reads it."""
    await _exists(tx, "bind_nonce", params)
    return await tx.rows("get_nonce", params)


# take_tokens, pause_provider and breaker_failure insert a row that may exist (1062) before a
# guarded UPDATE of it. That insert runs autocommitted: a failed insert holds a shared lock on
# the existing row until its transaction ends, and two transactions that each hold one and
# then want the row exclusively for their UPDATE deadlock. Autocommitted, the shared lock ends
# with the statement. (A claim's or a bind's failed insert is followed by reads only.)


async def _exists(tx: Tx, name: str, params: Params) -> bool:
    """Run the insert ``name``; False when it inserted, True when the key existed."""
    try:
        await tx.insert(name, params)
    except Duplicate:
        return True
    return False


async def _take_tokens(tx: Tx, params: Params) -> list[Row]:
    await _exists(tx, "rate_row", params)
    async with tx.transaction():
        await tx.count("take_tokens", params)
        return await tx.rows("tokens_read", params)


async def _return_tokens(tx: Tx, params: Params) -> list[Row]:
    await tx.count("return_tokens", params)
    return []


async def _take_permits(tx: Tx, params: Params) -> list[Row]:
    """Slot by slot, lowest first, each taken by one statement (new, or its lease ended)."""
    taken: list[Row] = []
    want = int(str(params["want"]))
    for slot in range(1, int(str(params["concurrency"])) + 1):
        if len(taken) >= want:
            break
        one = {**params, "slot": slot}
        try:
            got = await tx.insert("take_permit", one)
        except Duplicate:
            got = await tx.count("take_permit_again", one)
        if got:
            taken.append({"slot": slot})
    return taken


async def _release_permits(tx: Tx, params: Params) -> list[Row]:
    return [{"slot": None}] * await tx.count("release_permits", params)


async def _claim_notice(tx: Tx, params: Params) -> list[Row]:
    try:
        await tx.insert("claim_notice", params)
    except Duplicate:
        if not await tx.count("claim_notice_again", params):
            return []
    return [{"claimed": 1}]


async def _pause_provider(tx: Tx, params: Params) -> list[Row]:
    await _exists(tx, "provider_row", params)
    async with tx.transaction():
        if not await tx.count("pause_provider", params):
            return []
        return await tx.rows("provider_state", params)


async def _breaker_failure(tx: Tx, params: Params) -> list[Row]:
    if not await _exists(tx, "breaker_first", params):
        return await tx.rows("provider_state", params)
    async with tx.transaction():
        if not await tx.count("breaker_failure", params):
            return []
        return await tx.rows("provider_state", params)


def _guarded_state(name: str) -> Step:
    async def step(tx: Tx, params: Params) -> list[Row]:
        if not await tx.count(name, params):
            return []
        return await tx.rows("provider_state", params)
    return step


async def _enqueue(tx: Tx, params: Params) -> Enqueued:
    max_depth = params["max_depth"]
    room = {**params, "depth_limit": int(str(max_depth)) if max_depth is not None else 0}
    [has_room] = await tx.rows("enqueue_room", room)
    if has_room["ok"]:
        try:
            await tx.insert("enqueue_event", params)
        except Duplicate:
            pass
        else:
            await tx.insert("enqueue_entry", params)
            return Enqueued(accepted=True, row=None)
    existing = await tx.rows("get_locked", params)
    if existing:
        return Enqueued(accepted=False, row=event_row(existing[0]))
    return Enqueued(accepted=False, row=None, full=True)


async def _take_queued(tx: Tx, params: Params) -> list[Row]:
    taken: list[Row] = []
    for pick in await tx.rows("take_queued_pick", params):
        key = {**params, "event_id": pick["event_id"]}
        await tx.count("take_queued_entry", key)
        await tx.count("take_queued_event", key)
        taken.extend(await tx.rows("take_queued_read", key))
    return taken


async def _settle_queued(tx: Tx, params: Params) -> list[Row]:
    """The entry and row locked under the fence (the take's try count), the row written, the
    try recorded, then the entry removed (done) or made due again (or dead)."""
    locked = await tx.rows("settle_lock", params)
    if not locked:
        return []
    await tx.count("settle_queued_event", params)
    await tx.insert("record_attempt", {**params, "attempt": locked[0]["attempt"],
                                       "lease_owner": locked[0]["lease_owner"]})
    step = "settle_queued_done" if params["state"] == "done" else "settle_queued_entry"
    await tx.count(step, params)
    return await tx.rows("attempt_of", params)


async def _requeue_dead(tx: Tx, params: Params) -> list[Row]:
    picked = await tx.rows("requeue_dead_pick", params)
    for pick in picked:
        key = {**params, "event_id": pick["event_id"], "attempt": pick["attempt"]}
        await tx.count("requeue_dead_entry", key)
        await tx.count("requeue_dead_event", key)
    return [{"event_id": p["event_id"]} for p in picked]


def _deleting(name: str) -> Step:
    async def step(tx: Tx, params: Params) -> list[Row]:
        return [{"deleted": await tx.count(name, params)}]
    return step


# -- migrations ---------------------------------------------------------------------------------


async def migrate_mysql(url: str, *, connect_timeout: float = 10.0,
                        lock_wait: float = 60.0) -> list[str]:
    """Apply the pending numbered migrations on one connection, under a named lock (a second
    concurrent run waits, then finds nothing to do). The server and the privileges migrate
    needs are checked first, so a refused run changes nothing. Returns the names applied."""
    try:
        target = parse_url(url)
    except ValueError as exc:
        raise StoreError(f"store.url: {exc}") from exc
    store = MySQLStore(await _open_pool(target, 1, 1, target.connect_timeout or connect_timeout),
                       target, deadline=3600.0, lock_timeout=lock_wait,
                       acquire_timeout=connect_timeout)
    try:
        async with store._session("migrate") as tx:
            await _check(tx, MIGRATE_PRIVILEGES, target)
            try:
                return await migrations.migrate(DIALECT, _MigrationSession(tx, lock_wait))
            except (asyncmy.errors.Error, OSError) as exc:
                raise StoreError(f"migration failed: {_describe(exc)}") from exc
    finally:
        await store.close()


class _MigrationSession:
    """``migrations.Session`` on one connection. MySQL commits each DDL statement by itself, so
    the "transaction" is the named lock (migration_lock.sql) held around each migration; every
    statement of a migration may run again (docs/design.md, "MySQL and MariaDB")."""

    def __init__(self, tx: Tx, lock_wait: float) -> None:
        self._tx = tx
        self._wait = lock_wait

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        [locked] = await self._tx.rows("migration_lock", {"wait": self._wait})
        if not locked["locked"]:
            raise SchemaError(f"another migrate held the lock for {self._wait:g}s")
        try:
            yield
        finally:
            await self._tx.rows("migration_unlock", {})

    async def rows(self, name: str, params: Params) -> Sequence[Row]:
        return await self._tx.rows(name, params)

    async def script(self, sql: str) -> None:
        for each in split_script(sql):
            await self._tx._cursor.execute(each)


def split_script(sql: str) -> list[str]:
    """A migration file's statements: comment lines left out, split at a ``;`` that ends a
    line (the files put one there after each statement, and nowhere else)."""
    statements: list[str] = []
    buffer: list[str] = []
    for line in sql.splitlines():
        if line.lstrip().startswith("--") or not line.strip():
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(buffer).rstrip().rstrip(";"))
            buffer = []
    if buffer:
        raise RuntimeError(f"a migration ends without ';': {' '.join(buffer)[:80]!r}")
    return statements
