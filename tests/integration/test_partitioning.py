"""Partitioned retention on real PostgreSQL (store.partitioning, docs/design.md "Partitioned
retention"): one row per key across partitions under concurrent inserts on both sides of a
boundary, a redelivery partitions later, and retention dropping whole partitions but never one
that holds work. Time is moved by partitions made for chosen bounds and rows inserted (or moved)
at chosen times, never by waiting."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    StoredRequest,
)
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres.partitioning import PartitionKeeper, partition_store

pytestmark = pytest.mark.postgres

STEP = 60  # seconds: partitions of a minute
BODY = hashlib.sha256(b"{}").digest()
REQUEST = StoredRequest(method="POST", path="/webhooks/stripe", headers=(), body=b"{}")
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b""), 1.0)

# The claim's INSERT (claim.sql) with a chosen received_at: which partition a copy lands in.
INSERT = """
INSERT INTO webhook_event AS e (provider, event_id, received_at, body_sha256, state, attempt,
                                lease_owner, lease_until, updated_at)
VALUES ($1, $2, $3::timestamptz, $4, 'processing', 1, $5, $3::timestamptz + interval '1 minute',
        $3::timestamptz)
ON CONFLICT DO NOTHING
RETURNING e.lease_owner
"""


@pytest.fixture
async def part_dsn(pg_database_factory: Callable[[], Awaitable[str]]) -> str:
    """A new database switched to partitions of a minute, with five past partitions made for
    chosen bounds (the current minute's start - 5 min … - 0), so rows can be dated into them."""
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    assert await partition_store(dsn, interval=STEP, ahead=2, only_if_empty=True)
    conn = await asyncpg.connect(dsn)
    try:
        first = await conn.fetchval(
            "SELECT min(lower_bound) FROM webhook_partitions('webhook_event') "
            "WHERE NOT is_default")
        for table in ("webhook_event", "webhook_attempt", "webhook_nonce"):
            for back in range(1, 6):
                lo = first - timedelta(seconds=STEP * back)
                await conn.execute(
                    f"CREATE TABLE {table}_past{back} PARTITION OF {table} "
                    f"FOR VALUES FROM ('{lo.isoformat()}') TO "
                    f"('{(lo + timedelta(seconds=STEP)).isoformat()}')")
    finally:
        await conn.close()
    return dsn


@pytest.fixture
async def conn(part_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(part_dsn)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def store(part_dsn: str) -> AsyncIterator[PostgresStore]:
    s = await PostgresStore.connect(part_dsn, min_size=2, max_size=8, partition_interval=STEP)
    try:
        yield s
    finally:
        await s.close()


async def _boundary(conn: asyncpg.Connection) -> datetime:
    """The bound between the oldest two partitions made for the test."""
    return await conn.fetchval(  # type: ignore[no-any-return]
        "SELECT upper_bound FROM webhook_partitions('webhook_event') "
        "WHERE part = 'webhook_event_past5'::regclass")


async def _partition_of(conn: asyncpg.Connection, event_id: str) -> str:
    return await conn.fetchval(  # type: ignore[no-any-return]
        "SELECT tableoid::regclass::text FROM webhook_event WHERE event_id = $1", event_id)


async def test_copies_racing_across_a_boundary_leave_one_row_each(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    """Two pools (two proxy processes' worth of connections) insert copies of the same keys at
    once, one copy just before a partition bound and one just after it: each key is inserted
    exactly once, whichever copy wins."""
    boundary = await _boundary(conn)
    before, after = boundary - timedelta(microseconds=1), boundary
    pools = [await asyncpg.create_pool(part_dsn, min_size=8, max_size=8) for _ in range(2)]
    try:
        keys = [f"evt_{i:03d}" for i in range(200)]
        copies = [(key, when, pools[n % 2], f"owner_{n}")
                  for key in keys for n, when in enumerate((before, after, after, before))]
        random.Random(23).shuffle(copies)

        async def insert(key: str, when: datetime, pool: asyncpg.Pool, owner: str) -> int:
            return len(await pool.fetch(INSERT, "stripe", key, when, BODY, owner))

        won = await asyncio.gather(*(insert(*c) for c in copies))
    finally:
        for pool in pools:
            await pool.close()
    assert sum(won) == len(keys)
    rows = await conn.fetch("SELECT event_id, count(*) AS n, "
                            "count(DISTINCT tableoid) AS parts FROM webhook_event "
                            "GROUP BY event_id")
    assert sorted((r["event_id"], r["n"]) for r in rows) == [(k, 1) for k in keys]
    landed = {r["tableoid"] for r in await conn.fetch(
        "SELECT DISTINCT tableoid::regclass::text AS tableoid FROM webhook_event")}
    assert landed == {"webhook_event_past5", "webhook_event_past4"}  # both sides won some


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
async def test_a_copy_waits_for_the_other_sides_copy_then_skips_or_inserts(
        part_dsn: str, conn: asyncpg.Connection, first_ends: str) -> None:
    """The race pinned down: the first copy inserted before the bound, not yet committed; the
    second copy, after the bound, waits for it (on the key's advisory lock), then inserts
    nothing if it committed, its own row if it rolled back."""
    boundary = await _boundary(conn)
    first = await asyncpg.connect(part_dsn)
    second = await asyncpg.connect(part_dsn)
    try:
        tx = first.transaction()
        await tx.start()
        assert await first.fetch(INSERT, "stripe", "evt_x", boundary - timedelta(seconds=1),
                                 BODY, "first")
        waiting = asyncio.create_task(
            second.fetch(INSERT, "stripe", "evt_x", boundary, BODY, "second"))
        while not await conn.fetchval(  # the second copy is blocked on the advisory lock
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"):
            assert not waiting.done(), "the second copy did not wait for the first"
            await asyncio.sleep(0.01)  # polling a condition the server reports, not a delay
        await (tx.commit() if first_ends == "commit" else tx.rollback())
        rows = await waiting
    finally:
        await first.close()
        await second.close()
    owners = [r["lease_owner"] for r in await conn.fetch(
        "SELECT lease_owner FROM webhook_event WHERE event_id = 'evt_x'")]
    if first_ends == "commit":
        assert rows == [] and owners == ["first"]
        assert await _partition_of(conn, "evt_x") == "webhook_event_past5"
    else:
        assert [r["lease_owner"] for r in rows] == ["second"] and owners == ["second"]
        assert await _partition_of(conn, "evt_x") == "webhook_event_past4"


async def test_a_redelivery_partitions_later_is_a_duplicate(
        store: PostgresStore, conn: asyncpg.Connection) -> None:
    """An event answered five partitions ago is found by a redelivery now, alone or in a
    batch of concurrent claims (claim_batch.sql)."""
    for key in ("evt_old", "evt_older"):
        assert (await store.claim("stripe", key, BODY, 30.0, "o")).won
        assert await store.complete("stripe", key, 1, DONE)
    for key in ("evt_old", "evt_older"):
        await _age(conn, key, 5)  # moved five partitions back
    assert (await _partition_of(conn, "evt_old")).startswith("webhook_event_past")

    again = await store.claim("stripe", "evt_old", BODY, 30.0, "o2")
    assert not again.won and again.row.state is EventState.DONE
    claims = await asyncio.gather(*(
        store.claim("stripe", key, BODY, 30.0, f"o{i}")
        for i, key in enumerate(["evt_older"] * 10 + [f"evt_new_{i}" for i in range(10)])))
    assert [c.won for c in claims] == [False] * 10 + [True] * 10
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_event WHERE event_id = 'evt_older'") == 1


async def test_nonces_are_unique_across_partitions(
        store: PostgresStore, conn: asyncpg.Connection) -> None:
    first = await store.bind_nonce("mailgun", "tok", BODY)
    await conn.execute("UPDATE webhook_nonce SET received_at = received_at - interval '5 min'")
    other = hashlib.sha256(b"other").digest()
    answers = await asyncio.gather(*(store.bind_nonce("mailgun", "tok", other)
                                     for _ in range(10)))
    assert {a.digest for a in answers} == {first.digest} == {BODY}
    assert await conn.fetchval("SELECT count(*) FROM webhook_nonce") == 1


# -- retention ---------------------------------------------------------------------------------

async def _age(conn: asyncpg.Connection, event_id: str, back: int) -> None:
    """Move an event into the middle of partition ``past<back>``."""
    await conn.execute(
        "UPDATE webhook_event SET received_at = (SELECT lower_bound + interval '30 s' "
        "FROM webhook_partitions('webhook_event') WHERE part = $2::text::regclass) "
        "WHERE event_id = $1", event_id, f"webhook_event_past{back}")


async def _parts(conn: asyncpg.Connection) -> set[str]:
    return {r["part"] for r in await conn.fetch(
        "SELECT part::text FROM webhook_partitions('webhook_event')")}


async def test_retention_drops_old_partitions_but_never_one_holding_work(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """Retention of two minutes: the partitions that ended more than two minutes ago go,
    except the one with a live lease, the one with a waiting queue entry and the one with a
    provider no longer configured; the young ones stay, and so does everything in them."""
    # past5: a done row, and one of a provider no longer configured; past4: a live lease;
    # past3: a waiting queue entry; the current partition: a young done row.
    await store.claim("stripe", "done5", BODY, 30.0, "o")
    assert await store.complete("stripe", "done5", 1, DONE)
    await _age(conn, "done5", 5)
    await store.claim("stripe", "live4", BODY, 600.0, "o")
    await _age(conn, "live4", 4)
    await store.enqueue("stripe", "queued3", BODY, REQUEST)
    await _age(conn, "queued3", 3)
    await conn.execute("UPDATE webhook_queue SET queued_at = queued_at - interval '3 min'")
    await store.claim("gone", "orphan5", BODY, 30.0, "o")
    assert await store.complete("gone", "orphan5", 1, DONE)
    await _age(conn, "orphan5", 5)
    await store.claim("stripe", "young", BODY, 30.0, "o")
    assert await store.complete("stripe", "young", 1, DONE)
    where = {key: await _partition_of(conn, key)
             for key in ("done5", "live4", "queued3", "orphan5", "young")}
    assert where["done5"] == where["orphan5"] == "webhook_event_past5"

    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=2)
    retired = await keeper.retire({"stripe": 120.0})  # "gone" is no longer configured

    kept = dict(retired.kept)
    assert "webhook_event_past5" not in retired.dropped
    assert kept["webhook_event_past5"] == "unconfigured_provider:gone"
    assert kept["webhook_event_past4"] == "busy" and kept["webhook_event_past3"] == "busy"
    remaining = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM webhook_event")}
    assert remaining == {"done5", "live4", "queued3", "orphan5", "young"}

    # Once "gone" is configured (with a short retention) its partition goes, and the past
    # ones with nothing in them; a redelivery of the dropped event is a new event again,
    # one of an event still stored is a duplicate.
    retired = await keeper.retire({"stripe": 120.0, "gone": 60.0})
    assert "webhook_event_past5" in retired.dropped
    assert "webhook_event_past5" not in await _parts(conn)
    assert {"webhook_event_past4", "webhook_event_past3"} <= await _parts(conn)
    assert (await store.claim("stripe", "done5", BODY, 30.0, "o")).won
    assert not (await store.claim("stripe", "young", BODY, 30.0, "o")).won
    assert not (await store.claim("stripe", "live4", BODY, 30.0, "o")).won


async def test_a_partition_that_gains_work_while_detached_is_attached_again(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The look after the detach: a lease taken between the first look and the detach (here:
    the first look skipped) keeps the partition, attached again with its rows."""
    await store.claim("stripe", "late", BODY, 600.0, "o")
    await _age(conn, "late", 5)

    async def no_first_look(*_: object) -> None:
        return None

    monkeypatch.setattr(PartitionKeeper, "_why_keep", no_first_look)
    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0})
    assert ("webhook_event_past5", "busy_after_detach") in retired.kept
    assert "webhook_event_past5" in await _parts(conn)
    again = await store.claim("stripe", "late", BODY, 30.0, "o2")
    assert not again.won and again.row.state is EventState.PROCESSING


async def test_partitions_are_made_ahead_and_rows_past_them_are_moved_out_of_default(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    await store.claim("stripe", "future", BODY, 30.0, "o")
    await conn.execute("UPDATE webhook_event SET received_at = received_at + interval '4 min'")
    assert await _partition_of(conn, "future") == "webhook_event_default"
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=5)
    assert (await keeper.retire({"stripe": 3600.0})).default_rows == 1
    assert await keeper.make_ahead() >= 3
    assert await _partition_of(conn, "future") != "webhook_event_default"
    assert (await keeper.retire({"stripe": 3600.0})).default_rows == 0
    uppers = await conn.fetchval("SELECT max(upper_bound) - clock_timestamp() "
                                 "FROM webhook_partitions('webhook_event')")
    assert uppers > timedelta(seconds=5 * STEP)
    assert not (await store.claim("stripe", "future", BODY, 30.0, "o2")).won
    assert datetime.now(UTC)  # the store answered through the new partitions
