"""GET /admin/events over real HTTP on loopback (a real SQLite store, and PostgreSQL): the new
filters and the cursor, the old parameters still answered, and bad input refused with 400 and a
clear message, before the store is asked (PostgreSQL refuses what SQLite takes: a NUL, a time
beyond its range)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sidecar.config.loader import parse_config
from sidecar.core.events import PageKey
from sidecar.core.ports import Store
from sidecar.runtime.wiring import build_apps
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
