"""Which store a ``store`` block opens: the embedded SQLite store, PostgreSQL or MySQL, for the
server (``sidecar.runtime.wiring``) and for the commands that need only a store (``migrate``,
``events``, ``providers``, ``store partition``). Each backend is imported when it is opened, so
a process imports the driver it uses and no other (a command starts faster)."""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from sidecar.config.model import ResultCommit, StoreConfig, StoreKind
from sidecar.core.ports import Store
from sidecar.obs.logs import get_logger
from sidecar.obs.storelog import StoreLog

if TYPE_CHECKING:
    from sidecar.obs.metrics import Metrics
    from sidecar.store.postgres.partition_upkeep import PartitionKeeper

log = get_logger("sidecar.store")


async def open_store(config: StoreConfig, metrics: Metrics | None = None) -> Store:
    """The store ``config`` names, reporting its outages as log lines and, given ``metrics``,
    its coalesced writes as metrics."""
    observer = StoreLog(metrics)
    match config.kind:
        case StoreKind.SQLITE:
            from sidecar.store.sqlite import SQLiteStore

            return await SQLiteStore.open(config.sqlite_path, observer=observer)
        case StoreKind.MYSQL:
            from sidecar.store.mysql import MySQLStore  # the [mysql] extra

            store = await MySQLStore.connect(
                config.url, min_size=config.pool_min_size, max_size=config.pool_max_size,
                acquire_timeout=config.acquire_timeout,
                statement_timeout=config.statement_timeout,
                lock_timeout=config.lock_timeout, observer=observer)
            # One server, or a Galera node and the nodes it sees: docs/design.md, "Galera".
            log.info("store_server", kind="mysql", server=str(store.cluster))
            return store
        case StoreKind.POSTGRESQL:
            from sidecar.store.postgres import PostgresStore

            return await PostgresStore.connect(
                config.url,
                min_size=config.pool_min_size,
                max_size=config.pool_max_size,
                acquire_timeout=config.acquire_timeout,
                statement_timeout=config.statement_timeout,
                lock_timeout=config.lock_timeout,
                command_timeout=config.statement_timeout + 1.0,
                statement_cache_size=config.statement_cache_size,
                session_settings=config.session_settings,
                partition_interval=config.partitioning.interval,
                observer=observer,
                result_commit_waits=config.result_commit is ResultCommit.WAIT,
            )
        case _:
            assert_never(config.kind)


async def migrate_store(config: StoreConfig) -> list[str]:
    """Bring the store's schema up to date; the migrations applied. The embedded store
    migrates itself when opened, so for it this is an open and a close (and ``[]``)."""
    match config.kind:
        case StoreKind.SQLITE:
            store = await open_store(config)
            await store.close()
            return []
        case StoreKind.MYSQL:
            from sidecar.store.mysql import migrate_mysql

            return await migrate_mysql(config.url)
        case StoreKind.POSTGRESQL:
            from sidecar.store.postgres import migrate_postgres
            from sidecar.store.postgres.partitioning import partition_store

            applied = await migrate_postgres(config.url)
            interval = config.partitioning.interval
            if interval is not None and await partition_store(
                    config.url, interval=interval, ahead=config.partitioning.ahead,
                    only_if_empty=True):
                applied.append("partitioned")
            return applied
        case _:
            assert_never(config.kind)


async def partition_existing_store(config: StoreConfig) -> bool:
    """``webhook-sidecar store partition``: switch the live store to partitions (False: it
    was partitioned already). Needs the schema this release ships (run ``migrate`` first)."""
    from sidecar.store.postgres.partitioning import partition_store

    assert config.partitioning.interval is not None
    return await partition_store(config.url, interval=config.partitioning.interval,
                                 ahead=config.partitioning.ahead)


def partition_keeper(config: StoreConfig) -> PartitionKeeper | None:
    """The upkeep of a partitioned store's partitions, or None (unpartitioned, SQLite, MySQL)."""
    if config.kind != "postgresql" or config.partitioning.interval is None:
        return None
    from sidecar.store.postgres.connections import startup_parameters
    from sidecar.store.postgres.partition_upkeep import PartitionKeeper

    return PartitionKeeper(config.url, interval=config.partitioning.interval,
                           ahead=config.partitioning.ahead,
                           statement_cache_size=config.statement_cache_size,
                           server_settings=startup_parameters(
                               statement_timeout=config.statement_timeout,
                               lock_timeout=config.lock_timeout,
                               idle_in_transaction_timeout=10.0,
                               session_settings=config.session_settings))
