"""Listings waiting for their turn are bounded, and stop waiting when their client has gone:
an in-process proxy on PostgreSQL whose event table is locked by the test, so that the two
listings allowed at once hang in the database while others queue behind them. Real HTTP on
loopback, real concurrency; every wait bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import asyncpg
import pytest

from sidecar.config.loader import parse_config
from sidecar.ops import listing
from sidecar.runtime.serve import start, stop
from sidecar.store.postgres import PostgresStore
from tests.integration.test_store_contract import BODY, LEASE
from tests.support import StubApp, base_config

pytestmark = pytest.mark.postgres


async def until(condition: Callable[[], Awaitable[bool]], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"within {timeout:g} s: {what}"
        await asyncio.sleep(0.02)  # polling what is watched, bounded by the deadline


async def test_listings_past_the_waiting_bound_are_busy_and_a_gone_client_stops_waiting(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    await pg_store.claim("stripe", "evt_0", BODY, LEASE, "o")
    # Patient enough to wait for the lock below while the test watches.
    store = await PostgresStore.connect(pg_dsn, max_size=8, lock_timeout=30,
                                        statement_timeout=30, command_timeout=30)
    stub = await StubApp().start()
    running = await start(parse_config(base_config(stub.url, "sqlite:///unused.db"), env={}),
                          store=store)
    assert running.admin_listen is not None
    admin = f"http://{running.admin_listen}"
    holder = await asyncpg.connect(pg_dsn)
    watcher = await asyncpg.connect(pg_dsn)
    sockets: list[asyncio.StreamWriter] = []

    async def in_the_database() -> int:
        return int(await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '-- One page of the event listing%'"))

    async def waiting() -> int:
        return listing._listings[store].waiting

    async def raw_listing() -> asyncio.StreamWriter:
        """A listing asked for on a connection the test can drop (an abandoned <img>)."""
        _, writer = await asyncio.open_connection(running.admin_listen.host,
                                                  running.admin_listen.port)
        writer.write(b"GET /admin/events?status=5xx HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        return writer

    transaction = holder.transaction()
    try:
        async with aiohttp.ClientSession() as client:
            await transaction.start()
            await holder.execute("LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE")

            async def get(path: str) -> tuple[int, str, str | None]:
                async with client.get(admin + path) as resp:
                    return resp.status, await resp.text(), resp.headers.get("Retry-After")

            first = [asyncio.create_task(get("/admin/events")) for _ in range(2)]
            await until(lambda: _at_least(in_the_database, 2), "two listings in the database")
            sockets += [await raw_listing() for _ in range(listing.WAITING_LISTINGS)]
            await until(lambda: _at_least(waiting, listing.WAITING_LISTINGS),
                        "the waiting listings counted")

            # One more: busy at once, from the admin API and the inspector alike.
            status, text, retry = await asyncio.wait_for(get("/admin/events"), 5)
            assert (status, retry) == (429, str(listing.BUSY_RETRY_SECONDS)), text
            status, html, retry = await asyncio.wait_for(get("/ui/?state=failed"), 5)
            assert status == 429 and retry is not None and "Busy" in html

            # The waiting clients go away: their listings stop waiting (nothing is read).
            for writer in sockets:
                writer.close()
            await until(lambda: _at_most(waiting, 0), "the abandoned listings gone")
            late = asyncio.create_task(get("/admin/events"))
            await until(lambda: _at_least(waiting, 1), "a new listing waiting its turn")
            assert await in_the_database() == 2

            await transaction.rollback()
            for status, text, _ in await asyncio.wait_for(asyncio.gather(*first, late), 30):
                assert status == 200 and "evt_0" in text, text
    finally:
        for writer in sockets:
            writer.close()
        await holder.close()
        await watcher.close()
        await stop(running)
        await stub.stop()
        await store.close()


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


async def _at_most(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() <= n
