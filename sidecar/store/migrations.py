"""Numbered, forward-only schema migrations shared by both adapters.

A migration is a file ``sql/<dialect>/migrations/NNNN_short_name.sql``. Versions start at 1 and
have no gaps; a migration, once released, is never edited (add a new one instead). Each adapter
applies the pending ones in order, one transaction per migration, and records the name of each in
its ``webhook_sidecar_migrations`` table.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Collection, Iterable
from dataclasses import dataclass

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
