"""Schema migrations: forward-only, idempotent, safe to run concurrently, and the migrated
schema is the declared one (HOT-friendly: only immutable columns indexed)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from sidecar.core.errors import SchemaError, StoreError
from sidecar.store import migrations
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.sqlfiles import statement
from sidecar.store.sqlite import SQLiteStore
from tests.pgserver import free_port

MakeDb = Callable[[], Awaitable[str]]

ALL_PG = [m.name for m in migrations.load_migrations("postgres")]

# The declared shape of webhook_event (column -> type), for both dialects.
PG_COLUMNS = {
    "provider": ("text", "NO"),
    "event_id": ("text", "NO"),
    "received_at": ("timestamp with time zone", "NO"),
    "body_sha256": ("bytea", "NO"),
    "state": ("text", "NO"),
    "attempt": ("integer", "NO"),
    "lease_owner": ("text", "YES"),
    "lease_until": ("timestamp with time zone", "YES"),
    "updated_at": ("timestamp with time zone", "NO"),
    "outcome": ("text", "YES"),
    "response_status": ("integer", "YES"),
    "response_headers": ("jsonb", "YES"),
    "response_body": ("bytea", "YES"),
    "latency_ms": ("double precision", "YES"),
    "payload_body": ("bytea", "YES"),
    "payload_request": ("jsonb", "YES"),
}
SQLITE_COLUMNS = {
    "provider": "TEXT",
    "event_id": "TEXT",
    "received_at": "REAL",
    "body_sha256": "BLOB",
    "state": "TEXT",
    "attempt": "INTEGER",
    "lease_owner": "TEXT",
    "lease_until": "REAL",
    "updated_at": "REAL",
    "outcome": "TEXT",
    "response_status": "INTEGER",
    "response_headers": "TEXT",
    "response_body": "BLOB",
    "latency_ms": "REAL",
    "payload_body": "BLOB",
    "payload_request": "TEXT",
}
MUTABLE = {
    "state",
    "attempt",
    "lease_owner",
    "lease_until",
    "updated_at",
    "outcome",
    "response_status",
    "response_headers",
    "response_body",
    "latency_ms",
}


# == shipped migration files =================================================================


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_shipped_migrations_are_numbered_from_one_without_gaps(dialect: str) -> None:
    shipped = migrations.load_migrations(dialect)
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))
    assert shipped[0].name == "0001_init"
    assert migrations.latest_version(shipped) == len(shipped)


def test_migration_helpers() -> None:
    shipped = migrations.load_migrations("postgres")
    assert migrations.version_of("0007_add_things") == 7
    assert migrations.version_of("init") is None
    assert migrations.applied_version([]) == 0
    assert migrations.applied_version(["0001_init", "0003_x", "junk"]) == 3
    assert migrations.pending(shipped, {"0001_init"}) == list(shipped[1:])
    assert migrations.pending(shipped, set()) == list(shipped)


def test_split_sqlite_script_respects_literals_and_triggers() -> None:
    script = """
        -- leading comment
        CREATE TABLE t (a TEXT DEFAULT ';');
        INSERT INTO t VALUES ('x;y');
        CREATE TRIGGER tr AFTER INSERT ON t BEGIN
            UPDATE t SET a = 'z;' WHERE a = new.a;
        END;
        -- trailing comment
    """
    statements = migrations.split_sqlite_script(script)
    assert len(statements) == 3
    assert statements[2].startswith("CREATE TRIGGER") and statements[2].endswith("END;")
    with pytest.raises(RuntimeError):
        migrations.split_sqlite_script("CREATE TABLE t (a TEXT)")


# == PostgreSQL ==============================================================================


async def _pending_postgres(dsn: str) -> list[str]:
    """What ``migrate_postgres`` would apply, read through the store's own bookkeeping (a store
    made from a bare pool: ``connect`` refuses a database that is behind)."""
    store = PostgresStore(await asyncpg.create_pool(dsn, min_size=1, max_size=1),
                          acquire_timeout=2.0)
    try:
        applied = await store.applied_migrations()
    finally:
        await store.close()
    return [m.name for m in migrations.pending(migrations.load_migrations("postgres"), applied)]


@pytest.mark.postgres
async def test_migrate_applies_everything_once_and_then_nothing(
    pg_database_factory: MakeDb,
) -> None:
    dsn = await pg_database_factory()
    assert await _pending_postgres(dsn) == ALL_PG

    assert await migrate_postgres(dsn) == ALL_PG
    assert await migrate_postgres(dsn) == []
    assert await _pending_postgres(dsn) == []
    conn = await asyncpg.connect(dsn)
    try:
        recorded = await conn.fetch("SELECT name FROM webhook_sidecar_migrations ORDER BY name")
    finally:
        await conn.close()
    assert [r["name"] for r in recorded] == ALL_PG


@pytest.mark.postgres
async def test_connect_refuses_an_unmigrated_database(pg_database_factory: MakeDb) -> None:
    dsn = await pg_database_factory()

    with pytest.raises(SchemaError) as info:
        await PostgresStore.connect(dsn)
    message = str(info.value)
    assert f"at version 0, this release needs {len(ALL_PG)}" in message
    assert "webhook-sidecar migrate" in message
    assert await _pending_postgres(dsn) == ALL_PG, "connect never migrates"

    await migrate_postgres(dsn)
    store = await PostgresStore.connect(dsn)
    try:
        await store.ping()
    finally:
        await store.close()


@pytest.mark.postgres
async def test_connect_accepts_a_schema_newer_than_this_release(
    pg_database_factory: MakeDb,
) -> None:
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO webhook_sidecar_migrations (name) VALUES ('9999_future')")
    finally:
        await conn.close()
    store = await PostgresStore.connect(dsn)  # an older replica during a rolling upgrade
    await store.close()


@pytest.mark.postgres
async def test_concurrent_migrate_runs_both_succeed_and_apply_once(
    pg_database_factory: MakeDb,
) -> None:
    dsn = await pg_database_factory()

    results = await asyncio.gather(*(migrate_postgres(dsn) for _ in range(3)))

    # Each migration is applied by exactly one run (which one is up to the race: a run that
    # waited on the lock applies what is still missing, in order).
    applied = [name for result in results for name in result]
    assert sorted(applied) == ALL_PG and all(r == sorted(r) for r in results)
    conn = await asyncpg.connect(dsn)
    try:
        count = await conn.fetchval("SELECT count(*) FROM webhook_sidecar_migrations")
    finally:
        await conn.close()
    assert count == len(ALL_PG)


@pytest.mark.postgres
async def test_migrate_of_an_unreachable_server_raises_store_error() -> None:
    with pytest.raises(StoreError):
        await migrate_postgres(
            f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", connect_timeout=2.0
        )


@pytest.mark.postgres
async def test_migrated_postgres_schema_is_the_declared_one(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        columns = await conn.fetch(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'webhook_event'"
        )
        indexes = await conn.fetch(
            """
            SELECT i.relname AS name, ix.indisprimary AS primary_key,
                   array_agg(a.attname ORDER BY k.ord) AS columns
              FROM pg_index ix
              JOIN pg_class i ON i.oid = ix.indexrelid
              JOIN pg_class t ON t.oid = ix.indrelid
              CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
             WHERE t.relname = 'webhook_event'
             GROUP BY i.relname, ix.indisprimary
            """
        )
        predicates = await conn.fetchval(
            "SELECT count(*) FROM pg_index WHERE indrelid = 'webhook_event'::regclass"
            " AND (indpred IS NOT NULL OR indexprs IS NOT NULL)"
        )
        options = await conn.fetchval(
            "SELECT reloptions FROM pg_class WHERE oid = 'webhook_event'::regclass"
        )
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, state,"
                " attempt, updated_at) VALUES ('p', 'e', now(), '\\x00', 'bogus', 1, now())"
            )
    finally:
        await conn.close()

    assert {r["column_name"]: (r["data_type"], r["is_nullable"]) for r in columns} == PG_COLUMNS
    by_name = {r["name"]: (r["primary_key"], list(r["columns"])) for r in indexes}
    assert by_name == {
        "webhook_event_pkey": (True, ["provider", "event_id"]),
        "webhook_event_received_at_idx": (False, ["provider", "received_at"]),
    }
    indexed = {c for _, cols in by_name.values() for c in cols}
    assert not indexed & MUTABLE, "mutable columns must stay unindexed (HOT updates)"
    assert predicates == 0, "no partial or expression index (their columns count as indexed)"
    assert "fillfactor=80" in (options or [])


@pytest.mark.postgres
async def test_state_transitions_are_hot_updates(pg_database_factory: MakeDb) -> None:
    """Every UPDATE the store issues (take over, complete, release) is heap-only: it writes no
    index entry. Checked on the adapter's own SQL inside one transaction, whose statistics
    pg_stat_xact_user_tables reports exactly."""
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    conn = await asyncpg.connect(dsn)

    async def run(name: str, **params: object) -> object:
        stmt = statement("postgres", name)
        return await conn.fetchval(stmt.sql, *stmt.positional(params))

    try:
        async with conn.transaction():
            for i in range(20):
                key = {"provider": "stripe", "event_id": f"evt_{i}"}
                claim = {"body_sha256": b"h", "lease_seconds": 0.0, "owner": "a",
                         "payload_body": None, "payload_request": None}
                assert await run("claim", **key, **claim) is True  # the `won` column
                assert await run("take_over", **key, lease_seconds=30.0, owner="b") == 2
                assert await run("release", **key, force=True) == 2
                assert await run("take_over", **key, lease_seconds=30.0, owner="c") == 3
                done = {"state": "done", "outcome": "response", "response_status": 200,
                        "response_headers": '[["a", "b"]]', "response_body": b"ok",
                        "latency_ms": 1.5}
                assert await run("complete", **key, attempt=3, **done) == 3
            stats = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                " WHERE relname = 'webhook_event'"
            )
    finally:
        await conn.close()
    assert stats["n_tup_upd"] == 80
    assert stats["n_tup_hot_upd"] == 80


# == SQLite ==================================================================================


def _sqlite_schema(path: Path) -> tuple[dict[str, str], dict[str, list[str]], list[str], str]:
    con = sqlite3.connect(path)
    try:
        columns = {r[1]: r[2] for r in con.execute("PRAGMA table_info(webhook_event)")}
        indexes = {
            name: [c[2] for c in con.execute(f"PRAGMA index_info('{name}')")]
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'webhook_event'"
            )
        }
        names = [r[0] for r in con.execute("SELECT name FROM webhook_sidecar_migrations")]
        (mode,) = con.execute("PRAGMA journal_mode").fetchone()
    finally:
        con.close()
    return columns, indexes, names, mode


async def test_sqlite_open_migrates_once_and_reopening_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    for _ in range(2):
        store = await SQLiteStore.open(path)
        await store.close()

    columns, indexes, names, mode = _sqlite_schema(path)
    assert columns == SQLITE_COLUMNS
    assert sorted(indexes.values()) == [["provider", "event_id"], ["provider", "received_at"]]
    assert not {c for cols in indexes.values() for c in cols} & MUTABLE
    assert names == [m.name for m in migrations.load_migrations("sqlite")]
    assert mode == "wal"


async def test_sqlite_concurrent_first_opens_apply_each_migration_once(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    stores = await asyncio.gather(*(SQLiteStore.open(path) for _ in range(4)))
    for store in stores:
        await store.close()
    _, _, names, _ = _sqlite_schema(path)
    assert names == [m.name for m in migrations.load_migrations("sqlite")]


async def test_sqlite_connection_uses_full_synchronous_mode(sqlite_store: SQLiteStore) -> None:
    # synchronous is a per-connection setting: read it on the store's own worker thread.
    def read() -> int:
        (value,) = sqlite_store._con.execute("PRAGMA synchronous").fetchone()
        return int(value)

    assert await sqlite_store._call("pragma", read) == 2  # FULL
