"""Coalesced writes (``sidecar/store/coalesce.py``) on real PostgreSQL and SQLite: concurrent
claims, and result writes, that arrive while one of their kind is in flight go out together as
one statement with one commit, and each caller is answered as if its call had run alone.

- many claims of few ids across two stores (two pools, or two SQLite handles on one file): one
  winner per id, every loser sees the winner's row;
- fewer commits than calls, counted by PostgreSQL (``pg_stat_database.xact_commit`` of the
  test's own database) and by SQLite's statement trace;
- result writes in a batch are each fenced by their attempt;
- a crash of the server while a batch is in flight loses no claim that was answered as won;
- a batch whose answer was lost with its connection is recognised, item by item, when repeated;
- an idle call goes out alone, at once, as the single-row statement.

The crash and lost-answer tests run on a private cluster (``tests/pgserver.py``), never the
shared server. Nothing sleeps to synchronise: waits are bounded polls on a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sidecar.core.errors import StoreError
from sidecar.core.events import (
    AttemptResult,
    Claim,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
)
from sidecar.core.ports import Store
from sidecar.store.coalesce import MAX_BATCH
from sidecar.store.mysql import MySQLStore
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.sqlite import SQLiteStore
from tests.pgserver import (
    ThrowawayCluster,
    migrated_database,
)
from tests.replyeater import ReplyEater

BODY = b"\x02" * 32
LEASE = 30.0
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "application/json"),), b"{}"), 4.5)
FAILED = AttemptResult(EventState.FAILED, Outcome.TIMEOUT, None, 9.0)
APP = "webhook-sidecar"  # the store's application_name


def _state(row: EventRow) -> tuple[object, ...]:
    """Everything about a row except the read clock."""
    return (row.provider, row.event_id, row.state, row.attempt, row.body_sha256,
            row.received_at, row.updated_at, row.lease_until, row.outcome, row.response,
            row.latency_ms)


async def until(condition: Callable[[], Awaitable[bool]], what: str, tries: int = 500) -> None:
    """A bounded poll on a condition (≤ 5 s), not a sleep used as a barrier."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never: {what}")


def assert_one_winner_per_id(claims: list[tuple[str, Claim]], ids: list[str]) -> None:
    winners: dict[str, list[Claim]] = defaultdict(list)
    for event_id, claim in claims:
        if claim.won:
            winners[event_id].append(claim)
    assert sorted(winners) == sorted(ids)
    assert all(len(w) == 1 for w in winners.values()), winners
    for event_id, claim in claims:
        assert claim.row.event_id == event_id
        assert _state(claim.row) == _state(winners[event_id][0].row), "the winner's row"


@pytest.fixture
async def store(store: Store, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """conftest's store; for [mariadb], one that sends writes together: the MySQL store sends
    each alone by default (faster there, docs/design.md), its batches are an opt-in."""
    if not isinstance(store, MySQLStore):
        yield store
        return
    batched = await MySQLStore.connect(request.getfixturevalue("mariadb_dsn"), min_size=2,
                                       max_size=8, write_batch=MAX_BATCH)
    try:
        yield batched
    finally:
        await batched.close()

# == (a) many claims of few ids, two stores ===================================================


async def _claim_all(stores: list[Any], ids: list[str], copies: int,
                     ) -> list[tuple[str, Claim]]:
    calls = [(event_id, stores[(n + i) % len(stores)])
             for n in range(copies) for i, event_id in enumerate(ids)]
    claims = await asyncio.gather(*(store.claim("stripe", event_id, BODY, LEASE, f"p{n}")
                                    for n, (event_id, store) in enumerate(calls)))
    return [(event_id, claim) for (event_id, _), claim in zip(calls, claims, strict=True)]


@pytest.mark.postgres
async def test_two_hundred_claims_of_twenty_ids_through_two_pools_have_one_winner_each(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    ids = [f"evt_{i}" for i in range(20)]
    other = await PostgresStore.connect(pg_dsn, min_size=2, max_size=8)
    try:
        claims = await _claim_all([pg_store, other], ids, copies=10)
        assert len(claims) == 200
        assert_one_winner_per_id(claims, ids)
        assert len(await pg_store.list_events(provider="stripe", limit=1000)) == 20
        for store in (pg_store, other):
            assert store._claims.batches >= 1, "the claims were sent together"
    finally:
        await other.close()


async def test_two_hundred_claims_of_twenty_ids_through_two_sqlite_handles_have_one_winner_each(
    tmp_path: Path,
) -> None:
    ids = [f"evt_{i}" for i in range(20)]
    path = tmp_path / "shared.db"
    a, b = await asyncio.gather(SQLiteStore.open(path), SQLiteStore.open(path))
    try:
        claims = await _claim_all([a, b], ids, copies=10)
        assert_one_winner_per_id(claims, ids)
        assert len(await a.list_events(provider="stripe", limit=1000)) == 20
        assert a._claims.batches >= 1 and b._claims.batches >= 1
    finally:
        await a.close()
        await b.close()


async def test_claims_of_one_id_inside_one_batch_behave_like_concurrent_claims(
    store: PostgresStore | SQLiteStore,
) -> None:
    # The first call goes alone; the ten behind it go out as one batch holding each id 5 times.
    keys = ["evt_first"] + ["evt_x", "evt_y"] * 5
    claims = await asyncio.gather(*(store.claim("stripe", k, BODY, LEASE, f"p{n}")
                                    for n, k in enumerate(keys)))
    assert (store._claims.singles, store._claims.batches, store._claims.batched) == (1, 1, 10)
    assert_one_winner_per_id(list(zip(keys, claims, strict=True)),
                             ["evt_first", "evt_x", "evt_y"])
    # In item order, the first claim of each key in the batch is the one that won.
    assert claims[1].won and claims[2].won


# == (b) fewer commits than calls =============================================================


@contextlib.asynccontextmanager
async def fresh_database(pg_database_factory: Callable[[], Awaitable[str]],
                         ) -> AsyncIterator[str]:
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    yield dsn


async def _others_gone(dsn: str) -> None:
    """Until no other session is connected to this database: a backend reports its counts
    (xact_commit) on its way out, before it leaves pg_stat_activity."""
    conn = await asyncpg.connect(dsn)
    try:
        async def gone() -> bool:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            return not await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()")

        await until(gone, "the other sessions of the test database ended")
    finally:
        await conn.close()


async def _commits(dsn: str) -> int:
    """Committed transactions of this database so far (its own database only: the server is
    shared)."""
    await _others_gone(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        value: int = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return value
    finally:
        await conn.close()


async def _commits_of(dsn: str, work: Callable[[PostgresStore], Awaitable[Any]],
                      write_batch: int) -> tuple[int, PostgresStore]:
    """The commits of a store opened on ``dsn`` doing ``work`` (pool opening and closing
    included: a handful)."""
    before = await _commits(dsn)
    store = await PostgresStore.connect(dsn, min_size=4, max_size=8, write_batch=write_batch)
    try:
        await work(store)
    finally:
        await store.close()
    return await _commits(dsn) - before, store


@pytest.mark.postgres
async def test_concurrent_claims_take_fewer_commits_than_calls(
    pg_database_factory: Callable[[], Awaitable[str]],
) -> None:
    async def claims(prefix: str) -> Callable[[PostgresStore], Awaitable[Any]]:
        async def work(store: PostgresStore) -> None:
            results = await asyncio.gather(*(store.claim("stripe", f"{prefix}_{i}", BODY,
                                                         LEASE, "p") for i in range(200)))
            assert all(c.won for c in results)
        return work

    async with fresh_database(pg_database_factory) as dsn:
        alone, single_store = await _commits_of(dsn, await claims("alone"), write_batch=1)
        together, store = await _commits_of(dsn, await claims("together"), write_batch=64)
    # Each claim alone is its own commit; sent together, 200 claims are 1 + ceil(199 / 64)
    # statements (and the pool's own few).
    assert single_store._claims.singles == 200 and single_store._claims.batches == 0
    assert (store._claims.singles, store._claims.batches, store._claims.batched) == (1, 4, 199)
    assert alone >= 200, alone
    assert together < 200 / 4, (together, alone)


# == (c) result writes: fewer commits, each fenced ============================================


async def _setup_for_completes(store: Any, ids: list[str], stale: list[str]) -> None:
    """Rows of ``ids`` at attempt 1, except ``stale`` ones, taken over to attempt 2."""
    for event_id in ids:
        claim = await store.claim("stripe", event_id, BODY, 0 if event_id in stale else LEASE,
                                  "p")
        assert claim.won
    for event_id in stale:
        assert await store.take_over("stripe", event_id, LEASE, "q") == 2


async def _complete_all(store: Any, ids: list[str], stale: list[str]) -> None:
    # Every row gets attempt 1's result; the stale rows also attempt 2's, in the same batch.
    writes = [(event_id, 1, DONE if n % 2 else FAILED) for n, event_id in enumerate(ids)]
    writes += [(event_id, 2, DONE) for event_id in stale]
    results = await asyncio.gather(*(store.complete("stripe", e, attempt, result)
                                     for e, attempt, result in writes))
    for (event_id, attempt, _), written in zip(writes, results, strict=True):
        expected = attempt == 2 or event_id not in stale
        assert written is expected, (event_id, attempt, written)


async def _check_completes(store: Any, ids: list[str], stale: list[str]) -> None:
    """Each row holds its one written result, and its timeline that one attempt, with the
    owner of the lease it cleared: a superseded item of the batch recorded nothing."""
    for event_id in ids:
        row = await store.get("stripe", event_id)
        assert row is not None and row.lease_until is None
        timeline = [(a.attempt, a.state, a.owner) for a in await store.attempts("stripe",
                                                                                 event_id)]
        if event_id in stale:
            assert (row.state, row.attempt, row.response) == (EventState.DONE, 2, DONE.response)
            assert timeline == [(2, EventState.DONE, "q")]
        else:
            n = ids.index(event_id)
            assert row.attempt == 1
            assert row.state is (EventState.DONE if n % 2 else EventState.FAILED)
            assert timeline == [(1, row.state, "p")]


@pytest.mark.postgres
async def test_concurrent_result_writes_take_fewer_commits_and_each_is_fenced(
    pg_database_factory: Callable[[], Awaitable[str]],
) -> None:
    ids = [f"evt_{i}" for i in range(100)]
    stale = ids[10:20]  # their attempt 1 was superseded: its result must not land
    async with fresh_database(pg_database_factory) as dsn:
        async def setup(store: PostgresStore) -> None:
            await _setup_for_completes(store, ids, stale)

        await _commits_of(dsn, setup, write_batch=64)

        async def write(store: PostgresStore) -> None:
            await _complete_all(store, ids, stale)

        commits, store = await _commits_of(dsn, write, write_batch=64)

        async def check(store: PostgresStore) -> None:
            await _check_completes(store, ids, stale)

        await _commits_of(dsn, check, write_batch=64)
    assert store._completes.batches >= 1 and store._completes.singles <= 2
    assert commits < 110 / 4, commits  # 110 result writes


class _Transactions:
    """Counts SQLite transactions from the connection's statement trace: each COMMIT, and each
    statement run outside an explicit transaction (autocommitted)."""

    def __init__(self) -> None:
        self.count = 0
        self._inside = False

    def __call__(self, sql: str) -> None:
        word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if word == "BEGIN":
            self._inside = True
        elif word in ("COMMIT", "ROLLBACK"):
            self._inside = False
            self.count += word == "COMMIT"
        elif not self._inside:
            self.count += 1


@contextlib.contextmanager
def _traced(store: SQLiteStore) -> Iterator[_Transactions]:
    counter = _Transactions()
    store._con.set_trace_callback(counter)
    try:
        yield counter
    finally:
        store._con.set_trace_callback(None)


async def test_sqlite_concurrent_claims_and_result_writes_share_transactions(
    tmp_path: Path,
) -> None:
    ids = [f"evt_{i}" for i in range(100)]
    stale = ids[10:20]
    # check_same_thread is the worker thread's: the trace is set from there.
    store = await SQLiteStore.open(tmp_path / "events.db")
    try:
        counter = _Transactions()
        await store._call("trace", store._con.set_trace_callback, counter)
        claims = await asyncio.gather(*(store.claim("stripe", f"new_{i}", BODY, LEASE, "p")
                                        for i in range(200)))
        assert all(c.won for c in claims)
        assert counter.count < 200 / 4, counter.count
        await _setup_for_completes(store, ids, stale)
        counter.count = 0
        await _complete_all(store, ids, stale)
        assert counter.count < 110 / 4, counter.count  # 110 result writes
        assert store._completes.batches >= 1
        await _check_completes(store, ids, stale)
    finally:
        with contextlib.suppress(StoreError, sqlite3.Error):
            await store._call("trace", store._con.set_trace_callback, None)
        await store.close()


# == (e) idle: the single-row statement, at once ==============================================


async def test_an_idle_call_goes_out_alone_as_the_single_row_statement(
    store: PostgresStore | SQLiteStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "store" is conftest's: [sqlite] and [postgres].
    sent: list[str] = []
    postgres = isinstance(store, PostgresStore | MySQLStore)
    if isinstance(store, PostgresStore):
        real = store._calls._run

        async def run(name: str, *args: Any) -> Any:
            sent.append(name)
            return await real(name, *args)

        monkeypatch.setattr(store._calls, "_run", run)
    elif isinstance(store, MySQLStore):  # one call of the store per verb, as on PostgreSQL
        real_run = store._run

        async def run_mysql(what: str, work: Any, **options: Any) -> Any:
            sent.append(what)
            return await real_run(what, work, **options)

        monkeypatch.setattr(store, "_run", run_mysql)
    else:
        real_call = store._call

        async def call(what: str, fn: Any, *args: Any) -> Any:
            sent.append(f"{what}:{getattr(fn, '__name__', fn)}")
            return await real_call(what, fn, *args)

        monkeypatch.setattr(store, "_call", call)
    for i in range(3):  # one after the other: nothing is ever in flight at a call's start
        assert (await store.claim("stripe", f"evt_{i}", BODY, LEASE, "p")).won
        assert await store.complete("stripe", f"evt_{i}", 1, DONE)
    assert (store._claims.singles, store._claims.batches) == (3, 0)
    assert (store._completes.singles, store._completes.batches) == (3, 0)
    if postgres:
        assert sent == ["claim", "complete"] * 3, "claim.sql and complete.sql, never a batch"
    else:
        assert sent == ["claim:claim", "complete:complete"] * 3


# == (d) a crash mid-batch; (f) a batch's answer lost =========================================


@pytest.fixture
async def crash_dsn(cluster: ThrowawayCluster) -> AsyncIterator[str]:
    async with migrated_database(cluster, "coalesce") as url:
        yield url


_HOLD = ("INSERT INTO webhook_event (provider, event_id, received_at, body_sha256, state,"
         " attempt, lease_owner, lease_until, updated_at)"
         " VALUES ('stripe', $1, now(), '\\x00', 'processing', 1, 'holder',"
         " now() + interval '30 s', now())")


async def _waiting_backends(conn: asyncpg.Connection) -> int:
    """The store's backends in this database waiting for a lock."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    count: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = $1 AND wait_event_type = 'Lock'", APP)
    return count


@pytest.mark.postgres
async def test_a_crash_while_a_batch_is_in_flight_loses_no_claim(
    cluster: ThrowawayCluster, crash_dsn: str,
) -> None:
    store = await PostgresStore.connect(crash_dsn, min_size=2, max_size=4, acquire_timeout=1.0,
                                        connect_timeout=1.0, statement_timeout=5.0)
    holders = [await asyncpg.connect(crash_dsn) for _ in range(2)]
    watcher = await asyncpg.connect(crash_dsn, server_settings={"application_name": "watcher"})
    try:
        # Two other sessions insert a key each and keep their transactions open.
        for holder, key in zip(holders, ("evt_hold_a", "evt_hold_b"), strict=True):
            await holder.execute("BEGIN")
            await holder.execute(_HOLD, key)
        # The first claim goes alone and waits for holder a's insert of its key...
        first = asyncio.create_task(store.claim("stripe", "evt_hold_a", BODY, LEASE, "p"))

        async def first_waits() -> bool:
            return await _waiting_backends(watcher) == 1

        await until(first_waits, "the first claim waits for holder a")
        # ...while these wait for it: new keys (some twice), and holder b's key.
        keys = [f"evt_{i}" for i in range(30)] + [f"evt_{i}" for i in range(5)] + ["evt_hold_b"]
        batch = [asyncio.create_task(store.claim("stripe", k, BODY, LEASE, f"p{n}"))
                 for n, k in enumerate(keys)]

        async def all_wait() -> bool:
            return len(store._claims._waiting) == len(keys)

        await until(all_wait, "the other claims wait for the first")
        await holders[0].execute("ROLLBACK")  # the first claim wins; the batch goes out...

        async def batch_waits() -> bool:
            return (first.done() and store._claims.batches == 1
                    and await _waiting_backends(watcher) == 1)

        await until(batch_waits, "the batch inserted its keys and waits for holder b")
        won_first = await first
        assert won_first.won
        await asyncio.to_thread(cluster.stop, "immediate")  # ...and the server crashes
        results = await asyncio.gather(*batch, return_exceptions=True)
    finally:
        for conn in (*holders, watcher):
            conn.terminate()
    try:
        assert all(isinstance(r, Claim | StoreError) for r in results), results
        await asyncio.to_thread(cluster.start)
        conn = await asyncpg.connect(crash_dsn)
        try:
            stored = {r["event_id"]: r["lease_owner"] for r in await conn.fetch(
                "SELECT event_id, lease_owner FROM webhook_event")}
        finally:
            await conn.close()
        winners = [("evt_hold_a", won_first)] + [
            (k, r) for k, r in zip(keys, results, strict=True)
            if isinstance(r, Claim) and r.won]
        assert len({k for k, _ in winners}) == len(winners), "no id has two winners"
        for key, _ in winners:
            assert key in stored, f"{key} was answered as won, and lost in the crash"
        # Nothing is half there: the batch committed whole or not at all.
        batch_keys = set(keys) - {"evt_hold_b"}
        assert batch_keys <= set(stored) or not batch_keys & set(stored), sorted(stored)
        # The provider's retries: every key can be claimed (or is found) once the server is back.
        retries = await asyncio.gather(*(store.claim("stripe", k, BODY, LEASE, "retry")
                                         for k in sorted(set(keys))))
        for key, claim in zip(sorted(set(keys)), retries, strict=True):
            assert claim.won is (key not in stored), key
    finally:
        await store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("verb", ["claim", "complete"])
async def test_a_batch_whose_answer_was_lost_is_recognised_item_by_item(
    crash_dsn: str, eater: ReplyEater, verb: str,
) -> None:
    ids = [f"evt_{i}" for i in range(10)]
    async with contextlib.AsyncExitStack() as stack:
        # Through the relay; no statement cache, so each statement's text is on the wire.
        store = await PostgresStore.connect(eater.relayed(crash_dsn), min_size=1, max_size=2,
                                            statement_cache_size=0)
        stack.push_async_callback(store.close)
        if verb == "complete":
            for event_id in ids:
                assert (await store.claim("stripe", event_id, BODY, LEASE, "p")).won
        # The batch's parameters (the first call, evt_0, goes alone): armed on its Bind, sent
        # with its Execute, so the reply swallowed is the batch's own, committed. (The
        # statement's text goes in a Parse of its own first: armed on it, the relay would
        # swallow the prepare's reply, and the repeat would be the first run.)
        eater.arm(b"evt_9")
        # A plain repeat of the batch would answer "lost" (claims) or "superseded" (writes).
        if verb == "claim":
            claims = await asyncio.gather(*(store.claim("stripe", e, BODY, LEASE, "p")
                                            for e in ids))
            assert all(c.won and c.row.attempt == 1 for c in claims), claims
            coalescer = store._claims
        else:
            written = await asyncio.gather(*(store.complete("stripe", e, 1, DONE) for e in ids))
            assert written == [True] * len(ids)
            coalescer = store._completes
        assert eater.fired.is_set(), "the batch committed and its answer was swallowed"
        assert (coalescer.singles, coalescer.batches) == (1, 1)
        rows = [await store.get("stripe", e) for e in ids]
        # Each item's repeat wrote nothing: its attempt is in the timeline once, or (claims)
        # not at all.
        timelines = [len(await store.attempts("stripe", e)) for e in ids]
    expected = EventState.PROCESSING if verb == "claim" else EventState.DONE
    assert all(r is not None and (r.state, r.attempt) == (expected, 1) for r in rows)
    assert timelines == [0 if verb == "claim" else 1] * len(ids)
