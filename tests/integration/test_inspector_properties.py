"""A property over every GET route of the admin listener (the inspector under /ui/ and the
admin API): whatever the query string, and whatever event id, the answer is never a 5xx. On a
real proxy (in-process, SQLite, real HTTP on loopback) holding a few stored events: a done
one, a failed one, and one whose stored request has a header byte that is not UTF-8.

Hypothesis drives the examples from a thread (it has no asyncio support); each request runs on
the proxy's event loop. Bounded: 300 examples in all, no per-example deadline (a shared CI
machine), each request within 10 s."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

from sidecar.core.listing import PageKey
from sidecar.core.ports import Store
from tests.integration.test_inspector import TOKEN, failing
from tests.integration.test_inspector_answers import inspector, raw_delivery
from tests.support import stripe_event

ROUTES = ("/ui/", "/ui/overview", "/ui/login", "/ui", "/ui/static/inspector.css",
          "/ui/events/stripe/{id}", "/ui/events/{provider}/{id}", "/admin/events",
          "/admin/events/stripe/{id}", "/admin/events/{provider}/{id}", "/healthz", "/readyz",
          "/metrics", "/admin/openapi.json", "/admin/providers")
NAMES = ("provider", "state", "status", "since", "until", "id_prefix", "limit", "cursor",
         "older_than", "notice", "count", "next", "force")
KNOWN = ("evt_done", "evt_failed", "evt_latin1")
# Values a person or a script might send, and their near misses.
VALUES = st.one_of(
    st.sampled_from(["stripe", "github", "failed", "dead", "queued", "5xx", "none", "2xx",
                     "bulk", "requeued", "logged_out", "1", "0", "500", "501", "-1", "1e3",
                     "NaN", "inf", "10m", "1h", "²", "٣", "9" * 400, "2026-11-30T13:56:01Z",
                     "2026-13-45", "0001-01-01", "10000-01-01", "/ui/..", "//evil.example",
                     PageKey(10**15, "stripe", "evt_done").encode(), "\x00", "\ud800", ""]),
    st.text(max_size=40),
)
# Digits int() refuses ('²', '٣'), more than int() takes (4300), and text.
COUNTS = st.one_of(st.sampled_from(["²", "٣", "12", "9" * 5000, "-1", ""]), st.text(max_size=6))
IDS = st.one_of(st.sampled_from(KNOWN), st.text(min_size=1, max_size=60))


def encoded(text: str) -> str:
    """Percent-encoded as a browser or a script would send it (undecodable text as bytes)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@st.composite
def requests(draw: st.DrawFn) -> str:
    """A GET target: a route, its path parameters, and a query string, well-formed or not."""
    path = draw(st.sampled_from(ROUTES)).format(
        id=encoded(draw(IDS)), provider=encoded(draw(st.sampled_from(["stripe", "github",
                                                                        "nope", "%", ""]))))
    pairs = draw(st.lists(st.tuples(st.one_of(st.sampled_from(NAMES), st.text(max_size=10)),
                                    VALUES), max_size=6))
    if draw(st.booleans()):  # what an action's redirect adds: every page renders it
        pairs.append(("notice", draw(st.sampled_from(["bulk", "requeued", "x"]))))
        pairs.append(("count", draw(COUNTS)))
    query = "&".join(f"{encoded(name)}={encoded(value)}" for name, value in pairs)
    raw = draw(st.sampled_from(["", "&", "&&=", "&=x", "&a", "&%", "&%zz", "&count=%B2"]))
    return f"{path}?{query}{raw}" if query or raw else path


@pytest.mark.parametrize(("token", "examples"), [(None, 200), (TOKEN, 100)])
async def test_no_query_string_or_event_id_makes_a_get_route_fail(
    sqlite_store: Store, token: str | None, examples: int,
) -> None:
    overrides: dict[str, Any] = {} if token is None else {"admin_token": token}
    async with inspector(sqlite_store, **overrides) as ui:
        assert await raw_delivery(ui, stripe_event("evt_done")) == 200
        assert await raw_delivery(ui, stripe_event("evt_latin1"), b"X-Note: caf\xe9\r\n") == 200
        ui.stub.behaviour = failing
        assert await raw_delivery(ui, stripe_event("evt_failed")) == 500
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        loop = asyncio.get_running_loop()

        async def status(target: str) -> tuple[int, str]:
            url = URL(ui.admin(target), encoded=True)
            async with ui.client.get(url, headers=headers, allow_redirects=False) as resp:
                return resp.status, (await resp.read()).decode("utf-8", "replace")[:300]

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(requests())
        def never_a_5xx(target: str) -> None:
            answered, text = asyncio.run_coroutine_threadsafe(status(target), loop).result(10)
            assert answered < 500, (target, answered, text)

        await asyncio.to_thread(never_a_5xx)


def test_the_routes_are_every_get_route(tmp_path: Any) -> None:
    """A new GET route joins the property (or is named here as left out)."""
    from aiohttp import web

    from sidecar.config.loader import parse_config
    from sidecar.runtime.wiring import build_apps
    from tests.support import base_config

    apps = build_apps(parse_config(base_config("http://127.0.0.1:9",
                                               f"sqlite:///{tmp_path / 'x.db'}"), env={}),
                      store=None)
    served = {route.resource.canonical for route in apps.admin.router.routes()
              if route.method == "GET" and route.resource is not None}
    tested = {path.replace("stripe", "{provider}").replace("{id}", "{event_id}")
              for path in ROUTES}
    assert served - tested == {"/ui/static/{name}"}, served - tested
    assert isinstance(apps.admin, web.Application)
