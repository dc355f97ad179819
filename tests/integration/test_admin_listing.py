"""GET /admin/events over real HTTP on loopback (a real SQLite store, and PostgreSQL): the new
filters and the cursor, the old parameters still answered, and bad input refused with 400 and a
clear message, before the store is asked (PostgreSQL refuses what SQLite takes: a NUL, a time
beyond its range)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sidecar.config.loader import parse_config
from sidecar.core.listing import PageKey
from sidecar.core.ports import Store
from sidecar.ops import events as ops
from sidecar.runtime.wiring import build_apps
from sidecar.store.postgres import PostgresStore
from tests.integration.test_store_contract import BODY, DONE_200, FAILED_503, LEASE
from tests.unit.test_unread_secrets import data

AUTH = {"Authorization": "Bearer an-admin-token-of-some-length"}


@pytest.fixture
async def admin(store: Store) -> AsyncIterator[TestClient[Any, Any]]:
    for n in range(7):
        await store.claim("stripe", f"evt_{n}", BODY, LEASE, "o")
        await store.complete("stripe", f"evt_{n}", 1, DONE_200 if n % 2 else FAILED_503)
    apps = build_apps(parse_config(data(), env={}), store=store)
    async with TestClient(TestServer(apps.admin, host="127.0.0.1")) as client:
        yield client


async def get(client: TestClient[Any, Any], query: str) -> tuple[int, Any]:
    async with client.get("/admin/events?" + query, headers=AUTH) as resp:
        return resp.status, await resp.json()


async def test_pages_follow_the_cursor_to_the_end(admin: TestClient[Any, Any]) -> None:
    seen: list[str] = []
    status, page = await get(admin, "limit=3&status=2xx")
    while True:
        assert status == 200
        seen += [e["event_id"] for e in page["events"]]
        if page["next"] is None:
            break
        status, page = await get(admin, f"limit=3&status=2xx&cursor={page['next']}")
    assert sorted(seen) == ["evt_1", "evt_3", "evt_5"] and len(seen) == 3


async def test_the_old_parameters_still_work(admin: TestClient[Any, Any]) -> None:
    status, page = await get(admin, "provider=stripe&state=failed&limit=10")
    assert status == 200 and {e["event_id"] for e in page["events"]} == {
        "evt_0", "evt_2", "evt_4", "evt_6"}
    status, page = await get(admin, "older_than=1h")
    assert status == 200 and page == {"events": [], "next": None}
    status, page = await get(admin, "since=2000-01-01T00:00:00Z&until=4102444800&id_prefix=evt_")
    assert status == 200 and len(page["events"]) == 7


async def test_empty_fields_are_not_given(admin: TestClient[Any, Any]) -> None:
    # What an HTML form (the inspector's filters) submits for fields left blank.
    status, page = await get(admin, "provider=stripe&state=failed&status=&since=&until="
                                    "&id_prefix=&older_than=&cursor=&limit=")
    assert status == 200 and len(page["events"]) == 4, page


@pytest.mark.parametrize(("query", "message"), [
    ("limit=0", "limit must be"), ("limit=10000", "limit must be"), ("limit=x", "limit must"),
    ("state=gone", "state must be one of"), ("status=6xx", "status must be one of"),
    ("since=yesterday", "since must be ISO-8601"), ("until=nan", "until must be a finite"),
    ("older_than=soon", "older_than must be a duration"),
    ("cursor=garbage", "cursor is not one"), ("cursor=WzEsInAiXQ", "cursor is not one"),
    # Beyond what PostgreSQL represents (it answered 503 "store unavailable" for these).
    ("until=1e300", "until must be from 0001-01-01"), ("since=-1e300", "since must be from"),
    ("since=1e12", "since must be from"), ("until=10000-01-01", "until must be ISO"),
    ("cursor=" + PageKey(2**63 - 1, "stripe", "x").encode(), "cursor is not one"),
    ("cursor=" + PageKey(-(2**63), "stripe", "x").encode(), "cursor is not one"),
    # NUL, which no PostgreSQL text holds.
    ("id_prefix=a%00b", "id_prefix must not contain a NUL"),
    ("provider=st%00ripe", "provider must not contain a NUL"),
    ("cursor=" + PageKey(10**15, "stripe", "x\x00").encode(), "cursor is not one"),
    ("cursor=" + PageKey(10**15, "st\x00ripe", "x").encode(), "cursor is not one"),
])
async def test_bad_input_is_a_400_that_says_what_is_wrong(
    admin: TestClient[Any, Any], query: str, message: str
) -> None:
    status, answer = await get(admin, query)
    assert status == 400 and message in answer["error"], answer


async def test_the_far_past_is_still_a_time(admin: TestClient[Any, Any]) -> None:
    # Year 1 is within range (and older_than beyond it lists what year 1 does): nothing there.
    for query in ("until=0001-01-01T00:00:00", "older_than=999999999999999", "since=-62135596800"):
        status, page = await get(admin, query)
        assert status == 200, (query, page)
        assert len(page["events"]) == (7 if query.startswith("since") else 0), query


@pytest.mark.parametrize("path", ["/admin/events/stripe/%00", "/admin/events/st%00ripe/evt_1",
                                  "/admin/events/stripe/a%00b"])
async def test_a_key_with_a_nul_is_no_event(admin: TestClient[Any, Any], path: str) -> None:
    async with admin.get(path, headers=AUTH) as resp:
        assert resp.status == 404, await resp.text()
    async with admin.post(path + "/release", headers=AUTH) as resp:
        assert resp.status == 404, await resp.text()


@pytest.mark.postgres
async def test_at_most_two_pages_are_read_at_once(pg_store: PostgresStore, pg_dsn: str) -> None:
    await pg_store.claim("stripe", "evt_0", BODY, LEASE, "o")
    # Patient enough to wait for the lock below while the test watches.
    store = await PostgresStore.connect(pg_dsn, max_size=8, lock_timeout=30,
                                        statement_timeout=30, command_timeout=30)
    holder = await asyncpg.connect(pg_dsn)
    watcher = await asyncpg.connect(pg_dsn)

    async def in_the_database() -> int:
        # Listing statements (list_page.sql, by its first line: the text shown is cut at
        # track_activity_query_size) waiting for the table the holder locked.
        return int(await watcher.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '-- One page of the event listing%'"))

    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("LOCK TABLE webhook_event IN ACCESS EXCLUSIVE MODE")
        query = ops.query_from({}, ["stripe"])
        pages = [asyncio.create_task(ops.list_page(store, query)) for _ in range(4)]
        deadline = time.monotonic() + 10
        while await in_the_database() < 2:
            assert time.monotonic() < deadline, "two pages never reached the database"
        # For a second, the other two wait their turn outside the database.
        watched = time.monotonic() + 1
        while time.monotonic() < watched:
            assert await in_the_database() <= 2
        assert sum(page.done() for page in pages) == 0
        await transaction.rollback()
        for page in await asyncio.gather(*pages):
            assert [e["event_id"] for e in page["events"]] == ["evt_0"]
    finally:
        await holder.close()
        await watcher.close()
        await store.close()
