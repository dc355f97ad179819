"""The events inspector (/ui/ on the admin listener), in-process on a real SQLite store, reached
over real HTTP on loopback: the access rule, the login and its cookie, CSRF refusal, masking,
escaping, the filters and the paging link."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.runtime.serve import Running, start, stop
from sidecar.store.sqlite import SQLiteStore
from tests.acceptance.test_admin_access import non_loopback_address
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers

TOKEN = "inspector-token-0123456789"
STRIPE = "/webhooks/stripe"


@contextlib.asynccontextmanager
async def inspector(tmp_path: Path, **overrides: Any) -> AsyncIterator[Inspected]:
    stub = await StubApp().start()
    config = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}", **overrides)
    config["providers"]["stripe"]["store_payload"] = True
    store = await SQLiteStore.open(str(tmp_path / "events.db"))
    running = await start(parse_config(config, env={}), store=store)
    try:
        # unsafe: keep cookies set by an IP-address host (127.0.0.1)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
            yield Inspected(running, stub, client)
    finally:
        await stop(running)
        await stub.stop()
        await store.close()


class Inspected:
    def __init__(self, running: Running, stub: StubApp, client: aiohttp.ClientSession) -> None:
        self.running, self.stub, self.client = running, stub, client

    def admin(self, path: str) -> str:
        return f"http://{self.running.admin_listen}{path}"

    async def deliver(self, event_id: str, **extra: Any) -> int:
        body = stripe_event(event_id, **extra)
        status, _, _ = await post(self.client, f"http://{self.running.listen}{STRIPE}", body,
                                  stripe_headers(body))
        return status

    async def page(self, path: str, **kwargs: Any) -> tuple[int, str, aiohttp.ClientResponse]:
        async with self.client.get(self.admin(path), allow_redirects=False, **kwargs) as resp:
            return resp.status, await resp.text(), resp


async def failing(_: Any) -> web.StreamResponse:
    return web.json_response({"error": "down"}, status=500)


def csrf_of(html: str, action: str) -> str:
    form = re.search(rf'<form method="post" action="{re.escape(action)}">\s*<input type="hidden"'
                     r' name="csrf" value="([0-9a-f]+)">', html)
    assert form is not None, f"no form posting to {action}"
    return form.group(1)


async def test_pages_carry_the_security_headers_and_reach_the_overview(tmp_path: Path) -> None:
    async with inspector(tmp_path) as ui:
        assert await ui.deliver("evt_overview") == 200
        status, html, resp = await ui.page("/ui/overview")
        assert status == 200, html
        assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["Referrer-Policy"] == "no-referrer"
        assert resp.headers["Cache-Control"] == "no-store"
        assert "since start" in html and ">stripe</a>" in html
        assert '<a class="skip" href="#content">' in html
        css_status, css, _ = await ui.page("/ui/static/inspector.css")
        assert css_status == 200 and ".skip" in css


async def test_without_a_token_only_loopback_is_served(tmp_path: Path) -> None:
    outside = non_loopback_address()
    async with inspector(tmp_path, admin_listen="0.0.0.0:0") as ui:
        port = ui.running.admin_listen.port if ui.running.admin_listen else 0
        assert (await ui.page("/ui/overview"))[0] == 200
        for method, path in (("GET", "/ui/"), ("GET", "/ui/overview"),
                             ("POST", "/ui/queue/stripe/redrive-dead")):
            async with ui.client.request(method, f"http://{outside}:{port}{path}",
                                         allow_redirects=False) as resp:
                assert resp.status == 403, path
                assert "Loopback only" in await resp.text()
        # Without a token there is nothing to log in to.
        status, _, resp = await ui.page("/ui/login")
        assert status == 303 and resp.headers["Location"] == "/ui/"


async def test_with_a_token_the_browser_logs_in_once_and_keeps_a_derived_cookie(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        status, _, resp = await ui.page("/ui/overview")
        assert status == 303 and resp.headers["Location"].startswith("/ui/login?next=")
        async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                  data={"token": "not-the-token", "next": "/ui/"}) as resp:
            assert resp.status == 401 and "not the admin token" in await resp.text()
            assert "Set-Cookie" not in resp.headers
        with structlog.testing.capture_logs() as logs:
            async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                      data={"token": TOKEN, "next": "/ui/overview"}) as resp:
                assert resp.status == 303 and resp.headers["Location"] == "/ui/overview"
                cookie = resp.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui/" in cookie
        assert TOKEN not in cookie
        fingerprint = hashlib.sha256(TOKEN.encode()).hexdigest()[:12]
        assert [e["token"] for e in logs if e["event"] == "ui_login"] == [fingerprint]
        status, html, _ = await ui.page("/ui/overview")
        assert status == 200 and TOKEN not in html
        # A login never sends the browser to another site.
        async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                  data={"token": TOKEN, "next": "//evil.example/"}) as resp:
            assert resp.headers["Location"] == "/ui/"


async def test_without_the_cookie_a_token_configured_inspector_serves_nothing(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        assert await ui.deliver("evt_locked") == 200
        status, _, _ = await ui.page("/ui/events/stripe/evt_locked")
        assert status == 303
        ui.client.cookie_jar.update_cookies({"sidecar_inspector": "9999999999.forged"})
        status, _, _ = await ui.page("/ui/events/stripe/evt_locked")
        assert status == 303
        # Scripts may present the token as the admin API takes it.
        status, html, _ = await ui.page("/ui/events/stripe/evt_locked",
                                        headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and "evt_locked" in html


async def test_an_action_without_its_csrf_token_is_refused_and_nothing_is_done(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path) as ui:
        ui.stub.behaviour = failing
        assert await ui.deliver("evt_csrf") == 500
        action = "/ui/events/stripe/evt_csrf/redrive"
        _, html, _ = await ui.page("/ui/events/stripe/evt_csrf")
        token = csrf_of(html, action)
        with structlog.testing.capture_logs() as logs:
            for form in ({}, {"csrf": "0" * 64}, {"csrf": csrf_of(html, action.replace(
                    "redrive", "release"))}):  # another form's token does not do either
                async with ui.client.post(ui.admin(action), data=form,
                                          allow_redirects=False) as resp:
                    assert resp.status == 403, form
                    assert "Nothing was done" in await resp.text()
        assert ui.stub.attempts("evt_csrf") == [1]
        refused = [e for e in logs if e["event"] == "ui_csrf_refused"]
        assert len(refused) == 3 and refused[0]["token"] == "loopback"
        assert refused[0]["peer"] == "127.0.0.1"

        ui.stub.behaviour = _ok
        with structlog.testing.capture_logs() as logs:
            async with ui.client.post(ui.admin(action), data={"csrf": token},
                                      allow_redirects=False) as resp:
                assert resp.status == 303, await resp.text()
                assert resp.headers["Location"] == "/ui/events/stripe/evt_csrf?notice=forwarded"
        assert ui.stub.attempts("evt_csrf") == [1, 2]
        [done] = [e for e in logs if e["event"] == "ui_action"]
        assert done["action"] == "redrive" and done["token"] == "loopback"
        assert done["peer"] == "127.0.0.1" and done["attempt"] == 2
        _, html, _ = await ui.page("/ui/events/stripe/evt_csrf?notice=forwarded")
        assert "Re-driven" in html


async def _ok(_: Any) -> web.StreamResponse:
    return web.json_response({"ok": True})


async def test_signature_values_never_reach_the_page(tmp_path: Path) -> None:
    async with inspector(tmp_path) as ui:
        body = stripe_event("evt_masked", data={"api_key": "sk_live_hidden", "amount": 5})
        headers = {**stripe_headers(body), "Authorization": "Basic c2VjcmV0"}
        status, _, _ = await post(ui.client, f"http://{ui.running.listen}{STRIPE}", body,
                                  headers)
        assert status == 200
        status, html, _ = await ui.page("/ui/events/stripe/evt_masked")
        assert status == 200
        signature = headers["Stripe-Signature"]
        assert signature not in html and signature.split(",")[1] not in html
        assert "c2VjcmV0" not in html and "sk_live_hidden" not in html
        assert "Stripe-Signature" in html and "••••••" in html
        # The JSON body, pretty-printed (the amount kept), and the recorded response.
        assert '&#34;amount&#34;: 5' in html or '"amount": 5' in html
        assert "Recorded response" in html and ">200<" in html


async def test_an_event_id_with_markup_is_escaped(tmp_path: Path) -> None:
    async with inspector(tmp_path) as ui:
        hostile = "evt_<img src=x onerror=alert(1)>"
        assert await ui.deliver(hostile) == 200
        status, html, _ = await ui.page("/ui/events/stripe/evt_%3Cimg%20src=x%20onerror="
                                        "alert(1)%3E")
        assert status == 200
        assert "<img src=x" not in html and "evt_&lt;img src=x onerror=alert(1)&gt;" in html


def listed(html: str) -> set[str]:
    return set(re.findall(r'<a href="/ui/events/[^/"]+/[^"]+">([^<]+)</a>', html))


async def test_each_filter_reaches_the_listing_and_the_older_link_carries_the_cursor(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path) as ui:
        for event_id in ("evt_a1", "evt_a2", "evt_b1"):
            assert await ui.deliver(event_id) == 200
        ui.stub.behaviour = failing
        assert await ui.deliver("evt_a3_fails") == 500

        async def ids(query: str) -> set[str]:
            status, html, _ = await ui.page("/ui/?" + query)
            assert status == 200, html
            return listed(html)

        assert await ids("") == {"evt_a1", "evt_a2", "evt_b1", "evt_a3_fails"}
        assert await ids("provider=github") == set()
        assert await ids("id_prefix=evt_a") == {"evt_a1", "evt_a2", "evt_a3_fails"}
        assert await ids("state=failed") == {"evt_a3_fails"}
        assert await ids("status=5xx") == {"evt_a3_fails"}
        assert await ids("status=2xx&id_prefix=evt_b") == {"evt_b1"}
        assert await ids("since=2999-01-01T00:00:00Z") == set()
        assert await ids("until=946684800") == set()  # 2000-01-01: before them all

        # One a page: the link to older events keeps the filters and adds the cursor.
        seen: list[str] = []
        path = "/ui/?id_prefix=evt_a&limit=1"
        while path:
            status, html, _ = await ui.page(path)
            assert status == 200, html
            seen.extend(listed(html))
            older = re.search(r'<a href="([^"]+)" rel="next">', html)
            path = older.group(1).replace("&amp;", "&") if older else ""
            if path:
                assert "cursor=" in path and "id_prefix=evt_a" in path and "limit=1" in path
        assert seen == ["evt_a3_fails", "evt_a2", "evt_a1"]  # newest first, each once

        status, html, _ = await ui.page("/ui/?state=bogus")
        assert status == 400 and "state" in html
