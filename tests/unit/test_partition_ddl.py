"""The DDL partitioned retention builds in Python: identifiers and literals quoted by the
server's rules, whatever a name read from the catalog holds. (That the server runs these
statements is shown by the retention tests on real PostgreSQL.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sidecar.store.postgres.partition_ddl import (
    attach_again,
    drop_events,
    qualified,
    quote_ident,
    quote_literal,
    timestamp,
)

LO = datetime(2026, 12, 4, 18, 0, tzinfo=UTC)
HI = datetime(2026, 12, 4, 18, 1, tzinfo=UTC)


@pytest.mark.parametrize(("name", "quoted"), [
    ("webhook_event_past5", '"webhook_event_past5"'),
    ("Mixed Case", '"Mixed Case"'),
    ('a"b', '"a""b"'),
    ('x"; DROP TABLE webhook_event; --', '"x""; DROP TABLE webhook_event; --"'),
    ("évènement", '"évènement"'),
])
def test_identifiers_are_always_quoted_with_quotes_doubled(name: str, quoted: str) -> None:
    assert quote_ident(name) == quoted


@pytest.mark.parametrize("name", ["", "a\x00b"])
def test_no_identifier_is_empty_or_holds_nul(name: str) -> None:
    with pytest.raises(ValueError, match="not an identifier"):
        quote_ident(name)


def test_a_qualified_name_quotes_each_part() -> None:
    assert qualified("public", 'we"ird') == '"public"."we""ird"'


@pytest.mark.parametrize(("text", "quoted"), [
    ("2026-12-04T18:00:00+00:00", "'2026-12-04T18:00:00+00:00'"),
    ("it's", "'it''s'"),
    ("a\\b'", "E'a\\\\b'''"),  # what the server's quote_literal('a\b''') answers
])
def test_literals_are_quoted_as_the_servers_quote_literal(text: str, quoted: str) -> None:
    assert quote_literal(text) == quoted


def test_a_bound_needs_its_time_zone() -> None:
    assert timestamp(LO) == "'2026-12-04T18:00:00+00:00'"
    with pytest.raises(ValueError, match="time zone"):
        timestamp(datetime(2026, 12, 4, 18, 0))  # a naive time


def test_attaching_again_checks_the_bounds_first_and_drops_the_check_after() -> None:
    script = attach_again(parent='"webhook_event"', part='"public"."p"', fence='"p_bound"',
                          key='"received_at"', lower=LO, upper=HI)
    assert script.split(";\n") == [
        'ALTER TABLE "public"."p" ADD CONSTRAINT "p_bound" CHECK ("received_at" < '
        "'2026-12-04T18:01:00+00:00' AND \"received_at\" >= '2026-12-04T18:00:00+00:00')",
        'ALTER TABLE "webhook_event" ATTACH PARTITION "public"."p" FOR VALUES FROM '
        "('2026-12-04T18:00:00+00:00') TO ('2026-12-04T18:01:00+00:00')",
        'ALTER TABLE "public"."p" DROP CONSTRAINT "p_bound"',
        'COMMENT ON TABLE "public"."p" IS NULL',
    ]


def test_a_partition_of_everything_before_attaches_from_minvalue() -> None:
    script = attach_again(parent='"webhook_event"', part='"public"."before"', fence='"b"',
                          key='"received_at"', lower=None, upper=HI)
    assert "CHECK (\"received_at\" < '2026-12-04T18:01:00+00:00')" in script
    assert "FOR VALUES FROM (MINVALUE) TO ('2026-12-04T18:01:00+00:00')" in script


def test_dropping_events_takes_their_dead_queue_entries_but_not_a_newer_copys() -> None:
    delete, drop = drop_events(parent='"webhook_event"', part='"public"."p"',
                               queue='"webhook_queue"').split(";\n")
    assert delete.startswith('DELETE FROM "webhook_queue" AS q USING "public"."p" AS e ')
    assert 'NOT EXISTS (SELECT 1 FROM "webhook_event" AS a ' in delete
    assert drop == 'DROP TABLE "public"."p"'
