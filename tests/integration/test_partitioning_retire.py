"""Retention's looks at a partition's work: after a detach, a queue-mode redelivery claimed in
between keeps neither the detached old row (no second row for the key) nor loses its entry to
the old partition's drop; before it, a look too long for its bound gives take-overs back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.store.postgres import PostgresStore
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from tests.integration import partitioned
from tests.integration.partitioned import STEP, make_past, partitioned_database, reasons

pytestmark = pytest.mark.postgres
conn, store = partitioned.conn, partitioned.store  # the fixtures on part_dsn

BODY = bytes(32)
REQUEST = StoredRequest(method="POST", path="/webhooks/stripe", headers=(), body=b"{}")
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b""), 1.0)
FAILED = AttemptResult(EventState.FAILED, Outcome.RESPONSE, RecordedResponse(500, (), b""), 1.0)
OLD = "webhook_event_old"


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    """Partitions of a minute, and one ten minutes back for rows past retention."""
    dsn = await partitioned_database(pg_database_factory)
    await make_past(dsn, [("webhook_event", OLD, 10)])
    return dsn


async def _done_then_left_detached(store: PostgresStore, conn: asyncpg.Connection,
                                   event_id: str) -> None:
    """Event ``event_id`` done (no queue entry) in the old partition, which a round detached and
    died before retiring (as the retire's lock wait giving up leaves it too)."""
    assert (await store.enqueue("stripe", event_id, BODY, REQUEST)).accepted
    [work] = await store.take_queued("stripe", 1, 30.0, "w")
    assert await store.settle_queued("stripe", event_id, work.tries,
                                     Settlement(EventState.DONE, DONE))
    await conn.execute(
        "UPDATE webhook_event SET received_at = (SELECT lower_bound + interval '30 s' "
        "FROM webhook_partitions('webhook_event') WHERE part = $2::regclass) "
        "WHERE event_id = $1", event_id, OLD)
    assert not await conn.fetchval("SELECT count(*) FROM webhook_queue")
    async with conn.transaction():
        assert await conn.fetchval(
            "SELECT webhook_partition_detach('webhook_event', $1::regclass)", OLD)


@pytest.mark.parametrize("entry", ["waiting", "dead"])
async def test_a_redelivery_after_the_detach_keeps_one_row_and_its_entry(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection, entry: str) -> None:
    await _done_then_left_detached(store, conn, "evt_e")
    again = await store.enqueue("stripe", "evt_e", BODY, REQUEST)  # claimed as new, as designed
    assert again.accepted
    if entry == "dead":
        await conn.execute("UPDATE webhook_queue SET due_at = NULL WHERE event_id = 'evt_e'")

    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0})

    assert OLD in retired.dropped
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_event WHERE event_id = 'evt_e'") == 1
    assert await conn.fetchval("SELECT to_regclass($1)", OLD) is None
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_queue WHERE event_id = 'evt_e'") == 1


async def test_a_look_longer_than_its_bound_keeps_the_partition_and_frees_take_overs(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """The look for work runs under the lock take-overs wait for (they answer "in flight"
    meanwhile). A partition too large to look at within the keeper's bound (here: a look made
    to last a minute, as the scan of a huge partition would) is kept for a later round, and
    the lock is let go at the bound, not when the scan ends."""
    await store.claim("stripe", "late", BODY, 30.0, "o")
    assert await store.complete("stripe", "late", 1, FAILED)
    await conn.execute(
        "UPDATE webhook_event SET received_at = (SELECT lower_bound + interval '30 s' "
        "FROM webhook_partitions('webhook_event') WHERE part = $1::regclass) "
        "WHERE event_id = 'late'", OLD)
    await conn.execute("""
        ALTER FUNCTION webhook_partition_busy(regclass, regclass)
            RENAME TO webhook_partition_busy_real;
        CREATE FUNCTION webhook_partition_busy(part regclass, detached_from regclass DEFAULT NULL)
        RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            PERFORM pg_sleep(60);  -- the scan of a huge partition
            RETURN webhook_partition_busy_real(part, detached_from);
        END $$""")
    loop = asyncio.get_running_loop()
    started = loop.time()
    retired = await asyncio.wait_for(
        PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0}), 30)
    assert loop.time() - started < 15  # the default bound (5 s), not the minute
    assert (OLD, "look_timeout") in reasons(retired)
    assert await asyncio.wait_for(store.take_over("stripe", "late", 30.0, "o2"), 5) == 2
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_event WHERE event_id = 'late'") == 1
