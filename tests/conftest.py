"""Shared fixtures: real PostgreSQL (found or started, never skipped) and real SQLite stores.

- ``pg_server`` (session): a reachable server (see ``tests/pgserver.py``) with an admin DSN.
- ``pg_dsn`` (session): DSN of a fresh, migrated database private to this test session
  (``sidecar_test_<pid>_<random>``), dropped at the end.
- ``pg_database_factory``: ``await make()`` returns a DSN to a new empty (unmigrated) database,
  dropped after the test.
- ``pg_store``: a ``PostgresStore`` on ``pg_dsn`` with an empty ``webhook_event`` table.
- ``pg_part_dsn`` (session), ``pg_part_store``: the same on a second database whose tables are
  partitioned by the minute (``store.partitioning``: ``PART_INTERVAL``, ``PART_AHEAD``).
- ``sqlite_store``: a ``SQLiteStore`` on a new file in ``tmp_path``.
- ``mariadb_server`` (session), ``mariadb_dsn`` (session), ``mariadb_store``: the same for MySQL /
  MariaDB (see ``tests/mariadbserver.py``): one migrated database per session, emptied per test.
- ``store``: parametrized over them (``[sqlite]``, ``[postgres]``, ``[postgres_part]``,
  ``[mariadb]``).
- ``pg_throwaway_cluster``: a started private ``ThrowawayCluster`` (fsync on) a test may crash
  with ``stop(mode="immediate")`` and ``start()`` again; removed after the test.

Event loops: every async test and fixture runs on the loop ``WEBHOOK_SIDECAR_LOOP`` names, as
the proxy would (``sidecar.runtime.loop``); the proxy processes a test starts inherit the
variable. A test marked ``every_loop`` runs once on each loop instead (``[asyncio]``,
``[uvloop]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import asyncpg
import pytest
import structlog

from sidecar.core.ports import Store
from sidecar.obs.logs import configure_logging
from sidecar.obs.storelog import StoreLog
from sidecar.runtime import loop as event_loop
from sidecar.store.memory import MemoryStore
from sidecar.store.mysql import MySQLStore, migrate_mysql
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres.partitioning import partition_store
from sidecar.store.sqlite import SQLiteStore
from tests.backdoor import PART_AHEAD, PART_INTERVAL, Backdoor, SqliteBackdoor, pg_backdoor
from tests.mariadbserver import MariaDBServer, MariaDBServerError
from tests.mariadbserver import admin as mariadb_admin
from tests.mariadbserver import create_database as mariadb_create_database
from tests.mariadbserver import drop_database as mariadb_drop_database
from tests.mariadbserver import find_or_start as mariadb_find_or_start
from tests.mariadbserver import unique_database_name as mariadb_database_name
from tests.pgserver import (
    PgServer,
    PgServerError,
    ThrowawayCluster,
    create_database,
    drop_database,
    find_or_start,
    run_sync,
    unique_database_name,
)
from tests.support import STARTED

# ``node_oracle``: Node.js packages as independent signers and verifiers.
# ``chromium``: Debian's browser for the inspector's browser test.
# ``pgbouncer``: Debian's pgbouncer in transaction mode in front of the suite's server.
pytest_plugins = ["tests.node_oracle", "tests.browser", "tests.pgbouncer"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "every_loop: run on asyncio's loop and on uvloop's")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Before the test's fixtures and event loop go: kill the proxy processes it left running
    (a test that failed half-way), which uvloop's loop would wait for as it closes."""
    for proc in list(STARTED):
        STARTED.discard(proc)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item,
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loop of every async test (pytest-asyncio's hook): the one the proxy would choose."""
    if item.get_closest_marker("every_loop") is not None:
        uvloop = event_loop.choose({event_loop.LOOP_ENV: "auto"})  # asyncio without uvloop
        return {"asyncio": asyncio.new_event_loop,
                uvloop.name: uvloop.factory or asyncio.new_event_loop}
    chosen = event_loop.choose()
    return {chosen.name: chosen.factory or asyncio.new_event_loop}


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        server = find_or_start()
    except PgServerError as exc:
        pytest.fail(f"no PostgreSQL for the test suite: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def pg_dsn(pg_server: PgServer) -> Iterator[str]:
    dbname = unique_database_name()
    dsn = run_sync(create_database(pg_server.admin_dsn, dbname))
    try:
        run_sync(migrate_postgres(dsn))
        yield dsn
    finally:
        run_sync(drop_database(pg_server.admin_dsn, dbname))




@pytest.fixture(scope="session")
def pg_part_dsn(pg_server: PgServer) -> Iterator[str]:
    dbname = unique_database_name("sidecar_test_part")
    dsn = run_sync(create_database(pg_server.admin_dsn, dbname))
    try:
        run_sync(migrate_postgres(dsn))
        run_sync(partition_store(dsn, interval=PART_INTERVAL, ahead=PART_AHEAD,
                                 only_if_empty=True))
        yield dsn
    finally:
        run_sync(drop_database(pg_server.admin_dsn, dbname))


@pytest.fixture
async def pg_database_factory(pg_server: PgServer) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    created: list[str] = []

    async def make() -> str:
        dbname = unique_database_name("sidecar_test_fresh")
        created.append(dbname)
        return await create_database(pg_server.admin_dsn, dbname)

    yield make
    for dbname in created:
        await drop_database(pg_server.admin_dsn, dbname)


async def _emptied_store(dsn: str, partition_interval: float | None = None
                         ) -> AsyncIterator[PostgresStore]:
    """A ``PostgresStore`` on ``dsn`` whose tables were emptied first (session databases)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE webhook_attempt, webhook_queue, webhook_event")
    finally:
        await conn.close()
    store = await PostgresStore.connect(dsn, min_size=2, max_size=8, observer=StoreLog(),
                                        partition_interval=partition_interval)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async for store in _emptied_store(pg_dsn):
        yield store


@pytest.fixture
async def pg_part_store(pg_part_dsn: str) -> AsyncIterator[PostgresStore]:
    async for store in _emptied_store(pg_part_dsn, partition_interval=PART_INTERVAL):
        yield store


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = await SQLiteStore.open(tmp_path / "events.db")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDBServer]:
    try:
        server = mariadb_find_or_start()
    except MariaDBServerError as exc:
        pytest.fail(f"no MariaDB/MySQL for the test suite: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def mariadb_dsn(mariadb_server: MariaDBServer) -> Iterator[str]:
    dbname = mariadb_database_name()
    dsn = run_sync(mariadb_create_database(mariadb_server.admin_dsn, dbname))
    try:
        run_sync(migrate_mysql(dsn))
        yield dsn
    finally:
        run_sync(mariadb_drop_database(mariadb_server.admin_dsn, dbname))


@pytest.fixture
async def mariadb_store(mariadb_dsn: str) -> AsyncIterator[MySQLStore]:
    """A ``MySQLStore`` on the session's database, its tables emptied first."""
    db = mariadb_dsn.rsplit("/", 1)[1]
    await mariadb_admin(mariadb_dsn, *(f"DELETE FROM `{db}`.{table}" for table in (
        "webhook_attempt", "webhook_queue", "webhook_event", "webhook_nonce",
        "webhook_provider_state", "webhook_rate", "webhook_permit", "webhook_notice")))
    store = await MySQLStore.connect(mariadb_dsn, min_size=2, max_size=8, observer=StoreLog())
    # The driver logs the server's warnings and notes (a value rounded, a truncation): the
    # store's statements must raise none (each costs a SHOW WARNINGS round trip, too).
    warnings = _Collected()
    logging.getLogger("asyncmy").addHandler(warnings)
    try:
        yield store
    finally:
        logging.getLogger("asyncmy").removeHandler(warnings)
        await store.close()
    assert warnings.messages == [], "the server warned about the store's statements"


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logging_into(level: str) -> Iterator[io.StringIO]:
    """Logging as the CLI sets it up at ``level`` in JSON, into a buffer (restored after)."""
    root = logging.getLogger()
    handlers, previous = root.handlers[:], root.level
    stream = io.StringIO()
    configure_logging(level, "json", stream)
    try:
        yield stream
    finally:
        root.handlers[:] = handlers
        root.setLevel(previous)
        logging.getLogger("aiohttp.access").setLevel(logging.NOTSET)
        structlog.reset_defaults()


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """Logging as the CLI sets it up at ``log.level: debug``, into a buffer (restored after)."""
    with logging_into("debug") as stream:
        yield stream


@pytest.fixture
async def memory_store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
            pytest.param("postgres_part", marks=pytest.mark.postgres), "memory",
            pytest.param("mariadb", marks=pytest.mark.mariadb)]
)
def every_store(request: pytest.FixtureRequest) -> Store:
    """Each store in turn: the contract suites hold all of them to one behaviour."""
    fixture = {"sqlite": "sqlite_store", "postgres": "pg_store",
               "postgres_part": "pg_part_store", "memory": "memory_store",
               "mariadb": "mariadb_store"}
    backend: Store = request.getfixturevalue(fixture[request.param])
    return backend


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("postgres_part", marks=pytest.mark.postgres),
                        pytest.param("mariadb", marks=pytest.mark.mariadb)])
def store(request: pytest.FixtureRequest) -> PostgresStore | SQLiteStore | MySQLStore:
    fixture = {"sqlite": "sqlite_store", "postgres": "pg_store",
               "postgres_part": "pg_part_store", "mariadb": "mariadb_store"}[request.param]
    backend: PostgresStore | SQLiteStore | MySQLStore = request.getfixturevalue(fixture)
    return backend


@pytest.fixture
def pg_throwaway_cluster() -> Iterator[ThrowawayCluster]:
    cluster = ThrowawayCluster(fsync=True)
    try:
        cluster.start()
    except PgServerError as exc:
        cluster.cleanup()
        pytest.fail(f"cannot start a throwaway PostgreSQL cluster: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def backdoor(store: Store, request: pytest.FixtureRequest) -> Backdoor:
    if isinstance(store, SQLiteStore):
        return SqliteBackdoor(store.path)
    return pg_backdoor(request)
