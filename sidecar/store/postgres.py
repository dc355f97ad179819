"""PostgreSQL adapter (asyncpg): the production store, shared by any number of proxy replicas.

Every verb is one short autocommitted statement on a connection held only for that statement
(``claim`` and ``bind_nonce`` may need a second, plain read). Claims, result writes and nonce
binds that arrive while one of their kind is in flight are sent together when it returns, as one
statement over arrays with one commit (``claim_batch.sql``, ``complete_batch.sql``,
``bind_nonce_batch.sql``; :mod:`sidecar.store.coalesce`), each answered as if it had run alone.
Invariants are enforced by the database: the primary key arbitrates claims, guarded
``UPDATE … RETURNING`` statements arbitrate takeovers and fence result writes by attempt, and
every time comes from the database clock (``clock_timestamp()``).

Every call has one deadline (``statement_timeout``) and ends in rows or a ``StoreError``, never
in a driver error. A connection that fails is closed, never reused, and the call is repeated
once on a connection that has just answered where that is safe (``_AGAIN`` says which, and how
a repeated write recognises its own first run). A take-over or result write meeting an event
row another session holds gives up at once with ``RowLocked`` (``row_lock_wait.fragment.sql``).

Queue mode's writes (``enqueue``, ``take_queued``, ``settle_queued``, ``requeue_dead``) are
one statement each too, over the event row and its queue entry together; ``enqueue`` and
``requeue_dead`` NOTIFY the provider's workers in every process at commit, and
:meth:`PostgresStore.listen_queue` LISTENs for that on a connection of its own.

The schema is applied by :func:`migrate_postgres` (``webhook-sidecar migrate``);
:meth:`PostgresStore.connect` only checks it and refuses a database that is behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import asyncpg
import structlog

from sidecar.core.errors import RowLocked, StoreClosed, StoreError
from sidecar.core.events import Claim, Enqueued
from sidecar.store import migrations
from sidecar.store.coalesce import MAX_BATCH, Coalescer, fresh
from sidecar.store.outage import OutageLog
from sidecar.store.rows import Params, event_row
from sidecar.store.sqlfiles import statement
from sidecar.store.verbs import SQLStore

DIALECT = "postgres"

T = TypeVar("T")

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

# Running a call again after its connection failed mid-call. asyncpg gives no way to tell
# whether the server ran the statement before the connection went (a reply lost with the
# connection looks like a request never sent), so a call is repeated only where a second run
# cannot do harm and its answer tells the truth about the first. The repeat runs these
# statements in order, on a connection that has just answered, until one returns rows.
# A statement missing here is not repeated: its call fails with StoreError (503).
_AGAIN: Final[Mapping[str, tuple[str, ...]]] = {
    # Reads: nothing to repeat but the read.
    **{read: (read,) for read in ("get", "get_nonce", "get_payload", "list_events", "ping",
                                  "stuck_counts", "migrations_exist", "migrations_applied",
                                  "queue_entry", "queue_stats")},
    # ON CONFLICT DO NOTHING inserts at most once; but if the first run's insert committed, a
    # plain repeat finds the row and answers "lost". The row is leased to an owner unique to
    # the call, so claim_landed.sql finds it first and answers "won".
    "claim": ("claim_landed", "claim"),
    # NOT idempotent in effect: a plain repeat after a first run that committed finds the row
    # under a live lease and answers "someone else took it", and nobody forwards the attempt
    # until its lease expires (the event is delayed, not lost, not duplicated). The lease owner
    # is unique to the call, so take_over_landed.sql, after the repeat updated nothing, finds
    # this call's own attempt.
    "take_over": ("take_over", "take_over_landed"),
    # Fenced by attempt: a repeat writes nothing more. If the first run committed, the repeat
    # updates nothing; complete_landed.sql then tells "recorded by the first run" from
    # "superseded" (the row holds exactly this result).
    "complete": ("complete", "complete_landed"),
    # ON CONFLICT DO NOTHING, then the bound hash either way: idempotent per (provider, nonce,
    # hash). If the first run's insert committed, the repeat finds the row and answers the hash
    # it bound, the caller's own. (A first run still alive on its backend makes the repeat wait
    # for it and answer no row; the caller then reads the hash with get_nonce.sql.)
    "bind_nonce": ("bind_nonce",),
    # Queue mode. enqueue is claim's twin: ON CONFLICT DO NOTHING inserts at most once, and the
    # new entry holds the call's token until its first take, so enqueue_landed.sql finds the
    # first run's insert and answers "accepted" (a take in between makes the repeat answer the
    # row as existing: still stored, counted as a duplicate).
    "enqueue": ("enqueue_landed", "enqueue"),
    # NOT idempotent in effect: a plain repeat after a first run that committed takes other
    # entries, and the first run's stay leased to a try that never runs until the lease ends.
    # The lease owner is unique to the call, so take_queued_landed.sql finds them first.
    "take_queued": ("take_queued_landed", "take_queued"),
    # Fenced by the take counter: a repeat writes nothing more. If the first run committed,
    # settle_queued_landed.sql tells "written by the first run" from "superseded".
    "settle_queued": ("settle_queued", "settle_queued_landed"),
    # requeue_dead is not repeated: a repeat after a first run that committed finds those
    # events no longer dead and answers none of them. The operator sees the error, looks, and
    # runs it again.
    # release is NOT repeated: it has no attempt fence, so if its first run committed and a
    # redelivery took the failed row over before the repeat ran, the repeat would release
    # that newer, live attempt. The operator sees the error and runs it again.
    # purge and purge_nonces are not repeated: a repeat deletes another batch and reports only
    # its own count. The maintenance loop runs them again at its interval.
}
# claim_batch, complete_batch and bind_nonce_batch (concurrent claims, result writes or nonce
# binds sent together) are not repeated as such: after a lost connection each item is repeated
# as its own call would be, per the entry of "claim", "complete" or "bind_nonce" above, one
# after the other, in item order, on one connection that has just answered. The batch committed
# whole or not at all; each item's repeat tells which. (Binds of one nonce in a lost batch: if
# it committed, every repeat answers the hash its first item bound; if not, the first item's
# repeat binds its own and the later ones get it back, as in the batch.)

# A batch the server refused for one of its items (a row another session holds, a deadlock
# with another batch, a unique violation while the key is rebuilt, a bad value): its items run
# one by one, so that only that item's call fails, as it would have alone. Nothing was written.
_ONE_BY_ONE_SQLSTATES: Final = frozenset({"55P03", "40P01", "40001", "23505"})


_POOL_LOG: Final = logging.getLogger("asyncpg.pool")
# Not sidecar.obs.logs.get_logger: the import contract keeps the store and obs apart (as in
# outage.py); structlog's logger of the same name is what it would return.
_LOG: Final = structlog.get_logger("sidecar.store")

# Queue mode's wake-ups: enqueue.sql and requeue_dead.sql notify this channel with the
# provider's key as payload, at commit.
QUEUE_CHANNEL: Final = "webhook_sidecar_queue"
_LISTEN_APPLICATION: Final = "webhook-sidecar listen"
_LISTEN_RETRY_FIRST: Final = 0.1  # seconds before reconnecting a lost LISTEN connection,
_LISTEN_RETRY_MAX: Final = 5.0  # doubling up to this
# How long the LISTEN connection may stay silent before a round trip checks it: a connection
# cut without a FIN or RST (a network partition, a hung server) is noticed within this.
_LISTEN_CHECK: Final = 30.0


class _ConnectionLost(Exception):
    """Internal: the connection failed mid-call; the statement may or may not have run."""


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
    :class:`~sidecar.store.verbs.SQLStore`'s; this class holds the pool, the claim race and
    what a call does when its connection fails.

    Every call ends within ``deadline`` seconds (when set): waiting for a connection (at most
    ``acquire_timeout`` of it), lock waits, the statement, and its one repeat on another
    connection. Past it the call is cancelled (asyncpg asks the server to cancel the
    statement), its connection is closed, and it raises ``StoreError``.
    """

    def __init__(self, pool: asyncpg.Pool, *, acquire_timeout: float,
                 deadline: float | None = None, write_batch: int = MAX_BATCH,
                 dsn: str | None = None, server_settings: Mapping[str, str] | None = None,
                 connect_timeout: float = 5.0) -> None:
        self._pool = pool
        self._acquire_timeout = acquire_timeout
        self._deadline = deadline
        # For listen_queue's own connection (None: a store made from a bare pool, which then
        # listens to nothing).
        self._dsn = dsn
        self._server_settings = dict(server_settings or {})
        self._connect_timeout = connect_timeout
        self._listening: set[asyncpg.Connection] = set()
        self._outage = OutageLog()
        _POOL_LOG.addFilter(self._outage)  # mutes the pool's reconnect warnings meanwhile
        # Concurrent claims, result writes and nonce binds go out together (write_batch <= 1:
        # never). A waiting call is bound by the deadline like any other.
        self._claims: Coalescer[Params, list[asyncpg.Record]] = Coalescer(
            lambda params: self._rows("claim", params),
            lambda items: self._many("claim", items),
            max_batch=write_batch, wait=deadline)
        self._completes: Coalescer[Params, list[asyncpg.Record]] = Coalescer(
            lambda params: self._rows("complete", params),
            lambda items: self._many("complete", items),
            max_batch=write_batch, wait=deadline)
        self._binds: Coalescer[Params, list[asyncpg.Record]] = Coalescer(
            lambda params: self._rows("bind_nonce", params),
            lambda items: self._many("bind_nonce", items),
            max_batch=write_batch, wait=deadline)

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
        write_batch: int = MAX_BATCH,
    ) -> PostgresStore:
        """Create the pool and check the schema version (never migrates).

        ``statement_timeout`` is the deadline of each call, from its wait for a connection to
        its answer (0: none); ``lock_timeout`` bounds each lock wait (PostgreSQL applies it per
        lock), except that a take-over or result write gives up on an event row another
        session holds after ~100 ms (``RowLocked``). ``statement_timeout``, ``lock_timeout``
        and ``idle_in_transaction_timeout`` are also sent as connection startup parameters,
        for the server's side. Behind pgbouncer in transaction mode pass
        ``session_settings=False`` (pgbouncer rejects them; set them with ``ALTER ROLE``
        instead) and ``statement_cache_size=0``. ``command_timeout`` is asyncpg's own bound on
        one statement, a backstop behind the deadline. ``write_batch`` bounds how many
        concurrent claims (or result writes, or nonce binds) go out in one statement; 1 sends
        each alone.

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
        store = cls(pool, acquire_timeout=acquire_timeout,
                    deadline=statement_timeout if statement_timeout > 0 else None,
                    write_batch=write_batch, dsn=dsn, server_settings=server_settings,
                    connect_timeout=connect_timeout)
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
        _POOL_LOG.removeFilter(self._outage)
        for conn in list(self._listening):  # listen_queue then waits until cancelled
            _discard(conn)
        try:
            async with asyncio.timeout(_CLOSE_GRACE):
                await self._pool.close()
        except _CLOSE_ERRORS:
            self._pool.terminate()

    # -- the claim race --------------------------------------------------------------------

    async def _claim(self, params: Params) -> Claim:
        # Each statement has its deadline; the race as a whole gets one too, so a claim ends
        # within statement_timeout like every other call.
        try:
            async with asyncio.timeout(self._deadline):
                return await self._claim_race(params)
        except TimeoutError as exc:
            raise StoreError(f"claim: no answer within {self._deadline:g}s") from exc

    async def _claim_race(self, params: Params) -> Claim:
        for _ in range(3):
            try:
                records = await self._together(self._claims, "claim", params)
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

    # -- queue mode -------------------------------------------------------------------------

    async def _enqueue(self, params: Params) -> Enqueued:
        # As for a claim: each statement has its deadline, the race as a whole one too.
        try:
            async with asyncio.timeout(self._deadline):
                return await self._enqueue_race(params)
        except TimeoutError as exc:
            raise StoreError(f"enqueue: no answer within {self._deadline:g}s") from exc

    async def _enqueue_race(self, params: Params) -> Enqueued:
        for _ in range(3):
            try:
                records = await self._rows("enqueue", params)
            except StoreError as exc:
                # A unique violation can escape ON CONFLICT while the primary key is being
                # rebuilt concurrently (REINDEX CONCURRENTLY): someone else holds the key.
                if not isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                    raise
                records = []
            answer = records[0] if records else None
            if answer is not None:
                if answer["accepted"]:
                    return Enqueued(accepted=True, row=None)
                if answer["provider"] is not None:  # the existing row, full queue or not
                    return Enqueued(accepted=False, row=event_row(answer))
                if answer["full"]:
                    return Enqueued(accepted=False, row=None, full=True)
            # The competing insert committed after this statement's snapshot: read it anew.
            existing = await self._rows("get", params)
            if existing:
                return Enqueued(accepted=False, row=event_row(existing[0]))
            # The competitor rolled back or the row was purged in between: enqueue again.
        key = f"{params['provider']}:{params['event_id']}"
        raise StoreError(f"enqueue of {key} did not settle after 3 tries")

    async def _take_queued(self, params: Params, *, ordered: bool = False
                           ) -> list[asyncpg.Record]:
        # With an order key, takes of one provider go one at a time across processes: a take's
        # ordering check sees only what was committed when it began, so two takes running
        # together could each let one event of a key through (a re-driven dead event beside a
        # later one being taken; two enqueues that committed out of seq order). The lock is
        # taken in the transaction before the take, so the take's snapshot includes the
        # previous taker's commit.
        lock = f"webhook_sidecar_queue:{params['provider']}" if ordered else None
        return await self._rows("take_queued", params, lock=lock)

    async def _settle_queued(self, params: Params) -> list[asyncpg.Record]:
        return await self._rows("settle_queued", params)

    async def _requeue_dead(self, params: Params) -> list[asyncpg.Record]:
        return await self._rows("requeue_dead", params)

    async def listen_queue(self, wake: Callable[[str], None]) -> None:
        """LISTEN for queued work on a connection of its own (never a pooled one: a LISTEN
        belongs to its session, which must outlive every call), calling ``wake(provider)`` per
        notification, until cancelled. A lost connection is logged once and opened again,
        first after 0.1 s, then up to 5 s apart; notifications sent meanwhile are lost (the
        workers' poll finds that work). A store made from a bare pool, or closed, waits."""
        delay = _LISTEN_RETRY_FIRST
        lost_since: float | None = None

        def listening() -> None:
            nonlocal delay, lost_since
            if lost_since is not None:
                _LOG.info("queue_listen_restored",
                          outage_s=round(time.monotonic() - lost_since, 3))
                lost_since = None
            delay = _LISTEN_RETRY_FIRST

        dsn = self._dsn
        if dsn is None:
            await asyncio.Event().wait()
            return
        while True:
            if self._pool.is_closing():
                await asyncio.Event().wait()
            try:
                await self._listen_once(dsn, wake, listening)
                error = "connection closed"
            except _DRIVER_ERRORS as exc:
                error = _describe(exc)
            if lost_since is None and not self._pool.is_closing():
                lost_since = time.monotonic()
                _LOG.warning("queue_listen_lost", error=error, retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LISTEN_RETRY_MAX)

    async def _listen_once(self, dsn: str, wake: Callable[[str], None],
                           listening: Callable[[], None]) -> None:
        """One LISTEN connection, from its opening until it is lost (or the call cancelled);
        ``listening()`` once the LISTEN is in force."""
        conn = await asyncpg.connect(
            dsn, timeout=self._connect_timeout,
            server_settings={**self._server_settings, "application_name": _LISTEN_APPLICATION})
        self._listening.add(conn)
        try:
            ended = asyncio.Event()
            conn.add_termination_listener(lambda _conn: ended.set())
            async with asyncio.timeout(self._connect_timeout):  # a hung server: try again
                await conn.add_listener(QUEUE_CHANNEL, _waker(wake))
            listening()
            await _until_lost(conn, ended, self._connect_timeout)
        finally:
            self._listening.discard(conn)
            await _close(conn, self._connect_timeout)

    # -- concurrent writes, sent together --------------------------------------------------

    async def _complete(self, params: Params) -> list[asyncpg.Record]:
        return await self._together(self._completes, "complete", params)

    async def _bind_nonce(self, params: Params) -> list[asyncpg.Record]:
        return await self._together(self._binds, "bind_nonce", params)

    async def _together(self, coalescer: Coalescer[Params, list[asyncpg.Record]], name: str,
                        params: Params) -> list[asyncpg.Record]:
        """One call of ``name`` through its coalescer: alone when none is in flight, else with
        the others that wait, within the deadline either way."""
        try:
            return await coalescer(params)
        except TimeoutError as exc:  # only a waiting call's: the statements translate theirs
            raise StoreError(f"{name}: no answer within the store deadline "
                             f"({self._deadline}s)") from exc

    async def _many(self, name: str, items: Sequence[Params],
                    ) -> list[list[asyncpg.Record] | BaseException]:
        """``<name>_batch.sql`` for ``items``: per item, the rows ``<name>.sql`` would have
        answered it, or the ``StoreError`` its call raises (each caller its own instance)."""
        try:
            answers = await self._call_many(name, items)
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, asyncpg.PostgresError) and (
                    cause.sqlstate in _ONE_BY_ONE_SQLSTATES
                    or (cause.sqlstate or "").startswith("22")):
                return list(await asyncio.gather(*(self._rows(name, params)
                                                   for params in items),
                                                 return_exceptions=True))
            self._outage.failed(exc)
            return [fresh(exc) for _ in items]
        self._outage.succeeded()
        return answers

    async def _call_many(self, name: str, items: Sequence[Params],
                         ) -> list[list[asyncpg.Record] | BaseException]:
        """``_call`` for a batch: ``<name>_batch.sql`` once; on a failed connection, each item
        repeated per ``_AGAIN[name]``."""
        batch = f"{name}_batch"
        if self._pool.is_closing():
            raise StoreClosed(f"{batch}: the PostgreSQL store is closed")
        columns = {key: [params[key] for params in items] for key in items[0]}
        try:
            async with asyncio.timeout(self._deadline):
                try:
                    records = await self._run(batch, (batch,), columns, self._pooled)
                except _ConnectionLost:
                    return await self._using(name, self._answering,
                                             lambda conn: _each_again(conn, name, items))
        except _ConnectionLost as lost:
            raise StoreError(f"{batch}: connection lost: {lost}") from lost.__cause__
        except TimeoutError as exc:
            raise StoreError(f"{batch}: no answer within the store deadline "
                             f"({self._deadline}s)") from exc
        answers: list[list[asyncpg.Record]] = [[] for _ in items]
        for record in records:
            answers[record["item"] - 1].append(record)
        return list(answers)

    # -- one call: a statement on a pooled connection, within the deadline -------------------

    async def _rows(self, name: str, params: Params, *, lock: str | None = None
                    ) -> list[asyncpg.Record]:
        """``_call``, its outcome reported to the outage log."""
        try:
            records = await self._call(name, params, lock=lock)
        except StoreError as exc:
            self._outage.failed(exc)
            raise
        self._outage.succeeded()
        return records

    async def _call(self, name: str, params: Params, *, lock: str | None = None
                    ) -> list[asyncpg.Record]:
        """Run ``sql/postgres/<name>.sql``; on a failed connection, repeat it per ``_AGAIN``.
        With ``lock``, in a transaction that first takes that advisory lock (held to its end).
        Raises ``StoreError`` (``RowLocked``, ``StoreClosed``) and nothing else from the driver;
        a cancellation of the caller goes on as such."""
        if self._pool.is_closing():
            raise StoreClosed(f"{name}: the PostgreSQL store is closed")
        try:
            async with asyncio.timeout(self._deadline):
                try:
                    return await self._run(name, (name,), params, self._pooled, lock)
                except _ConnectionLost:
                    again = _AGAIN.get(name)
                    if again is None:
                        raise
                    return await self._run(name, again, params, self._answering, lock)
        except _ConnectionLost as lost:
            raise StoreError(f"{name}: connection lost: {lost}") from lost.__cause__
        except TimeoutError as exc:  # only the deadline's: _run raises nothing else untranslated
            raise StoreError(f"{name}: no answer within the store deadline "
                             f"({self._deadline}s)") from exc

    async def _run(self, name: str, names: tuple[str, ...], params: Params,
                   connection: Callable[[str], Awaitable[asyncpg.Connection]],
                   lock: str | None = None) -> list[asyncpg.Record]:
        """The statements ``names`` in order on one connection, until one returns rows; with
        ``lock``, in one transaction after taking that advisory lock."""
        statements = [(stmt.sql, stmt.positional(params))
                      for stmt in (statement(DIALECT, each) for each in names)]

        async def fetch(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            records: list[asyncpg.Record] = []
            for sql, args in statements:
                records = await conn.fetch(sql, *args)
                if records:
                    break
            return records

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            if lock is None:
                return await fetch(conn)
            take_lock = statement(DIALECT, "advisory_lock")
            async with conn.transaction():
                await conn.execute(take_lock.sql, *take_lock.positional({"lock_name": lock}))
                return await fetch(conn)

        return await self._using(name, connection, run)

    async def _using(self, name: str,
                     connection: Callable[[str], Awaitable[asyncpg.Connection]],
                     work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` on one connection, given back to the pool after, or closed if it failed."""
        conn = await connection(name)
        try:
            result = await work(conn)
        except Exception as exc:
            if not _server_refused(exc):
                # A broken socket, a protocol in an unknown state, a session the server ended:
                # this connection is never used again, and the statement's fate is unknown.
                _discard(conn)
                raise _ConnectionLost(_describe(exc)) from exc
            await self._give_back(conn)
            raise _refusal(name, exc) from exc
        except BaseException as exc:
            # Cancelled (the deadline, or the caller): asyncpg has sent the server a cancel
            # request; the connection is closed now rather than given back to the pool after
            # waiting for the cancellation (which a hung server never confirms).
            _discard(conn)
            if isinstance(exc, asyncio.CancelledError) and not _cancelling():
                # The driver's own CancelledError, not a cancellation of this task.
                raise _ConnectionLost(_describe(exc)) from exc
            raise
        await self._give_back(conn)
        return result

    async def _pooled(self, name: str) -> asyncpg.Connection:
        """A connection from the pool (opened anew if the pooled one is known to be closed)."""
        try:
            conn: asyncpg.Connection = await self._pool.acquire(timeout=self._acquire_timeout)
        except Exception as exc:
            if self._pool.is_closing():
                raise StoreClosed(f"{name}: the PostgreSQL store is closed") from exc
            raise StoreError(f"{name}: no database connection: {_describe(exc)}") from exc
        return conn

    async def _answering(self, name: str) -> asyncpg.Connection:
        """A pooled connection that has just answered a ping, for repeating a call. After one
        connection failed, more of the pool's idle ones often have too (a server restart, a
        failover, backends terminated together): each is closed in turn until one answers."""
        for _ in range(self._pool.get_max_size() + 1):
            conn = await self._pooled(name)
            try:
                await conn.fetch(statement(DIALECT, "ping").sql)
            except Exception:
                _discard(conn)
                continue
            except BaseException as exc:
                _discard(conn)
                if isinstance(exc, asyncio.CancelledError) and not _cancelling():
                    continue  # the driver's own CancelledError: this connection is no good
                raise
            return conn
        raise StoreError(f"{name}: no pooled connection answers")

    async def _give_back(self, conn: asyncpg.Connection) -> None:
        """Return a connection that works to the pool (a local step, no round trip); if the
        pool refuses it, close it instead."""
        try:
            await self._pool.release(conn)
        except Exception:
            _discard(conn)


async def _each_again(conn: asyncpg.Connection, name: str, items: Sequence[Params],
                      ) -> list[list[asyncpg.Record] | BaseException]:
    """After a batch's connection failed (it committed whole, or not at all): each item's
    statements per ``_AGAIN[name]``, one item after the other on ``conn``, as the item's own
    call would repeat them. A statement the server refuses fails its item only."""
    answers: list[list[asyncpg.Record] | BaseException] = []
    for params in items:
        records: list[asyncpg.Record] = []
        try:
            for each in _AGAIN[name]:
                stmt = statement(DIALECT, each)
                records = await conn.fetch(stmt.sql, *stmt.positional(params))
                if records:
                    break
        except Exception as exc:
            if not _server_refused(exc):
                raise
            refusal = _refusal(name, exc)
            refusal.__cause__ = exc
            answers.append(refusal)
            continue
        answers.append(records)
    return answers


def _waker(wake: Callable[[str], None]) -> Callable[[object, int, str, str], None]:
    """asyncpg's notification callback for ``wake``: a failing ``wake`` is logged, and the
    connection listens on."""

    def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            wake(payload)
        except Exception as exc:
            _LOG.error("queue_wake_failed", provider=payload, error=_describe(exc))

    return notified


async def _until_lost(conn: asyncpg.Connection, ended: asyncio.Event, timeout: float) -> None:
    """Return when ``conn`` has ended: closed by the server or the network (asyncpg's
    termination listener sets ``ended``), or found dead by a round trip after a silence."""
    while not ended.is_set():
        try:
            async with asyncio.timeout(_LISTEN_CHECK):
                await ended.wait()
        except TimeoutError:
            await conn.fetchval("SELECT 1", timeout=timeout)


async def _close(conn: asyncpg.Connection, timeout: float) -> None:
    """Close a connection within ``timeout``, else abort it."""
    if conn.is_closed():
        return
    try:
        async with asyncio.timeout(timeout):
            await conn.close()
    except _CLOSE_ERRORS:
        conn.terminate()
    except BaseException:
        conn.terminate()
        raise


def _refusal(name: str, exc: Exception) -> StoreError:
    """The ``StoreError`` for a statement the server refused (raise it ``from exc``)."""
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return RowLocked(f"{name}: the event row is locked by another session "
                         f"({_describe(exc)})")
    return StoreError(f"{name}: {_describe(exc)}")


def _discard(conn: asyncpg.Connection) -> None:
    """Close a connection that may be broken, at once, so the pool opens a new one in its
    place. If asyncpg has already closed it and handed it back to the pool, there is nothing
    left to do (calling it then raises InterfaceError)."""
    with contextlib.suppress(Exception):
        conn.terminate()


def _server_refused(exc: Exception) -> bool:
    """The server answered the statement with an error, and the session goes on (a lock or
    statement timeout, a constraint): the connection can be reused."""
    if not isinstance(exc, asyncpg.PostgresError):
        return False  # raised by the driver itself: socket, protocol state, pool
    if isinstance(exc, asyncpg.PostgresConnectionError):
        return False
    # Class 57P (admin shutdown, crash shutdown, cannot connect now, database dropped, idle
    # session timeout) and FATAL errors end the session.
    return not (exc.sqlstate or "").startswith("57P") and \
        getattr(exc, "severity_en", None) not in ("FATAL", "PANIC")


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _fetch(conn: asyncpg.Connection, name: str, params: Params) -> list[asyncpg.Record]:
    """Run ``sql/postgres/<name>.sql`` on ``conn``, its named parameters sent as ``$n``."""
    stmt = statement(DIALECT, name)
    records: list[asyncpg.Record] = await conn.fetch(stmt.sql, *stmt.positional(params))
    return records


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
