"""What a call does when its connection fails: the statements it repeats, and how.

Every call has one deadline and ends in rows or a ``StoreError``. A connection that fails is
closed, never reused (:mod:`~sidecar.store.postgres.connections`), and the call is repeated once
on a connection that has just answered where that is safe: ``AGAIN`` says which, and how a
repeated write recognises its own first run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Final, TypeVar

import asyncpg

from sidecar.core import phases
from sidecar.core.errors import StoreClosed, StoreError
from sidecar.store.postgres.connections import DIALECT, Connect, Connections
from sidecar.store.postgres.faults import (
    ConnectionLost,
    no_answer,
    not_read_committed,
    refusal,
    server_refused,
)
from sidecar.store.rows import Params
from sidecar.store.sqlfiles import statement

T = TypeVar("T")

# Running a call again after its connection failed mid-call. asyncpg gives no way to tell
# whether the server ran the statement before the connection went (a reply lost with the
# connection looks like a request never sent), so a call is repeated only where a second run
# cannot do harm and its answer tells the truth about the first. The repeat runs these
# statements in order, on a connection that has just answered, until one returns rows.
# A statement missing here is not repeated: its call fails with StoreError (503).
AGAIN: Final[Mapping[str, tuple[str, ...]]] = {
    # Reads: nothing to repeat but the read.
    **{read: (read,) for read in ("get", "get_nonce", "get_payload", "list_events", "attempts",
                                  "ping",
                                  "stuck_counts", "migrations_exist", "migrations_applied",
                                  "partitioning_state",
                                  "queue_entry", "queue_stats", "list_page",
                                  "list_page_queue", "provider_states")},
    # ON CONFLICT DO NOTHING inserts at most once; but if the first run's insert committed, a
    # plain repeat finds the row and answers "lost". The row is leased to an owner unique to
    # the call, so claim_landed.sql finds it first and answers "won" (a guarded claim's with
    # the binding its first run made or found, read beside the row). A guarded first run that
    # committed without winning bound the guard or found it bound: the repeat's bind changes
    # nothing and answers as the first run would have (lost, or Replayed).
    "claim": ("claim_landed", "claim"),
    # NOT idempotent in effect: a plain repeat after a first run that committed finds the row
    # under a live lease and answers "someone else took it", and nobody forwards the attempt
    # until its lease expires (the event is delayed, not lost, not duplicated). The lease owner
    # is unique to the call, so take_over_landed.sql, after the repeat updated nothing, finds
    # this call's own attempt.
    "take_over": ("take_over", "take_over_landed"),
    # Fenced by attempt: a repeat writes nothing more. If the first run committed, the repeat
    # updates nothing; complete_landed.sql then tells "recorded by the first run" from
    # "superseded" (the row holds exactly this result). The attempt's record in the timeline
    # (webhook_attempt) is inserted only from the fenced update's own rows, so a repeat that
    # updates nothing records nothing: the first run's record stays the only one.
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
    # settle_queued_landed.sql tells "written by the first run" from "superseded". As with
    # complete, the try's record in the timeline comes only from the fenced update's rows: a
    # repeat that writes nothing records nothing.
    "settle_queued": ("settle_queued", "settle_queued_landed"),
    # Delivery limits. A release deletes the rows its take's owner still holds: a repeat
    # deletes nothing more and answers what is left to free (nothing, if the first run
    # committed); the caller only counts.
    "release_permits": ("release_permits",),
    # take_tokens, return_tokens and take_permits are not repeated: a repeat after a first run
    # that committed would take (or put back) tokens a second time, or take more slots under a
    # new answer while the first run's stay leased to nobody. Failing is harmless: a lost take
    # of tokens only leaves the bucket emptier for a moment, and slots taken by a lost first
    # run are free again when their lease ends. The worker waits and asks again.
    # requeue_dead is not repeated: a repeat after a first run that committed finds those
    # events no longer dead and answers none of them. The operator sees the error, looks, and
    # runs it again.
    # release is NOT repeated: it has no attempt fence, so if its first run committed and a
    # redelivery took the failed row over before the repeat ran, the repeat would release
    # that newer, live attempt. The operator sees the error and runs it again.
    # purge and purge_nonces are not repeated: a repeat deletes another batch and reports only
    # its own count. The maintenance loop runs them again at its interval.
}
# claim_batch, complete_batch, bind_nonce_batch, enqueue_batch and settle_queued_batch
# (concurrent calls of one verb sent together) are not repeated as such: after a lost
# connection each item is repeated as its own call would be, per the entry of its verb above,
# one after the other, in item order, on one connection that has just answered. The batch
# committed whole or not at all; each item's repeat tells which. (Binds of one nonce in a lost
# batch: if it committed, every repeat answers the hash its first item bound; if not, the first
# item's repeat binds its own and the later ones get it back, as in the batch.)
# - enqueue_batch: each item's entry holds its own call's :owner until a take, so
#   enqueue_landed.sql finds the entry the batch inserted for it and answers "accepted"; an item
#   the batch answered as a sibling's row (one key twice) or as existing holds no entry of its
#   own, and its repeat of enqueue.sql answers the row as existing, as the batch did. An item
#   refused as full wrote nothing: its repeat counts afresh (a second run cannot write twice:
#   ON CONFLICT DO NOTHING).
# - settle_queued_batch: each item is fenced by its own take counter, so a repeat writes
#   nothing more, and settle_queued_landed.sql tells the item's own committed settle (the row
#   holds exactly its result) from a superseded one. The timeline is fed only by the fenced
#   update, so nothing is recorded twice.

Answers = list[list[asyncpg.Record] | BaseException]
"""Per item of a batch: the rows its own call would have answered, or the error it raises."""


class Calls:
    """Statements on the pool's connections: each call within the deadline (when set; what it
    covers: ``PostgresStore``), and repeated once per ``AGAIN`` when its connection failed."""

    def __init__(self, connections: Connections, deadline: float | None) -> None:
        self._connections = connections
        self._deadline = deadline
        self._pinned = PinnedIsolation()

    async def call(self, name: str, params: Params, *, lock: str | None = None
                   ) -> list[asyncpg.Record]:
        """Run ``sql/postgres/<name>.sql``; on a failed connection, repeat it per ``AGAIN``.
        With ``lock``, in a transaction that first takes that advisory lock (held to its end).
        Raises ``StoreError`` (``RowLocked``, ``StoreClosed``) and nothing else from the driver;
        a cancellation of the caller goes on as such."""

        async def once_or_again() -> list[asyncpg.Record]:
            try:
                return await self._run(name, (name,), params, self._connections.pooled, lock)
            except ConnectionLost:
                again = AGAIN.get(name)
                if again is None:
                    raise
                return await self._run(name, again, params, self._connections.answering, lock)

        return await self._within_deadline(name, once_or_again)

    async def call_many(self, name: str, items: Sequence[Params]) -> Answers:
        """``call`` for a batch: ``<name>_batch.sql`` once, its parameters one array per name
        (its rows name their ``item``, from 1); on a failed connection, each item repeated per
        ``AGAIN[name]``."""
        batch = f"{name}_batch"
        columns = {key: [params[key] for params in items] for key in items[0]}

        async def once_or_each_again() -> Answers:
            try:
                records = await self._run(batch, (batch,), columns, self._connections.pooled)
            except ConnectionLost:
                return await self._connections.using(
                    name, self._connections.answering,
                    lambda conn: _each_again(conn, name, items, self._pinned))
            by_item: list[list[asyncpg.Record]] = [[] for _ in items]
            for record in records:
                by_item[record["item"] - 1].append(record)
            return list(by_item)

        return await self._within_deadline(batch, once_or_each_again)

    async def _within_deadline(self, name: str, work: Callable[[], Awaitable[T]]) -> T:
        """``work`` within the deadline, its lost connection or timeout said as ``StoreError``.
        Inside a ``deadline`` scope of the same task that ends sooner (a claim's insert race),
        that scope bounds it: no timer of its own."""
        if self._connections.closing:
            raise StoreClosed(f"{name}: the PostgreSQL store is closed")
        try:
            if _bounded_within(self._deadline):
                return await work()
            async with asyncio.timeout(self._deadline):
                return await work()
        except ConnectionLost as lost:
            raise StoreError(f"{name}: connection lost: {lost}") from lost.__cause__
        except TimeoutError as exc:  # only the deadline's: _run raises nothing else untranslated
            raise no_answer(name, self._deadline) from exc

    async def _run(self, name: str, names: tuple[str, ...], params: Params,
                   connection: Connect, lock: str | None = None) -> list[asyncpg.Record]:
        """The statements ``names`` in order on one connection, until one returns rows; with
        ``lock``, in one transaction after taking that advisory lock."""
        statements = _prepared(names, params)

        async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            phases.mark(name, "_wait")  # for a connection in hand (and the coalescer's turn)
            if lock is None:
                records = await self._pinned.until_rows(conn, name, statements)
            else:
                take_lock = statement(DIALECT, "advisory_lock")
                async with conn.transaction(isolation="read_committed"):
                    await conn.execute(take_lock.sql, *take_lock.positional({"lock_name": lock}))
                    records = await _until_rows(conn, statements)
            phases.mark(name, "_statement")
            return records

        return await self._connections.using(name, connection, run)


_Bound = tuple["asyncio.Task[object] | None", float] | None
_bound: ContextVar[_Bound] = ContextVar("sidecar_store_deadline", default=None)
"""The enclosing deadline of the running task's store calls (``enclosing``): the task, and
when it ends (loop time). A task started inside it (a coalesced batch) inherits the value but
not the scope: it is told apart by the task."""


def enclosing(scope: asyncio.Timeout) -> Token[_Bound]:
    """Make ``scope`` (entered in the running task) the deadline of the store calls made
    inside it in this task, which then start no timer of their own when it ends sooner than
    theirs would (a claim's insert race: one timer, not one per statement). ``_bound.reset``
    the token when the scope ends."""
    when = scope.when()
    return _bound.set((asyncio.current_task(), when) if when is not None else None)


def _bounded_within(seconds: float | None) -> bool:
    """Whether the enclosing deadline of the running task ends within ``seconds`` from now."""
    bound = _bound.get()
    if bound is None or seconds is None:
        return False
    task, when = bound
    return task is asyncio.current_task() and when <= asyncio.get_running_loop().time() + seconds


def end_enclosing(token: Token[_Bound]) -> None:
    _bound.reset(token)


def _prepared(names: Sequence[str], params: Params) -> list[tuple[str, list[object]]]:
    """The statements ``names`` with their arguments, as asyncpg takes them."""
    return [(stmt.sql, stmt.positional(params))
            for stmt in (statement(DIALECT, each) for each in names)]


async def _until_rows(conn: asyncpg.Connection, statements: Sequence[tuple[str, list[object]]]
                      ) -> list[asyncpg.Record]:
    """Each statement in turn, until one returns rows (the last one's rows, else none)."""
    records: list[asyncpg.Record] = []
    for sql, args in statements:
        records = await conn.fetch(sql, *args)
        if records:
            break
    return records


async def _each_again(conn: asyncpg.Connection, name: str, items: Sequence[Params],
                      pinned: PinnedIsolation) -> Answers:
    """After a batch's connection failed (it committed whole, or not at all): each item's
    statements per ``AGAIN[name]``, one item after the other on ``conn``, as the item's own
    call would repeat them. A statement the server refuses fails its item only."""
    answers: Answers = []
    for params in items:
        try:
            answers.append(await pinned.until_rows(conn, name, _prepared(AGAIN[name], params)))
        except Exception as exc:
            if not server_refused(exc):
                raise
            failed = refusal(name, exc)
            failed.__cause__ = exc
            answers.append(failed)
    return answers


class PinnedIsolation:
    """READ COMMITTED for the calls that need it, whatever the role's default isolation, with
    no round trip added where that default is READ COMMITTED already.

    A call runs autocommitted, at the session's level: the role's default unless
    ``store.session_settings`` pins it, and behind pgbouncer it cannot. The partitioned
    store's uniqueness is only sound at READ COMMITTED, and its triggers refuse an insert at
    any other level (nothing was written: the statement rolled back). Such a call is run again
    in an explicit ``BEGIN ISOLATION LEVEL READ COMMITTED`` transaction, and so is every later
    call of that statement: two round trips more (BEGIN, COMMIT) per insert, the price of a
    role whose default is another level (docs/design.md, "Partitioned retention")."""

    def __init__(self) -> None:
        self._names: set[str] = set()  # the calls refused once

    async def until_rows(self, conn: asyncpg.Connection, name: str,
                         statements: Sequence[tuple[str, list[object]]]
                         ) -> list[asyncpg.Record]:
        if name not in self._names:
            try:
                return await _until_rows(conn, statements)
            except Exception as exc:
                if not not_read_committed(exc):
                    raise
                self._names.add(name)
        async with conn.transaction(isolation="read_committed"):
            return await _until_rows(conn, statements)
