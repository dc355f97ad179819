"""The partitioned store's one-row-per-key under a role whose default isolation is not READ
COMMITTED, with ``session_settings: false`` (as behind pgbouncer): the store still runs its
inserts at READ COMMITTED, and an insert at any other level is refused, never a second row."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from sidecar.store.postgres import PostgresStore
from tests.integration.partitioned import STEP, partitioned_database

pytestmark = pytest.mark.postgres

BODY = hashlib.sha256(b"{}").digest()


async def isolated_database(dsn: str, level: str) -> None:
    """Give the connecting role ``level`` as its default isolation in this database only."""
    conn = await asyncpg.connect(dsn)
    try:
        db = await conn.fetchval("SELECT current_database()")
        await conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE \"{db}\" "
                           f"SET default_transaction_isolation = '{level}'")
    finally:
        await conn.close()


async def race_claims(dsns: list[str], keys: list[str], copies: int) -> list[bool]:
    """Two stores (two proxies' pools, ``session_settings: false``) claim ``copies`` copies of
    every key at once; each claim's ``won``."""
    stores = [await PostgresStore.connect(dsn, min_size=4, max_size=8, session_settings=False,
                                          statement_cache_size=0, partition_interval=STEP)
              for dsn in dsns]
    try:
        calls = [(stores[n % len(stores)], key, f"owner_{n}")
                 for key in keys for n in range(copies)]
        random.Random(7).shuffle(calls)
        claims = await asyncio.gather(*(s.claim("stripe", key, BODY, 30.0, owner)
                                        for s, key, owner in calls))
    finally:
        for s in stores:
            await s.close()
    return [c.won for c in claims]


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    return await partitioned_database(pg_database_factory)


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
async def test_racing_claims_leave_one_row_per_key_whatever_the_roles_isolation(
        part_dsn: str, level: str) -> None:
    await isolated_database(part_dsn, level)
    keys = [f"evt_{i:03d}" for i in range(60)]
    won = await race_claims([part_dsn, part_dsn], keys, copies=6)
    conn = await asyncpg.connect(part_dsn)
    try:
        assert await conn.fetchval("SHOW transaction_isolation") == level  # the role's default
        rows = await conn.fetch("SELECT event_id, count(*) AS n FROM webhook_event "
                                "GROUP BY event_id")
    finally:
        await conn.close()
    assert sorted((r["event_id"], r["n"]) for r in rows) == [(k, 1) for k in keys]
    assert sum(won) == len(keys)


async def test_an_insert_at_repeatable_read_is_refused_not_doubled(part_dsn: str) -> None:
    """The triggers' own guard, for anything that inserts without the store (an operator's
    script, an older release): refused at any level but READ COMMITTED."""
    await isolated_database(part_dsn, "repeatable read")
    conn = await asyncpg.connect(part_dsn)
    try:
        with pytest.raises(asyncpg.PostgresError, match="READ COMMITTED"):
            await conn.execute(
                "INSERT INTO webhook_nonce (provider, nonce, received_at, body_sha256) "
                "VALUES ('mailgun', 'tok', now(), $1)", BODY)
        with pytest.raises(asyncpg.PostgresError, match="READ COMMITTED"):
            await conn.execute(
                "INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, "
                "state, attempt, updated_at) VALUES ('stripe', 'e', now(), $1, 'processing', "
                "1, now())", BODY)
        async with conn.transaction(isolation="read_committed"):
            await conn.execute(
                "INSERT INTO webhook_nonce (provider, nonce, received_at, body_sha256) "
                "VALUES ('mailgun', 'tok', now(), $1)", BODY)
    finally:
        await conn.close()


@pytest.mark.parametrize(("level", "wrapped"), [("read committed", 0), ("repeatable read", 20)])
async def test_what_pinning_the_level_costs_a_claim(
        part_dsn: str, monkeypatch: pytest.MonkeyPatch, level: str, wrapped: int) -> None:
    """At READ COMMITTED (the default) a claim is its one statement, no transaction around it;
    at another level each claim runs in BEGIN … COMMIT (two round trips more)."""
    await isolated_database(part_dsn, level)
    begins: list[str] = []
    execute = asyncpg.Connection.execute

    async def counting(self: asyncpg.Connection, query: str, *args: object,
                       **kwargs: object) -> str:
        if query.startswith("BEGIN"):
            begins.append(query)
        return await execute(self, query, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncpg.Connection, "execute", counting)
    store = await PostgresStore.connect(part_dsn, min_size=1, max_size=1,
                                        session_settings=False, partition_interval=STEP)
    try:
        for i in range(20):
            assert (await store.claim("stripe", f"evt_{i}", BODY, 30.0, "o")).won
    finally:
        await store.close()
    assert len(begins) == wrapped
    assert all("READ COMMITTED" in b for b in begins)
