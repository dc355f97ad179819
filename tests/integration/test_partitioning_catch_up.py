"""Catching up from the DEFAULT partition while deliveries flow: the partition for *now* is
made while claims of now go on, none of them waits long, and every row is in its partition."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from sidecar.store.postgres import PostgresStore
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from tests.integration.test_partitioning import (  # noqa: F401 (fixtures)
    BODY,
    STEP,
    conn,
    part_dsn,
    store,
)

pytestmark = pytest.mark.postgres

# How long a claim may wait while the partition of its interval is made: the make's lock wait
# (20 ms) and the move of the interval's rows with the attach's check of the DEFAULT partition
# (here a few hundred rows), with room for a busy test machine.
LONGEST_WAIT = 1.0


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

    async def claims(n: int) -> None:
        i = 0
        while not stop.is_set():
            started = loop.time()
            assert (await store.claim("stripe", f"flow_{n}_{i}", BODY, 30.0, "o")).won
            waits.append(loop.time() - started)
            i += 1

    flows = [asyncio.create_task(claims(n)) for n in range(4)]
    try:
        while len(waits) < 200:  # rows of now in the DEFAULT partition, and more coming
            await asyncio.sleep(0.01)  # polling the flows' progress, not a delay
        made = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).make_ahead()
        count_at_make = len(waits)
        while len(waits) < count_at_make + 100:  # the flows go on after it
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.gather(*flows)
    assert made.busy == () and made.made >= 3 * 3  # now and two ahead, for three tables
    assert await conn.fetchval("SELECT count(*) FROM webhook_event_default") == 0
    assert await conn.fetchval("SELECT count(*) FROM webhook_event") == len(waits)
    assert max(waits) < LONGEST_WAIT, max(waits)
