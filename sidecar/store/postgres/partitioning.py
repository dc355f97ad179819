"""Partitioned retention on PostgreSQL (``store.partitioning``): the switch of a store to
partitions, and the check that a database matches the config; the upkeep of the partitions
(made ahead, dropped past retention) is :mod:`~sidecar.store.postgres.partition_upkeep`. The
design and the options rejected: docs/design.md, "Partitioned retention".

Guarantees:

- **One row per key across partitions.** ``webhook_event`` and ``webhook_nonce`` are unique on
  their key by a trigger (``partitioning/functions.sql``), not an index: no unique index of a
  partitioned table can leave out the partition key. The verbs' SQL is the same on both shapes.
- **A switch stops deliveries for one short transaction**: only catalog changes, under a
  ``lock_timeout`` (a wait past it gives up and tries again); the index builds and the scan
  that let the attach skip its own scan run before it, without blocking writers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg

from sidecar.core.errors import SchemaError, StoreError
from sidecar.store import migrations
from sidecar.store.postgres import partition_ddl as ddl
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
    row = await fetchrow(conn, "partitioning_state")
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
        DIALECT, await migrations.recorded(lambda name, params: rows(conn, name, params)))
    if (shape := await read_shape(conn)).partitioned:
        check_shape(shape, interval)
        # This release's functions replace an older one's (CREATE OR REPLACE: a brief catalog
        # lock, no table lock), so `migrate` after an upgrade brings them up to date.
        await conn.execute(query(DIALECT, "partitioning/functions"))
        return False
    if only_if_empty and await fetchval(conn, "partitioning/has_events"):
        raise StoreError(
            "the event table holds events: move it to partitions with " + CHECK_FIX)
    await conn.execute(query(DIALECT, "partitioning/functions"))  # a script: simple protocol
    for index_name in KEY_INDEXES:  # an interrupted build leaves an invalid index behind
        for invalid in await rows(conn, "partitioning/invalid_index", {"index_name": index_name}):
            # Dropped so that the next build makes it again: IF NOT EXISTS would keep it, and
            # the attach would build it itself, inside the switch, every delivery waiting.
            await conn.execute(ddl.drop_index(invalid["schema"], invalid["name"]))
    for _, _, build in TABLES:  # concurrently: writers go on (never inside a transaction)
        if build is not None:
            await conn.execute(statement(DIALECT, build).sql)
    switched = False
    try:
        for _attempt in range(SWITCH_TRIES):
            bound = _bound(interval)
            for table, column, _ in TABLES:  # each statement a transaction of its own
                await conn.execute(ddl.switch_prepare(table=table, key=column, bound=bound))
                await conn.execute(ddl.switch_validate(table))
            try:
                async with conn.transaction(isolation="read_committed"):
                    await fetchval(conn, "partitioning/lock_timeout",
                                    {"lock_timeout": SWITCH_LOCK_TIMEOUT})
                    await fetchval(conn, "partitioning/switch_all",
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
                if await fetchval(conn, "partitioning/plain_table", {"tbl": table}):
                    await conn.execute(ddl.switch_unprepare(table))


def _bound(interval: float, now: float | None = None) -> datetime:
    """The first partition boundary at least ``BOUND_MARGIN`` (and one interval) from now, a
    multiple of the interval since the epoch, as every partition bound is."""
    now = time.time() if now is None else now
    seconds = math.ceil((now + max(BOUND_MARGIN, interval)) / interval) * interval
    return datetime.fromtimestamp(seconds, UTC)


async def rows(conn: asyncpg.Connection, name: str,
               params: Mapping[str, object] | None = None) -> list[asyncpg.Record]:
    stmt = statement(DIALECT, name)
    records: list[asyncpg.Record] = await conn.fetch(stmt.sql, *stmt.positional(params or {}))
    return records


async def fetchrow(conn: asyncpg.Connection, name: str,
                   params: Mapping[str, object] | None = None) -> asyncpg.Record:
    found = await rows(conn, name, params)
    return found[0]


async def fetchval(conn: asyncpg.Connection, name: str,
                   params: Mapping[str, object] | None = None) -> Any:
    found = await rows(conn, name, params)
    return found[0][0] if found else None
