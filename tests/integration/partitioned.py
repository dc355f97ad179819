"""The partitioned PostgreSQL store the partitioning tests share: a new database switched to
partitions of ``STEP`` seconds, past partitions made at chosen bounds so rows can be dated into
them, and the ``conn`` and ``store`` fixtures on a module's ``part_dsn`` (each module defines
``part_dsn`` with the partitions it needs and imports the fixtures it uses)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import timedelta

import asyncpg
import pytest

from sidecar.core.partition_retention import PartitionsRetired
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres.partitioning import partition_store

STEP = 60  # seconds: partitions of a minute


async def partitioned_database(make: Callable[[], Awaitable[str]]) -> str:
    """A new database (from ``make``), migrated and switched to partitions of ``STEP``."""
    dsn = await make()
    await migrate_postgres(dsn)
    assert await partition_store(dsn, interval=STEP, ahead=2, only_if_empty=True)
    return dsn


async def make_past(dsn: str, parts: Iterable[tuple[str, str, int]]) -> None:
    """Each ``(table, name, back)``: the partition ``name`` of ``table`` for the interval
    ``back`` steps before the first one the switch made."""
    conn = await asyncpg.connect(dsn)
    try:
        first = await conn.fetchval("SELECT min(lower_bound) FROM webhook_partitions("
                                    "'webhook_event') WHERE NOT is_default")
        for table, name, back in parts:
            lo = first - timedelta(seconds=STEP * back)
            hi = lo + timedelta(seconds=STEP)
            await conn.execute(f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM "
                               f"('{lo.isoformat()}') TO ('{hi.isoformat()}')")
    finally:
        await conn.close()


def reasons(retired: PartitionsRetired) -> list[tuple[str, str]]:
    """The partitions a round kept, each with its reason as the ``partition_kept`` line
    renders it (``str()`` of the typed reason)."""
    return [(name, str(kept)) for name, kept in retired.kept]


@pytest.fixture
async def conn(part_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(part_dsn)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def store(part_dsn: str) -> AsyncIterator[PostgresStore]:
    s = await PostgresStore.connect(part_dsn, min_size=2, max_size=8, partition_interval=STEP)
    try:
        yield s
    finally:
        await s.close()
