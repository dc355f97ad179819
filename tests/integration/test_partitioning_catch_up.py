"""Catching up from the DEFAULT partition while deliveries flow: the partition for *now* is
made while claims of now go on, none of them waits long, and every row is in its partition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from sidecar.store.postgres import PostgresStore
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from tests.integration import partitioned
from tests.integration.partitioned import STEP, partitioned_database

pytestmark = pytest.mark.postgres
conn, store = partitioned.conn, partitioned.store  # the fixtures on part_dsn

# How long a claim may wait while the partition of its interval is made: the make's lock wait
# (20 ms) and the move of the interval's rows with the attach's check of the DEFAULT partition
# (here a few hundred rows), with room for a busy test machine.
LONGEST_WAIT = 1.0


BODY = bytes(32)


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    return await partitioned_database(pg_database_factory)


async def _fall_behind(conn: asyncpg.Connection) -> None:
    """As if maintenance had been down: no partition for the current interval or after it."""
    for table in ("webhook_event", "webhook_attempt", "webhook_nonce"):
        for part in await conn.fetch(
                "SELECT part::text FROM webhook_partitions($1::regclass) "
                "WHERE NOT is_default AND upper_bound > clock_timestamp()", table):
            await conn.execute(f"DROP TABLE {part['part']}")


async def test_the_partition_for_now_is_made_while_claims_of_now_flow(
        part_dsn: str, conn: asyncpg.Connection, store: PostgresStore) -> None:
    await _fall_behind(conn)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    waits: list[float] = []
    target = 200  # rows of now in the DEFAULT partition, and more coming
    reached = asyncio.Event()

    async def claims(n: int) -> None:
        i = 0
        while not stop.is_set():
            started = loop.time()
            assert (await store.claim("stripe", f"flow_{n}_{i}", BODY, 30.0, "o")).won
            waits.append(loop.time() - started)
            if len(waits) >= target:
                reached.set()
            i += 1

    flows = [asyncio.create_task(claims(n)) for n in range(4)]
    try:
        await asyncio.wait_for(reached.wait(), 30)
        made = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).make_ahead()
        target = len(waits) + 100  # the flows go on after it
        reached.clear()
        await asyncio.wait_for(reached.wait(), 30)
    finally:
        stop.set()
        await asyncio.gather(*flows)
    assert made.busy == () and made.made >= 3 * 3  # now and two ahead, for three tables
    assert await conn.fetchval("SELECT count(*) FROM webhook_event_default") == 0
    assert await conn.fetchval("SELECT count(*) FROM webhook_event") == len(waits)
    assert max(waits) < LONGEST_WAIT, max(waits)


async def test_a_partition_refused_by_a_row_of_its_range_is_busy_not_an_error(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    """An attach the DEFAULT partition's rows refuse (23514: a late row of a past range came in
    after the move; here every attach of the event table is made to refuse) leaves that table
    for the next round, named busy; the other tables' partitions are made."""
    await _fall_behind(conn)
    await conn.execute("""
        ALTER FUNCTION webhook_partition_attach_next(regclass, text, text, timestamptz,
                                                     timestamptz)
            RENAME TO webhook_partition_attach_next_real;
        CREATE FUNCTION webhook_partition_attach_next(parent regclass, keycol text,
                                                      part_name text, lo timestamptz,
                                                      hi timestamptz)
        RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            IF parent = 'webhook_event'::regclass THEN
                RAISE EXCEPTION 'updated partition constraint for default partition would be '
                                'violated by some row' USING ERRCODE = 'check_violation';
            END IF;
            RETURN webhook_partition_attach_next_real(parent, keycol, part_name, lo, hi);
        END $$""")
    made = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).make_ahead()
    assert made.busy == ("webhook_event",)
    assert made.made >= 2 * 3  # now and two ahead, for the two other tables
