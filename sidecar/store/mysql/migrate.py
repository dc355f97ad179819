"""``migrate_mysql``: the numbered migrations applied on one connection, each under the migrate
lease (``webhook_sidecar_lock``), so that concurrent runs, against one server or against
different nodes of a Galera cluster, apply each migration once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

import asyncmy
from asyncmy.cursors import DictCursor

from sidecar.core.errors import SchemaError, StoreError
from sidecar.store import migrations
from sidecar.store.mysql.connections import check, open_pool, pin
from sidecar.store.mysql.galera import check_migrate
from sidecar.store.mysql.session import DIALECT, MIGRATE_PRIVILEGES, parse_url
from sidecar.store.mysql.tx import DEADLOCK, Duplicate, Row, Tx, describe, error_code
from sidecar.store.rows import Params

# The lease is renewed before each statement of a migration; a run that dies holding it
# (SIGKILL, a lost host) delays the next one by at most this long.
LEASE_SECONDS: Final = 30.0
_POLL: Final = 0.2  # seconds between tries while another run holds the lease


async def migrate_mysql(url: str, *, connect_timeout: float = 10.0,
                        lock_wait: float = 60.0) -> list[str]:
    """Apply the pending numbered migrations on one connection, each under the migrate lease
    (a second concurrent run waits for it, then finds nothing to do). The server and the
    privileges migrate needs are checked first, so a refused run changes nothing. Returns the
    names applied."""
    try:
        target = parse_url(url)
    except ValueError as exc:
        raise StoreError(f"store.url: {exc}") from exc
    pool = await open_pool(target, 1, 1, target.connect_timeout or connect_timeout)
    try:
        async with asyncio.timeout(connect_timeout):
            conn = await pool.acquire()
        try:
            await pin(conn, lock_wait)
            async with conn.cursor(DictCursor) as cursor:
                tx = Tx(cursor)
                check_migrate(await check(tx, MIGRATE_PRIVILEGES, target))
                return await migrations.migrate(DIALECT, _MigrationSession(tx, lock_wait))
        except (asyncmy.errors.Error, OSError) as exc:
            raise StoreError(f"migration failed: {describe(exc)}") from exc
        finally:
            pool.release(conn)
    except TimeoutError as exc:
        raise StoreError(f"migrate: no connection within {connect_timeout:g}s") from exc
    finally:
        pool.close()
        await pool.wait_closed()


class _MigrationSession:
    """``migrations.Session`` on one connection. MySQL commits each DDL statement by itself, so
    the "transaction" is the migrate lease held around each migration; every statement of a
    migration may run again (docs/design.md, "MySQL and MariaDB"). A lease row rather than a
    named lock (GET_LOCK): a named lock is local to one node of a Galera cluster."""

    def __init__(self, tx: Tx, lock_wait: float) -> None:
        self._tx = tx
        self._wait = lock_wait
        self._lease = {"owner": f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}",
                       "lease_seconds": LEASE_SECONDS}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        await self._tx.count("migration_lock_table", {})
        deadline = time.monotonic() + self._wait
        while not await self._take():
            if time.monotonic() >= deadline:
                raise SchemaError(f"another migrate held the lock for {self._wait:g}s")
            await asyncio.sleep(_POLL)
        try:
            yield
        finally:
            with contextlib.suppress(asyncmy.errors.Error, OSError):
                await self._tx.count("migration_unlock", self._lease)

    async def _take(self) -> bool:
        """Whether the lease is ours now (new, renewed, or taken over once it ran out)."""
        try:
            try:
                return await self._tx.insert("migration_lock", self._lease) == 1
            except Duplicate:
                return await self._tx.count("migration_lock_again", self._lease) == 1
        except asyncmy.errors.OperationalError as exc:
            if error_code(exc) == DEADLOCK:  # a run on another node took it at the same time
                return False
            raise

    async def rows(self, name: str, params: Params) -> Sequence[Row]:
        return await self._tx.rows(name, params)

    async def script(self, sql: str) -> None:
        for each in split_script(sql):
            if not await self._take():
                raise SchemaError("the migrate lease ran out and another run took it over")
            await self._tx.execute(each)


def split_script(sql: str) -> list[str]:
    """A migration file's statements: comment lines left out, split at a ``;`` that ends a
    line (the files put one there after each statement, and nowhere else)."""
    statements: list[str] = []
    buffer: list[str] = []
    for line in sql.splitlines():
        if line.lstrip().startswith("--") or not line.strip():
            continue
        buffer.append(line)
        if line.rstrip().endswith(";"):
            statements.append("\n".join(buffer).rstrip().rstrip(";"))
            buffer = []
    if buffer:
        raise RuntimeError(f"a migration ends without ';': {' '.join(buffer)[:80]!r}")
    return statements
