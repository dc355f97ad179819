"""``Tx``: the statements of one verb on one connection, and what the server's error codes mean
to the verbs (the key exists; the transaction lost a deadlock or a Galera certification; a lock
wait ran out)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import asyncmy

from sidecar.core.errors import StoreError
from sidecar.store.mysql.session import DIALECT
from sidecar.store.rows import Params
from sidecar.store.sqlfiles import statement

DUP_ENTRY: Final = 1062  # ER_DUP_ENTRY: the key exists
# ER_LOCK_DEADLOCK: the whole transaction was rolled back, by InnoDB (a deadlock's victim) or,
# on a Galera cluster, by the node (another node's commit of the same key certified first).
DEADLOCK: Final = 1213
LOCK_WAIT: Final = 1205  # ER_LOCK_WAIT_TIMEOUT: the statement was rolled back
RETRIES: Final = 3  # runs of a transaction rolled back as a deadlock's (or a certification's) loser

# Columns that are VARBINARY in the schema (compared byte for byte) but text to the core.
_TEXT_KEYS: Final = frozenset({"provider", "event_id", "order_key"})

Row = dict[str, Any]


class Duplicate(Exception):
    """A statement met ER_DUP_ENTRY (the key exists)."""


def error_code(exc: BaseException) -> int | None:
    """The server's (or the client's) error number of a driver error, else None."""
    if isinstance(exc, asyncmy.errors.Error) and exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


class Tx:
    """The statements of one verb on one connection (in a transaction, or autocommitted)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    async def rows(self, name: str, params: Params) -> list[Row]:
        """Run ``sql/mysql/<name>.sql``; its rows (the keys decoded to text)."""
        await self._run(name, params)
        records = await self._cursor.fetchall()
        return [_decoded(r) for r in records]

    async def count(self, name: str, params: Params) -> int:
        """Run ``sql/mysql/<name>.sql``; the rows it matched (found rows)."""
        await self._run(name, params)
        return int(self._cursor.rowcount)

    async def insert(self, name: str, params: Params) -> int:
        """Run an ``INSERT``; the rows inserted. Raises ``Duplicate`` on ER_DUP_ENTRY."""
        try:
            return await self.count(name, params)
        except asyncmy.errors.IntegrityError as exc:
            if exc.args and exc.args[0] == DUP_ENTRY:
                raise Duplicate(name) from exc
            raise

    async def execute(self, sql: str) -> None:
        """Run one statement that is not a file of ``sql/mysql/`` (a migration's)."""
        await self._cursor.execute(sql)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """The statements inside, in one transaction (the connection is otherwise
        autocommitted): for a verb whose first statement must not hold its locks longer."""
        await self.count("begin", {})
        try:
            yield
        except (asyncmy.errors.Error, StoreError):  # else the connection is closed: see _session
            with contextlib.suppress(asyncmy.errors.Error, OSError):
                await self.count("rollback", {})
            raise
        await self.count("commit", {})

    async def _run(self, name: str, params: Params) -> None:
        stmt = statement(DIALECT, name)
        await self._cursor.execute(stmt.sql, {n: params[n] for n in stmt.names})


def _decoded(record: Row) -> Row:
    return {k: (v.decode() if k in _TEXT_KEYS and isinstance(v, bytes) else v)
            for k, v in record.items()}


Step = Callable[[Tx, Params], Awaitable[list[Row]]]


async def exists(tx: Tx, name: str, params: Params) -> bool:
    """Run the insert ``name``; False when it inserted, True when the key existed."""
    try:
        await tx.insert(name, params)
    except Duplicate:
        return True
    return False


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
