"""The quoting of retention's DDL (``partition_ddl``) against the server itself: a table named
by ``quote_ident`` is stored under exactly that name, a literal reads back as its text, and
the scripts run as written on a table with an awkward name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import pytest

from sidecar.store.postgres.partition_ddl import attach_again, qualified, quote_ident, quote_literal

pytestmark = pytest.mark.postgres

NAMES = ["plain", "Mixed Case", 'a"b', 'x"; DROP TABLE t; --', "évènement", "a" * 63]
TEXTS = ["it's", "a\\b'", "2026-12-04T18:00:00+00:00", "$$", "'; SELECT 1; --"]


@pytest.fixture
async def conn(pg_database_factory: Callable[[], Awaitable[str]]
               ) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(await pg_database_factory())
    try:
        yield c
    finally:
        await c.close()


async def test_a_quoted_name_is_stored_as_it_is(conn: asyncpg.Connection) -> None:
    for name in NAMES:
        await conn.execute(f"CREATE TABLE {quote_ident(name)} (x int)")
        assert await conn.fetchval(
            "SELECT relname FROM pg_class WHERE relname = $1", name) == name, name
        await conn.execute(f"DROP TABLE {qualified('public', name)}")


async def test_a_literal_reads_back_as_its_text(conn: asyncpg.Connection) -> None:
    for conforming in ("on", "off"):
        await conn.execute(f"SET standard_conforming_strings = {conforming}")
        for text in TEXTS:
            assert await conn.fetchval(f"SELECT {quote_literal(text)}::text") == text
            assert await conn.fetchval(
                "SELECT quote_literal($1::text)", text) == quote_literal(text)


async def test_attaching_again_runs_on_an_awkward_name(conn: asyncpg.Connection) -> None:
    lo, hi = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    await conn.execute('CREATE TABLE "Parent" (at timestamptz) PARTITION BY RANGE (at); '
                       'CREATE TABLE "we""ird" (at timestamptz)')
    await conn.execute(attach_again(
        parent=quote_ident("Parent"), part=qualified("public", 'we"ird'),
        fence=quote_ident('we"ird_bound'), key=quote_ident("at"), lower=lo, upper=hi))
    bound = await conn.fetchval("SELECT pg_get_expr(relpartbound, oid) FROM pg_class "
                                "WHERE relname = 'we\"ird'")
    assert bound.startswith("FOR VALUES FROM ('2026-01-01") and "TO ('2026-01-02" in bound
    assert not await conn.fetchval("SELECT count(*) FROM pg_constraint WHERE conrelid <> 0 "
                                   "AND contype = 'c'")  # the fence went
