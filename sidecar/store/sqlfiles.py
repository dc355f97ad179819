"""The adapters' ``.sql`` files, loaded from the package once and made ready for the driver.

Queries live in ``sql/<dialect>/<name>.sql``; migrations in ``sql/<dialect>/migrations/``.
Files are read with ``importlib.resources`` so they work from a wheel or a zip as well as from a
source checkout.

Two things happen to a query between its file and the driver, once per process:

- **Fragments are spliced in.** ``{{event_row}}`` stands for the text of
  ``sql/<dialect>/event_row.fragment.sql`` (its ``--`` comment lines left out), so that the
  column list every row-reading query shares is written once per dialect. A fragment both
  dialects spell alike lives once, in ``sql/shared/`` (a dialect's own file of the name would
  come first). The braces are not SQL, so a file run by hand without its fragment fails instead
  of reading other columns.
- **Named parameters are made positional where the driver wants it.** Queries of both dialects
  name their parameters, ``:provider``. ``sqlite3`` binds those from a mapping as they are;
  asyncpg only knows ``$1, $2, …``, so for PostgreSQL each distinct name becomes ``$n`` in the
  order of its first use (:meth:`Statement.positional` lines the values up). Casts
  (``:provider::text`` keeps its ``::text``), string literals (``'webhook-sidecar:migrate'``),
  quoted identifiers, dollar-quoted bodies and comments are left as they are.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

DIALECTS = ("postgres", "sqlite", "mysql")
_SHARED = "shared"  # fragments both dialects splice in, spelled alike

_FRAGMENT = re.compile(r"\{\{(?P<name>[a-z_]+)\}\}")

# One left-to-right scan. What may contain a colon without being a parameter is matched (and
# kept) first; a ``:name`` is a parameter only where none of those starts.
_SCAN = re.compile(
    r"""
      (?P<keep>
          --[^\n]*                              # line comment
        | /\*.*?\*/                             # block comment
        | (?<![\w$])[eE]'(?:[^'\\]|\\.|'')*'    # escape string literal, E'…'
        | '(?:[^']|'')*'                        # string literal
        | "(?:[^"]|"")*"                        # quoted identifier
        | (?<![\w$])\$(?P<tag>(?:[A-Za-z_]\w*)?)\$.*?\$(?P=tag)\$   # dollar-quoted
        | ::                                    # a cast
      )
    | (?<![\w:]):(?P<name>[A-Za-z_]\w*)         # a named parameter (not a[lo:hi])
    | (?<![\w$])(?P<positional>\$[0-9]+)        # a positional one: not in a named file
    """,
    re.DOTALL | re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Statement:
    """One query as its driver takes it."""

    name: str  # the file's name without ".sql", e.g. "claim"
    sql: str  # PostgreSQL: with $n placeholders; SQLite: with the :name ones as written
    names: tuple[str, ...]  # the parameters in order of first use: $n stands for names[n - 1]

    def positional(self, params: Mapping[str, object]) -> list[object]:
        """The values of ``params`` in ``$n`` order, for asyncpg."""
        missing = [n for n in self.names if n not in params]
        if missing:
            raise KeyError(f"{self.name}.sql needs a value for :{', :'.join(missing)}")
        return [params[n] for n in self.names]


def _dialect_dir(dialect: str) -> Traversable:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {DIALECTS}")
    return resources.files("sidecar.store").joinpath("sql", dialect)


def _read(dialect: str, relative: str, *, shared: bool = False) -> str:
    path = _dialect_dir(dialect).joinpath(relative)
    if shared and not path.is_file():
        path = resources.files("sidecar.store").joinpath("sql", _SHARED, relative)
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {dialect}/{relative} in the sidecar.store package")
    return path.read_text(encoding="utf-8")


@functools.cache
def fragment(dialect: str, name: str) -> str:
    """The text of ``sql/<dialect>/<name>.fragment.sql`` (else ``sql/shared/<name>.fragment.sql``)
    without its comment lines."""
    lines = _read(dialect, f"{name}.fragment.sql", shared=True).splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("--")).strip()
    # A fragment may use another (MySQL's spell the clock once, {{now}}).
    return _FRAGMENT.sub(lambda m: fragment(dialect, m["name"]), text)


@functools.cache
def query(dialect: str, name: str) -> str:
    """The text of ``sql/<dialect>/<name>.sql`` with its fragments spliced in, read once."""
    return _FRAGMENT.sub(lambda m: fragment(dialect, m["name"]), _read(dialect, f"{name}.sql"))


@functools.cache
def statement(dialect: str, name: str) -> Statement:
    """``query(dialect, name)`` ready for the dialect's driver, built once per process: its
    first line (the file's one-line summary, which names the statement wherever the server
    shows it) and its SQL, without the other comment lines. PostgreSQL keeps only the first
    1024 bytes of a running statement's text (``pg_stat_activity.query``); a long explanation
    would push the statement itself out of sight."""
    text = _first_comment_only(query(dialect, name))
    sql, names = to_positional(text, what=f"{dialect}/{name}.sql")
    if dialect == "sqlite":  # sqlite3 binds :name from a mapping itself
        sql = text
    elif dialect == "mysql":  # the driver interpolates %(name)s from a mapping
        sql, names = to_pyformat(text, what=f"{dialect}/{name}.sql")
    return Statement(name, sql, names)


def _first_comment_only(sql: str) -> str:
    first, *rest = sql.splitlines()
    return "\n".join([first, *(line for line in rest if not line.lstrip().startswith("--"))])


def to_positional(sql: str, *, what: str = "query") -> tuple[str, tuple[str, ...]]:
    """``sql`` with each ``:name`` parameter replaced by ``$n`` (one ``n`` per distinct name, in
    order of first use), and the names in that order. Raises ``ValueError`` on a ``$n`` already
    there: a file uses one style."""
    names: dict[str, int] = {}

    def number(name: str) -> str:
        return f"${names.setdefault(name, len(names) + 1)}"

    return _rewrite(sql, what, number), tuple(names)


def to_pyformat(sql: str, *, what: str = "query") -> tuple[str, tuple[str, ...]]:
    """``sql`` with each ``:name`` parameter replaced by ``%(name)s`` and every other ``%``
    doubled (the MySQL driver formats the text with ``%``), and the names in order of first
    use."""
    names: dict[str, None] = {}

    def named(name: str) -> str:
        names.setdefault(name)
        return f"%({name})s"

    return _rewrite(sql, what, named, lambda text: text.replace("%", "%%")), tuple(names)


def _rewrite(sql: str, what: str, parameter: Callable[[str], str],
             other: Callable[[str], str] = str) -> str:
    """``sql`` with each ``:name`` parameter replaced by ``parameter(name)`` and all else
    (comments, literals and the text between) by ``other(text)``, in one scan (``_SCAN``)."""
    parts: list[str] = []
    end = 0
    for match in _SCAN.finditer(sql):
        if match["positional"]:
            raise ValueError(f"{what} mixes in a positional {match['positional']}: use :name")
        name = match["name"]
        parts += [other(sql[end:match.start()]),
                  other(match[0]) if name is None else parameter(name)]
        end = match.end()
    parts.append(other(sql[end:]))
    return "".join(parts)


def query_names(dialect: str) -> list[str]:
    """The names of all queries shipped for ``dialect`` (fragments and migrations left out)."""
    return sorted(
        entry.name.removesuffix(".sql") for entry in _dialect_dir(dialect).iterdir()
        if entry.is_file() and entry.name.endswith(".sql")
        and not entry.name.endswith(".fragment.sql")
    )


def migrations_dir(dialect: str) -> Traversable:
    """The folder holding ``dialect``'s numbered migration files."""
    return _dialect_dir(dialect).joinpath("migrations")
