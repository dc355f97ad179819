"""Numbered, forward-only schema migrations, and the one runner both SQL adapters use.

A migration is a file ``sql/<dialect>/migrations/NNNN_short_name.sql``. Versions start at 1 and
have no gaps; a migration, once released, is never edited (add a new one instead).
:func:`migrate` applies the pending ones in order, one transaction per migration, and records the
name of each in the ``webhook_sidecar_migrations`` table; the adapter only supplies a
:class:`Session`: how to open that transaction under its lock and how to run a statement in it.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from sidecar.core.errors import SchemaError
from sidecar.store.rows import Params, Record
from sidecar.store.sqlfiles import migrations_dir

_NAME = re.compile(r"^(?P<version>[0-9]{4})_[a-z0-9_]+$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str  # file name without ".sql", e.g. "0001_init"; the recorded identity
    sql: str


def version_of(name: str) -> int | None:
    """The version number of a migration name, or None if ``name`` is not one."""
    match = _NAME.match(name)
    return int(match["version"]) if match else None


@functools.cache
def load_migrations(dialect: str) -> tuple[Migration, ...]:
    """All migrations shipped for ``dialect``, in order. Raises ``RuntimeError`` when the files
    are misnumbered (a packaging defect, not a runtime condition)."""
    found: list[Migration] = []
    for entry in migrations_dir(dialect).iterdir():
        if not entry.name.endswith(".sql") or not entry.is_file():
            continue
        name = entry.name.removesuffix(".sql")
        version = version_of(name)
        if version is None:
            raise RuntimeError(f"badly named migration file {dialect}/migrations/{entry.name}")
        found.append(Migration(version, name, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations must be numbered 1..n without gaps: {versions}")
    return tuple(found)


def latest_version(migrations: Iterable[Migration]) -> int:
    return max((m.version for m in migrations), default=0)


def applied_version(applied_names: Iterable[str]) -> int:
    """The schema version a database is at: the highest recorded migration number."""
    return max((v for v in map(version_of, applied_names) if v is not None), default=0)


def pending(migrations: Iterable[Migration], applied_names: Collection[str]) -> list[Migration]:
    """The migrations not yet recorded as applied, in order."""
    return [m for m in migrations if m.name not in applied_names]


RunQuery = Callable[[str, Params], Awaitable[Sequence[Record]]]
"""Runs the query ``sql/<dialect>/<name>.sql`` with the given parameters; answers its rows."""


class Session(Protocol):
    """One database connection of an adapter, as :func:`migrate` drives it."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """One transaction that holds the adapter's migration lock from its start, so that
        concurrent runs apply each migration once; committed on normal exit, else rolled back."""
        ...

    async def rows(self, name: str, params: Params) -> Sequence[Record]:
        """Run the query ``sql/<dialect>/<name>.sql`` in the current transaction."""
        ...

    async def script(self, sql: str) -> None:
        """Run a migration file (several statements) in the current transaction."""
        ...


async def migrate(dialect: str, session: Session) -> list[str]:
    """Apply the pending migrations of ``dialect``, each in its own transaction; returns the
    names applied, in order (empty when the database is up to date). Another run that got the
    lock first has applied some or all of them: those are skipped, not applied twice."""
    applied: list[str] = []
    for migration in load_migrations(dialect):
        async with session.transaction():
            await session.rows("migrations_table", {})
            if migration.name in _names(await session.rows("migrations_applied", {})):
                continue
            await session.script(migration.sql)
            await session.rows("migration_record", {"name": migration.name})
        applied.append(migration.name)
    return applied


async def recorded(rows: RunQuery) -> set[str]:
    """Names of the migrations recorded in a database (empty for a fresh one), read with
    ``rows(query_name, params)``; creates nothing."""
    present = await rows("migrations_exist", {})
    if not present or not present[0]["present"]:
        return set()
    return _names(await rows("migrations_applied", {}))


def check_current(dialect: str, applied_names: Collection[str]) -> None:
    """Raise ``SchemaError`` unless every migration this release ships has been applied (a
    newer schema is fine: an older replica during a rolling upgrade)."""
    needed = load_migrations(dialect)
    if pending(needed, applied_names):
        raise SchemaError(
            f"database schema is at version {applied_version(applied_names)}, this release "
            f"needs {latest_version(needed)}: run `webhook-sidecar migrate`"
        )


def _names(records: Iterable[Record]) -> set[str]:
    return {str(r["name"]) for r in records}


def split_sqlite_script(script: str) -> list[str]:
    """Split a SQLite script into complete statements (``sqlite3.complete_statement`` knows about
    string literals and trigger bodies), so that they can run inside one explicit transaction:
    ``Cursor.executescript`` would commit first."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    rest = "\n".join(
        line for line in buffer.splitlines() if line.strip() and not line.lstrip().startswith("--")
    )
    if rest:
        raise RuntimeError(f"incomplete SQL statement at the end of a script: {rest[:80]!r}")
    return statements
