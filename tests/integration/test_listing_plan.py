"""The event listing's PostgreSQL plan: on a large table the page is answered from the
(provider, received_at) index, walked back per provider from the cursor, with no sequential
scan of webhook_event and no sort of it, only of the few rows the walks return.

A fresh database is filled fast (INSERT … SELECT generate_series: four providers, every state,
rows sharing received_at), analysed, and the very statement the adapter runs
(``sql/postgres/list_page.sql``, ``list_page_queue.sql`` with ``rows.page_params``) is
EXPLAINed for first and later pages, with and without filters, both as the custom plan the
first executions get and as the generic plan a prepared statement may settle on. EXPLAIN
ANALYZE also counts the rows the walks read: bounded by the page, not by the table.

By default 2·10^5 rows; the same test at 10^7 rows is marked ``slow`` (``pytest -m slow``),
its plan and timings are in docs/design.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from sidecar.core.events import EventState
from sidecar.core.listing import EventQuery, PageKey, StatusClass
from sidecar.store.postgres import migrate_postgres
from sidecar.store.rows import page_params
from sidecar.store.sqlfiles import statement

pytestmark = pytest.mark.postgres

PROVIDERS = ("github", "shopify", "stripe", "twilio")
START = datetime(2027, 1, 1, tzinfo=UTC)
START_US = int(START.timestamp()) * 1_000_000
TIE = 8  # consecutive rows sharing one received_at: two per provider

# Row i: provider i % 4, received START + (i / 8) ms; states by residue: ~2 % failed (half of
# them without an answer), 0.1 % each queued and dead (with queue entries), ~0.1 % processing.
# Once the queue states are checked, a fifth provider, not listed, gains 2·10^4 queued events:
# a queue the history's pages must not read whole to tell which of their rows are in it. (With
# it, the planner guesses a provider's queue at a fifth of all entries and reads the queue
# states' rows from the provider's history by bitmap: docs/design.md's note.)
FILL = """
INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, state, attempt,
                           updated_at, outcome, response_status, latency_ms)
SELECT (ARRAY['github', 'shopify', 'stripe', 'twilio'])[1 + i % 4],
       'evt_' || lpad(i::text, 9, '0'),
       $2::timestamptz + (i / 8) * interval '1 millisecond',
       '\\x00'::bytea, s.state, CASE WHEN s.state = 'queued' THEN 0 ELSE 1 END,
       $2::timestamptz, s.outcome, s.status, 1.0
  FROM generate_series(0, $1::integer - 1) AS i
 CROSS JOIN LATERAL (
       SELECT CASE WHEN i % 1000 = 7 THEN 'queued' WHEN i % 1000 = 13 THEN 'dead'
                   WHEN i % 50 = 3 THEN 'failed' WHEN i % 997 = 5 THEN 'processing'
                   ELSE 'done' END AS state) AS k
 CROSS JOIN LATERAL (
       SELECT k.state,
              CASE WHEN k.state IN ('queued', 'processing') THEN NULL
                   WHEN k.state = 'failed' AND (i / 50) % 2 = 1 THEN 'timeout'
                   ELSE 'response' END AS outcome,
              CASE k.state WHEN 'done' THEN CASE WHEN i % 7 = 0 THEN 204 ELSE 200 END
                           WHEN 'dead' THEN 500
                           WHEN 'failed' THEN CASE WHEN (i / 50) % 2 = 0 THEN 503 END
                           END AS status) AS s
"""
ELSEWHERE = """
WITH rows AS (
    INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, state, attempt,
                               updated_at)
    SELECT 'zendesk', 'evt_' || lpad(i::text, 9, '0'), $1::timestamptz, '\\x00'::bytea,
           'queued', 0, $1::timestamptz
      FROM generate_series(0, 19999) AS i
    RETURNING provider, event_id, received_at)
INSERT INTO webhook_queue (provider, event_id, due_at, queued_at, base_attempt)
SELECT provider, event_id, received_at, received_at, 0 FROM rows
"""
QUEUE = """
INSERT INTO webhook_queue (provider, event_id, due_at, queued_at, base_attempt)
SELECT provider, event_id, CASE WHEN state = 'queued' THEN received_at END, received_at, 0
  FROM webhook_event WHERE state IN ('queued', 'dead')
"""


def key_of(i: int) -> PageKey:
    """Row i's exact key, as the fill wrote it."""
    return PageKey(START_US + (i // TIE) * 1000, PROVIDERS[i % 4], f"evt_{i:09d}")


def queries(rows: int) -> dict[str, EventQuery]:
    middle = key_of(rows // 2)
    t_mid = (START_US + (rows // 2 // TIE) * 1000) / 1e6
    return {
        "first page": EventQuery(PROVIDERS),
        "later page": EventQuery(PROVIDERS, after=middle),
        "one provider, later page": EventQuery(("stripe",), after=middle, limit=200),
        "failed, 5xx": EventQuery(PROVIDERS, state=EventState.FAILED,
                                  status_class=StatusClass.S5XX),
        "no answer, later page": EventQuery(PROVIDERS, status_class=StatusClass.NONE,
                                            after=middle),
        # The 1000 ids up to the middle one, all received in the minute before it.
        "prefix and time range": EventQuery(PROVIDERS, id_prefix=f"evt_{rows // 2 - 1:09d}"[:-3],
                                            received_after=t_mid - 60,
                                            received_before=t_mid, limit=20),
        "dead (the queue)": EventQuery(PROVIDERS, state=EventState.DEAD),
        "queued (the queue), later page": EventQuery(PROVIDERS, state=EventState.QUEUED,
                                                     after=middle),
    }


def nodes(plan: dict[str, Any], under: tuple[dict[str, Any], ...] = ()) -> Iterator[
        tuple[dict[str, Any], tuple[dict[str, Any], ...]]]:
    """Every plan node with its ancestors (nearest last)."""
    yield plan, under
    for child in plan.get("Plans", []):
        yield from nodes(child, (*under, plan))


def check(plan: dict[str, Any], *, from_queue: bool) -> None:
    """No sequential (or bitmap) scan of webhook_event; every read of it by an index; and no
    Sort with a read of webhook_event below it that no Limit bounds (a per-row primary key
    lookup from the queue is bounded by the queue). Walking the history, webhook_queue is read
    only by index, once per row returned."""
    queue_reads = [n for n, _ in nodes(plan) if n.get("Relation Name") == "webhook_queue"]
    if not from_queue:
        # Whether a row is in its queue: one index lookup per row of the page, after its LIMIT.
        for node in queue_reads:
            assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node["Node Type"]
            assert int(node["Actual Loops"]) <= plan["Actual Rows"], node["Actual Loops"]
    event_reads = [(n, up) for n, up in nodes(plan) if n.get("Relation Name") == "webhook_event"]
    assert event_reads, "the plan reads webhook_event"
    for node, up in event_reads:
        assert node["Node Type"] in ("Index Scan", "Index Only Scan"), node["Node Type"]
        if from_queue:
            assert node["Index Name"] == "webhook_event_pkey", node["Index Name"]
            continue
        assert node["Index Name"] == "webhook_event_received_at_idx", node["Index Name"]
        assert node["Scan Direction"] == "Backward"
        sorts = [i for i, n in enumerate(up) if n["Node Type"] == "Sort"]
        limits = [i for i, n in enumerate(up) if n["Node Type"] == "Limit"]
        # Below every full Sort above this read, a Limit stops the walk (LIMIT n + 1).
        assert all(any(s < lim for lim in limits) for s in sorts), "a Sort over the walk"
        assert up and up[-1]["Node Type"] in ("Incremental Sort", "Limit"), up[-1]["Node Type"]


def walked(plan: dict[str, Any]) -> int:
    """Rows the index scans of webhook_event returned (EXPLAIN ANALYZE), over all loops."""
    return sum(int(n["Actual Rows"]) * int(n["Actual Loops"]) for n, _ in nodes(plan)
               if n.get("Relation Name") == "webhook_event")


async def fill(dsn: str, rows: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET synchronous_commit = off")
        await conn.execute(FILL, rows, START)
        await conn.execute(QUEUE)
        await conn.execute("ANALYZE webhook_event")
        await conn.execute("ANALYZE webhook_queue")
    finally:
        await conn.close()


async def explain(conn: asyncpg.Connection, query: EventQuery, *,
                  generic: bool) -> dict[str, Any]:
    queued = query.state in (EventState.QUEUED, EventState.DEAD)
    stmt = statement("postgres", "list_page_queue" if queued else "list_page")
    mode = "force_generic_plan" if generic else "force_custom_plan"
    await conn.execute(f"SET plan_cache_mode = {mode}")
    text = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {stmt.sql}",
                               *stmt.positional(page_params(query)))
    result: dict[str, Any] = json.loads(text)[0]
    return result


async def run(pg_database_factory: Callable[[], Awaitable[str]], rows: int,
              capsys: pytest.CaptureFixture[str]) -> None:
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    started = time.monotonic()
    await fill(dsn, rows)
    filled = time.monotonic() - started
    conn = await asyncpg.connect(dsn)
    report = [f"{rows} rows filled and analysed in {filled:.1f}s"]
    try:
        listed = sorted(queries(rows).items(), key=lambda item: item[1].state not in (
            EventState.QUEUED, EventState.DEAD))
        elsewhere = False
        for name, query in listed:
            from_queue = query.state in (EventState.QUEUED, EventState.DEAD)
            if not from_queue and not elsewhere:
                elsewhere = True
                await conn.execute(ELSEWHERE, START)
                await conn.execute("ANALYZE webhook_event")
                await conn.execute("ANALYZE webhook_queue")
                report.append("20000 events of a fifth provider queued, analysed")
            for generic in (False, True):
                explained = await explain(conn, query, generic=generic)
                plan = explained["Plan"]
                check(plan, from_queue=from_queue)
                count = walked(plan)
                assert plan["Actual Rows"] >= 1, f"{name}: the page is not empty"
                if name in ("first page", "later page", "one provider, later page"):
                    # The walks stop at limit + 1 rows each, plus the Incremental Sort's
                        # read-ahead (batches of 32 rows or more, then the rest of a tie).
                    bound = len(query.providers) * (query.limit + 1 + 32 + TIE)
                    assert count <= bound, f"{name}: {count} rows read, more than {bound}"
                kind = "generic" if generic else "custom"
                report.append(f"{name} [{kind}]: {explained['Execution Time']:.2f} ms, "
                              f"{count} event rows read")
        # The plan of one page, as docs/design.md shows it.
        shown = await conn.fetch(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) "
            + statement("postgres", "list_page").sql,
            *statement("postgres", "list_page").positional(
                page_params(queries(rows)["later page"])))
        report += [r[0] for r in shown]
    finally:
        await conn.close()
    with capsys.disabled():
        print("\n" + "\n".join(report))


async def test_the_listing_walks_the_index_on_a_large_table(
    pg_database_factory: Callable[[], Awaitable[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    await run(pg_database_factory, 200_000, capsys)


@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_the_listing_walks_the_index_on_ten_million_rows(
    pg_database_factory: Callable[[], Awaitable[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    await run(pg_database_factory, 10_000_000, capsys)
