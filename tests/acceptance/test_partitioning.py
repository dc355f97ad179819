"""Partitioned stores end to end (store.partitioning): `migrate` making a partitioned store, two
proxy processes sharing it under concurrent copies and a redelivery from an old partition; the
proxy refusing a config that does not match; and `store partition` moving a live store while a
proxy process keeps delivering."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.acceptance.conftest import Deployment, create_database, drop_database, run_cli
from tests.support import (
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

pytestmark = pytest.mark.postgres

STRIPE = "/webhooks/stripe"
PARTITIONING = {"interval": "1m", "ahead": 2}


@pytest.fixture
async def unpartitioned(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    """A migrated, unpartitioned database and a stub app; proxies started by the test."""
    stub = await StubApp().start()
    store_url = await create_database(pg_dsn)
    dep = Deployment("postgres", store_url, stub, tmp_path, base_config(stub.url, store_url))
    code, _, err = await run_cli("migrate", "--config", str(write_config(tmp_path, dep.config)))
    assert code == 0, err
    try:
        yield dep
    finally:
        for proc in dep.procs:
            await proc.kill()
        await stub.stop()
        await drop_database(pg_dsn, store_url)


def partitioned_config(dep: Deployment) -> dict[str, Any]:
    config = copy.deepcopy(dep.config)
    config["store"]["partitioning"] = dict(PARTITIONING)
    return config


async def test_migrate_makes_a_partitioned_store_two_processes_share(
        pg_dsn: str, tmp_path: Path) -> None:
    stub = await StubApp().start()
    store_url = await create_database(pg_dsn)
    dep = Deployment("postgres", store_url, stub, tmp_path, base_config(stub.url, store_url))
    dep.config["store"]["partitioning"] = dict(PARTITIONING)
    try:
        code, out, err = await run_cli("migrate", "--config",
                                       str(write_config(tmp_path, dep.config)))
        assert code == 0, err
        assert "partitioned" in out
        await dep.start(2)
        ids = [f"evt_part_{i:02d}" for i in range(20)]
        bodies = {i: stripe_event(i) for i in ids}
        # One event answered long ago, in a partition five minutes back: its redeliveries are
        # duplicates, through either process.
        old = stripe_event("evt_old")
        async with aiohttp.ClientSession() as client:
            status, _, _ = await post(client, dep.url(0, STRIPE), old, stripe_headers(old))
            assert status == 200
            conn = await asyncpg.connect(store_url)
            try:  # one transaction: maintenance drops an empty old partition
                async with conn.transaction():
                    past = await conn.fetchval("SELECT min(lower_bound) - interval '5 min' "
                                               "FROM webhook_partitions('webhook_event')")
                    await conn.execute(
                        "CREATE TABLE webhook_event_past PARTITION OF webhook_event FOR VALUES "
                        f"FROM ('{past.isoformat()}') TO "
                        f"('{(past + timedelta(minutes=1)).isoformat()}')")
                    await conn.execute("UPDATE webhook_event SET received_at = $1 "
                                       "WHERE event_id = 'evt_old'", past + timedelta(seconds=30))
                where = await conn.fetchval("SELECT tableoid::regclass::text FROM "
                                            "webhook_event WHERE event_id = 'evt_old'")
                assert where == "webhook_event_past"
            finally:
                await conn.close()
            copies = [(i, n % 2) for i in [*ids, "evt_old"] for n in range(6)]
            sends = [asyncio.create_task(post(client, dep.url(proc, STRIPE), bodies.get(i, old),
                                              stripe_headers(bodies.get(i, old))))
                     for i, proc in copies]
            answers = await asyncio.gather(*sends)
        # A copy waiting longer than inflight_wait for the first copy's forward is told 409:
        # never forwarded. The old event's copies are replays of its answer.
        assert {status for status, _, _ in answers} <= {200, 409}
        replays = [headers.get("X-Webhook-Sidecar-Replay")
                   for (event_id, _), (_, headers, _) in zip(copies, answers, strict=True)
                   if event_id == "evt_old"]
        assert replays == ["true"] * 6
        assert sorted(s.event_id for s in dep.stub.seen) == sorted([*ids, "evt_old"])
        rows = await dep.rows.all()
        assert sorted(r["event_id"] for r in rows) == sorted([*ids, "evt_old"])
    finally:
        for proc in dep.procs:
            await proc.kill()
        await stub.stop()
        await drop_database(pg_dsn, store_url)


async def test_the_proxy_refuses_a_config_that_does_not_match_the_store(
        unpartitioned: Deployment) -> None:
    path = write_config(unpartitioned.tmp, partitioned_config(unpartitioned), "part.yaml")
    code, _, err = await run_cli("run", "--config", str(path))
    assert code != 0
    assert "is not partitioned" in err and "webhook-sidecar store partition" in err


async def test_store_partition_moves_a_live_store_with_deliveries_flowing(
        unpartitioned: Deployment) -> None:
    """A proxy process delivers all the while (new events and redeliveries of earlier ones) as
    `store partition` switches the tables under it: every delivery is answered, each event
    reaches the app once, and no delivery waited a second."""
    dep = unpartitioned
    await dep.start(1)
    stop = asyncio.Event()
    latencies: list[tuple[float, float, str, int]] = []  # (start, seconds, event id, status)

    async def lane(n: int, client: aiohttp.ClientSession) -> None:
        i = 0
        while not stop.is_set() or i < 5:
            event_id = f"evt_{n}_{i}"
            for again in (event_id, f"evt_{n}_{max(0, i - 3)}"):  # a new one, a redelivery
                body = stripe_event(again)
                started = time.monotonic()
                status, _, _ = await post(client, dep.url(0, STRIPE), body,
                                          stripe_headers(body))
                latencies.append((started, time.monotonic() - started, again, status))
            i += 1

    async with aiohttp.ClientSession() as client:
        lanes = [asyncio.create_task(lane(n, client)) for n in range(4)]
        await dep.stub.wait_for(lambda: dep.stub.count() >= 20)  # deliveries are flowing
        path = write_config(dep.tmp, partitioned_config(dep), "part.yaml")
        code, out, err = await run_cli("store", "partition", "--config", str(path))
        assert code == 0, err
        assert "partitioned now" in out
        seen_at_switch = dep.stub.count()
        await dep.stub.wait_for(lambda: dep.stub.count() >= seen_at_switch + 20)  # and after
        stop.set()
        await asyncio.gather(*lanes)

    conn = await asyncpg.connect(dep.store_url)
    try:
        assert await conn.fetchval(
            "SELECT relkind FROM pg_class WHERE oid = 'webhook_event'::regclass") == b"p"
        assert await conn.fetchval("SELECT count(*) FROM webhook_event_before") > 0
    finally:
        await conn.close()
    assert {status for _, _, _, status in latencies} == {200}
    sent = {event_id for _, _, event_id, _ in latencies}
    assert sorted(s.event_id for s in dep.stub.seen) == sorted(sent)  # each exactly once
    assert sorted(r["event_id"] for r in await dep.rows.all()) == sorted(sent)
    longest = max(seconds for _, seconds, _, _ in latencies)
    print(f"deliveries: {len(latencies)}, longest: {longest * 1000:.0f} ms")
    assert longest < 1.0
