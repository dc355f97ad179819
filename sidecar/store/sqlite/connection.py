"""The SQLite file and its one connection: opening it (WAL, the session's pragmas), running a
named query or a script on it, and the explicit write transaction. Everything here runs on the
store's worker thread."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from sidecar.store import migrations
from sidecar.store.rows import Params
from sidecar.store.sqlfiles import query, statement

DIALECT: Final = "sqlite"  # the store's SQL files: sql/sqlite/*.sql


def open_connection(filename: str, busy_timeout: float) -> sqlite3.Connection:
    con = sqlite3.connect(
        filename,
        timeout=busy_timeout,  # sets SQLite's busy timeout
        isolation_level=None,  # autocommit; explicit BEGIN IMMEDIATE where needed
        check_same_thread=True,
    )
    try:
        con.row_factory = sqlite3.Row
        mode = _enable_wal(con, busy_timeout)
        if str(mode).lower() != "wal" and filename != ":memory:":
            raise sqlite3.OperationalError(
                f"could not switch {filename!r} to WAL mode (got {mode!r}); "
                "a network filesystem is not supported"
            )
        for sql in migrations.split_sqlite_script(query(DIALECT, "session")):
            con.execute(sql).fetchall()
    except BaseException:
        con.close()
        raise
    return con


def execute(con: sqlite3.Connection, name: str, params: Params) -> list[sqlite3.Row]:
    """Run ``sql/sqlite/<name>.sql`` with ``params`` (bound by name); its rows."""
    return con.execute(statement(DIALECT, name).sql, params).fetchall()


@contextmanager
def immediate(con: sqlite3.Connection) -> Iterator[None]:
    """An explicit write transaction: takes the database write lock up front (waiting up to the
    busy timeout), so that what is read inside it cannot change before the commit."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        rollback(con)
        raise


def rollback(con: sqlite3.Connection) -> None:
    if con.in_transaction:
        con.execute("ROLLBACK")


def run_script(con: sqlite3.Connection, sql: str) -> None:
    """Statement by statement, inside the open transaction (``executescript`` would commit)."""
    for each in migrations.split_sqlite_script(sql):
        con.execute(each).fetchall()


def _enable_wal(con: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL (a persistent property of the file). Changing the journal mode needs an
    exclusive lock and SQLite answers SQLITE_BUSY at once, without its busy handler, while another
    connection opens the same fresh file: retry until the busy timeout is spent."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = con.execute(query(DIALECT, "journal_mode")).fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            busy = (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(0.005)
