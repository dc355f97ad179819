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
from sidecar.core.events import StoredRequest
from sidecar.store import migrations
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.sqlfiles import statement
from sidecar.store.sqlite import SQLiteStore
from tests.pgserver import free_port

MakeDb = Callable[[], Awaitable[str]]

ALL_MIGRATIONS_PG = migrations.load_migrations("postgres")
ALL_PG = [m.name for m in ALL_MIGRATIONS_PG]

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
                         "payload_body": None, "payload_request": None,
                         "guard_key": None, "guard_digest": None}
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


async def test_sqlite_connection_enforces_foreign_keys(sqlite_store: SQLiteStore) -> None:
    # Per connection too: a queue entry's row deleted by retention takes the entry with it.
    def read() -> int:
        (value,) = sqlite_store._con.execute("PRAGMA foreign_keys").fetchone()
        return int(value)

    assert await sqlite_store._call("pragma", read) == 1


# == schema 4: queue mode ====================================================================

PG_QUEUE_COLUMNS = {
    "provider": ("text", "NO"),
    "event_id": ("text", "NO"),
    "seq": ("bigint", "NO"),
    "due_at": ("timestamp with time zone", "YES"),
    "queued_at": ("timestamp with time zone", "NO"),
    "base_attempt": ("integer", "NO"),
    "tries": ("integer", "NO"),
    "order_key": ("text", "YES"),
    "last_error": ("text", "YES"),
    "lease_owner": ("text", "YES"),
}
SQLITE_QUEUE_COLUMNS = {
    "seq": "INTEGER",
    "provider": "TEXT",
    "event_id": "TEXT",
    "due_at": "REAL",
    "queued_at": "REAL",
    "base_attempt": "INTEGER",
    "tries": "INTEGER",
    "order_key": "TEXT",
    "last_error": "TEXT",
    "lease_owner": "TEXT",
}
QUEUE_INDEXES = {
    "webhook_queue_due_idx": ["provider", "due_at", "seq"],
    "webhook_queue_order_idx": ["provider", "order_key", "seq"],
}


@pytest.mark.postgres
async def test_migrated_postgres_queue_schema_is_the_declared_one(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        columns = await conn.fetch(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'webhook_queue'")
        indexes = await conn.fetch(
            """
            SELECT i.relname AS name, pg_get_expr(ix.indpred, ix.indrelid) AS predicate,
                   array_agg(a.attname ORDER BY k.ord) AS columns
              FROM pg_index ix
              JOIN pg_class i ON i.oid = ix.indexrelid
              CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
             WHERE ix.indrelid = 'webhook_queue'::regclass
             GROUP BY i.relname, ix.indpred, ix.indrelid
            """)
        constraints = await conn.fetch(
            "SELECT conname, contype, convalidated, pg_get_constraintdef(oid) AS definition"
            " FROM pg_constraint WHERE conrelid IN ('webhook_event'::regclass,"
            " 'webhook_queue'::regclass)")
    finally:
        await conn.close()

    assert {r["column_name"]: (r["data_type"], r["is_nullable"]) for r in columns} == \
        PG_QUEUE_COLUMNS
    by_name = {r["name"]: (list(r["columns"]), r["predicate"]) for r in indexes}
    assert by_name == {
        "webhook_queue_pkey": (["provider", "event_id"], None),
        "webhook_queue_due_idx": (QUEUE_INDEXES["webhook_queue_due_idx"], None),
        "webhook_queue_order_idx": (QUEUE_INDEXES["webhook_queue_order_idx"],
                                    "(order_key IS NOT NULL)"),
    }
    defined = {r["conname"]: r["definition"] for r in constraints}
    assert all(r["convalidated"] for r in constraints), "0005 validated the NOT VALID checks"
    assert "'queued'" in defined["webhook_event_state_check"]
    assert "'dead'" in defined["webhook_event_state_check"]
    assert defined["webhook_event_attempt_check"] == "CHECK ((attempt >= 0))"
    assert defined["webhook_queue_event_fkey"] == (
        "FOREIGN KEY (provider, event_id) REFERENCES webhook_event(provider, event_id)"
        " ON DELETE CASCADE")


async def test_sqlite_queue_schema_is_the_declared_one(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = await SQLiteStore.open(path)
    await store.close()
    con = sqlite3.connect(path)
    try:
        columns = {r[1]: r[2] for r in con.execute("PRAGMA table_info(webhook_queue)")}
        indexes = {
            name: [c[2] for c in con.execute(f"PRAGMA index_info('{name}')")]
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'"
                " AND tbl_name = 'webhook_queue'")
        }
        keys = [(r[2], r[3], r[4], r[6]) for r in con.execute(
            "PRAGMA foreign_key_list(webhook_queue)")]
        event_sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'webhook_event'"
                                ).fetchone()[0]
    finally:
        con.close()

    assert columns == SQLITE_QUEUE_COLUMNS
    assert sorted(indexes.values()) == sorted(
        [["provider", "event_id"], *QUEUE_INDEXES.values()])
    assert {name: cols for name, cols in indexes.items() if name in QUEUE_INDEXES} == \
        QUEUE_INDEXES
    assert sorted(keys) == [("webhook_event", "event_id", "event_id", "CASCADE"),
                            ("webhook_event", "provider", "provider", "CASCADE")]
    assert "STRICT" in event_sql and "'dead'" in event_sql and "attempt >= 0" in event_sql


PG_ATTEMPT_COLUMNS = {
    "provider": ("text", "NO"),
    "event_id": ("text", "NO"),
    "attempt": ("integer", "NO"),
    "started_at": ("timestamp with time zone", "NO"),
    "finished_at": ("timestamp with time zone", "NO"),
    "owner": ("text", "YES"),
    "outcome": ("text", "NO"),
    "response_status": ("integer", "YES"),
    "latency_ms": ("double precision", "NO"),
    "state": ("text", "NO"),
    "error": ("text", "YES"),
}
ATTEMPT_INDEX = ["provider", "event_id", "finished_at"]


@pytest.mark.postgres
async def test_migrated_postgres_attempts_schema_is_the_declared_one(pg_dsn: str) -> None:
    """The timeline: one index, for reading an event's attempts in order (and retention's
    delete); nothing unique (a queued try that did not reach the app gives its attempt number
    back); no foreign key (purge.sql deletes an event's attempts itself)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        columns = await conn.fetch(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = 'webhook_attempt'")
        indexes = await conn.fetch(
            """
            SELECT i.relname AS name, ix.indisunique AS is_unique,
                   array_agg(a.attname ORDER BY k.ord) AS columns
              FROM pg_index ix
              JOIN pg_class i ON i.oid = ix.indexrelid
              CROSS JOIN LATERAL unnest(ix.indkey) WITH ORDINALITY AS k(attnum, ord)
              JOIN pg_attribute a ON a.attrelid = ix.indrelid AND a.attnum = k.attnum
             WHERE ix.indrelid = 'webhook_attempt'::regclass
             GROUP BY i.relname, ix.indisunique
            """)
        constraints = await conn.fetchval(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'webhook_attempt'::regclass"
            " AND contype IN ('f', 'u', 'p')")
    finally:
        await conn.close()
    assert {r["column_name"]: (r["data_type"], r["is_nullable"]) for r in columns} == \
        PG_ATTEMPT_COLUMNS
    assert {r["name"]: (r["is_unique"], list(r["columns"])) for r in indexes} == {
        "webhook_attempt_event_idx": (False, ATTEMPT_INDEX)}
    assert constraints == 0


async def test_sqlite_attempts_schema_is_the_declared_one(tmp_path: Path) -> None:
    """As on PostgreSQL, except that retention's delete is the foreign key's cascade."""
    path = tmp_path / "events.db"
    store = await SQLiteStore.open(path)
    await store.close()
    con = sqlite3.connect(path)
    try:
        columns = [r[1] for r in con.execute("PRAGMA table_info(webhook_attempt)")]
        indexes = {
            name: [c[2] for c in con.execute(f"PRAGMA index_info('{name}')")]
            for (name,) in con.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'"
                " AND tbl_name = 'webhook_attempt'")
        }
        unique = [r for r in con.execute("PRAGMA index_list(webhook_attempt)") if r[2]]
        keys = sorted((r[2], r[3], r[4], r[6]) for r in con.execute(
            "PRAGMA foreign_key_list(webhook_attempt)"))
    finally:
        con.close()
    assert columns == list(PG_ATTEMPT_COLUMNS)
    assert indexes == {"webhook_attempt_event_idx": ATTEMPT_INDEX}
    assert unique == []
    assert keys == [("webhook_event", "event_id", "event_id", "CASCADE"),
                    ("webhook_event", "provider", "provider", "CASCADE")]


# Rows as release 3 (schema 0003) left them: one per state, with payloads and results.
_V3_ROWS = [
    ("stripe", "evt_done", "done", 1, "response", 200, '[["X-A", "b"]]', b"ok", 1.5,
     b"payload", '{"method": "POST", "path": "/x", "headers": []}'),
    ("stripe", "evt_failed", "failed", 3, "timeout", None, None, None, 10_000.0, None, None),
    ("github", "evt_busy", "processing", 2, None, None, None, None, None, None, None),
]
_V3_COLUMNS = ("provider, event_id, state, attempt, outcome, response_status, response_headers,"
               " response_body, latency_ms, payload_body, payload_request")


@pytest.mark.postgres
async def test_postgres_schema_4_keeps_the_rows_of_schema_3(pg_database_factory: MakeDb) -> None:
    dsn = await pg_database_factory()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement("postgres", "migrations_table").sql)
        for migration in migrations.load_migrations("postgres"):
            if migration.version <= 3:
                await conn.execute(migration.sql)
                await conn.execute(statement("postgres", "migration_record").sql,
                                   migration.name)
        await conn.executemany(
            "INSERT INTO webhook_event (provider, event_id, state, attempt, outcome,"
            " response_status, response_headers, response_body, latency_ms, payload_body,"
            " payload_request, received_at, updated_at, body_sha256, lease_owner, lease_until)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9, $10, $11::jsonb, now(), now(),"
            " '\\x01', 'o', now() + interval '1 minute')", _V3_ROWS)
        await conn.execute("INSERT INTO webhook_nonce VALUES ('mailgun', 'tok', '\\x02', now())")
        before = await conn.fetch("SELECT * FROM webhook_event ORDER BY provider, event_id")

        assert await migrate_postgres(dsn) == [m.name for m in ALL_MIGRATIONS_PG
                                               if m.version > 3]

        after = await conn.fetch("SELECT * FROM webhook_event ORDER BY provider, event_id")
        assert [dict(r) for r in after] == [dict(r) for r in before]
        assert await conn.fetchval("SELECT count(*) FROM webhook_nonce") == 1
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE webhook_event SET state = 'bogus'")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute("UPDATE webhook_event SET attempt = -1")
    finally:
        await conn.close()
    store = await PostgresStore.connect(dsn)
    try:
        request = StoredRequest("POST", "/x", (), b"{}")
        assert (await store.enqueue("stripe", "evt_new", b"\x03", request)).accepted
        assert (await store.enqueue("stripe", "evt_done", b"\x03", request)).row is not None
        assert await store.take_over("github", "evt_busy", 30.0, "o") is None, "still live"
    finally:
        await store.close()


async def test_sqlite_schema_4_keeps_the_rows_of_schema_3(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(statement("sqlite", "migrations_table").sql)
        for migration in migrations.load_migrations("sqlite"):
            if migration.version <= 3:
                con.executescript(migration.sql)
                con.execute("INSERT INTO webhook_sidecar_migrations VALUES (?, 0)",
                            (migration.name,))
        con.executemany(
            f"INSERT INTO webhook_event ({_V3_COLUMNS}, received_at, updated_at, body_sha256,"
            " lease_owner, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " 1700000000.5, 1700000001.25, x'01', 'o', 4000000000.0)", _V3_ROWS)
        con.execute("INSERT INTO webhook_nonce VALUES ('mailgun', 'tok', x'02', 1.0)")
        before = con.execute("SELECT * FROM webhook_event ORDER BY provider, event_id"
                             ).fetchall()
    finally:
        con.close()

    store = await SQLiteStore.open(path)
    try:
        assert "0004_queue" in await store.applied_migrations()
        request = StoredRequest("POST", "/x", (), b"{}")
        assert (await store.enqueue("stripe", "evt_new", b"\x03", request)).accepted
        assert (await store.enqueue("stripe", "evt_done", b"\x03", request)).row is not None
        assert await store.take_over("github", "evt_busy", 30.0, "o") is None, "still live"
    finally:
        await store.close()
    con = sqlite3.connect(path)
    try:
        after = con.execute("SELECT * FROM webhook_event WHERE event_id <> 'evt_new'"
                            " ORDER BY provider, event_id").fetchall()
        nonces = con.execute("SELECT count(*) FROM webhook_nonce").fetchone()[0]
        with pytest.raises(sqlite3.IntegrityError):
            con.execute("UPDATE webhook_event SET state = 'bogus'")
    finally:
        con.close()
    assert after == before
    assert nonces == 1
    columns, indexes, _, _ = _sqlite_schema(path)
    assert columns == SQLITE_COLUMNS, "the same columns, in the same order"
    assert list(columns) == list(SQLITE_COLUMNS)
    assert sorted(indexes.values()) == [["provider", "event_id"], ["provider", "received_at"]]


@pytest.mark.postgres
async def test_queue_transitions_are_hot_updates_of_the_event_row(
    pg_database_factory: MakeDb,
) -> None:
    """Queue mode moves the event row through queued, processing, queued, processing, done:
    every one of those UPDATEs is heap-only (the queue's indexed columns are in webhook_queue).
    Checked on the adapter's own SQL inside one transaction, as above; with few enough rows
    that all their versions fit on their page (nothing is pruned inside one transaction, and a
    version that needs another page is never heap-only, whatever the indexes)."""
    events = 6
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    conn = await asyncpg.connect(dsn)

    async def run(name: str, **params: object) -> list[asyncpg.Record]:
        stmt = statement("postgres", name)
        rows: list[asyncpg.Record] = await conn.fetch(stmt.sql, *stmt.positional(params))
        return rows

    result = {"outcome": "response", "response_status": 500, "response_headers": "[]",
              "response_body": b"no", "latency_ms": 1.0, "reached": True, "error": "HTTP 500"}
    take = {"provider": "stripe", "limit": 100, "lease_seconds": 30.0, "owner": "w"}
    try:
        async with conn.transaction():
            for i in range(events):
                (answer,) = await run("enqueue", provider="stripe", event_id=f"evt_{i}",
                                      body_sha256=b"h", payload_body=b"{}",
                                      payload_request='{"method": "POST", "path": "/",'
                                                      ' "headers": []}',
                                      order_key=None, max_depth=None, owner="e")
                assert answer["accepted"]
            assert len(await run("take_queued", **take)) == events
            for i in range(events):
                assert await run("settle_queued", provider="stripe", event_id=f"evt_{i}",
                                 tries=1, state="queued", retry_in=0.0, **result)
            assert len(await run("take_queued", **take)) == events
            for i in range(events):
                assert await run("settle_queued", provider="stripe", event_id=f"evt_{i}",
                                 tries=2, state="done", retry_in=0.0, **result)
            stats = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                " WHERE relname = 'webhook_event'")
    finally:
        await conn.close()
    assert stats["n_tup_upd"] == 4 * events
    assert stats["n_tup_hot_upd"] == 4 * events
