"""Coalesced nonce binds (``sidecar/store/coalesce.py``) on real PostgreSQL and SQLite: binds
that arrive while one is in flight go out together as one statement (PostgreSQL,
``bind_nonce_batch.sql``) or one ``BEGIN IMMEDIATE`` transaction (SQLite) with one commit, and
each caller is answered as if its call had run alone.

- many binds of few nonces across two stores (two pools, or two SQLite handles on one file):
  every caller of a nonce gets the same hash back, the one bound, one of those offered for it;
- fewer commits than calls, counted by PostgreSQL (``pg_stat_database.xact_commit`` of the
  test's own database) and by SQLite's statement trace;
- one nonce bound twice in one batch: the first in arrival order binds, the second gets its
  hash; a nonce bound before the batch answers the hash bound then;
- a competitor that commits after the batch's snapshot: the item falls back to get_nonce.sql;
- a batch whose answer was lost with its connection: each item's repeat answers its hash;
- an idle bind goes out alone, at once, as the single statement.

Nonces carry a random suffix and a provider of their own: the session database's nonce table
is shared with the contract suite (which counts "mailgun" nonces). Nothing sleeps to
synchronise: waits are bounded polls on a condition.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import sqlite3
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from sidecar.core.errors import StoreError
from sidecar.core.events import NonceBinding
from sidecar.core.ports import Store
from sidecar.store.coalesce import MAX_BATCH
from sidecar.store.mysql import MySQLStore
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore
from tests.integration.test_coalesced_writes import (
    _commits_of,
    _Transactions,
    _waiting_backends,
    fresh_database,
    until,
)
from tests.pgserver import (
    ThrowawayCluster,
    migrated_database,
)
from tests.replyeater import ReplyEater

PROVIDER = "github"  # never "mailgun" or "other": the contract suite counts those


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def digests(bindings: Sequence[NonceBinding]) -> list[bytes]:
    """The hash each bind answered (what these tests compare; when is the contract's)."""
    return [binding.digest for binding in bindings]


def _nonces(count: int) -> list[str]:
    tag = secrets.token_hex(4)
    return [f"guard_{tag}_{i}" for i in range(count)]


async def _stored(dsn: str, nonces: Sequence[str]) -> dict[str, bytes]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT nonce, body_sha256 FROM webhook_nonce"
                                " WHERE provider = $1 AND nonce = any($2::text[])",
                                PROVIDER, list(nonces))
    finally:
        await conn.close()
    return {r["nonce"]: bytes(r["body_sha256"]) for r in rows}


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

# == (a) many binds of few nonces, two stores =================================================


async def _bind_all(stores: Sequence[Any], nonces: list[str], copies: int,
                    ) -> tuple[dict[str, set[bytes]], dict[str, list[bytes]]]:
    """``copies`` binds of each nonce, each with a body of its own, spread over ``stores``:
    the hashes offered and the hashes answered, per nonce."""
    calls = [(nonce, stores[(n + i) % len(stores)], _digest(f"{nonce}/{n}"))
             for n in range(copies) for i, nonce in enumerate(nonces)]
    bound = digests(await asyncio.gather(*(store.bind_nonce(PROVIDER, nonce, sha)
                                           for nonce, store, sha in calls)))
    offered: dict[str, set[bytes]] = defaultdict(set)
    answered: dict[str, list[bytes]] = defaultdict(list)
    for (nonce, _, sha), got in zip(calls, bound, strict=True):
        offered[nonce].add(sha)
        answered[nonce].append(got)
    return offered, answered


def assert_one_hash_per_nonce(offered: dict[str, set[bytes]], answered: dict[str, list[bytes]],
                              stored: dict[str, bytes]) -> None:
    assert sorted(stored) == sorted(offered), "every nonce bound, once"
    for nonce, hashes in answered.items():
        assert set(hashes) == {stored[nonce]}, f"{nonce}: every caller gets the bound hash"
        assert stored[nonce] in offered[nonce], f"{nonce}: the bound hash was offered for it"


@pytest.mark.postgres
async def test_two_hundred_binds_of_twenty_nonces_through_two_pools_agree_per_nonce(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    nonces = _nonces(20)
    other = await PostgresStore.connect(pg_dsn, min_size=2, max_size=8)
    try:
        offered, answered = await _bind_all([pg_store, other], nonces, copies=10)
        assert sum(len(h) for h in answered.values()) == 200
        assert_one_hash_per_nonce(offered, answered, await _stored(pg_dsn, nonces))
        for store in (pg_store, other):
            assert store._binds.batches >= 1, "the binds were sent together"
    finally:
        await other.close()


async def test_two_hundred_binds_of_twenty_nonces_through_two_sqlite_handles_agree_per_nonce(
    tmp_path: Path,
) -> None:
    nonces = _nonces(20)
    path = tmp_path / "shared.db"
    a, b = await asyncio.gather(SQLiteStore.open(path), SQLiteStore.open(path))
    try:
        offered, answered = await _bind_all([a, b], nonces, copies=10)
        with contextlib.closing(sqlite3.connect(path)) as con:
            stored = {nonce: bytes(sha) for nonce, sha in con.execute(
                "SELECT nonce, body_sha256 FROM webhook_nonce WHERE provider = ?", (PROVIDER,))}
        assert_one_hash_per_nonce(offered, answered, stored)
        assert a._binds.batches >= 1 and b._binds.batches >= 1
    finally:
        await a.close()
        await b.close()


# == (b) fewer commits than calls =============================================================


@pytest.mark.postgres
async def test_concurrent_binds_take_fewer_commits_than_calls(
    pg_database_factory: Callable[[], Awaitable[str]],
) -> None:
    def binds(nonces: list[str]) -> Callable[[PostgresStore], Any]:
        async def work(store: PostgresStore) -> None:
            offered, answered = await _bind_all([store], nonces, copies=10)
            for nonce, hashes in answered.items():
                assert len(set(hashes)) == 1 and hashes[0] in offered[nonce]
        return work

    async with fresh_database(pg_database_factory) as dsn:
        alone, single_store = await _commits_of(dsn, binds(_nonces(20)), write_batch=1)
        together, store = await _commits_of(dsn, binds(_nonces(20)), write_batch=64)
    # Each bind alone is its own commit; sent together, 200 binds are 1 + ceil(199 / 64)
    # statements (and the pool's own few).
    assert single_store._binds.singles == 200 and single_store._binds.batches == 0
    assert (store._binds.singles, store._binds.batches, store._binds.batched) == (1, 4, 199)
    assert alone >= 200, alone
    assert together < 200 / 4, (together, alone)


async def test_sqlite_concurrent_binds_share_transactions(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "events.db")
    try:
        counter = _Transactions()
        # check_same_thread is the worker thread's: the trace is set from there.
        await store._call("trace", store._con.set_trace_callback, counter)
        offered, answered = await _bind_all([store], _nonces(20), copies=10)
        for nonce, hashes in answered.items():
            assert len(set(hashes)) == 1 and hashes[0] in offered[nonce]
        assert (store._binds.singles, store._binds.batches, store._binds.batched) == (1, 4, 199)
        assert counter.count < 200 / 4, counter.count
    finally:
        with contextlib.suppress(StoreError, sqlite3.Error):
            await store._call("trace", store._con.set_trace_callback, None)
        await store.close()


# == (c) one nonce twice in one batch; one bound before it ====================================


async def test_binds_of_one_nonce_inside_one_batch_behave_like_concurrent_binds(
    store: PostgresStore | SQLiteStore,
) -> None:
    first, x, y, old = _nonces(4)
    old_sha = _digest("bound before")
    assert (await store.bind_nonce(PROVIDER, old, old_sha)).digest == old_sha
    # The first call goes alone; the ones behind it go out as one batch holding x and y five
    # times each (every call with a body of its own), and the nonce bound before, twice.
    keys = [first] + [x, y] * 5 + [old, old]
    offered = [_digest(f"body {n}") for n in range(len(keys))]
    offered[-1] = old_sha  # a redelivery of the old nonce's body; the one before it, a replay
    singles = store._binds.singles
    bound = digests(await asyncio.gather(*(store.bind_nonce(PROVIDER, k, sha)
                                           for k, sha in zip(keys, offered, strict=True))))
    assert (store._binds.singles - singles, store._binds.batches, store._binds.batched) == \
        (1, 1, len(keys) - 1)
    assert bound[0] == offered[0]
    # In arrival order, the first bind of each nonce in the batch binds its own hash; the
    # others get it back, as the second of two concurrent binds would.
    assert [b for k, b in zip(keys, bound, strict=True) if k == x] == [offered[1]] * 5
    assert [b for k, b in zip(keys, bound, strict=True) if k == y] == [offered[2]] * 5
    assert bound[-2:] == [old_sha, old_sha]
    # Repeats of either body, later and alone, answer the same.
    assert (await store.bind_nonce(PROVIDER, x, offered[3])).digest == offered[1]
    assert (await store.bind_nonce(PROVIDER, y, offered[2])).digest == offered[2]


# == (d) a competitor that commits after the batch's snapshot =================================


_HOLD_NONCE = ("INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at)"
               " VALUES ($1, $2, $3, now())")


@pytest.mark.postgres
async def test_an_item_whose_competitor_commits_after_the_snapshot_reads_the_hash_anew(
    pg_store: PostgresStore, pg_dsn: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    held_a, held_b, *fresh = _nonces(6)
    holder_sha = _digest("the competitor's body")
    read: list[str] = []
    real_rows = pg_store._rows

    async def rows(name: str, params: Any) -> Any:
        read.append(name)
        return await real_rows(name, params)

    monkeypatch.setattr(pg_store, "_rows", rows)
    holders = [await asyncpg.connect(pg_dsn) for _ in range(2)]
    watcher = await asyncpg.connect(pg_dsn, server_settings={"application_name": "watcher"})
    try:
        # Two other sessions bind a nonce each and keep their transactions open.
        for holder, nonce in zip(holders, (held_a, held_b), strict=True):
            await holder.execute("BEGIN")
            await holder.execute(_HOLD_NONCE, PROVIDER, nonce, holder_sha)
        # The first bind goes alone and waits for holder a's insert of its nonce...
        first = asyncio.create_task(pg_store.bind_nonce(PROVIDER, held_a, _digest("first")))

        async def first_waits() -> bool:
            return await _waiting_backends(watcher) == 1

        await until(first_waits, "the first bind waits for holder a")
        # ...while these wait for it: new nonces, and holder b's.
        keys = [*fresh, held_b]
        offered = [_digest(f"batch {n}") for n in range(len(keys))]
        batch = [asyncio.create_task(pg_store.bind_nonce(PROVIDER, k, sha))
                 for k, sha in zip(keys, offered, strict=True)]

        async def all_wait() -> bool:
            return len(pg_store._binds._waiting) == len(keys)

        await until(all_wait, "the other binds wait for the first")
        await holders[0].execute("ROLLBACK")  # the first bind binds; the batch goes out...

        async def batch_waits() -> bool:
            return (first.done() and pg_store._binds.batches == 1
                    and await _waiting_backends(watcher) == 1)

        await until(batch_waits, "the batch inserted its nonces and waits for holder b")
        assert (await first).digest == _digest("first")
        await holders[1].execute("COMMIT")  # ...after its snapshot was taken
        bound = digests(await asyncio.gather(*batch))
    finally:
        for conn in (*holders, watcher):
            conn.terminate()
    assert bound == [*offered[:-1], holder_sha]
    assert read.count("get_nonce") == 1, read  # holder b's nonce, read anew
    assert read.count("bind_nonce") == 1, read  # the first bind; the rest went as one batch


# == (e) a batch's answer lost with its connection ============================================


@pytest.fixture
async def private_dsn(cluster: ThrowawayCluster) -> AsyncIterator[str]:
    async with migrated_database(cluster, "binds") as url:
        yield url


@pytest.mark.postgres
async def test_a_bind_batch_whose_answer_was_lost_answers_each_item_its_hash(
    private_dsn: str, eater: ReplyEater,
) -> None:
    first, *nonces = _nonces(6)
    keys = [first, *nonces, *nonces]  # each nonce of the batch twice, another body the 2nd time
    offered = [_digest(f"body {n}") for n in range(len(keys))]
    async with contextlib.AsyncExitStack() as stack:
        # Through the relay; no statement cache, so each statement's text is on the wire.
        store = await PostgresStore.connect(eater.relayed(private_dsn), min_size=1, max_size=2,
                                            statement_cache_size=0)
        stack.push_async_callback(store.close)
        # The batch's parameters (the first call goes alone): armed on its Bind, sent with its
        # Execute, so the reply swallowed is the batch's own, committed (not the Parse's).
        eater.arm(nonces[-1].encode())
        bound = digests(await asyncio.gather(*(store.bind_nonce(PROVIDER, k, sha)
                                               for k, sha in zip(keys, offered, strict=True))))
        assert eater.fired.is_set(), "the batch committed and its answer was swallowed"
        assert (store._binds.singles, store._binds.batches) == (1, 1)
    # Each item's repeat found what the batch bound: the first of each nonce its own hash, the
    # second the first's, as the batch itself would have answered.
    assert bound == [offered[0], *offered[1:6], *offered[1:6]]
    assert await _stored(private_dsn, keys) == dict(zip(keys[:6], offered[:6], strict=True))


# == (f) idle: the single statement, at once ==================================================


async def test_an_idle_bind_goes_out_alone_as_the_single_statement(
    store: PostgresStore | SQLiteStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[str] = []
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
            sent.append(what)
            return await real_call(what, fn, *args)

        monkeypatch.setattr(store, "_call", call)
    (nonce,) = _nonces(1)
    one, other = _digest("one"), _digest("other")
    # One after the other: nothing is ever in flight at a call's start.
    assert (await store.bind_nonce(PROVIDER, nonce, one)).digest == one  # new
    assert (await store.bind_nonce(PROVIDER, nonce, one)).digest == one  # a redelivery
    assert (await store.bind_nonce(PROVIDER, nonce, other)).digest == one  # a replay
    assert (store._binds.singles, store._binds.batches) == (3, 0)
    if isinstance(store, PostgresStore | MySQLStore):
        assert sent == ["bind_nonce"] * 3, "bind_nonce.sql, never a batch"
    else:  # SQLite's INSERT answers only what it inserted: a bound nonce is read after it
        assert sent == ["bind_nonce", "bind_nonce", "get_nonce", "bind_nonce", "get_nonce"]
