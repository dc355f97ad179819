"""A partitioned store behind pgbouncer in transaction mode (``statement_cache_size: 0``,
``session_settings: false``, as docs/operations.md says): the partition upkeep leaves no lock on
a pooled server connection and works through the pooler, and racing claims leave one row per
key even when the role's default isolation is REPEATABLE READ."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from sidecar.config.loader import parse_config
from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.runtime.wiring import partition_keeper
from sidecar.store.postgres import PostgresStore
from tests.integration.partitioned import STEP, make_past, partitioned_database, reasons
from tests.integration.test_partitioning_isolation import isolated_database, race_claims
from tests.pgbouncer import PgBouncer
from tests.support import base_config

pytestmark = pytest.mark.postgres

BODY = bytes(32)
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b""), 1.0)
OLD = "webhook_event_old"


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    """Partitions of a minute, and one ten minutes back for rows past retention."""
    dsn = await partitioned_database(pg_database_factory)
    await make_past(dsn, [("webhook_event", OLD, 10)])
    return dsn


async def test_partition_upkeep_through_pgbouncer_leaves_no_lock_behind(
        part_dsn: str, pgbouncer: PgBouncer) -> None:
    pooled = pgbouncer.dsn(part_dsn)
    store = await PostgresStore.connect(pooled, statement_cache_size=0, session_settings=False,
                                        partition_interval=STEP)
    try:
        await store.claim("stripe", "old", BODY, 30.0, "o")
        assert await store.complete("stripe", "old", 1, DONE)
    finally:
        await store.close()
    direct = await asyncpg.connect(part_dsn)
    try:
        await direct.execute(
            "UPDATE webhook_event SET received_at = (SELECT lower_bound + interval '30 s' "
            "FROM webhook_partitions('webhook_event') WHERE part = $1::regclass)", OLD)
        data = base_config("http://127.0.0.1:9", pooled)
        data["store"] |= {"statement_cache_size": 0, "session_settings": False,
                          "partitioning": {"interval": "1m", "ahead": 4}}
        keeper = partition_keeper(parse_config(data, env={}).store)
        assert keeper is not None
        rounds = []
        for _ in range(3):  # statements reused across rounds and server connections
            made = await keeper.make_ahead()
            rounds.append(await keeper.retire({"stripe": 120.0}))
            assert made.busy == ()
        assert OLD in rounds[0].dropped
        assert all(not r.kept or {why for _, why in reasons(r)} == {"inside_retention"}
                   for r in rounds)
        # Nothing left held on pgbouncer's server connections, which outlive the keeper's.
        assert await direct.fetchval(
            "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND a.datname = current_database()") == 0
        assert await direct.fetchval(  # pgbouncer's own connections did the work
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()") > 0
    finally:
        await direct.close()


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
async def test_racing_claims_through_pgbouncer_leave_one_row_per_key(
        part_dsn: str, pgbouncer: PgBouncer, level: str) -> None:
    await isolated_database(part_dsn, level)
    pooled = pgbouncer.dsn(part_dsn)
    keys = [f"evt_{i:03d}" for i in range(60)]
    won = await race_claims([pooled, pooled], keys, copies=6)
    direct = await asyncpg.connect(part_dsn)
    try:
        rows = await direct.fetch("SELECT event_id, count(*) AS n FROM webhook_event "
                                  "WHERE event_id LIKE 'evt_%' GROUP BY event_id")
    finally:
        await direct.close()
    assert sorted((r["event_id"], r["n"]) for r in rows) == [(k, 1) for k in keys]
    assert sum(won) == len(keys)
