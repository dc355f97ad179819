"""``migrate``'s lease on MySQL / MariaDB (``webhook_sidecar_lock``, not a named lock, so that it
also holds across the nodes of a Galera cluster): a live lease makes a second run wait and give
up saying so; a lease whose holder died is taken over once it has ended; none is left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncmy
import pytest

from sidecar.core.errors import SchemaError
from sidecar.store import migrations
from sidecar.store.mysql import MySQLStore, migrate_mysql
from tests.mariadbserver import (
    MariaDBServer,
    _connect_args,
    create_database,
    drop_database,
    unique_database_name,
)

pytestmark = pytest.mark.mariadb


@pytest.fixture
async def fresh_database(mariadb_server: MariaDBServer) -> AsyncIterator[str]:
    dbname = unique_database_name("sidecar_test_lease")
    dsn = await create_database(mariadb_server.admin_dsn, dbname)
    try:
        yield dsn
    finally:
        await drop_database(mariadb_server.admin_dsn, dbname)


async def execute(dsn: str, *statements: str) -> list[tuple[object, ...]]:
    conn = await asyncmy.connect(db=dsn.rsplit("/", 1)[1], **_connect_args(dsn))
    try:
        async with conn.cursor() as cur:
            for sql in statements:
                await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        conn.close()


async def a_lease_held_by_a_dead_run(dsn: str, *, ends_in: float) -> None:
    """As a run that died holding the lease leaves it: made by an earlier migrate's table
    statement, then the row."""
    await execute(dsn, """CREATE TABLE webhook_sidecar_lock (
        name VARCHAR(64) NOT NULL PRIMARY KEY, owner VARCHAR(255) NOT NULL,
        expires_at DECIMAL(16,6) NOT NULL) ENGINE = InnoDB""",
        "INSERT INTO webhook_sidecar_lock VALUES ('migrate', 'gone:1:dead',"
        f" UNIX_TIMESTAMP(NOW(6)) + {ends_in})")


async def test_a_live_lease_makes_migrate_wait_then_give_up_changing_nothing(
        fresh_database: str) -> None:
    await a_lease_held_by_a_dead_run(fresh_database, ends_in=60)
    with pytest.raises(SchemaError, match=r"another migrate held the lock for 0\.5s"):
        await migrate_mysql(fresh_database, lock_wait=0.5)
    tables = {r[0] for r in await execute(fresh_database, "SHOW TABLES")}
    assert tables == {"webhook_sidecar_lock"}  # the lease is taken before anything else


async def test_a_lease_whose_holder_died_is_taken_over_once_it_ends(fresh_database: str) -> None:
    await a_lease_held_by_a_dead_run(fresh_database, ends_in=-1)
    names = [m.name for m in migrations.load_migrations("mysql")]
    assert await migrate_mysql(fresh_database, lock_wait=0.5) == names
    assert await execute(fresh_database, "SELECT * FROM webhook_sidecar_lock") == []
    store = await MySQLStore.connect(fresh_database)  # the schema is current
    await store.close()


async def test_a_lease_that_ends_while_waiting_is_taken(fresh_database: str) -> None:
    """Polled, not slept through: a lease ending 1 s from now is taken within the wait."""
    await a_lease_held_by_a_dead_run(fresh_database, ends_in=1)
    assert await migrate_mysql(fresh_database, lock_wait=10) != []
