"""The SQL files as the drivers get them: fragments spliced in, named parameters made positional
for asyncpg without touching casts, literals or comments, and the same names in both dialects
(the verbs build one mapping of parameters for both)."""

from __future__ import annotations

from importlib import resources

import asyncpg
import pytest

from sidecar.store.sqlfiles import DIALECTS, fragment, query, query_names, statement, to_positional


def test_named_parameters_become_numbered_in_order_of_first_use() -> None:
    sql, names = to_positional(
        "SELECT :b::text, :a, :b FROM t WHERE x = :a AND y IN (:c,:a)"
    )
    assert sql == "SELECT $1::text, $2, $1 FROM t WHERE x = $2 AND y IN ($3,$2)"
    assert names == ("b", "a", "c")


@pytest.mark.parametrize(
    "kept",
    [
        "'webhook-sidecar:migrate'",  # a string literal
        "'it''s :quoted'",  # with a doubled quote
        "E'back\\\\slash \\' :x'",  # an escape string
        '"odd:column"',  # a quoted identifier
        "$$ SELECT :x $$",  # dollar quotes
        "$body$ :x $body$",
        "-- a comment naming :x\n",
        "/* :x */",
        "arr[1:2]",  # an array slice
        "arr[lo:hi]",
        "x::jsonb",  # a cast
    ],
)
def test_what_only_looks_like_a_parameter_is_left_alone(kept: str) -> None:
    sql, names = to_positional(f"SELECT {kept} , :p")
    assert sql == f"SELECT {kept} , $1"
    assert names == ("p",)


def test_a_file_mixing_in_positional_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\$2"):
        to_positional("SELECT :a, $2", what="x.sql")


def test_positional_values_follow_the_names_and_a_missing_one_is_named() -> None:
    stmt = statement("postgres", "get")
    assert stmt.sql.count("$1") and stmt.sql.count("$2") and ":provider" not in stmt.sql
    assert stmt.positional({"event_id": "e", "provider": "p", "extra": 1}) == ["p", "e"]
    with pytest.raises(KeyError, match=":event_id"):
        stmt.positional({"provider": "p"})


def test_sqlite_keeps_its_named_parameters() -> None:
    stmt = statement("sqlite", "get")
    assert ":provider" in stmt.sql and stmt.names == ("provider", "event_id")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_row_columns_are_spliced_where_a_query_asks_for_them(dialect: str) -> None:
    columns = fragment(dialect, "event_row")
    assert columns.removeprefix("e.").startswith(("provider, event_id", "provider, e.event_id"))
    assert columns.endswith("AS now")
    for name in query_names(dialect):
        assert "{{" not in query(dialect, name), name
    # MySQL's claim answers no row (no RETURNING): the row is read by get / get_locked.
    readers = ("get", "get_locked", "list_events") if dialect == "mysql" else (
        "claim", "get", "list_events")
    for name in readers:
        assert columns in query(dialect, name), name


def test_both_dialects_ship_the_same_queries_with_the_same_parameters() -> None:
    common = set(query_names("postgres")) & set(query_names("sqlite"))
    assert {"claim", "take_over", "complete", "get", "list_events", "purge", "queue_entry",
            "queue_stats"} <= common
    for name in sorted(common):
        postgres, sqlite = statement("postgres", name), statement("sqlite", name)
        assert set(postgres.names) == set(sqlite.names), name


@pytest.mark.postgres
async def test_every_postgres_query_prepares(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        for name in query_names("postgres"):
            stmt = statement("postgres", name)
            prepared = await conn.prepare(stmt.sql)
            assert len(prepared.get_parameters()) == len(stmt.names), name
    finally:
        await conn.close()


def test_a_shared_fragment_is_one_text_spliced_in_both_dialects() -> None:
    rule = fragment("postgres", "held_back")
    assert rule == fragment("sqlite", "held_back") and rule.startswith("EXISTS (")
    assert rule in query("postgres", "take_queued")
    assert rule in query("sqlite", "take_queued_pick")
    with pytest.raises(FileNotFoundError, match=r"sqlite/no_such\.fragment\.sql"):
        fragment("sqlite", "no_such")


def test_a_fragment_both_dialects_spell_alike_is_written_once_in_shared() -> None:
    """A dialect's own fragment is one whose text differs from the other dialect's: one that
    reads the same (comments aside) lives once, in ``sql/shared/``."""
    sql = resources.files("sidecar.store").joinpath("sql")
    own = {dialect: {entry.name.removesuffix(".fragment.sql")
                     for entry in sql.joinpath(dialect).iterdir()
                     if entry.name.endswith(".fragment.sql")}
           for dialect in DIALECTS}
    both = set.intersection(*own.values())
    assert {"event_row", "binding"} <= both
    twins = sorted(name for name in both
                   if len({fragment(dialect, name) for dialect in DIALECTS}) == 1)
    assert twins == [], f"spelled alike in both dialects, belong in sql/shared/: {twins}"
