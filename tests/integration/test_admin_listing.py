"""GET /admin/events over real HTTP on loopback (a real SQLite store): the new filters and the
cursor, the old parameters still answered, and bad input refused with 400 and a clear message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sidecar.config.loader import parse_config
from sidecar.runtime.wiring import build_apps
from sidecar.store.sqlite import SQLiteStore
from tests.integration.test_store_contract import BODY, DONE_200, FAILED_503, LEASE
from tests.unit.test_unread_secrets import data

AUTH = {"Authorization": "Bearer an-admin-token-of-some-length"}


@pytest.fixture
async def admin(sqlite_store: SQLiteStore) -> AsyncIterator[TestClient[Any, Any]]:
    for n in range(7):
        await sqlite_store.claim("stripe", f"evt_{n}", BODY, LEASE, "o")
        await sqlite_store.complete("stripe", f"evt_{n}", 1, DONE_200 if n % 2 else FAILED_503)
    apps = build_apps(parse_config(data(), env={}), store=sqlite_store)
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
])
async def test_bad_input_is_a_400_that_says_what_is_wrong(
    admin: TestClient[Any, Any], query: str, message: str
) -> None:
    status, answer = await get(admin, query)
    assert status == 400 and message in answer["error"], answer
