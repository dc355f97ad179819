"""The upkeep of a partitioned store's partitions (``store.partitioning``): made ahead, dropped
past retention, for ``sidecar.ops.maintenance``. The design: docs/design.md, "Partitioned
retention".

Guarantees:

- **A partition is dropped only when every row in it is past its provider's retention**, its
  providers are all configured (today's retention keeps the rows of a provider no longer
  configured), and it holds no live lease and no waiting queue entry. The look for work runs
  in the detach's transaction, holding an advisory lock that take-overs (``take_over.sql``)
  wait for, so no lease is taken in the partition between that look and its detach; after the
  detach, when no proxy can reach it, it is looked at again (else it is attached again). A
  queue entry of a newer copy of an event, claimed after the detach, keeps nothing.
- **No detached partition is left behind**: a round that dies between the detach and the
  drop leaves a table whose comment names its parent and bounds; the next round drops it (or
  attaches it again) like one it detached itself.
- **Making partitions never makes a delivery wait long**: each partition is made in two short
  transactions (the table, then the move out of the DEFAULT partition and the attach), whose
  lock waits give up after ``MAKE_LOCK_TIMEOUT`` and whose statements after ``make_timeout``;
  an insert into the DEFAULT partition waits at most for those. Busy (a lock, a row that came
  in meanwhile, the timeout): tried again with a pause, else next round (they are made
  ``ahead``).
- **Retention never makes a delivery wait long**: the detach is one short transaction whose
  wait for its lock is bounded by ``UPKEEP_LOCK_TIMEOUT`` and whose look for work (take-overs
  answer "in flight" meanwhile) by ``look_timeout``; tried again a few times with a pause,
  else next round. (``DETACH … CONCURRENTLY`` would take no lock deliveries wait for, but
  PostgreSQL refuses it while a DEFAULT partition exists; see docs/design.md.)
- **Pooler-safe**: every lock and setting is the transaction's own (no session advisory lock,
  no SET), transactions run at READ COMMITTED whatever the role's default, and the connection
  takes the store's ``statement_cache_size`` and startup settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, assert_never

import asyncpg

from sidecar.core.partition_retention import (
    DetachAnswer,
    Gone,
    KeepReason,
    Kept,
    MakeAnswer,
    MakeNext,
    PartitionOutcome,
    PartitionsMade,
    PartitionsRetired,
    Retire,
    TableDone,
    TryAgain,
    after_detach,
    after_make,
    reason_to_keep,
    retired,
    round_report,
)
from sidecar.store.postgres.faults import DRIVER_ERRORS, describe
from sidecar.store.postgres.migrate import single_connection
from sidecar.store.postgres.partition_retire import known_parent, retire_detached
from sidecar.store.postgres.partitioning import TABLES, fetchrow, fetchval, rows

UPKEEP_LOCK_TIMEOUT: Final = "100ms"  # each lock wait of dropping partitions
# Each lock wait of making a partition: the move and the attach lock the DEFAULT partition,
# which every insert reads (the uniqueness trigger), so inserts queue behind the wait. Short,
# tried again: made `ahead`, a partition can wait for a quiet moment.
MAKE_LOCK_TIMEOUT: Final = "20ms"
# The longest statement of making a partition (moving a range's rows out of the DEFAULT
# partition, the attach's check of it): inserts into the DEFAULT partition wait for it.
MAKE_TIMEOUT: Final = 10.0
# The longest look for work under the retire lock (take-overs answer "in flight" meanwhile).
LOOK_TIMEOUT: Final = 5.0

# Making a partition met a lock, a row of its range that came in meanwhile, or its timeout.
_BUSY: Final = (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError,
                asyncpg.CheckViolationError, asyncpg.QueryCanceledError)


class _Elsewhere(Exception):
    """Another process is in a retention step: this round leaves dropping to it."""


class PartitionKeeper:
    """Partitions made ahead and dropped past retention; each round on a connection of its own,
    so that the pool's connections, which deliveries need, are never held by the upkeep's
    waits."""

    def __init__(self, dsn: str, *, interval: float, ahead: int,
                 connect_timeout: float = 10.0, statement_cache_size: int = 100,
                 server_settings: Mapping[str, str] | None = None,
                 make_timeout: float = MAKE_TIMEOUT, look_timeout: float = LOOK_TIMEOUT
                 ) -> None:
        self._dsn = dsn
        self._interval = int(interval)
        self._ahead = ahead
        self._connect_timeout = connect_timeout
        self._statement_cache_size = statement_cache_size
        self._server_settings = dict(server_settings or {})
        self._make_timeout = _ms(make_timeout)
        self._look_timeout = _ms(look_timeout)

    async def make_ahead(self) -> PartitionsMade:
        """Make the partitions ``ahead`` intervals past now (and move rows that went to a
        DEFAULT partition into the partition of their time); the number made. A table that
        stays busy through ``MAKE_TRIES`` tries (``core.partition_retention.after_make``)
        waits for the next round (and is named in ``busy``): the partitions are made
        ``ahead``, so a round missed costs nothing."""
        made = 0
        busy: list[str] = []
        async with self._connection() as conn:
            for table, column, _ in TABLES:
                made_nothing = 0
                while True:
                    answer = await self._make_next(conn, table, column)
                    made_nothing += answer.made_nothing
                    step = after_make(answer, made_nothing)
                    match step:
                        case MakeNext(made=counted):
                            made += counted
                        case TryAgain(pause=pause):
                            await asyncio.sleep(pause)
                        case TableDone(busy=stayed_busy):
                            if stayed_busy:
                                busy.append(table)  # the caller warns; next round tries again
                            break
                        case _:
                            assert_never(step)
        return PartitionsMade(made, tuple(busy))

    async def _make_next(self, conn: asyncpg.Connection, table: str, column: str
                         ) -> MakeAnswer:
        """One try of making ``table``'s next partition, if one is due."""
        params: dict[str, object] = {"parent": table, "keycol": column,
                                     "step_seconds": self._interval, "ahead": self._ahead}
        try:
            async with self._transaction(conn, MAKE_LOCK_TIMEOUT, self._make_timeout):
                due = await rows(conn, "partitioning/prepare_next", params)
            if not due:
                return MakeAnswer.NONE_DUE
            async with self._transaction(conn, MAKE_LOCK_TIMEOUT, self._make_timeout):
                attached: bool = await fetchval(conn, "partitioning/attach_next", {
                    "parent": table, "keycol": column, "part_name": due[0]["part_name"],
                    "lo": due[0]["lo"], "hi": due[0]["hi"]})
        except _BUSY:
            return MakeAnswer.BUSY
        return MakeAnswer.ATTACHED if attached else MakeAnswer.MADE_ELSEWHERE

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        """Drop the partitions whose rows are all past their provider's ``retention`` (seconds
        by provider key), never one holding a live lease or a waiting queue entry; and each
        table's extent after the drops (a read of the catalog a table, for the gauges). One
        process at a time drops (every proxy runs maintenance): while another is in a step,
        this one only reads the counts."""
        outcomes: list[tuple[str, PartitionOutcome]] = []
        async with self._connection() as conn:
            try:
                await self._drop_all(conn, retention, outcomes)
            except _Elsewhere:
                pass  # the other process goes on from here
            extent = []
            default_rows = 0
            for table, _, _ in TABLES:
                row = await fetchrow(conn, "partitioning/extent", {"parent": table})
                extent.append((table, row["partitions"], row["last_bound_epoch"]))
                default_rows += row["default_rows"]
        dropped, kept = round_report(outcomes)
        return PartitionsRetired(dropped, kept, default_rows, tuple(extent))

    async def _drop_all(self, conn: asyncpg.Connection, retention: Mapping[str, float],
                        outcomes: list[tuple[str, PartitionOutcome]]) -> None:
        """Each partition looked at, with what became of it, into ``outcomes``."""
        async with self._step(conn, self._look_timeout):
            pass  # another process in a step: leave the round to it at once
        for part in await rows(conn, "partitioning/detached"):  # left by a run that died
            outcome: PartitionOutcome
            if not known_parent(part["parent"]):  # a comment edited by hand: never dropped
                outcome = Kept(KeepReason.DETACHED_ERROR,
                               f"{part['parent']} is no partitioned table of the store")
            else:
                try:
                    outcome = await self._retire(conn, part["parent"], part, step=True)
                except DRIVER_ERRORS as exc:  # one table that cannot go must not stop retention
                    outcome = Kept(KeepReason.DETACHED_ERROR, describe(exc))
            outcomes.append((part["name"], outcome))
        for table, _, _ in TABLES:
            for part in await rows(conn, "partitioning/candidates", {"parent": table}):
                try:
                    outcome = await self._look_and_drop(conn, table, part, retention)
                except asyncpg.UndefinedTableError:
                    outcome = Gone()  # dropped by another process since the list was read
                outcomes.append((part["name"], outcome))

    async def _look_and_drop(self, conn: asyncpg.Connection, table: str, part: asyncpg.Record,
                             retention: Mapping[str, float]) -> PartitionOutcome:
        providers: list[str] = [] if part["pending"] else await fetchval(
            conn, "partitioning/providers", {"part": part["name"]})
        kept = reason_to_keep(pending=part["pending"], age=part["age_seconds"],
                              providers=providers, retention=retention)
        if kept is not None:
            return kept
        attempt = 0  # the look for work runs with the detach
        while True:
            step = after_detach(await self._detach(conn, table, part), attempt)
            match step:
                case Retire():
                    return await self._retire(conn, table, part)
                case TryAgain(pause=pause):
                    await asyncio.sleep(pause)  # back off: deliveries come first
                case Kept() | Gone():
                    return step
                case _:
                    assert_never(step)
            attempt += 1

    async def _detach(self, conn: asyncpg.Connection, table: str, part: asyncpg.Record
                      ) -> DetachAnswer:
        """One try of the detach (``webhook_partition_detach``), its answer or error typed."""
        try:
            async with self._step(conn, self._look_timeout):
                detached: bool | None = await fetchval(
                    conn, "partitioning/detach", {"parent": table, "part": part["name"]})
        except asyncpg.ObjectInUseError:
            return DetachAnswer.WORK_ARRIVED  # the detach was rolled back
        except asyncpg.QueryCanceledError:
            return DetachAnswer.LOOK_TIMED_OUT
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
            return DetachAnswer.LOCK_BUSY
        if detached is None:
            return DetachAnswer.NOT_A_PARTITION
        return DetachAnswer.DETACHED if detached else DetachAnswer.HOLDS_WORK

    async def _retire(self, conn: asyncpg.Connection, table: str, part: asyncpg.Record, *,
                      step: bool = False) -> PartitionOutcome:
        """Drop detached ``part``, or attach it again if it holds work. The attach's lock waits
        are bounded as the detach's: past them it stays detached, and the next round finds it
        by its comment. ``step``: one this round did not detach itself, so it takes the
        round's lock first."""
        try:
            async with (self._step(conn, self._look_timeout) if step else
                        self._transaction(conn, UPKEEP_LOCK_TIMEOUT, self._look_timeout)):
                action = await retire_detached(conn, table, part["name"], part["lower_bound"],
                                               part["upper_bound"])
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError,
                asyncpg.QueryCanceledError):
            return Kept(KeepReason.LOCKED_DETACHED)
        return retired(action)

    @asynccontextmanager
    async def _step(self, conn: asyncpg.Connection, statement_timeout: str
                    ) -> AsyncIterator[None]:
        """A retention step's transaction, holding the round's lock (a transaction lock: see
        ``round_lock.sql``); ``_Elsewhere`` when another process holds it."""
        async with self._transaction(conn, UPKEEP_LOCK_TIMEOUT, statement_timeout):
            if not await fetchval(conn, "partitioning/round_lock"):
                raise _Elsewhere
            yield

    @asynccontextmanager
    async def _transaction(self, conn: asyncpg.Connection, lock_timeout: str,
                           statement_timeout: str) -> AsyncIterator[None]:
        """A transaction at READ COMMITTED (the uniqueness triggers refuse any other level)
        with its own timeouts."""
        async with conn.transaction(isolation="read_committed"):
            await fetchval(conn, "partitioning/timeouts", {
                "lock_timeout": lock_timeout, "statement_timeout": statement_timeout})
            yield

    def _connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        return single_connection(self._dsn, self._connect_timeout, "webhook-sidecar partitions",
                                 statement_cache_size=self._statement_cache_size,
                                 server_settings=self._server_settings)


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"
