"""Partitioned retention on PostgreSQL (``store.partitioning``): the switch of a store to
partitions, the check that a database matches the config, and the upkeep of the partitions
(made ahead, dropped past retention). The design and the options rejected: docs/design.md,
"Partitioned retention".

Guarantees:

- **One row per key across partitions.** ``webhook_event`` and ``webhook_nonce`` are unique on
  their key by a trigger (``partitioning/functions.sql``), not an index: no unique index of a
  partitioned table can leave out the partition key. The verbs' SQL is the same on both shapes.
- **A switch stops deliveries for one short transaction**: only catalog changes, under a
  ``lock_timeout`` (a wait past it gives up and tries again); the index builds and the scan
  that let the attach skip its own scan run before it, without blocking writers.
- **A partition is dropped only when every row in it is past its provider's retention**, its
  providers are all configured (today's retention keeps the rows of a provider no longer
  configured), and it holds no live lease and no waiting queue entry. The look for work runs
  in the detach's transaction, holding an advisory lock that take-overs (``take_over.sql``)
  wait for, so no lease is taken in the partition between that look and its detach; after the
  detach, when no proxy can reach it, it is looked at again (else it is attached again).
- **No detached partition is left behind**: a round that dies between the detach and the
  drop leaves a table whose comment names its parent and bounds; the next round drops it (or
  attaches it again) like one it detached itself.
- **Making partitions never makes a delivery wait long on a lock**: each partition is made
  in a transaction of its own whose lock waits give up after ``MAKE_LOCK_TIMEOUT`` (inserts
  queue behind the attach's lock on the DEFAULT partition: at most that wait and one attach),
  tried again with a pause, else next round (they are made ``ahead``).
- **Retention never makes a delivery wait long on a lock**: the detach is one short
  transaction whose wait for its lock is bounded by ``UPKEEP_LOCK_TIMEOUT`` (deliveries queue
  behind that wait, no longer), tried again a few times with a pause, else next round.
  (``DETACH … CONCURRENTLY`` would take no lock deliveries wait for, but PostgreSQL refuses
  it while a DEFAULT partition exists; see docs/design.md.)
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg

from sidecar.core.errors import SchemaError, StoreError
from sidecar.core.events import PartitionsMade, PartitionsRetired
from sidecar.store import migrations
from sidecar.store.postgres.connections import DIALECT
from sidecar.store.postgres.faults import DRIVER_ERRORS, describe
from sidecar.store.postgres.migrate import single_connection
from sidecar.store.sqlfiles import query, statement

# (table, partition key column, the index on its key the parent needs, built CONCURRENTLY on
# the old table before the switch: None when an existing index serves)
TABLES: Final = (
    ("webhook_event", "received_at", "partitioning/key_index_event"),
    ("webhook_attempt", "finished_at", None),
    ("webhook_nonce", "received_at", "partitioning/key_index_nonce"),
)
KEY_INDEXES: Final = ("webhook_event_key_idx", "webhook_nonce_key_idx")

SWITCH_LOCK_TIMEOUT: Final = "300ms"  # the switch's lock waits: deliveries queue behind them
SWITCH_TRIES: Final = 20
UPKEEP_LOCK_TIMEOUT: Final = "100ms"  # each lock wait of dropping partitions
# Each lock wait of making a partition: the attach's ACCESS EXCLUSIVE lock on the DEFAULT
# partition, which every insert reads (the uniqueness trigger), so inserts queue behind the
# wait. Short, tried again: made `ahead`, a partition can wait for a quiet moment.
MAKE_LOCK_TIMEOUT: Final = "20ms"
MAKE_TRIES: Final = 5
DETACH_TRIES: Final = 5
# The switch's CHECK bound lies this far ahead at least: the index builds and the scan between
# its CHECK and the switch must end before it (else the switch refuses, and is prepared again).
BOUND_MARGIN: Final = 15 * 60.0

CHECK_FIX: Final = "`webhook-sidecar store partition --config FILE`"


@dataclass(frozen=True, slots=True)
class Shape:
    """How a database's event table is laid out: partitioned, and by what span."""

    partitioned: bool
    interval: float | None  # seconds; None when unpartitioned (or no bounded partition yet)


async def read_shape(conn: asyncpg.Connection) -> Shape:
    row = await _fetchrow(conn, "partitioning_state")
    return Shape(bool(row["partitioned"]), row["interval_seconds"])


def check_shape(shape: Shape, interval: float | None) -> None:
    """Raise ``SchemaError`` unless the database is laid out as ``store.partitioning.interval``
    says; the message names the key or the command that fixes it."""
    if interval is None and shape.partitioned:
        raise SchemaError(
            f"the database's event table is partitioned (by {_span(shape.interval)}) but "
            f"store.partitioning.interval is not set: set it to {_span(shape.interval)}")
    if interval is not None and not shape.partitioned:
        raise SchemaError(
            f"store.partitioning.interval is {_span(interval)} but the database's event table "
            f"is not partitioned: run {CHECK_FIX} (on a new database, `webhook-sidecar "
            f"migrate` does it), or remove store.partitioning")
    if interval is not None and shape.interval is not None and shape.interval != interval:
        raise SchemaError(
            f"store.partitioning.interval is {_span(interval)} but the database's partitions "
            f"span {_span(shape.interval)}: set store.partitioning.interval to "
            f"{_span(shape.interval)}")


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


# -- the switch ------------------------------------------------------------------------------

async def partition_store(dsn: str, *, interval: float, ahead: int,
                          connect_timeout: float = 10.0,
                          only_if_empty: bool = False) -> bool:
    """Switch the store at ``dsn`` to partitions of ``interval`` seconds (docs/operations.md,
    "Moving to partitions"). Returns False if it was partitioned already (nothing done).
    ``only_if_empty``: refuse (``StoreError``) a store holding events (``migrate`` does: a
    live table is moved by the operator's ``store partition``, never as a side effect)."""
    async with single_connection(dsn, connect_timeout, "webhook-sidecar store partition"
                                 ) as conn:
        try:
            return await _partition(conn, interval, ahead, only_if_empty)
        except DRIVER_ERRORS as exc:
            raise StoreError(f"partitioning failed: {describe(exc)}") from exc


async def _partition(conn: asyncpg.Connection, interval: float, ahead: int,
                     only_if_empty: bool) -> bool:
    migrations.check_current(  # the switch knows this release's tables, no older ones
        DIALECT, await migrations.recorded(lambda name, params: _rows(conn, name, params)))
    if (shape := await read_shape(conn)).partitioned:
        check_shape(shape, interval)
        # This release's functions replace an older one's (CREATE OR REPLACE: a brief catalog
        # lock, no table lock), so `migrate` after an upgrade brings them up to date.
        await conn.execute(query(DIALECT, "partitioning/functions"))
        return False
    if only_if_empty and await _fetchval(conn, "partitioning/has_events"):
        raise StoreError(
            "the event table holds events: move it to partitions with " + CHECK_FIX)
    await conn.execute(query(DIALECT, "partitioning/functions"))  # a script: simple protocol
    for index_name in KEY_INDEXES:  # an interrupted build leaves an invalid index behind
        await _fetchval(conn, "partitioning/drop_invalid", {"index_name": index_name})
    for _, _, build in TABLES:  # concurrently: writers go on (never inside a transaction)
        if build is not None:
            await conn.execute(statement(DIALECT, build).sql)
    switched = False
    try:
        for _attempt in range(SWITCH_TRIES):
            bound = _bound(interval)
            for table, column, _ in TABLES:
                await _fetchval(conn, "partitioning/prepare",
                                {"tbl": table, "keycol": column, "bound": bound})
                await _fetchval(conn, "partitioning/validate", {"tbl": table})
            try:
                async with conn.transaction():
                    await _fetchval(conn, "partitioning/lock_timeout",
                                    {"lock_timeout": SWITCH_LOCK_TIMEOUT})
                    await _fetchval(conn, "partitioning/switch_all",
                                    {"bound": bound, "step_seconds": int(interval),
                                     "ahead": ahead})
                switched = True
                return True
            except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError,
                    asyncpg.ObjectNotInPrerequisiteStateError):
                continue  # deliveries held a lock past the timeout, or the bound came close
        raise StoreError(f"could not switch to partitions: the tables stayed busy through "
                         f"{SWITCH_TRIES} tries of {SWITCH_LOCK_TIMEOUT}; try again")
    finally:
        if not switched:
            for table, _, _ in TABLES:
                await _fetchval(conn, "partitioning/unprepare", {"tbl": table})


def _bound(interval: float, now: float | None = None) -> datetime:
    """The first partition boundary at least ``BOUND_MARGIN`` (and one interval) from now, a
    multiple of the interval since the epoch, as every partition bound is."""
    now = time.time() if now is None else now
    seconds = math.ceil((now + max(BOUND_MARGIN, interval)) / interval) * interval
    return datetime.fromtimestamp(seconds, UTC)


# -- upkeep ----------------------------------------------------------------------------------

class PartitionKeeper:
    """Partitions made ahead and dropped past retention, for ``sidecar.ops.maintenance``; each
    round on a connection of its own, so that the pool's connections, which deliveries need,
    are never held by the upkeep's waits."""

    def __init__(self, dsn: str, *, interval: float, ahead: int,
                 connect_timeout: float = 10.0) -> None:
        self._dsn = dsn
        self._interval = int(interval)
        self._ahead = ahead
        self._connect_timeout = connect_timeout

    async def make_ahead(self) -> PartitionsMade:
        """Make the partitions ``ahead`` intervals past now (and move rows that went to a
        DEFAULT partition into the partition of their time); the number made. Each partition
        in a transaction of its own whose lock waits give up after ``MAKE_LOCK_TIMEOUT``:
        inserts wait behind the attach's lock on the DEFAULT partition, from its request to
        its commit. A table that stays busy through ``MAKE_TRIES`` tries waits for the next
        round (and is named in ``busy``): the partitions are made ``ahead``, so a round missed
        costs nothing."""
        made = 0
        busy: list[str] = []
        async with self._connection() as conn:
            for table, column, _ in TABLES:
                tries = 0
                while True:
                    try:
                        async with conn.transaction():
                            await _fetchval(conn, "partitioning/lock_timeout",
                                            {"lock_timeout": MAKE_LOCK_TIMEOUT})
                            if not await _fetchval(conn, "partitioning/next", {
                                    "parent": table, "keycol": column,
                                    "step_seconds": self._interval, "ahead": self._ahead}):
                                break
                        made += 1
                    except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
                        tries += 1
                        if tries == MAKE_TRIES:
                            busy.append(table)  # the caller warns; the next round tries again
                            break
                        await asyncio.sleep(0.05 * 2 ** tries)  # deliveries come first
        return PartitionsMade(made, tuple(busy))

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        """Drop the partitions whose rows are all past their provider's ``retention`` (seconds
        by provider key), never one holding a live lease or a waiting queue entry; and each
        table's extent after the drops (a read of the catalog a table, for the gauges). One
        process at a time drops (every proxy runs maintenance): while another holds the
        round's lock, this one only reads the counts."""
        fates: list[tuple[str, str | None]] = []  # (partition, why kept; None: dropped)
        async with self._connection() as conn:
            if await _fetchval(conn, "partitioning/round_lock"):
                fates = await self._drop_all(conn, retention)
            extent = []
            default_rows = 0
            for table, _, _ in TABLES:
                row = await _fetchrow(conn, "partitioning/extent", {"parent": table})
                extent.append((table, row["partitions"], row["last_bound_epoch"]))
                default_rows += row["default_rows"]
        dropped = tuple(name for name, why in fates if why is None)
        kept = tuple((name, why) for name, why in fates if why is not None)
        return PartitionsRetired(dropped, kept, default_rows, tuple(extent))

    async def _drop_all(self, conn: asyncpg.Connection, retention: Mapping[str, float]
                        ) -> list[tuple[str, str | None]]:
        """Each partition looked at, and why it was kept (None: dropped)."""
        fates: list[tuple[str, str | None]] = []
        for part in await _rows(conn, "partitioning/detached"):  # left by a run that died
            try:
                why = await self._retire_detached(conn, part["parent"], part)
            except DRIVER_ERRORS as exc:  # one table that cannot go must not stop retention
                why = f"detached_error:{describe(exc)}"
            fates.append((part["name"], why))
        for table, _, _ in TABLES:
            for part in await _rows(conn, "partitioning/candidates", {"parent": table}):
                why = await self._why_keep(conn, table, part, retention)
                if why is None:
                    why = await self._drop(conn, table, part)
                fates.append((part["name"], why))
        return fates

    async def _why_keep(self, conn: asyncpg.Connection, table: str, part: asyncpg.Record,
                        retention: Mapping[str, float]) -> str | None:
        if part["pending"]:
            return "detach_pending"  # another's DETACH … CONCURRENTLY: an operator's
        providers = await _fetchval(conn, "partitioning/providers", {"part": part["name"]})
        unknown = [p for p in providers if p not in retention]
        if unknown:
            return f"unconfigured_provider:{','.join(sorted(unknown))}"
        longest = max((retention[p] for p in providers), default=0.0)
        if part["age_seconds"] <= longest:
            return "inside_retention"
        return None  # the look for work runs with the detach (_drop)

    async def _drop(self, conn: asyncpg.Connection, table: str,
                    part: asyncpg.Record) -> str | None:
        """Detach, then drop ``part``; None when dropped, else why it was kept."""
        for attempt in range(DETACH_TRIES):
            try:
                async with conn.transaction():
                    await _fetchval(conn, "partitioning/lock_timeout",
                                    {"lock_timeout": UPKEEP_LOCK_TIMEOUT})
                    detached = await _fetchval(conn, "partitioning/detach",
                                               {"parent": table, "part": part["name"]})
                if detached is None:
                    return "gone"  # no partition of the table any more: someone else's act
                if not detached:
                    return "busy"  # a live lease or a waiting queue entry: not detached
                break
            except asyncpg.ObjectInUseError:
                return "busy"  # a queue entry re-driven since the look: detach rolled back
            except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
                if attempt == DETACH_TRIES - 1:
                    return "locked"  # a long transaction holds it: the next round tries again
                await asyncio.sleep(0.05 * 2 ** attempt)  # back off: deliveries come first
        return await self._retire_detached(conn, table, part)

    async def _retire_detached(self, conn: asyncpg.Connection, table: str,
                               part: asyncpg.Record) -> str | None:
        """Drop detached ``part`` (None), or attach it again if it holds work; why it is kept.
        The attach's lock waits are bounded as the detach's: past them it stays detached,
        and the next round finds it by its comment."""
        try:
            async with conn.transaction():
                await _fetchval(conn, "partitioning/lock_timeout",
                                {"lock_timeout": UPKEEP_LOCK_TIMEOUT})
                retired: bool | None = await _fetchval(conn, "partitioning/retire", {
                    "parent": table, "part": part["name"], "lower_bound": part["lower_bound"],
                    "upper_bound": part["upper_bound"]})
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError):
            return "locked_detached"
        if retired is None:
            return "gone"
        return None if retired else "busy_after_detach"

    def _connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        return single_connection(self._dsn, self._connect_timeout,
                                 "webhook-sidecar partitions")


async def _rows(conn: asyncpg.Connection, name: str,
                params: Mapping[str, object] | None = None) -> list[asyncpg.Record]:
    stmt = statement(DIALECT, name)
    records: list[asyncpg.Record] = await conn.fetch(stmt.sql, *stmt.positional(params or {}))
    return records


async def _fetchrow(conn: asyncpg.Connection, name: str,
                    params: Mapping[str, object] | None = None) -> asyncpg.Record:
    rows = await _rows(conn, name, params)
    return rows[0]


async def _fetchval(conn: asyncpg.Connection, name: str,
                    params: Mapping[str, object] | None = None) -> Any:
    rows = await _rows(conn, name, params)
    return rows[0][0] if rows else None
