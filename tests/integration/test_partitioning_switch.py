"""The switch of a live store to partitions (``store partition``) around its one short
transaction: an index an interrupted build left invalid is built again before it, and a switch
that cannot happen leaves none of its CHECKs behind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from sidecar.core.errors import StoreError
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres import partitioning as switch
from sidecar.store.postgres.partitioning import partition_store
from tests.integration.partitioned import STEP

pytestmark = pytest.mark.postgres

BODY = bytes(32)
BOUNDS = ("SELECT conrelid::regclass::text AS tbl FROM pg_constraint "
          "WHERE conname LIKE '%\\_partition\\_bound'")


@pytest.fixture
async def live_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    """A migrated, unpartitioned store holding two events of one provider."""
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    store = await PostgresStore.connect(dsn, min_size=1, max_size=2)
    try:
        for event_id in ("a", "b"):
            assert (await store.claim("stripe", event_id, BODY, 30.0, "o")).won
    finally:
        await store.close()
    return dsn


@pytest.fixture
async def conn(live_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(live_dsn)
    try:
        yield c
    finally:
        await c.close()


async def test_an_index_left_invalid_is_built_again_before_the_switch(
        live_dsn: str, conn: asyncpg.Connection) -> None:
    # An interrupted CREATE INDEX CONCURRENTLY of the key index (here: a unique one the two
    # rows of one provider refuse) leaves an invalid index of that name behind.
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute("CREATE UNIQUE INDEX CONCURRENTLY webhook_event_key_idx "
                           "ON webhook_event (provider)")
    assert await conn.fetchval("SELECT indisvalid FROM pg_index "
                               "WHERE indexrelid = 'webhook_event_key_idx'::regclass") is False

    assert await partition_store(live_dsn, interval=STEP, ahead=2)

    index = await conn.fetchrow(
        "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) AS def FROM pg_index AS i "
        "WHERE i.indexrelid = 'webhook_event_key_idx'::regclass")
    assert index["indisvalid"] and index["def"].endswith("(provider, event_id)")
    assert await conn.fetchval("SELECT count(*) FROM webhook_event") == 2


async def test_a_switch_that_cannot_happen_leaves_no_check_behind(
        live_dsn: str, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deliveries hold the tables through every try: the switch gives up, and the CHECKs it
    added beforehand go (left, each would refuse every insert once its bound is past)."""
    monkeypatch.setattr(switch, "SWITCH_TRIES", 2)
    holder = await asyncpg.connect(live_dsn)
    try:
        await holder.execute("BEGIN; LOCK TABLE webhook_queue IN ROW EXCLUSIVE MODE")
        with pytest.raises(StoreError, match="tables stayed busy"):
            await partition_store(live_dsn, interval=STEP, ahead=2)
    finally:
        await holder.close()
    assert not await conn.fetch(BOUNDS)
    assert await conn.fetchval(
        "SELECT relkind::text FROM pg_class WHERE oid = 'webhook_event'::regclass") == "r"
    assert await partition_store(live_dsn, interval=STEP, ahead=2)  # once the tables are free
