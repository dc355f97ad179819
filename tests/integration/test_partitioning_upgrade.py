"""Upgrading a partitioned store: this release's ``migrate`` no longer installs
``webhook_partition_retire`` (the retire runs from Python) and leaves the previous release's in
place, so that older replicas keep retiring during a rolling upgrade; the two releases finish
each other's detached tables."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from sidecar.store.postgres.partitioning import partition_store
from tests.integration import partitioned
from tests.integration.partitioned import STEP, make_past, partitioned_database

pytestmark = pytest.mark.postgres
conn, store = partitioned.conn, partitioned.store  # the fixtures on part_dsn

PREVIOUS_RETIRE = (Path(__file__).parent / "previous_partition_retire.sql").read_text()
SIGNATURE = "webhook_partition_retire(regclass, regclass, timestamptz, timestamptz)"
BODY = bytes(32)
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b""), 1.0)


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    dsn = await partitioned_database(pg_database_factory)
    await make_past(dsn, [("webhook_event", f"webhook_event_past{n}", n) for n in (4, 5)])
    return dsn


async def _retire_function(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT to_regprocedure($1) IS NOT NULL", SIGNATURE))


async def _done_and_left_detached(store: PostgresStore, conn: asyncpg.Connection,
                                  event_id: str, part: str) -> None:
    """A done event in ``part``, which a round detached and died before retiring."""
    await store.claim("stripe", event_id, BODY, 30.0, "o")
    assert await store.complete("stripe", event_id, 1, DONE)
    await conn.execute(
        "UPDATE webhook_event SET received_at = (SELECT lower_bound + interval '30 s' "
        "FROM webhook_partitions('webhook_event') WHERE part = $2::text::regclass) "
        "WHERE event_id = $1", event_id, part)
    async with conn.transaction():
        assert await conn.fetchval(
            "SELECT webhook_partition_detach('webhook_event', $1::text::regclass)", part)


async def test_migrate_leaves_the_previous_retire_and_both_releases_retire(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    assert not await _retire_function(conn)  # a new store never had it
    await conn.execute(PREVIOUS_RETIRE)  # a store the previous release partitioned

    # `migrate` of this release on it: the numbered steps, then its partitioning functions.
    assert not await migrate_postgres(part_dsn)
    assert not await partition_store(part_dsn, interval=STEP, ahead=2, only_if_empty=True)
    assert await _retire_function(conn)

    await _done_and_left_detached(store, conn, "old5", "webhook_event_past5")
    await _done_and_left_detached(store, conn, "old4", "webhook_event_past4")
    # An older replica's round retires past5, as that release's retire.sql calls it.
    async with conn.transaction():
        assert await conn.fetchval(
            "SELECT webhook_partition_retire(d.parent, d.part, d.lower_bound, d.upper_bound) "
            "FROM webhook_partitions_detached() AS d "
            "WHERE d.part = 'webhook_event_past5'::regclass") is True
    # This release's round finds the other one by its comment.
    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0})

    assert retired.dropped == ("webhook_event_past4",)
    assert not retired.kept
    for part in ("webhook_event_past5", "webhook_event_past4"):
        assert await conn.fetchval("SELECT to_regclass($1)", part) is None
    assert not await conn.fetch("SELECT * FROM webhook_partitions_detached()")
    assert await conn.fetchval("SELECT count(*) FROM webhook_event") == 0
