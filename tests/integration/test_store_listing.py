"""The event listing (``list_page``), one contract for every ``Store``: real SQLite, real
PostgreSQL and the in-memory store (``[sqlite]``, ``[postgres]``, ``[memory]``).

Rows are made with the store's own verbs (claim, complete, enqueue, take, settle), then each is
placed at an exact received time through the database itself, many of them sharing one time.
The oracle is plain Python over the table the test wrote: filter, sort by (received_us DESC,
provider, event_id), cut. Every filter is checked alone and combined, and every row is paged
through exactly once, in order, at several page sizes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.core.listing import EventQuery, PageKey, StatusClass
from sidecar.core.ports import Store
from sidecar.store.memory import MemoryStore
from sidecar.store.sqlite import SQLiteStore
from tests.backdoor import pg_backdoor
from tests.integration.test_store_contract import BODY, LEASE
from tests.mariadbserver import MariaDBBackdoor

REQUEST = StoredRequest(method="POST", path="/webhooks/x", headers=(), body=b"{}")
BASE_US = 1_800_000_000_000_000  # 2027-01-15, in microseconds: every row sits near it

PROVIDERS = ("github", "shopify", "stripe")  # code-point order, as the listing sorts them


def result(state: EventState, status: int | None) -> AttemptResult:
    if status is None:
        return AttemptResult(state, Outcome.TIMEOUT, None, 10_000.0)
    return AttemptResult(state, Outcome.RESPONSE, RecordedResponse(status, (), b""), 5.0)


@dataclass(frozen=True)
class Spec:
    """A row the test writes, and what the oracle knows of it."""

    provider: str
    event_id: str
    received_us: int
    state: EventState
    status: int | None
    filtered: bool = False  # recorded done by a filter: outcome filtered, the proxy's 200

    @property
    def outcome(self) -> Outcome | None:
        if self.filtered:
            return Outcome.FILTERED
        if self.state in (EventState.PROCESSING, EventState.QUEUED):
            return None
        return Outcome.TIMEOUT if self.status is None else Outcome.RESPONSE

    @property
    def status_class(self) -> StatusClass:
        return StatusClass(f"{self.status // 100}xx") if self.status else StatusClass.NONE

    def key(self) -> tuple[int, str, str]:
        return (-self.received_us, self.provider, self.event_id)


def table() -> list[Spec]:
    """36 rows over three providers, every state and status class, received at only 9
    distinct times (so most rows tie on received_at, across and within providers); some
    times a microsecond apart."""
    kinds = [(EventState.DONE, 200), (EventState.DONE, 302), (EventState.FAILED, 404),
             (EventState.FAILED, 503), (EventState.FAILED, None), (EventState.PROCESSING, None),
             (EventState.QUEUED, None), (EventState.DEAD, 500), (EventState.DONE, 204),
             (EventState.DONE, -200)]  # -200: filtered (recorded 200, never forwarded)
    times = [BASE_US + offset for offset in (0, 1, 2, 1_000_000, 1_000_001, 5_000_000,
                                             7_250_003, 60_000_000, 3_600_000_000)]
    specs = []
    for n in range(36):
        provider = PROVIDERS[(n * 7) % 3]
        state, status = kinds[n % len(kinds)]
        # Ids whose prefixes the filter tests use: "evt_a…", "evt_b…", and a few others.
        event_id = f"{'evt_a' if n % 4 == 0 else 'evt_b' if n % 4 == 1 else 'ch_'}{n:03d}"
        specs.append(Spec(provider, event_id, times[(n * 5) % len(times)], state,
                          abs(status) if status is not None else None,
                          filtered=status is not None and status < 0))
    return specs


async def write(store: Store, spec: Spec) -> None:
    """The row, made by the store's own verbs, in the spec's state and status."""
    p, e = spec.provider, spec.event_id
    if spec.state in (EventState.QUEUED, EventState.DEAD):
        assert (await store.enqueue(p, e, BODY, REQUEST)).accepted
        if spec.state is EventState.DEAD:
            [work] = [w for w in await store.take_queued(p, 100, LEASE, "w") if w.event_id == e]
            settled = Settlement(EventState.DEAD, result(EventState.FAILED, spec.status),
                                 error="max_attempts")
            assert await store.settle_queued(p, e, work.tries, settled)
        return
    assert (await store.claim(p, e, BODY, LEASE, "o")).won
    if spec.filtered:
        assert await store.complete(p, e, 1, AttemptResult(
            EventState.DONE, Outcome.FILTERED, RecordedResponse(200, (), b"{}"), 0.0))
    elif spec.state is not EventState.PROCESSING:
        assert await store.complete(p, e, 1, result(spec.state, spec.status))


async def place(store: Store, request: pytest.FixtureRequest, specs: list[Spec]) -> None:
    """Each row's received time set exactly, through the database itself."""
    if isinstance(store, MemoryStore):
        for s in specs:
            store._events[(s.provider, s.event_id)].received_at = s.received_us / 1e6
        return
    values = [(s.received_us, s.provider, s.event_id) for s in specs]
    if isinstance(store, SQLiteStore):
        def run() -> None:
            con = sqlite3.connect(store.path, timeout=5.0, isolation_level=None)
            try:
                con.executemany("UPDATE webhook_event SET received_at = ? / 1000000.0"
                                " WHERE provider = ? AND event_id = ?", values)
            finally:
                con.close()
        await asyncio.to_thread(run)
        return
    door = pg_backdoor(request)
    if isinstance(door, MariaDBBackdoor):
        await door.received_exactly(values)
        return
    epoch = datetime(1970, 1, 1, tzinfo=UTC)  # asyncpg sends a datetime exactly (µs)
    conn = await asyncpg.connect(door.dsn)
    try:
        await conn.executemany(
            "UPDATE webhook_event SET received_at = $1 WHERE provider = $2 AND event_id = $3",
            [(epoch + timedelta(microseconds=us), p, e) for us, p, e in values])
    finally:
        await conn.close()


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


@pytest.fixture
async def rows(store: Store, request: pytest.FixtureRequest) -> list[Spec]:
    specs = table()
    # Dead ones first: their take would take any queued row of their provider as well.
    for spec in sorted(specs, key=lambda s: s.state is not EventState.DEAD):
        await write(store, spec)
    await place(store, request, specs)
    return specs


def oracle(specs: list[Spec], query: EventQuery) -> list[tuple[str, str]]:
    """Every row the query's filters pass, in the listing's order (cursor and limit aside)."""
    def passes(s: Spec) -> bool:
        received = s.received_us / 1e6
        return (s.provider in query.providers
                and (query.state is None or s.state is query.state)
                and (query.received_after is None or received >= query.received_after)
                and (query.received_before is None or received < query.received_before)
                and (query.id_prefix is None or s.event_id.startswith(query.id_prefix))
                and (query.status_class is None or s.status_class is query.status_class)
                and (query.outcome is None or s.outcome is query.outcome))
    return [(s.provider, s.event_id) for s in sorted(filter(passes, specs), key=Spec.key)]


async def every_page(store: Store, query: EventQuery) -> list[list[tuple[str, str]]]:
    """The listing paged through to its end, cursor to cursor (each cursor sent as text)."""
    pages: list[list[tuple[str, str]]] = []
    after: PageKey | None = None
    while True:
        page = await store.list_page(EventQuery(**{**_fields(query), "after": after}))
        pages.append([(r.provider, r.event_id) for r in page.rows])
        assert len(pages) <= 100, "the listing does not end"
        if page.next is None:
            return pages
        assert len(page.rows) == query.limit, "a page short of the limit has no next"
        after = PageKey.decode(page.next.encode())


def _fields(query: EventQuery) -> dict[str, object]:
    # dataclasses.fields, not __slots__: a mypyc-compiled class has no __slots__.
    return {f.name: getattr(query, f.name) for f in fields(EventQuery)}


T0 = BASE_US / 1e6

FILTERS = {
    "all": EventQuery(PROVIDERS),
    "one provider": EventQuery(("stripe",)),
    "two providers": EventQuery(("github", "stripe")),
    "unknown provider": EventQuery(("nobody",)),
    **{f"state {s.value}": EventQuery(PROVIDERS, state=s) for s in EventState},
    **{f"status {c.value}": EventQuery(PROVIDERS, status_class=c) for c in StatusClass},
    **{f"outcome {o.value}": EventQuery(PROVIDERS, outcome=o) for o in Outcome},
    "combined, filtered": EventQuery(("stripe", "github"), state=EventState.DONE,
                                     outcome=Outcome.FILTERED, received_after=T0),
    "prefix evt_a": EventQuery(PROVIDERS, id_prefix="evt_a"),
    "prefix ch_0": EventQuery(PROVIDERS, id_prefix="ch_0"),
    "prefix matching none": EventQuery(PROVIDERS, id_prefix="zz"),
    "received after (inclusive)": EventQuery(PROVIDERS, received_after=T0 + 1.0),
    "received before (exclusive)": EventQuery(PROVIDERS, received_before=T0 + 5.0),
    "a time range": EventQuery(PROVIDERS, received_after=T0 + 0.5, received_before=T0 + 60),
    "combined": EventQuery(("stripe", "shopify"), state=EventState.FAILED,
                           status_class=StatusClass.S5XX, received_before=T0 + 3600),
    "combined, queue states": EventQuery(("github", "stripe"), state=EventState.DEAD,
                                         id_prefix="evt", received_after=T0),
    "combined, prefix and none": EventQuery(PROVIDERS, id_prefix="ch_",
                                            status_class=StatusClass.NONE),
}


@pytest.mark.parametrize("name", FILTERS)
async def test_each_filter_alone_and_combined_gives_the_rows_it_names(
    store: Store, rows: list[Spec], name: str
) -> None:
    query = FILTERS[name]
    expected = oracle(rows, query)
    page = await store.list_page(EventQuery(**{**_fields(query), "limit": 500}))
    assert [(r.provider, r.event_id) for r in page.rows] == expected
    assert page.next is None
    if name in ("all", "state queued", "state dead", "status 5xx", "outcome filtered",
                "outcome timeout"):
        assert expected, "the table holds rows for this filter"  # the check is not vacuous


@pytest.mark.parametrize("limit", [1, 2, 5, 7, 36, 37])
@pytest.mark.parametrize("name", ["all", "two providers", "state queued", "status none",
                                  "combined, prefix and none"])
async def test_paging_gives_every_row_once_in_order_across_ties(
    store: Store, rows: list[Spec], name: str, limit: int
) -> None:
    query = EventQuery(**{**_fields(FILTERS[name]), "limit": limit})
    pages = await every_page(store, query)
    assert [key for page in pages for key in page] == oracle(rows, query)


async def test_the_rows_read_are_the_rows_written(store: Store, rows: list[Spec]) -> None:
    page = await store.list_page(EventQuery(("stripe", "github"), limit=500))
    by_key = {(s.provider, s.event_id): s for s in rows}
    assert page.rows
    for row in page.rows:
        spec = by_key[(row.provider, row.event_id)]
        assert row.state is spec.state
        assert round(row.received_at * 1e6) == spec.received_us
        assert (row.response.status if row.response else None) == spec.status
        assert row.in_queue == (spec.state in (EventState.QUEUED, EventState.DEAD))
    for state in (EventState.QUEUED, EventState.DEAD):  # read from the queue: all in it
        page = await store.list_page(EventQuery(tuple({s.provider for s in rows}), state=state,
                                                limit=500))
        assert page.rows and all(row.in_queue is True and row.state is state for row in page.rows)


async def test_the_next_cursor_is_the_last_rows_exact_key(
    store: Store, rows: list[Spec]
) -> None:
    page = await store.list_page(EventQuery(PROVIDERS, limit=3))
    last = page.rows[-1]
    spec = next(s for s in rows if (s.provider, s.event_id) == (last.provider, last.event_id))
    assert page.next == PageKey(spec.received_us, spec.provider, spec.event_id)
    # A cursor between two rows a microsecond apart keeps the older one and drops the newer.
    newest = sorted(rows, key=Spec.key)
    at = newest[-1]  # the oldest row: BASE_US exactly, with BASE_US + 1 just newer
    after = PageKey(at.received_us + 1, "zzz", "")  # after every row at BASE_US + 1
    listed = await store.list_page(EventQuery(PROVIDERS, after=after, limit=500))
    assert {r.received_at for r in listed.rows} == {at.received_us / 1e6}


async def test_sqlite_times_within_one_microsecond_page_in_the_keys_order(
    sqlite_store: SQLiteStore, request: pytest.FixtureRequest
) -> None:
    """SQLite keeps REAL seconds: three times under a microsecond apart share one key, so they
    page by event id, although the index walk meets them newest REAL first."""
    for event_id in ("a", "b", "c"):
        assert (await sqlite_store.claim("stripe", event_id, BODY, LEASE, "o")).won
    t = 1_000_000_000.0  # 2001: REAL steps of 0.12 µs here
    times = {"a": t, "b": t + 1.2e-7, "c": t + 2.4e-7}
    assert len(set(times.values())) == 3 and len({round(v * 1e6) for v in times.values()}) == 1

    def run() -> None:
        con = sqlite3.connect(sqlite_store.path, timeout=5.0, isolation_level=None)
        try:
            con.executemany("UPDATE webhook_event SET received_at = ? WHERE event_id = ?",
                            [(v, k) for k, v in times.items()])
        finally:
            con.close()
    await asyncio.to_thread(run)
    pages = await every_page(sqlite_store, EventQuery(("stripe",), limit=1))
    assert pages == [[("stripe", "a")], [("stripe", "b")], [("stripe", "c")]]
