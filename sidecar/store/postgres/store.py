"""``PostgresStore``: the verbs on PostgreSQL, with its pool, its insert race and its writes sent
together."""

from __future__ import annotations

import asyncio
import enum
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, TypeVar

import asyncpg

from sidecar.core.errors import StoreError
from sidecar.core.events import Claim, Enqueued, EventRow, Replayed
from sidecar.store import migrations
from sidecar.store.coalesce import MAX_BATCH, Coalescer, fresh
from sidecar.store.observer import StoreObserver, Unobserved
from sidecar.store.postgres.again import Answers, Calls, enclosing, end_enclosing
from sidecar.store.postgres.connections import (
    DIALECT,
    Connections,
    open_pool,
    startup_parameters,
)
from sidecar.store.postgres.faults import key_being_rebuilt, no_answer, refused_for_one_item
from sidecar.store.postgres.listen import QueueListener
from sidecar.store.postgres.outage import POOL_LOG, OutageLog
from sidecar.store.postgres.partitioning import Shape, check_shape
from sidecar.store.postgres.results import RESULT_WRITES, open_result_pool
from sidecar.store.rows import Params, Record, event_row, guard_binding
from sidecar.store.verbs import SQLStore

T = TypeVar("T")

_CLOSE_GRACE: Final = 10.0  # seconds close() waits for borrowed connections before aborting them

_Writes = Coalescer[Params, list[asyncpg.Record]]


class PostgresStore(SQLStore):
    """``sidecar.core.ports.Store`` on PostgreSQL. Create with :meth:`connect`. The verbs are
    :class:`~sidecar.store.verbs.SQLStore`'s; this class holds the pool, the insert race and
    the writes sent together; what a call does when its connection fails is
    :mod:`~sidecar.store.postgres.again`'s.

    Every call ends within ``deadline`` seconds (when set): waiting for a connection (at most
    ``acquire_timeout`` of it), lock waits, the statement, and its one repeat on another
    connection. Past it the call is cancelled (asyncpg asks the server to cancel the
    statement), its connection is closed, and it raises ``StoreError``.

    With a ``result_pool`` (``store.result_commit: no_wait``), the result writes
    (``results.RESULT_WRITES``) run on it instead, committed without waiting for their flush.
    """

    def __init__(self, pool: asyncpg.Pool, *, acquire_timeout: float,
                 deadline: float | None = None, write_batch: int = MAX_BATCH,
                 dsn: str | None = None, server_settings: Mapping[str, str] | None = None,
                 connect_timeout: float = 5.0, observer: StoreObserver | None = None,
                 result_pool: asyncpg.Pool | None = None) -> None:
        self._pool = pool
        self._connections = Connections(pool, acquire_timeout=acquire_timeout)
        self._calls = Calls(self._connections, deadline)
        self._result_connections = (Connections(result_pool, acquire_timeout=acquire_timeout)
                                    if result_pool is not None else None)
        self._result_calls = (Calls(self._result_connections, deadline)
                              if self._result_connections is not None else self._calls)
        self._deadline = deadline
        observer = observer or Unobserved()
        # For listen_queue's own connection (None: a store made from a bare pool, which then
        # listens to nothing).
        self._listener = QueueListener(
            dsn, server_settings=server_settings or {}, connect_timeout=connect_timeout,
            observer=observer) if dsn is not None else None
        self._outage = OutageLog(observer)
        POOL_LOG.addFilter(self._outage)  # mutes the pool's reconnect warnings meanwhile
        # Concurrent claims, result writes, nonce binds, and queue mode's enqueues and settles
        # go out together (write_batch <= 1: never). A waiting call is bound by the deadline
        # like any other.
        self._claims, self._completes, self._binds, self._enqueues, self._settles = (
            self._writes(name, write_batch, observer)
            for name in ("claim", "complete", "bind_nonce", "enqueue", "settle_queued"))

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
        partition_interval: float | None = None,
        observer: StoreObserver | None = None,
        result_commit_waits: bool = True,
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
        each alone. ``observer`` hears of outages, of the LISTEN connection and of each
        coalesced write's statements (default: no one). ``result_commit_waits=False``
        (``store.result_commit: no_wait``) sends the result writes over a pool of their own
        whose commits do not wait for their WAL flush (:mod:`~sidecar.store.postgres.results`:
        what a server crash can then lose); it opens at most ``max_size`` more connections.

        ``partition_interval`` is ``store.partitioning.interval`` (None: unpartitioned); a
        database laid out otherwise is refused.

        Raises ``SchemaError`` if the database lacks migrations this release needs, or is
        partitioned otherwise than ``partition_interval`` says, and
        ``StoreError`` if it cannot be reached within ``connect_timeout``.
        """
        settings = startup_parameters(
            statement_timeout=statement_timeout, lock_timeout=lock_timeout,
            idle_in_transaction_timeout=idle_in_transaction_timeout,
            session_settings=session_settings)
        pool = await open_pool(dsn, connect_timeout=connect_timeout, server_settings=settings,
                               min_size=min_size, max_size=max_size,
                               command_timeout=command_timeout,
                               statement_cache_size=statement_cache_size)
        result_pool = None
        if not result_commit_waits:
            try:
                result_pool = await open_result_pool(
                    dsn, connect_timeout=connect_timeout, server_settings=settings,
                    min_size=min(min_size, 1), max_size=max_size,
                    command_timeout=command_timeout,
                    statement_cache_size=statement_cache_size)
            except BaseException:
                await Connections(pool, acquire_timeout=acquire_timeout).close(_CLOSE_GRACE)
                raise
        store = cls(pool, acquire_timeout=acquire_timeout,
                    deadline=statement_timeout if statement_timeout > 0 else None,
                    write_batch=write_batch, dsn=dsn, server_settings=settings,
                    connect_timeout=connect_timeout, observer=observer,
                    result_pool=result_pool)
        try:
            await store.check_schema()
            await store.check_partitioning(partition_interval)
        except BaseException:
            await store.close()
            raise
        return store

    async def check_schema(self) -> None:
        """Raise ``SchemaError`` unless every migration this release ships has been applied."""
        migrations.check_current(DIALECT, await self.applied_migrations())

    async def check_partitioning(self, interval: float | None) -> None:
        """Raise ``SchemaError`` unless the tables are partitioned as ``interval`` says
        (``store.partitioning.interval``; None: unpartitioned)."""
        shape = await self._rows("partitioning_state", {})
        check_shape(Shape(bool(shape[0]["partitioned"]), shape[0]["interval_seconds"]),
                    interval)

    async def close(self) -> None:
        """Close the pool, waiting a bounded time for borrowed connections, then abort them."""
        if self._connections.closing:
            return
        POOL_LOG.removeFilter(self._outage)
        if self._listener is not None:
            self._listener.stop()
        closing = [self._connections.close(_CLOSE_GRACE)]
        if self._result_connections is not None:
            closing.append(self._result_connections.close(_CLOSE_GRACE))
        await asyncio.gather(*closing)

    async def listen_queue(self, wake: Callable[[str], None]) -> None:
        """See ``QueueListener.listen``. A store made from a bare pool, or closed, waits."""
        if self._listener is None:
            await asyncio.Event().wait()
            return
        await self._listener.listen(wake, lambda: self._connections.closing)

    # -- one call, its outcome reported to the outage log -----------------------------------

    async def _rows(self, name: str, params: Params, *, lock: str | None = None
                    ) -> list[asyncpg.Record]:
        calls = self._result_calls if name in RESULT_WRITES else self._calls
        return await self._outage.told(calls.call(name, params, lock=lock))

    # -- inserting a new event row: the claim, queue mode's enqueue -------------------------

    async def _claim(self, params: Params) -> Claim | Replayed:
        def insert() -> Awaitable[list[asyncpg.Record]]:
            return self._together(self._claims, "claim", params)

        def existing(row: EventRow, record: Record | None) -> Claim:
            return Claim(won=False, row=row,
                         binding=guard_binding(record) if record is not None else None)

        digest = params["guard_digest"]
        assert digest is None or isinstance(digest, bytes)
        return await self._inserted("claim", params, insert,
                                    functools.partial(_claimed, digest), existing)

    async def _enqueue(self, params: Params) -> Enqueued:
        def insert() -> Awaitable[list[asyncpg.Record]]:
            return self._together(self._enqueues, "enqueue", params)

        return await self._inserted("enqueue", params, insert, _enqueued,
                                    lambda row, _: Enqueued(accepted=False, row=row))

    async def _inserted(self, name: str, params: Params,
                        insert: Callable[[], Awaitable[list[asyncpg.Record]]],
                        answer: Callable[[Record | None], T | _Unsettled],
                        existing: Callable[[EventRow, Record | None], T]) -> T:
        """``insert`` (``claim.sql``, ``enqueue.sql``: ON CONFLICT DO NOTHING), settled: its
        record's ``answer`` (None: it answered no record), else the row that is there
        (``get.sql``) as ``existing`` (with the insert's record), or ``insert`` again. Each
        statement has its deadline; the race as a whole gets one too, so the call ends within
        statement_timeout like every other call."""
        try:
            # The race's deadline is its statements' too: one timer for all of them.
            async with asyncio.timeout(self._deadline) as scope:
                token = enclosing(scope)
                try:
                    for _ in range(3):
                        try:
                            records = await insert()
                        except StoreError as exc:
                            if not key_being_rebuilt(exc):
                                raise
                            records = []
                        record = records[0] if records else None
                        answered = answer(record)
                        if answered is _Unsettled.AGAIN:
                            # A guard bound by another session after the statement's
                            # snapshot: a new statement sees whose digest holds.
                            continue
                        if not isinstance(answered, _Unsettled):
                            return answered
                        # The competing insert committed after this statement's snapshot: read
                        # it anew.
                        found = await self._rows("get", params)
                        if found:
                            return existing(event_row(found[0]), record)
                        # The competitor rolled back or the row was purged in between: again.
                finally:
                    end_enclosing(token)
        except TimeoutError as exc:
            raise no_answer(name, self._deadline) from exc
        key = f"{params['provider']}:{params['event_id']}"
        raise StoreError(f"{name} of {key} did not settle after 3 tries")

    # -- queue mode -------------------------------------------------------------------------

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
        return await self._together(self._settles, "settle_queued", params)

    async def _requeue_dead(self, params: Params) -> list[asyncpg.Record]:
        return await self._rows("requeue_dead", params)

    # -- concurrent writes, sent together --------------------------------------------------

    async def _complete(self, params: Params) -> list[asyncpg.Record]:
        return await self._together(self._completes, "complete", params)

    async def _bind_nonce(self, params: Params) -> list[asyncpg.Record]:
        return await self._together(self._binds, "bind_nonce", params)

    def _writes(self, name: str, write_batch: int, observer: StoreObserver) -> _Writes:
        """``name``'s calls, sent together while one is in flight: alone as ``<name>.sql``,
        together as ``<name>_batch.sql``; each statement's size told to ``observer``."""
        return Coalescer(lambda params: self._rows(name, params),
                         lambda items: self._many(name, items),
                         max_batch=write_batch, wait=self._deadline,
                         sent=functools.partial(observer.statement_sent, name))

    async def _together(self, writes: _Writes, name: str, params: Params
                        ) -> list[asyncpg.Record]:
        """One call of ``name`` through its coalescer: alone when none is in flight, else with
        the others that wait, within the deadline either way."""
        try:
            return await writes(params)
        except TimeoutError as exc:  # only a waiting call's: the statements translate theirs
            raise no_answer(name, self._deadline) from exc

    async def _many(self, name: str, items: Sequence[Params]) -> Answers:
        """``<name>_batch.sql`` for ``items``: per item, the rows ``<name>.sql`` would have
        answered it, or the ``StoreError`` its call raises (each caller its own instance)."""
        calls = self._result_calls if name in RESULT_WRITES else self._calls
        try:
            answers = await calls.call_many(name, items)
        except StoreError as exc:
            if refused_for_one_item(exc):
                return list(await asyncio.gather(*(self._rows(name, params)
                                                   for params in items),
                                                 return_exceptions=True))
            self._outage.failed(exc)
            return [fresh(exc) for _ in items]
        self._outage.succeeded()
        return answers


class _Unsettled(enum.Enum):
    """An insert's record that does not answer the call yet."""

    READ = "read"  # the competing insert is not visible to the statement: read the row
    AGAIN = "again"  # a guarded claim's guard was not settled: run the statement again


def _claimed(guard_digest: bytes | None, record: Record | None
             ) -> Claim | Replayed | _Unsettled:
    """``claim.sql``'s (or an item's of ``claim_batch.sql``) answer: a guard first (bound to
    another digest: ``Replayed``, whatever the row; not settled: again), then the row."""
    binding = guard_binding(record) if record is not None else None
    if guard_digest is not None:
        if binding is None:
            return _Unsettled.AGAIN
        if binding.digest != guard_digest:
            return Replayed(binding)
    if record is None or record["provider"] is None:
        return _Unsettled.READ
    return Claim(won=bool(record["won"]), row=event_row(record), binding=binding)


def _enqueued(record: Record | None) -> Enqueued | _Unsettled:
    """``enqueue.sql``'s answer, or READ when it has none (the competing insert is not visible
    to it: read the row)."""
    if record is None:
        return _Unsettled.READ
    if record["accepted"]:
        return Enqueued(accepted=True, row=None)
    if record["provider"] is not None:  # the existing row, full queue or not
        return Enqueued(accepted=False, row=event_row(record))
    if record["full"]:
        return Enqueued(accepted=False, row=None, full=True)
    return _Unsettled.READ
