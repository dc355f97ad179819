"""The DDL of partitioned retention that names tables, built in Python: PostgreSQL binds no
identifier (a ``$n`` is a value, never a table), so the names are quoted here by the server's
own rules (docs/design.md, "Partitioned retention", "Where the logic lives"). Every identifier
is always quoted (``"`` doubled inside), every literal single-quoted (``'`` doubled), so no
name or value read from the catalog can end a statement early. Names come from the catalog as
stored (``pg_class.relname``, ``pg_namespace.nspname``), never as a ``regclass`` prints them
(already quoted where needed, and quoted twice here).
"""

from __future__ import annotations

from datetime import datetime


def quote_ident(name: str) -> str:
    """``name`` as a quoted identifier: ``"`` around it, each ``"`` in it doubled (what the
    server's ``quote_ident`` does when quoting is needed; always here, which is never wrong)."""
    if not name or "\x00" in name:
        raise ValueError(f"not an identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    return f"{quote_ident(schema)}.{quote_ident(name)}"


def quote_literal(text: str) -> str:
    """``text`` as a string literal, as the server's ``quote_literal`` writes it: ``'``
    doubled, and an ``E''`` literal with ``\\`` doubled when it holds a backslash (right
    whatever ``standard_conforming_strings`` says)."""
    if "\x00" in text:
        raise ValueError("a string literal cannot hold NUL")
    quoted = "'" + text.replace("'", "''") + "'"
    return "E" + quoted.replace("\\", "\\\\") if "\\" in text else quoted


def timestamp(value: datetime) -> str:
    """A partition bound as a literal: an aware time (asyncpg reads timestamptz as UTC)."""
    if value.tzinfo is None:
        raise ValueError(f"a partition bound needs its time zone: {value!r}")
    return quote_literal(value.isoformat())


def attach_again(*, parent: str, part: str, fence: str, key: str,
                 lower: datetime | None, upper: datetime) -> str:
    """Attach detached ``part`` (quoted) to ``parent`` (quoted) again, as one script (one round
    trip): first a CHECK ``fence`` of its bounds on ``key``, which lets the attach skip its scan
    (no proxy reaches the table, so the CHECK's own scan holds no lock deliveries wait for), so
    the attach's locks, the DEFAULT partition's ACCESS EXCLUSIVE among them, are held for
    catalog work; then the CHECK goes (the partition bound says the same) and so does the
    comment that marked the table detached."""
    check = f"{key} < {timestamp(upper)}"
    if lower is not None:
        check += f" AND {key} >= {timestamp(lower)}"
    start = "MINVALUE" if lower is None else timestamp(lower)
    return ";\n".join([
        f"ALTER TABLE {part} ADD CONSTRAINT {fence} CHECK ({check})",
        f"ALTER TABLE {parent} ATTACH PARTITION {part} "
        f"FOR VALUES FROM ({start}) TO ({timestamp(upper)})",
        f"ALTER TABLE {part} DROP CONSTRAINT {fence}",
        f"COMMENT ON TABLE {part} IS NULL",
    ])


def drop_events(*, parent: str, part: str, queue: str) -> str:
    """Drop detached event table ``part`` with the dead queue entries of its events (no foreign
    key cascades to them); an entry whose key is in the attached ``parent`` is a newer copy's,
    claimed after the detach, and stays."""
    return ";\n".join([
        f"DELETE FROM {queue} AS q USING {part} AS e "
        "WHERE e.provider = q.provider AND e.event_id = q.event_id "
        f"AND NOT EXISTS (SELECT 1 FROM {parent} AS a "
        "WHERE a.provider = q.provider AND a.event_id = q.event_id)",
        f"DROP TABLE {part}",
    ])


def drop_table(part: str) -> str:
    return f"DROP TABLE {part}"


def lock_exclusive(part: str) -> str:
    return f"LOCK TABLE {part} IN ACCESS EXCLUSIVE MODE"


# -- before the switch (``store partition``): the CHECK that lets its attach skip the scan ------

def switch_bound_name(table: str) -> str:
    return quote_ident(f"{table}_partition_bound")


def switch_prepare(*, table: str, key: str, bound: datetime) -> str:
    """The CHECK (``key`` < ``bound``) on plain ``table``, NOT VALID (no scan, a brief lock),
    replacing one an interrupted run left with another bound: one script, one transaction."""
    name = switch_bound_name(table)
    return ";\n".join([
        f"ALTER TABLE {quote_ident(table)} DROP CONSTRAINT IF EXISTS {name}",
        f"ALTER TABLE {quote_ident(table)} ADD CONSTRAINT {name} "
        f"CHECK ({quote_ident(key)} < {timestamp(bound)}) NOT VALID",
    ])


def switch_validate(table: str) -> str:
    """The CHECK's scan, under SHARE UPDATE EXCLUSIVE: reads and writes go on meanwhile."""
    return f"ALTER TABLE {quote_ident(table)} VALIDATE CONSTRAINT {switch_bound_name(table)}"


def switch_unprepare(table: str) -> str:
    """A switch that did not happen leaves no CHECK behind (it would refuse every insert once
    its bound is past)."""
    return (f"ALTER TABLE {quote_ident(table)} "
            f"DROP CONSTRAINT IF EXISTS {switch_bound_name(table)}")


def drop_index(schema: str, name: str) -> str:
    return f"DROP INDEX {qualified(schema, name)}"
