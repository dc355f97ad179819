"""The MySQL / MariaDB store's own checks: the URL forms ``check-config`` accepts and refuses,
start-up refusals (a server too old, settings it cannot work with, a user without the
privileges ``migrate`` needs: refused before anything is written), ``migrate`` run twice and
concurrently, and the suite's throwaway server. The verbs themselves are held to the contract
suites (``test_store_contract.py``, ``test_store_queue_contract.py``, ``[mariadb]``)."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncmy
import pytest
from asyncmy.cursors import DictCursor

from sidecar.config.loader import parse_config
from sidecar.core.errors import ConfigError, SchemaError, StoreError
from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.store import migrations
from sidecar.store.mysql import MySQLStore, migrate_mysql
from sidecar.store.mysql.session import SQL_MODE, check_server
from sidecar.store.mysql.store import split_script
from sidecar.store.sqlfiles import statement
from tests.mariadbserver import (
    MariaDBBackdoor,
    MariaDBServer,
    ThrowawayServer,
    admin,
    create_database,
    drop_database,
    probe,
    unique_database_name,
    with_database,
)
from tests.pgserver import free_port
from tests.unit.test_config import minimal

# == check-config: the URL forms ===============================================================


def _with_store(store: dict[str, Any]) -> dict[str, Any]:
    return {**minimal(), "store": store}


@pytest.mark.parametrize("url", [
    "mysql://sidecar:pw@db.internal:3306/webhooks",
    "mariadb://sidecar@127.0.0.1/webhooks",
    "MySQL://sidecar@db/webhooks?connect_timeout=3&ssl=true",
    "mysql://sidecar@localhost/webhooks?unix_socket=/run/mysqld/mysqld.sock",
])
def test_check_config_accepts_the_mysql_url_forms(url: str) -> None:
    config = parse_config(_with_store({"url": url}), env={})
    assert config.store.kind == "mysql"
    assert not any("one host" in w for w in config.warnings)


@pytest.mark.parametrize(("url", "says"), [
    ("mysql://sidecar@db", "name the database"),
    ("mysql://sidecar@db/", "name the database"),
    ("mysql://sidecar@db/webhooks?sslmode=require", "unknown URL option sslmode"),
    ("mysql://sidecar@db/webhooks?connect_timeout=soon", "connect_timeout must be seconds"),
    ("mysql://sidecar@db/webhooks?ssl=maybe", "ssl must be true or false"),
    ("mysql://sidecar@db:99999/webhooks", "port"),
])
def test_check_config_refuses_a_bad_mysql_url_saying_what_to_change(url: str, says: str
                                                                     ) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with_store({"url": url}), env={})
    assert "store.url" in str(caught.value) and says in str(caught.value)


@pytest.mark.parametrize(("store", "path"), [
    ({"partitioning": {"interval": "1d"}}, "store.partitioning.interval"),
    ({"result_commit": "no_wait"}, "store.result_commit"),
])
def test_check_config_refuses_postgresql_only_settings_on_mysql(store: dict[str, Any],
                                                               path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_with_store({"url": "mysql://u@db/webhooks", **store}), env={})
    assert path in str(caught.value)


# == start-up checks on what the server answers ================================================

_GOOD = {"version": "10.11.19-MariaDB-0+deb12u1", "sql_mode": SQL_MODE,
         "time_zone": "+00:00", "log_bin": 1, "binlog_format": "ROW"}


@pytest.mark.parametrize(("changed", "says"), [
    ({"version": "10.5.27-MariaDB"}, "MariaDB 10.6 or newer"),
    ({"version": "5.5.5-10.4.1-MariaDB-log"}, "MariaDB 10.6 or newer"),
    ({"version": "8.0.15"}, "MySQL 8.0.16 or newer"),
    ({"version": "5.7.44-log"}, "MySQL 8.0.16 or newer"),
    ({"sql_mode": SQL_MODE + ",ANSI_QUOTES"}, "sql_mode"),
    ({"time_zone": "SYSTEM"}, "time_zone"),
    ({"binlog_format": "STATEMENT"}, "binlog_format=ROW"),
])
def test_a_server_the_store_cannot_work_with_is_refused_with_what_to_change(
        changed: dict[str, object], says: str) -> None:
    check_server(_GOOD)  # the baseline passes
    with pytest.raises(StoreError, match=says):
        check_server({**_GOOD, **changed})


def test_supported_servers_pass() -> None:
    for version in ("8.0.16", "8.4.3", "9.1.0", "10.6.0-MariaDB", "11.4.2-MariaDB-log"):
        check_server({**_GOOD, "version": version})
    check_server({**_GOOD, "log_bin": 0, "binlog_format": "STATEMENT"})  # no binary log


# == against the server ========================================================================

@pytest.fixture
async def fresh_database(mariadb_server: MariaDBServer) -> AsyncIterator[str]:
    """An empty database on the suite's server, dropped after the test."""
    dbname = unique_database_name("sidecar_test_fresh")
    dsn = await create_database(mariadb_server.admin_dsn, dbname)
    try:
        yield dsn
    finally:
        await drop_database(mariadb_server.admin_dsn, dbname)


async def _tables(dsn: str) -> set[str]:
    db = dsn.rsplit("/", 1)[1]
    conn = await asyncmy.connect(host="127.0.0.1", **_admin_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT table_name FROM information_schema.tables"
                              " WHERE table_schema = %s", (db,))
            return {str(r[0]) for r in await cur.fetchall()}
    finally:
        conn.close()


def _admin_args(dsn: str) -> dict[str, Any]:
    from urllib.parse import urlsplit
    parts = urlsplit(dsn)
    return {"port": parts.port or 3306, "user": parts.username or "root",
            "password": parts.password or ""}


@pytest.mark.mariadb
async def test_migrate_applies_once_and_concurrent_runs_apply_each_migration_once(
        fresh_database: str) -> None:
    first, second = await asyncio.gather(migrate_mysql(fresh_database),
                                         migrate_mysql(fresh_database))
    names = [m.name for m in migrations.load_migrations("mysql")]
    assert sorted(first + second) == names  # each by one run or the other, once
    assert await migrate_mysql(fresh_database) == []
    assert {"webhook_event", "webhook_queue", "webhook_sidecar_migrations"} <= await _tables(
        fresh_database)


@pytest.mark.mariadb
async def test_a_store_on_an_unmigrated_database_is_refused_naming_migrate(
        fresh_database: str) -> None:
    with pytest.raises(SchemaError, match="webhook-sidecar migrate"):
        await MySQLStore.connect(fresh_database)


@pytest.mark.mariadb
async def test_an_unknown_url_option_is_refused_at_start_up(fresh_database: str) -> None:
    with pytest.raises(StoreError, match="unknown URL option sslmode"):
        await MySQLStore.connect(fresh_database + "?sslmode=require")


@pytest.mark.mariadb
async def test_migrate_by_a_user_without_ddl_privileges_is_refused_before_writing_anything(
        mariadb_server: MariaDBServer, fresh_database: str) -> None:
    db = fresh_database.rsplit("/", 1)[1]
    user, password = f"sc_{secrets.token_hex(4)}", secrets.token_hex(8)
    await admin(mariadb_server.admin_dsn,
                f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
                f"CREATE USER '{user}'@'localhost' IDENTIFIED BY '{password}'",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.* TO '{user}'@'%'",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{db}`.* TO '{user}'@'localhost'")
    try:
        from urllib.parse import urlsplit
        port = urlsplit(fresh_database).port or 3306
        dsn = f"mysql://{user}:{password}@127.0.0.1:{port}/{db}"
        with pytest.raises(StoreError, match=r"lacks ALTER, CREATE, DROP, INDEX, REFERENCES"
                                             r".*run GRANT"):
            await migrate_mysql(dsn)
        assert await _tables(fresh_database) == set(), "nothing was written"
        await admin(mariadb_server.admin_dsn,
                    f"GRANT ALL PRIVILEGES ON `{db}`.* TO '{user}'@'%'",
                    f"GRANT ALL PRIVILEGES ON `{db}`.* TO '{user}'@'localhost'")
        assert await migrate_mysql(dsn) != []
        store = await MySQLStore.connect(dsn)
        try:
            assert (await store.claim("stripe", "evt_1", b"h" * 32, 30.0, "o")).won
        finally:
            await store.close()
    finally:
        await admin(mariadb_server.admin_dsn, f"DROP USER IF EXISTS '{user}'@'%'",
                    f"DROP USER IF EXISTS '{user}'@'localhost'")


@pytest.mark.mariadb
async def test_event_ids_compare_byte_for_byte(mariadb_store: MySQLStore) -> None:
    """No collation folds case or pads spaces: each of these is its own event."""
    ids = ["evt_A", "evt_a", "evt_a ", "évt", "e\u0301vt"]
    claims = [await mariadb_store.claim("stripe", i, b"h" * 32, 30.0, "o") for i in ids]
    assert all(c.won for c in claims)
    assert [c.row.event_id for c in claims] == ids


@pytest.mark.mariadb
async def test_the_throwaway_server_starts_answers_and_is_removed() -> None:
    server = ThrowawayServer()
    try:
        server.start()
        assert await probe(server.dsn) is None
        dsn = await create_database(server.dsn, "sidecar_throwaway")
        assert with_database(server.dsn, "sidecar_throwaway") == dsn
        assert await migrate_mysql(dsn) != []
    finally:
        await asyncio.to_thread(server.cleanup)
    assert await probe(server.dsn) is not None


@pytest.mark.mariadb
async def test_an_ordered_take_of_a_long_key_names_its_lock_within_64_characters(
        mariadb_store: MySQLStore, mariadb_dsn: str) -> None:
    """A destination's queue key (``<provider>.<name>``) can be 127 characters; MySQL refuses
    lock names over 64, so such a key's take lock is named by a digest (held here by another
    session while the store's take waits for it)."""
    key = f"{'p' * 63}.{'d' * 63}"
    database = mariadb_dsn.rsplit("/", 1)[1]
    name = "webhook-sidecar:take:" + hashlib.sha1(f"{database}:{key}".encode()).hexdigest()
    assert len(name) <= 64
    request = StoredRequest(method="POST", path="/x", headers=(), body=b"{}")
    assert (await mariadb_store.enqueue(key, "A", b"h" * 32, request, order_key="k")).accepted
    other = await asyncmy.connect(db=database, autocommit=True, host="127.0.0.1",
                                  **_admin_args(mariadb_dsn))
    try:
        async with other.cursor(DictCursor) as cur:
            stmt = statement("mysql", "take_lock")
            await cur.execute(stmt.sql, {"provider": key, "wait": 5})
            await cur.execute("SELECT IS_FREE_LOCK(%s) AS free", (name,))
            assert (await cur.fetchone())["free"] == 0  # the digest's name is the one held
            await cur.execute(statement("mysql", "take_unlock").sql, {"provider": key})
        taken = await mariadb_store.take_queued(key, 10, 30.0, "P1", ordered=True)
        assert [w.event_id for w in taken] == ["A"]
    finally:
        other.close()


@pytest.mark.mariadb
async def test_ordered_takes_see_a_concurrent_take_of_the_same_key(
        mariadb_store: MySQLStore, mariadb_dsn: str) -> None:
    """A re-driven dead event must not overtake a later event of its key whose take (in
    another process) has not committed yet: ordered takes of a provider run one at a time
    under a named lock, so the second sees the first's lease. Without it, READ COMMITTED
    would not see the uncommitted take of B, and A would be taken beside it."""
    store = mariadb_store
    request = StoredRequest(method="POST", path="/x", headers=(), body=b"{}")
    for event_id in ("A", "B"):
        assert (await store.enqueue("stripe", event_id, b"h" * 32, request,
                                    order_key="k")).accepted
    (first,) = await store.take_queued("stripe", 10, 30.0, "P1", ordered=True)
    assert first.event_id == "A"
    dead = Settlement(EventState.DEAD, AttemptResult(EventState.DEAD, Outcome.RESPONSE,
                                                     RecordedResponse(500, (), b""), 1.0))
    assert await store.settle_queued("stripe", "A", first.tries, dead)
    other = await asyncmy.connect(db=mariadb_dsn.rsplit("/", 1)[1], autocommit=True,
                                  host="127.0.0.1", **_admin_args(mariadb_dsn))
    lock = {"provider": "stripe", "wait": 5}
    try:
        async with other.cursor(DictCursor) as cur:
            async def run(name: str, params: dict[str, object]) -> list[dict[str, Any]]:
                stmt = statement("mysql", name)
                await cur.execute(stmt.sql, {n: params[n] for n in stmt.names})
                return list(await cur.fetchall())

            # Another process's store: its session pinned as the store pins its own.
            await run("session", {"sql_mode": SQL_MODE, "lock_wait": 5})
            await run("isolation", {})
            assert (await run("take_lock", lock))[0]["locked"] == 1
            await run("begin", {})
            take = {"provider": "stripe", "limit": 10, "lease_seconds": 30.0, "owner": "P2#1"}
            picked = await run("take_queued_pick", take)
            assert [p["event_id"] for p in picked] == [b"B"]
            await run("take_queued_entry", {**take, "event_id": "B"})
            await run("take_queued_event", {**take, "event_id": "B"})
            assert await store.requeue_dead("stripe", "A") == ["A"]
            ours = asyncio.create_task(store.take_queued("stripe", 10, 30.0, "P1",
                                                         ordered=True))
            await _until_waiting_for_a_user_lock(mariadb_dsn)
            assert not ours.done()
            await run("commit", {})
            await run("take_unlock", lock)
        assert [w.event_id for w in await asyncio.wait_for(ours, 10)] == []  # B in flight
    finally:
        other.close()
    row = await store.get("stripe", "A")
    assert row is not None and row.state is EventState.QUEUED


async def _until_waiting_for_a_user_lock(dsn: str) -> None:
    """Until a session waits in GET_LOCK (bounded poll)."""
    conn = await asyncmy.connect(host="127.0.0.1", autocommit=True, **_admin_args(dsn))
    try:
        async with conn.cursor() as cur:
            for _ in range(500):
                await cur.execute("SELECT COUNT(*) FROM information_schema.processlist"
                                  " WHERE info LIKE '%GET_LOCK(%' AND id <> CONNECTION_ID()")
                if (await cur.fetchone())[0]:
                    return
                await asyncio.sleep(0.01)
    finally:
        conn.close()
    pytest.fail("no session came to wait for the take lock")


# == the schema ================================================================================

# Every index of the migrated schema (table, index, columns in order, unique), and every
# foreign key (cascading deletes from the event row): the declared shape, compared with what
# the server reports.
INDEXES = {
    ("webhook_event", "PRIMARY", ("provider", "event_id"), True),
    ("webhook_event", "webhook_event_received_at_idx", ("provider", "received_at"), False),
    ("webhook_queue", "PRIMARY", ("seq",), True),
    ("webhook_queue", "webhook_queue_event_key", ("provider", "event_id"), True),
    ("webhook_queue", "webhook_queue_due_idx", ("provider", "due_at", "seq"), False),
    ("webhook_queue", "webhook_queue_order_idx", ("provider", "order_key", "seq"), False),
    ("webhook_attempt", "PRIMARY", ("id",), True),
    ("webhook_attempt", "webhook_attempt_event_idx", ("provider", "event_id", "finished_at"),
     False),
    ("webhook_nonce", "PRIMARY", ("provider", "nonce"), True),
    ("webhook_nonce", "webhook_nonce_received_at_idx", ("provider", "received_at"), False),
    ("webhook_provider_state", "PRIMARY", ("provider",), True),
    ("webhook_rate", "PRIMARY", ("provider",), True),
    ("webhook_permit", "PRIMARY", ("provider", "slot"), True),
    ("webhook_notice", "PRIMARY", ("target", "kind", "provider"), True),
    ("webhook_sidecar_migrations", "PRIMARY", ("name",), True),
    ("webhook_take_lock", "PRIMARY", ("provider",), True),
    ("webhook_sidecar_lock", "PRIMARY", ("name",), True),
}
FOREIGN_KEYS = {("webhook_queue", "webhook_event", "CASCADE"),
                ("webhook_attempt", "webhook_event", "CASCADE")}


async def _query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncmy.connect(host="127.0.0.1", db=dsn.rsplit("/", 1)[1], **_admin_args(dsn))
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        conn.close()


def test_mysql_migrations_are_numbered_from_one_and_every_statement_may_run_again() -> None:
    shipped = migrations.load_migrations("mysql")
    assert [m.version for m in shipped] == list(range(1, len(shipped) + 1))
    for migration in shipped:
        for each in split_script(migration.sql):
            assert each.lstrip().upper().startswith("CREATE TABLE IF NOT EXISTS"), each[:60]


@pytest.mark.mariadb
async def test_the_migrated_schema_is_the_declared_one(mariadb_dsn: str) -> None:
    rows = await _query(mariadb_dsn, """
        SELECT table_name, index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index),
               MIN(non_unique) = 0
          FROM information_schema.statistics
         WHERE table_schema = DATABASE()
         GROUP BY table_name, index_name""")
    found = {(str(t), str(i), tuple(str(c).split(",")), bool(u)) for t, i, c, u in rows}
    assert found == INDEXES
    keys = await _query(mariadb_dsn, """
        SELECT table_name, referenced_table_name, delete_rule
          FROM information_schema.referential_constraints
         WHERE constraint_schema = DATABASE()""")
    assert {tuple(map(str, k)) for k in keys} == FOREIGN_KEYS
    # Keys compare byte for byte; times are exact microseconds.
    types = dict(((str(t), str(c)), str(d)) for t, c, d in await _query(mariadb_dsn, """
        SELECT table_name, column_name, column_type FROM information_schema.columns
         WHERE table_schema = DATABASE()"""))
    assert types[("webhook_event", "event_id")] == "varbinary(1024)"
    assert types[("webhook_event", "provider")] == "varbinary(255)"
    assert types[("webhook_queue", "order_key")] == "varbinary(1024)"
    assert types[("webhook_nonce", "nonce")] == "varbinary(1024)"
    for table, column in (("webhook_event", "received_at"), ("webhook_event", "lease_until"),
                          ("webhook_queue", "due_at"), ("webhook_attempt", "finished_at")):
        assert types[(table, column)] == "decimal(16,6)", (table, column)


@pytest.mark.mariadb
async def test_the_schema_refuses_a_state_it_does_not_know(mariadb_store: MySQLStore,
                                                           mariadb_dsn: str) -> None:
    await mariadb_store.claim("stripe", "evt_1", b"h" * 32, 30.0, "o")
    with pytest.raises(asyncmy.errors.Error, match="webhook_event_state_check"):
        await _query(mariadb_dsn, "UPDATE webhook_event SET state = 'lost'")


async def test_an_unreachable_server_is_a_store_error_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot connect"):
        await MySQLStore.connect(f"mysql://root@127.0.0.1:{free_port()}/webhooks",
                                 connect_timeout=2.0)
    with pytest.raises(StoreError, match="cannot connect"):
        await migrate_mysql(f"mariadb://root@127.0.0.1:{free_port()}/webhooks",
                            connect_timeout=2.0)
    assert time.monotonic() - started < 5.0


@pytest.mark.mariadb
async def test_a_cancelled_call_gives_its_connection_back(mariadb_store: MySQLStore,
                                                          mariadb_dsn: str) -> None:
    """A call cancelled while its statement waits on a row lock: its connection is closed
    (its transaction ends on the server), never handed to the next call mid-statement."""
    await mariadb_store.claim("stripe", "evt_1", b"h" * 32, 0, "crashed")
    single = await MySQLStore.connect(mariadb_dsn, min_size=1, max_size=1, lock_timeout=5.0,
                                      acquire_timeout=1.0)
    try:
        async with MariaDBBackdoor(mariadb_dsn).hold_write_lock("stripe", "evt_1"):
            blocked = asyncio.create_task(single.release("stripe", "evt_1"))
            for _ in range(300):  # bounded poll: until it holds the pool's one connection
                if single._pool.freesize == 0 and single._pool.size == 1:
                    break
                await asyncio.sleep(0.01)
            await _until_waiting_for_a_row_lock(mariadb_dsn)
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            await single.ping()  # a new connection, at once
        assert await single.take_over("stripe", "evt_1", 30.0, "b") == 2
    finally:
        await single.close()


async def _until_waiting_for_a_row_lock(dsn: str) -> None:
    conn = await asyncmy.connect(host="127.0.0.1", autocommit=True, **_admin_args(dsn))
    try:
        async with conn.cursor() as cur:
            for _ in range(500):
                await cur.execute("SELECT COUNT(*) FROM information_schema.innodb_lock_waits")
                if (await cur.fetchone())[0]:
                    return
                await asyncio.sleep(0.01)
    finally:
        conn.close()
    pytest.fail("no statement came to wait for the row lock")
