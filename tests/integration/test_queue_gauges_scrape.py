"""/metrics refreshes the queue gauges on scrape, within bounds: the proxy in-process on a real
PostgreSQL store, scraped over real HTTP. At most one store query every SCRAPE_REFRESH_EVERY
seconds, one at a time and shared by concurrent scrapes, and a scrape that waits at most
SCRAPE_REFRESH_WAIT for it: a real lock on the queue table stands in for a slow store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from sidecar.config.loader import parse_config
from sidecar.core.events import QueueStats
from sidecar.ops import maintenance
from sidecar.runtime.serve import Running, start, stop
from sidecar.store.postgres import PostgresStore, migrate_postgres
from tests.support import base_config, post, stripe_event, stripe_headers

# The queue_stats statement, as pg_stat_activity shows it.
QUEUE_STATS = "%AS oldest_pending_seconds%"


class ScrapeCountingStore:
    """A real store that counts the ``queue_stats`` calls made for scrapes (the refresh task's
    own name tells them from the maintenance loop's)."""

    def __init__(self, inner: PostgresStore) -> None:
        self.inner = inner
        self.for_scrapes = 0

    async def queue_stats(self) -> dict[str, QueueStats]:
        task = asyncio.current_task()
        if task is not None and task.get_name() == "queue-gauges":
            self.for_scrapes += 1
        return await self.inner.queue_stats()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Proxy:
    running: Running
    store: ScrapeCountingStore
    dsn: str
    client: aiohttp.ClientSession

    async def enqueue(self, *event_ids: str) -> None:
        url = f"http://{self.running.listen}/webhooks/stripe"
        for event_id in event_ids:
            body = stripe_event(event_id)
            assert (await post(self.client, url, body, stripe_headers(body)))[0] == 200

    async def depth(self) -> float:
        async with self.client.get(f"http://{self.running.admin_listen}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
        [value] = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "webhook_queue_depth" and s.labels["provider"] == "stripe"]
        return value


@pytest.fixture
async def proxy(pg_database_factory: Callable[[], Awaitable[str]],
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Proxy]:
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    inner = await PostgresStore.connect(dsn, acquire_timeout=1.0, statement_timeout=5.0,
                                        lock_timeout=4.0, command_timeout=6.0)
    store = ScrapeCountingStore(inner)
    data = base_config("http://127.0.0.1:9", dsn)  # the app is down: events stay queued
    data["providers"] = {"stripe": {**data["providers"]["stripe"], "mode": "queue"}}
    data["maintenance"] = {"interval": "1h"}  # only scrapes refresh the gauges in this test
    monkeypatch.setattr(maintenance, "SCRAPE_REFRESH_EVERY", 60.0)
    running = await start(parse_config(data, env={}), store=store)
    try:
        async with aiohttp.ClientSession() as client:
            yield Proxy(running, store, dsn, client)
    finally:
        await stop(running)
        await inner.close()


async def test_scrapes_refresh_at_most_once_per_interval(
        proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    await proxy.enqueue("evt_1", "evt_2", "evt_3")
    assert await proxy.depth() == 3
    assert proxy.store.for_scrapes == 1

    # Within the interval: the values found then, and no query, one scrape after the other or
    # ten at once.
    await proxy.enqueue("evt_4", "evt_5")
    assert [await proxy.depth() for _ in range(5)] == [3] * 5
    assert await asyncio.gather(*(proxy.depth() for _ in range(10))) == [3] * 10
    assert proxy.store.for_scrapes == 1

    monkeypatch.setattr(maintenance, "SCRAPE_REFRESH_EVERY", 0.0)  # the interval is over
    assert await proxy.depth() == 5
    assert proxy.store.for_scrapes == 2


async def test_a_slow_store_cannot_hang_a_scrape_and_concurrent_scrapes_share_one_query(
        proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    await proxy.enqueue("evt_1", "evt_2")
    assert await proxy.depth() == 2
    monkeypatch.setattr(maintenance, "SCRAPE_REFRESH_EVERY", 0.0)
    monkeypatch.setattr(maintenance, "SCRAPE_REFRESH_WAIT", 0.5)

    holder = await asyncpg.connect(proxy.dsn)
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("LOCK TABLE webhook_queue IN ACCESS EXCLUSIVE MODE")
        with structlog.testing.capture_logs() as logs:
            began = time.monotonic()
            depths = await asyncio.gather(*(proxy.depth() for _ in range(5)))
            took = time.monotonic() - began
            # The refresh still waits for the lock; a scrape that comes now shares it too.
            assert await proxy.depth() == 2
        assert depths == [2] * 5  # the last values, answered in time
        assert took < 0.5 + 1.0, took
        assert {e["reason"] for e in logs if e["event"] == "queue_gauges_stale"} == {
            "store_slow"}
        waiting = await holder.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE $1", QUEUE_STATS)
        assert waiting == 1 and proxy.store.for_scrapes == 2  # one query for all six
    finally:
        await holder.close()  # the lock goes with the session

    # The shared query finishes once the lock is gone; the next refresh sees new events.
    await proxy.enqueue("evt_3")
    deadline = time.monotonic() + 10
    while (depth := await proxy.depth()) != 3:
        assert time.monotonic() < deadline, f"depth {depth} after the lock was released"
        await asyncio.sleep(0.05)  # polling /metrics, bounded by the deadline
