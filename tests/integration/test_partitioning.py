"""Partitioned retention on real PostgreSQL (store.partitioning, docs/design.md "Partitioned
retention"): one row per key across partitions under concurrent inserts on both sides of a
boundary, a redelivery partitions later, and retention dropping whole partitions but never one
that holds work. Time is moved by partitions made for chosen bounds and rows inserted (or moved)
at chosen times, never by waiting."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sidecar.config.keyring import Keyring
from sidecar.config.loader import parse_config
from sidecar.core.errors import RowLocked, SchemaError
from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    StoredRequest,
)
from sidecar.core.partition_retention import PartitionsMade, PartitionsRetired
from sidecar.obs.metrics import Metrics
from sidecar.ops.maintenance import Maintenance
from sidecar.runtime.wiring import partition_keeper
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.postgres import partition_upkeep as upkeep
from sidecar.store.postgres.connections import DIALECT
from sidecar.store.postgres.partition_upkeep import PartitionKeeper
from sidecar.store.postgres.partitioning import partition_store
from sidecar.store.sqlfiles import statement
from tests.integration import partitioned
from tests.integration.partitioned import STEP, make_past, partitioned_database, reasons
from tests.support import base_config

pytestmark = pytest.mark.postgres
conn, store = partitioned.conn, partitioned.store  # the fixtures on part_dsn

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
    """Partitions of a minute, with five past partitions of each table made for chosen bounds
    (the current minute's start - 5 min … - 0), so rows can be dated into them."""
    dsn = await partitioned_database(pg_database_factory)
    await make_past(dsn, [(table, f"{table}_past{back}", back)
                          for table in ("webhook_event", "webhook_attempt", "webhook_nonce")
                          for back in range(1, 6)])
    return dsn


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


# One side of the race in a process of its own: reads the DSN, the INSERT and the copies (JSON:
# key, ISO time, owner) from stdin, says "ready", waits for "go", inserts them over 8 connections
# at once with the claim's INSERT, and prints how many rows it inserted.
RACER = """
import asyncio, json, sys
from datetime import datetime
import asyncpg
async def main():
    dsn, insert, copies = json.loads(sys.stdin.readline())
    pool = await asyncpg.create_pool(dsn, min_size=8, max_size=8)
    print("ready", flush=True)
    sys.stdin.readline()
    body = bytes(32)
    won = await asyncio.gather(*(pool.fetch(insert, "stripe", key,
                                            datetime.fromisoformat(when), body, owner)
                                 for key, when, owner in copies))
    await pool.close()
    print(sum(len(rows) for rows in won), flush=True)
asyncio.run(main())
"""


async def test_copies_racing_across_a_boundary_from_two_processes_leave_one_row_each(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    """The same race between two OS processes (two proxies' worth), several trials: one process
    sends every key's copies dated just before a partition bound, the other its copies dated
    just after it, both released at once. Each key is inserted exactly once."""
    boundary = await _boundary(conn)
    sides = (boundary - timedelta(microseconds=1), boundary)
    for trial in range(4):
        keys = [f"evt_t{trial}_{i:03d}" for i in range(150)]
        procs = [await asyncio.create_subprocess_exec(
            sys.executable, "-c", RACER, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE) for _ in sides]
        try:
            for n, (proc, when) in enumerate(zip(procs, sides, strict=True)):
                copies = [(key, when.isoformat(), f"owner_{n}_{c}")
                          for key in keys for c in range(2)]
                random.Random(trial * 2 + n).shuffle(copies)
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write((json.dumps([part_dsn, INSERT, copies]) + "\n").encode())
                await proc.stdin.drain()
                assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
            for proc in procs:  # go: both at once
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
            outputs = [await asyncio.wait_for(proc.communicate(), 60) for proc in procs]
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        assert [proc.returncode for proc in procs] == [0, 0]
        won = [int(out.strip()) for out, _ in outputs]
        assert sum(won) == len(keys), won
        rows = await conn.fetch("SELECT event_id, count(*) AS n FROM webhook_event "
                                "WHERE event_id LIKE $1 GROUP BY event_id", f"evt_t{trial}_%")
        assert sorted((r["event_id"], r["n"]) for r in rows) == [(k, 1) for k in keys]
    landed = {r["part"] for r in await conn.fetch(
        "SELECT DISTINCT tableoid::regclass::text AS part FROM webhook_event")}
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

    kept = dict(reasons(retired))
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


FAILED = AttemptResult(EventState.FAILED, Outcome.RESPONSE, RecordedResponse(500, (), b""), 1.0)
GATE = 4242  # an advisory lock the test holds: retention's look waits on it once it has looked


async def _gate_after_the_look(conn: asyncpg.Connection) -> None:
    """Make retention's look at a partition's work wait, after looking, for the test's GATE."""
    await conn.execute("""
        ALTER FUNCTION webhook_partition_busy(regclass, regclass)
            RENAME TO webhook_partition_busy_real;
        CREATE FUNCTION webhook_partition_busy(part regclass, detached_from regclass DEFAULT NULL)
        RETURNS boolean
        LANGUAGE plpgsql VOLATILE AS $$
        DECLARE
            busy boolean := webhook_partition_busy_real(part, detached_from);
            timeout text := current_setting('lock_timeout');
        BEGIN
            PERFORM set_config('lock_timeout', '0', true);  -- the gate's wait: the test's
            PERFORM pg_advisory_xact_lock(4242);
            PERFORM set_config('lock_timeout', timeout, true);
            RETURN busy;
        END $$""")


async def _waits_on_gate(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND objid = $1 AND database = (SELECT oid FROM pg_database "
        "WHERE datname = current_database()))", GATE))


async def test_a_take_over_between_retentions_look_and_its_detach_answers_in_flight(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """A very late redelivery of a failed event past retention, taking it over between
    retention's look at its partition (nothing in flight) and the detach, would start an
    attempt in a partition no proxy reaches a moment later; a second copy would then be claimed
    as new beside it, and the event forwarded twice. The take-over waits for retention (~100 ms,
    then RowLocked: the delivery answers "in flight"); the partition goes; the next copy is a
    new event, forwarded once."""
    await store.claim("stripe", "late", BODY, 30.0, "o")
    assert await store.complete("stripe", "late", 1, FAILED)
    await _age(conn, "late", 5)
    await _gate_after_the_look(conn)
    gate = await asyncpg.connect(part_dsn)
    try:
        await gate.execute("SELECT pg_advisory_lock($1)", GATE)
        keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=2)
        retiring = asyncio.create_task(keeper.retire({"stripe": 120.0}))
        async with asyncio.timeout(30):
            while not await _waits_on_gate(conn):  # retention has looked: nothing in flight
                assert not retiring.done(), "retention never looked at the partition"
                await asyncio.sleep(0.01)  # polling a condition the server reports
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RowLocked):
            await store.take_over("stripe", "late", 30.0, "o2")
        assert loop.time() - started < 2.0  # the row-lock wait, not retention's whole round
        await gate.execute("SELECT pg_advisory_unlock($1)", GATE)
        retired = await retiring
    finally:
        await gate.close()
    assert "webhook_event_past5" in retired.dropped
    again = await store.claim("stripe", "late", BODY, 30.0, "o3")
    assert again.won  # the one forward of this copy: the event is past retention
    assert await conn.fetchval(
        "SELECT count(*) FROM webhook_event WHERE event_id = 'late'") == 1


async def _detach_as_a_dead_round(conn: asyncpg.Connection, part: str) -> None:
    """What a maintenance round that died between the detach and the drop leaves behind."""
    async with conn.transaction():
        assert await conn.fetchval(
            "SELECT webhook_partition_detach('webhook_event', $1::text::regclass)", part)


async def test_partitions_left_detached_by_a_round_that_died_are_dropped_or_attached_again(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """The next round finds them by their comment: one with only done events and a dead queue
    entry is dropped with the entry (which would otherwise refuse the event's next enqueue);
    one that holds a live lease (the look after the detach: the net under the look before it)
    is attached again, its event still a duplicate."""
    await store.enqueue("stripe", "dead5", BODY, REQUEST)
    await conn.execute("UPDATE webhook_queue SET due_at = NULL WHERE event_id = 'dead5'")
    await conn.execute("UPDATE webhook_event SET state = 'dead' WHERE event_id = 'dead5'")
    await _age(conn, "dead5", 5)
    await store.claim("stripe", "live4", BODY, 600.0, "o")
    await store.claim("stripe", "done4", BODY, 30.0, "o")
    assert await store.complete("stripe", "done4", 1, DONE)
    await _age(conn, "done4", 4)
    await _detach_as_a_dead_round(conn, "webhook_event_past5")
    await _detach_as_a_dead_round(conn, "webhook_event_past4")
    await conn.execute("UPDATE webhook_event SET received_at = (SELECT received_at FROM "
                       "webhook_event_past4 LIMIT 1) WHERE event_id = 'live4'")
    assert await _partition_of(conn, "live4") == "webhook_event_default"
    await conn.execute("WITH moved AS (DELETE FROM webhook_event_default RETURNING *) "
                       "INSERT INTO webhook_event_past4 SELECT * FROM moved")
    assert {r["name"] for r in await conn.fetch(
        "SELECT part::text AS name FROM webhook_partitions_detached()")} == {
        "webhook_event_past5", "webhook_event_past4"}

    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0})

    assert "webhook_event_past5" in retired.dropped
    assert ("webhook_event_past4", "busy_after_detach") in reasons(retired)
    assert "webhook_event_past5" not in await _parts(conn)
    assert "webhook_event_past4" in await _parts(conn)
    assert not await conn.fetch("SELECT * FROM webhook_partitions_detached()")
    assert not await conn.fetchval("SELECT count(*) FROM webhook_queue")
    assert (await store.enqueue("stripe", "dead5", BODY, REQUEST)).accepted
    again = await store.claim("stripe", "live4", BODY, 30.0, "o2")
    assert not again.won and again.row.state is EventState.PROCESSING


async def test_partitions_are_made_ahead_and_rows_past_them_are_moved_out_of_default(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    await store.claim("stripe", "future", BODY, 30.0, "o")
    await conn.execute("UPDATE webhook_event SET received_at = received_at + interval '4 min'")
    assert await _partition_of(conn, "future") == "webhook_event_default"
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=5)
    assert (await keeper.retire({"stripe": 3600.0})).default_rows == 1
    before = await conn.fetchval("SELECT clock_timestamp()")  # the round's horizon's clock
    assert (await keeper.make_ahead()).made >= 3
    assert await _partition_of(conn, "future") != "webhook_event_default"
    assert (await keeper.retire({"stripe": 3600.0})).default_rows == 0
    uppers = await conn.fetchval("SELECT max(upper_bound) - $1::timestamptz "
                                 "FROM webhook_partitions('webhook_event')", before)
    assert uppers > timedelta(seconds=5 * STEP)
    assert not (await store.claim("stripe", "future", BODY, 30.0, "o2")).won
    assert datetime.now(UTC)  # the store answered through the new partitions


async def test_maintenance_makes_and_drops_partitions_and_says_what_it_kept(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    data = base_config("http://127.0.0.1:9", part_dsn)
    data["store"]["partitioning"] = {"interval": "1m", "ahead": 4}
    data["providers"]["stripe"]["retention"] = "2m"
    data["providers"]["stripe"]["lease"] = "30s"
    config = parse_config(data, env={})
    upkeep = Maintenance(config, store, Metrics(CollectorRegistry()), Keyring(config.providers),
                         partitions=partition_keeper(config.store))
    await store.claim("stripe", "live", BODY, 600.0, "o")
    await _age(conn, "live", 4)
    # The horizon is counted from the round's clock, not the assertion's, which runs later.
    before = await conn.fetchval("SELECT clock_timestamp()")
    with capture_logs() as logs:
        await upkeep.keep_partitions()
    events = {(e["event"], e.get("partition"), e.get("reason")) for e in logs}
    assert ("partition_dropped", "webhook_event_past5", None) in events
    assert ("partition_kept", "webhook_event_past4", "busy") in events
    assert any(e["event"] == "partitions_made" for e in logs)
    assert await conn.fetchval("SELECT max(upper_bound) - $1::timestamptz "
                               "FROM webhook_partitions('webhook_event')",
                               before) > timedelta(minutes=4)


async def test_partitioning_again_changes_nothing_and_another_interval_is_refused(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    before = await _parts(conn)
    assert not await partition_store(part_dsn, interval=STEP, ahead=2)
    assert not await migrate_postgres(part_dsn)
    assert await _parts(conn) == before
    with pytest.raises(SchemaError, match=r"partitions span 1m: set store\.partitioning"):
        await partition_store(part_dsn, interval=3600, ahead=2)
    with pytest.raises(SchemaError, match=r"is partitioned \(by 1m\) but store\.partitioning"):
        await PostgresStore.connect(part_dsn)


async def test_row_retention_leaves_to_the_drop_the_rows_of_partitions_it_will_drop(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """Partitions of a minute; github (which keeps nonces) and slack keep rows for as long
    ago as partition past2 ended plus 10 s (so past2 is not yet due for its drop, while its
    rows, 30 s into it, are past retention), stripe for 5 s (shorter than the longest by more
    than one interval). A maintenance round deletes no github row, event or nonce, of past2 and
    drops past5 whole; stripe's row in past2 goes row by row. The drop, once due (a shorter
    retention says so here), removes past2 with its rows."""
    ended = await conn.fetchval(
        "SELECT extract(epoch FROM clock_timestamp() - upper_bound) "
        "FROM webhook_partitions('webhook_event') WHERE part = 'webhook_event_past2'::regclass")
    longest = f"{math.ceil(ended) + 10}s"
    data = base_config("http://127.0.0.1:9", part_dsn)
    data["store"]["partitioning"] = {"interval": "1m", "ahead": 4}
    for key, retention in (("github", longest), ("slack", longest), ("stripe", "5s")):
        data["providers"][key]["retention"] = retention
        data["providers"][key]["lease"] = "3s"
    config = parse_config(data, env={})
    upkeep = Maintenance(config, store, Metrics(CollectorRegistry()), Keyring(config.providers),
                         partitions=partition_keeper(config.store))
    for key, back in (("kept2", 2), ("gone5", 5)):
        await store.claim("github", key, BODY, 10.0, "o")
        assert await store.complete("github", key, 1, DONE)
        await _age(conn, key, back)
    await store.claim("stripe", "short1", BODY, 10.0, "o")
    assert await store.complete("stripe", "short1", 1, DONE)
    await _age(conn, "short1", 2)
    await conn.execute(
        "INSERT INTO webhook_nonce (provider, nonce, body_sha256, received_at) "
        "SELECT 'github', 'n2', '', lower_bound + interval '30 s' "
        "FROM webhook_partitions('webhook_nonce') "
        "WHERE part = 'webhook_nonce_past2'::regclass")
    assert await conn.fetchval("SELECT tableoid::regclass::text FROM webhook_nonce "
                               "WHERE nonce = 'n2'") == "webhook_nonce_past2"

    await upkeep.keep_partitions()
    deleted = await upkeep.sweep_retention()

    assert deleted["github"] == 0 and deleted["stripe"] == 1
    events = {r["event_id"]: r["part"] for r in await conn.fetch(
        "SELECT event_id, tableoid::regclass::text AS part FROM webhook_event")}
    assert events == {"kept2": "webhook_event_past2"}  # gone5's partition was dropped
    assert "webhook_event_past5" not in await _parts(conn)
    assert await conn.fetchval("SELECT count(*) FROM webhook_nonce WHERE nonce = 'n2'") == 1

    # Later, past2 is past its drop horizon: a retention of 30 s says so now.
    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=4).retire(
        {"github": 30.0, "slack": 30.0, "stripe": 5.0})
    assert {"webhook_event_past2", "webhook_nonce_past2"} <= set(retired.dropped)
    assert await conn.fetchval("SELECT count(*) FROM webhook_event") == 0
    assert await conn.fetchval("SELECT count(*) FROM webhook_nonce") == 0


async def test_inserts_never_wait_long_behind_the_partitions_made_ahead(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    """Making partitions attaches each to a parent with a DEFAULT partition: the attach locks
    the DEFAULT partition ACCESS EXCLUSIVE, which every insert reads (the uniqueness trigger),
    so inserts queue behind it from its lock request to its commit. Here maintenance makes 30
    partitions a table (a round after an outage, or a larger ``ahead``) while inserts run one
    after another; a reader holds the DEFAULT partition as the first attach asks for it (a
    delivery's transaction) and ends then. No insert waits more than 100 ms (its own
    statement's time, measured by the server) — or, on a machine so busy that the round takes
    over 0.4 s, more than a quarter of the round: inserts queued behind the whole round rather
    than one attach would wait about all of it — and the partitions are all made."""
    reader = await asyncpg.connect(part_dsn)
    writer = await asyncpg.connect(part_dsn)
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=30)
    waits: list[float] = []

    async def insert_until_made() -> None:
        n = 0
        while not making.done() or n < 10:
            took = await writer.fetchval(
                "WITH ins AS (" + INSERT.replace("RETURNING e.lease_owner", "RETURNING 1")
                + ") SELECT extract(epoch FROM clock_timestamp() - statement_timestamp()) "
                "FROM ins", "stripe", f"e{n}", datetime.now(UTC), BODY, "o")
            waits.append(float(took))
            n += 1

    try:
        await reader.execute("BEGIN; SELECT count(*) FROM webhook_event")
        before = await conn.fetchval("SELECT clock_timestamp()")  # the round's horizon's clock
        started = time.monotonic()
        making = asyncio.create_task(keeper.make_ahead())
        while not await conn.fetchval(  # the first attach waits for the reader's lock
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'webhook-sidecar partitions' "
                "AND wait_event_type = 'Lock'"):
            assert not making.done()
            await asyncio.sleep(0.002)  # sampling pg_stat_activity, not synchronisation
        inserting = asyncio.create_task(insert_until_made())
        await reader.execute("COMMIT")
        await inserting
        made = making.result().made
        round_took = time.monotonic() - started
    finally:
        await reader.close()
        await writer.close()
    assert made >= 3 * 28, made  # the switch made two ahead; 30 intervals on now
    assert max(waits) <= max(0.100, round_took / 4), (sorted(waits)[-5:], round_took)
    uppers = await conn.fetchval("SELECT max(upper_bound) - $1::timestamptz "
                                 "FROM webhook_partitions('webhook_event')", before)
    assert uppers > timedelta(seconds=30 * STEP)


# -- what upkeep tells operators ---------------------------------------------------------------

TABLES = ("webhook_event", "webhook_attempt", "webhook_nonce")
LAST_BOUND = "webhook_partitions_last_bound_timestamp_seconds"


def _upkeep(part_dsn: str, store: PostgresStore, metrics: Metrics) -> Maintenance:
    data = base_config("http://127.0.0.1:9", part_dsn)
    data["store"]["partitioning"] = {"interval": "1m", "ahead": 4}
    data["providers"]["stripe"]["retention"] = "2m"
    config = parse_config(data, env={})
    return Maintenance(config, store, metrics, Keyring(config.providers),
                       partitions=partition_keeper(config.store))


async def test_maintenance_exports_the_partitions_it_keeps(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """After a round: the bounded partitions of each table, when the last one ends (Unix
    time), the rows in the DEFAULT partitions and the partitions dropped, as the catalog has
    them."""
    await store.claim("stripe", "far", BODY, 30.0, "o")  # past every partition made: DEFAULT
    await conn.execute("UPDATE webhook_event SET received_at = received_at + interval '1 day'")
    registry = CollectorRegistry()
    upkeep = _upkeep(part_dsn, store, Metrics(registry))

    with capture_logs() as logs:
        await upkeep.keep_partitions()

    for table in TABLES:
        count, bound, now = await conn.fetchrow(
            "SELECT count(*), extract(epoch FROM max(upper_bound)), "
            "extract(epoch FROM clock_timestamp()) "
            "FROM webhook_partitions($1::text::regclass) WHERE NOT is_default", table)
        assert registry.get_sample_value("webhook_partitions", {"table": table}) == count
        exported = registry.get_sample_value(LAST_BOUND, {"table": table})
        # The bound itself, not a lead from now: nothing to read "a moment before".
        assert exported == float(bound)
        assert exported - float(now) > 4 * STEP  # made 4 ahead
    assert registry.get_sample_value("webhook_partition_default_rows") == 1
    dropped = [e["partition"] for e in logs if e["event"] == "partition_dropped"]
    assert {f"{table}_past5" for table in TABLES} <= set(dropped)
    assert registry.get_sample_value("webhook_partitions_dropped_total") == len(dropped)

    await upkeep.keep_partitions()  # nothing more to drop: the counter stays
    assert registry.get_sample_value("webhook_partitions_dropped_total") == len(dropped)


async def test_a_table_with_no_bounded_partition_ends_at_the_epoch(
        conn: asyncpg.Connection) -> None:
    """The extent of a table with only its DEFAULT partition: 0 partitions ending at 0 (the
    epoch), so that the alert on the bound minus now fires; never -infinity or NULL."""
    await conn.execute("CREATE TABLE scratch (at timestamptz) PARTITION BY RANGE (at); "
                       "CREATE TABLE scratch_default PARTITION OF scratch DEFAULT")
    extent = statement(DIALECT, "partitioning/extent")
    row = await conn.fetchrow(extent.sql, *extent.positional({"parent": "scratch"}))
    assert (row["partitions"], row["last_bound_epoch"]) == (0, 0.0)


async def _hold_default(part_dsn: str, mode: str) -> asyncpg.Connection:
    """A session holding ``webhook_event``'s DEFAULT partition locked in ``mode`` (an open
    transaction), as a long delivery or an operator's statement may."""
    holder = await asyncpg.connect(part_dsn)
    await holder.execute(f"BEGIN; LOCK TABLE webhook_event_default IN {mode} MODE")
    return holder


async def test_make_ahead_reports_a_table_it_could_not_make(
        part_dsn: str, conn: asyncpg.Connection) -> None:
    """The DEFAULT partition of the event table stays locked through every try: that table
    is reported busy, the others get their partitions."""
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=5)  # the switch made 2 ahead
    before = await conn.fetchval(
        "SELECT max(upper_bound) FROM webhook_partitions('webhook_event')")
    holder = await _hold_default(part_dsn, "ACCESS EXCLUSIVE")
    try:
        made = await keeper.make_ahead()
    finally:
        await holder.close()
    assert made.busy == ("webhook_event",)
    assert made.made >= 2 * 3  # the attempt and nonce tables: 3 intervals more at least
    assert await conn.fetchval(
        "SELECT max(upper_bound) FROM webhook_partitions('webhook_event')") == before
    again = await keeper.make_ahead()  # the next round makes them
    assert again.busy == () and again.made >= 3


class _ReleasedAfterMaking:
    """The keeper, with ``holder``'s lock released as soon as its partitions are made (or
    given up): retention's detach would wait for that lock too."""

    def __init__(self, keeper: PartitionKeeper, holder: asyncpg.Connection) -> None:
        self._keeper = keeper
        self._holder = holder

    async def make_ahead(self) -> PartitionsMade:
        try:
            return await self._keeper.make_ahead()
        finally:
            await self._holder.close()

    async def retire(self, retention: Mapping[str, float]) -> PartitionsRetired:
        return await self._keeper.retire(retention)


async def test_maintenance_warns_of_partitions_not_made(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """A round that could not make the event table's partitions says which, and retention
    and the gauges go on: the exported bound of the event table stays behind the others'."""
    registry = CollectorRegistry()
    upkeep = _upkeep(part_dsn, store, Metrics(registry))
    holder = await _hold_default(part_dsn, "ACCESS EXCLUSIVE")
    try:
        keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=4)
        upkeep._partitions = _ReleasedAfterMaking(keeper, holder)
        with capture_logs() as logs:
            await upkeep.keep_partitions()
    finally:
        await holder.close()
    warned = [e for e in logs if e["event"] == "partitions_not_made"]
    assert len(warned) == 1 and warned[0]["tables"] == ["webhook_event"], warned
    assert warned[0]["log_level"] == "warning"
    assert any(e["event"] == "partition_dropped" for e in logs)
    event_bound = registry.get_sample_value(LAST_BOUND, {"table": "webhook_event"})
    nonce_bound = registry.get_sample_value(LAST_BOUND, {"table": "webhook_nonce"})
    assert event_bound is not None and nonce_bound is not None
    assert event_bound < nonce_bound - STEP  # the event table was left behind


async def test_a_partition_held_by_a_long_transaction_is_kept_and_the_round_goes_on(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """A session holding a partition (an operator's long report, a stuck transaction) makes
    its detach give up after its tries: the partition is kept ("locked", tried again next
    round) and the round goes on to the next one, instead of ending the round on an error."""
    for back in (5, 4):
        await store.claim("stripe", f"done{back}", BODY, 30.0, "o")
        assert await store.complete("stripe", f"done{back}", 1, DONE)
        await _age(conn, f"done{back}", back)
    reader = await asyncpg.connect(part_dsn)
    try:
        async with reader.transaction():
            await reader.execute("LOCK TABLE webhook_event_past5 IN ACCESS SHARE MODE")
            retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire(
                {"stripe": 120.0})
    finally:
        await reader.close()
    assert ("webhook_event_past5", "locked") in reasons(retired)
    assert "webhook_event_past4" in retired.dropped
    assert "webhook_event_past5" in await _parts(conn)


async def _done_in(store: PostgresStore, conn: asyncpg.Connection, event_id: str,
                   back: int) -> None:
    await store.claim("stripe", event_id, BODY, 30.0, "o")
    assert await store.complete("stripe", event_id, 1, DONE)
    await _age(conn, event_id, back)


async def _leased_after_a_dead_rounds_detach(store: PostgresStore,
                                             conn: asyncpg.Connection) -> None:
    """past4 left detached by a run that died, holding a live lease (the net's case: the looks
    under the detach's locks leave none, so the lease is written on the detached table)."""
    await store.claim("stripe", "live4", BODY, 600.0, "o")
    await _age(conn, "live4", 4)
    await conn.execute("UPDATE webhook_event SET lease_until = clock_timestamp() "
                       "WHERE event_id = 'live4'")  # expired: the detach's look lets it go
    await _detach_as_a_dead_round(conn, "webhook_event_past4")
    await conn.execute("UPDATE webhook_event_past4 SET lease_until = clock_timestamp() "
                       "+ interval '10 min' WHERE event_id = 'live4'")


async def test_one_process_retires_at_a_time_and_the_others_only_count(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """Every proxy runs maintenance. While one holds the round's lock, another's round drops
    nothing (it still reads the counts for its gauges); run together, each partition is dropped
    by exactly one of them, and neither fails on the other's work."""
    await _done_in(store, conn, "done5", 5)
    await _done_in(store, conn, "done4", 4)
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=2)
    holder = await asyncpg.connect(part_dsn)
    try:
        assert await holder.fetchval(
            "SELECT pg_try_advisory_lock(hashtextextended('webhook_partition_round', 0))")
        idle = await keeper.retire({"stripe": 120.0})
    finally:
        await holder.close()
    assert not idle.dropped and not idle.kept
    assert dict((t, n) for t, n, _ in idle.extent)["webhook_event"] >= 7
    assert {"webhook_event_past5", "webhook_event_past4"} <= await _parts(conn)

    rounds = await asyncio.gather(*(PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire(
        {"stripe": 120.0}) for _ in range(3)))
    dropped = [name for r in rounds for name in r.dropped]
    assert len(dropped) == len(set(dropped))
    assert {"webhook_event_past5", "webhook_event_past4"} <= set(dropped)
    assert not [k for r in rounds for k in reasons(r) if k[1] != "inside_retention"]


async def test_a_partition_another_process_drops_after_the_list_is_skipped(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The round's lock is taken per step: between this round's list of candidates and its
    look at one, another process may have dropped it. That one is the other's to report; this
    round goes on with the rest and does not fail."""
    await _done_in(store, conn, "done5", 5)
    await _done_in(store, conn, "done4", 4)
    listed = upkeep.rows

    async def list_then_lose_one(c: asyncpg.Connection, name: str,
                                 params: Mapping[str, object] | None = None) -> Any:
        found = await listed(c, name, params)
        if name == "partitioning/candidates" and params and params["parent"] == "webhook_event":
            await conn.execute("DROP TABLE webhook_event_past5")  # as another process would
        return found

    monkeypatch.setattr(upkeep, "rows", list_then_lose_one)
    retired = await PartitionKeeper(part_dsn, interval=STEP, ahead=2).retire({"stripe": 120.0})
    assert "webhook_event_past5" not in retired.dropped
    assert "webhook_event_past5" not in dict(retired.kept)
    assert "webhook_event_past4" in retired.dropped


async def test_a_partition_dropped_after_its_name_was_resolved_reads_as_gone(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """The providers look resolves the name, then reads the table: another process's drop in
    between leaves a regclass that prints as a bare OID. That is "gone" (a failed lookup, which
    the round skips), never SQL built from the number."""
    await conn.execute("CREATE TABLE webhook_gone_soon (provider text)")
    oid = await conn.fetchval("SELECT 'webhook_gone_soon'::regclass::oid")
    await conn.execute("DROP TABLE webhook_gone_soon")
    with pytest.raises(asyncpg.UndefinedTableError):
        await conn.fetchval("SELECT webhook_partition_providers($1::oid::regclass)", oid)


async def test_a_detached_table_that_cannot_go_is_kept_and_the_round_goes_on(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """A table a dead run left detached that can be neither dropped nor attached again (here:
    it holds a live lease, and the parent gained a column since) is reported and left; a
    comment edited by hand and one naming a parent that is gone are skipped; the rest of the
    round (past5) goes on, round after round."""
    await _done_in(store, conn, "done5", 5)
    await _leased_after_a_dead_rounds_detach(store, conn)
    await conn.execute("ALTER TABLE webhook_event ADD COLUMN added_later integer")
    await conn.execute("CREATE TABLE stray_a (x int); CREATE TABLE stray_b (x int)")
    await conn.execute("""COMMENT ON TABLE stray_a IS '{"webhook_sidecar_detached_from" nope'""")
    await conn.execute("""COMMENT ON TABLE stray_b IS '{"webhook_sidecar_detached_from": """
                       """"no_such_table", "lower_bound": null, """
                       """"upper_bound": "2026-01-01T00:00:00Z"}'""")
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=2)
    for _ in range(2):
        retired = await keeper.retire({"stripe": 120.0})
        why = dict(reasons(retired)).get("webhook_event_past4", "")
        assert why.startswith("detached_error:"), retired.kept
        assert not {"stray_a", "stray_b"} & {name for name, _ in retired.kept}
    assert "webhook_event_past5" not in await _parts(conn)
    assert await conn.fetchval("SELECT count(*) FROM webhook_event_past4") == 1


async def test_attaching_again_waits_for_its_locks_no_longer_than_a_detach(
        part_dsn: str, store: PostgresStore, conn: asyncpg.Connection) -> None:
    """The re-attach of a detached table holding work locks the DEFAULT partition, which every
    insert reads: its wait is bounded as the detach's, and past it the table stays detached,
    found again by the next round."""
    await _leased_after_a_dead_rounds_detach(store, conn)
    keeper = PartitionKeeper(part_dsn, interval=STEP, ahead=2)
    reader = await asyncpg.connect(part_dsn)
    try:
        async with reader.transaction():
            await reader.execute("LOCK TABLE webhook_event_default IN ACCESS SHARE MODE")
            retired = await keeper.retire({"stripe": 120.0})
    finally:
        await reader.close()
    assert ("webhook_event_past4", "locked_detached") in reasons(retired)
    assert [r["part"] for r in await conn.fetch(
        "SELECT part::text FROM webhook_partitions_detached()")] == ["webhook_event_past4"]
    retired = await keeper.retire({"stripe": 120.0})
    assert ("webhook_event_past4", "busy_after_detach") in reasons(retired)
    assert "webhook_event_past4" in await _parts(conn)
    assert not (await store.claim("stripe", "live4", BODY, 30.0, "o2")).won
