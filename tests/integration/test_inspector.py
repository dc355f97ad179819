"""The events inspector (/ui/ on the admin listener), in-process on a real SQLite store, reached
over real HTTP on loopback: the access rule, the login and its cookie, CSRF refusal, masking,
escaping, the filters and the paging link."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import structlog
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.http.ui import PREFIX, build_inspector
from sidecar.runtime.serve import Running, start, stop
from sidecar.runtime.wiring import build_apps
from sidecar.store.sqlite import SQLiteStore
from tests.acceptance.test_admin_access import non_loopback_address
from tests.support import (
    StubApp,
    base_config,
    post,
    serve_on_loopback,
    stripe_event,
    stripe_headers,
)

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
    form = re.search(rf'<form method="post" action="{re.escape(action)}"[^>]*>\s*'
                     r'<input type="hidden"'
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
        assert resp.headers["Referrer-Policy"] == "same-origin"
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


SECURITY = ("Content-Security-Policy", "X-Frame-Options", "Referrer-Policy",
            "X-Content-Type-Options", "Cache-Control")


async def test_an_action_on_an_id_that_url_encoding_changes_is_done(tmp_path: Path) -> None:
    """Composite ids (hubspot, zoom, adyen, lemonsqueezy) hold ':' and the like: the form's
    token is for the path as the page spells it, the request arrives decoded."""
    async with inspector(tmp_path) as ui:
        ui.stub.behaviour = failing
        event_id = "evt:1 é%"
        assert await ui.deliver(event_id) == 500
        page = "/ui/events/stripe/" + quote(event_id, safe="")
        status, html, _ = await ui.page(page)
        assert status == 200, html
        ui.stub.behaviour = _ok
        async with ui.client.post(ui.admin(page + "/redrive"), allow_redirects=False,
                                  data={"csrf": csrf_of(html, page + "/redrive")}) as resp:
            assert resp.status == 303, await resp.text()
            assert unquote(resp.headers["Location"]) == unquote(page) + "?notice=forwarded"
            # A redirect carries the security headers as a page does.
            assert all(name in resp.headers for name in SECURITY)
        assert ui.stub.attempts(event_id) == [1, 2]


async def test_without_a_token_another_sites_page_cannot_drive_the_listener(
    tmp_path: Path,
) -> None:
    """DNS rebinding (the attacker's name resolving to 127.0.0.1: a foreign Host) and
    cross-site POSTs (Sec-Fetch-Site, Origin) are refused; probes, curl and the CLI (neither
    header) are not."""
    async with inspector(tmp_path) as ui:
        ui.stub.behaviour = failing
        assert await ui.deliver("evt_rb") == 500
        page, action = "/ui/events/stripe/evt_rb", "/ui/events/stripe/evt_rb/redrive"
        assert ui.running.admin_listen is not None
        port = ui.running.admin_listen.port
        rebound = {"Host": f"attacker.example:{port}"}
        with structlog.testing.capture_logs() as logs:
            status, html, resp = await ui.page(page, headers=rebound)
            assert status == 403 and 'name="csrf"' not in html and "attacker.example" in html
            assert all(name in resp.headers for name in SECURITY)
            async with ui.client.get(ui.admin("/admin/events"), headers=rebound) as api:
                assert api.status == 403
                assert (await api.json())["reason"] == "host_not_allowed"
        assert [e["reason"] for e in logs if e["event"] in ("ui_refused", "admin_refused")] == [
            "host_not_allowed", "host_not_allowed"]
        for probe in ("/healthz", "/metrics", "/admin/openapi.json"):
            async with ui.client.get(ui.admin(probe), headers=rebound) as resp:
                assert resp.status == 200, probe
        for host in (f"localhost:{port}", "localhost", f"127.0.0.1:{port}"):
            assert (await ui.page(page, headers={"Host": host}))[0] == 200, host

        _, html, _ = await ui.page(page)
        token = csrf_of(html, action)
        foreign = ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                   {"Origin": "https://evil.example"}, {"Origin": "null"},
                   {"Origin": f"http://localhost:{port + 1}"})
        for headers in foreign:
            async with ui.client.post(ui.admin(action), data={"csrf": token}, headers=headers,
                                      allow_redirects=False) as resp:
                assert resp.status == 403, headers
            async with ui.client.post(ui.admin("/admin/events/stripe/evt_rb/release"),
                                      headers=headers, data="x=1") as resp:
                assert resp.status == 403 and (await resp.json())["reason"] == "cross_site"
        assert ui.stub.attempts("evt_rb") == [1]
        # The browser's own page posting (same origin) and curl (no Origin) are served.
        same = {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"}
        async with ui.client.post(ui.admin(action), data={"csrf": token}, headers=same,
                                  allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
        async with ui.client.post(ui.admin("/admin/events/stripe/evt_rb/release")) as resp:
            assert resp.status == 200, await resp.text()


async def test_with_a_token_any_host_is_served_but_not_a_cross_site_post(tmp_path: Path) -> None:
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        bearer = {"Authorization": f"Bearer {TOKEN}", "Host": "sidecar.internal.example"}
        assert (await ui.page("/ui/", headers=bearer))[0] == 200
        async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                  data={"token": TOKEN, "next": "/ui/"},
                                  headers={"Origin": "https://evil.example"}) as resp:
            assert resp.status == 403 and "Set-Cookie" not in resp.headers


async def test_a_proxy_in_front_does_not_make_a_remote_user_loopback(tmp_path: Path) -> None:
    """A reverse proxy on this host (or in this pod) connects from loopback on behalf of
    others: a forwarding header, or a peer in trusted_proxies, needs the token."""
    async with inspector(tmp_path) as ui:
        for header in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"},
                       {"X-Real-IP": "203.0.113.9"}, {"X-Forwarded-Proto": "https"}):
            status, html, _ = await ui.page("/ui/", headers=header)
            assert status == 403 and "Loopback only" in html, header
            async with ui.client.get(ui.admin("/admin/events"), headers=header) as resp:
                assert resp.status == 403, header
                assert (await resp.json())["reason"] == "admin_token_required"
        assert (await ui.page("/ui/"))[0] == 200
    async with inspector(tmp_path, trusted_proxies=["127.0.0.0/8"]) as ui:
        assert (await ui.page("/ui/"))[0] == 403
        async with ui.client.get(ui.admin("/admin/events")) as resp:
            assert resp.status == 403


async def test_the_session_cookie_is_secure_behind_a_trusted_tls_ingress(tmp_path: Path) -> None:
    async def cookie(ui: Inspected) -> str:
        async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                  data={"token": TOKEN, "next": "/ui/"},
                                  headers={"X-Forwarded-Proto": "https"}) as resp:
            assert resp.status == 303
            return resp.headers["Set-Cookie"]

    async with inspector(tmp_path, admin_token=TOKEN, trusted_proxies=["127.0.0.0/8"]) as ui:
        assert "Secure" in await cookie(ui)
    async with inspector(tmp_path, admin_token=TOKEN) as ui:  # anyone may send the header
        assert "Secure" not in await cookie(ui)


async def test_a_malformed_session_cookie_is_logged_out_never_an_error(tmp_path: Path) -> None:
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        for value in ("\u00b2.x", "9" * 5000 + ".x", "9999999999.\u00e9"):
            status, _, resp = await ui.page("/ui/", headers={
                "Cookie": f"sidecar_inspector={value}"})
            assert status == 303, value
            assert resp.headers["Location"].startswith("/ui/login")


async def test_query_string_secrets_are_masked_their_names_shown(tmp_path: Path) -> None:
    async with inspector(tmp_path) as ui:
        body = stripe_event("evt_q")
        status, _, _ = await post(ui.client, f"http://{ui.running.listen}{STRIPE}"
                                  "?token=SUPERSECRETQ&api_key=K3Y5ECRET&page=2", body,
                                  stripe_headers(body))
        assert status == 200
        status, html, _ = await ui.page("/ui/events/stripe/evt_q")
        assert status == 200
        assert "SUPERSECRETQ" not in html and "K3Y5ECRET" not in html
        assert f"{STRIPE}?token=••••••&amp;api_key=••••••&amp;page=2" in html


async def test_logout_and_the_bare_ui_path_redirect_with_the_security_headers(
    tmp_path: Path,
) -> None:
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        async with ui.client.post(ui.admin("/ui/login"), allow_redirects=False,
                                  data={"token": TOKEN, "next": "/ui/"}) as resp:
            assert resp.status == 303
        _, html, _ = await ui.page("/ui/")
        async with ui.client.post(ui.admin("/ui/logout"), allow_redirects=False,
                                  data={"csrf": csrf_of(html, "/ui/logout")}) as resp:
            assert resp.status == 303 and resp.headers["Location"].startswith("/ui/login")
            assert all(name in resp.headers for name in SECURITY)
        status, _, resp = await ui.page("/ui")
        assert status == 308 and all(name in resp.headers for name in SECURITY)


async def test_aiohttps_own_404_and_405_under_ui_carry_the_security_headers(
    tmp_path: Path,
) -> None:
    """The headers are added by the inspector's middleware, so they reach the answers no
    handler writes as well; the admin app outside ``/ui/`` is not the inspector."""
    async with inspector(tmp_path, admin_token=TOKEN) as ui:
        for method, path, status in (("GET", "/ui/nope", 404), ("GET", "/ui/overview/", 404),
                                     ("GET", "/ui/logout", 405), ("PUT", "/ui/", 405)):
            async with ui.client.request(method, ui.admin(path), allow_redirects=False) as resp:
                assert resp.status == status, (method, path)
                assert all(name in resp.headers for name in SECURITY), (method, path)
        async with ui.client.get(ui.admin("/uix")) as resp:
            assert resp.status == 404 and "Content-Security-Policy" not in resp.headers


async def test_a_route_missing_from_the_access_table_is_refused_never_open(
    tmp_path: Path,
) -> None:
    """A handler added to the sub-app without its line in ``app.ROUTES`` is taken as an action
    (the rules fail closed): without a session a GET goes to the login form; with the token, the
    form's CSRF token is missing. The handler never runs."""
    ran: list[str] = []

    async def unlisted(_: web.Request) -> web.StreamResponse:
        ran.append("unlisted")
        return web.Response(text="open to all")

    config = base_config("http://127.0.0.1:9", f"sqlite:///{tmp_path / 'events.db'}",
                         admin_token=TOKEN)
    inspector_app = build_inspector(build_apps(parse_config(config, env={})).proxy)
    inspector_app.router.add_get("/unlisted", unlisted)
    admin = web.Application()
    admin.add_subapp(PREFIX, inspector_app)
    runner, port = await serve_on_loopback(admin)
    try:
        async with aiohttp.ClientSession() as client:
            url = f"http://127.0.0.1:{port}/ui/unlisted"
            async with client.get(url, allow_redirects=False) as resp:
                assert resp.status == 303 and resp.headers["Location"].startswith("/ui/login")
            async with client.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
                assert resp.status == 403 and "Nothing was done" in await resp.text()
    finally:
        await runner.cleanup()
    assert ran == []


async def test_the_overview_pauses_and_resumes_a_provider_with_its_form(tmp_path: Path) -> None:
    """The overview shows each provider's hold and a form to change it, CSRF-protected; a
    paused forward-mode provider is answered 503 until resumed; GitHub (no retries) needs the
    form's force box."""
    async with inspector(tmp_path) as ui:
        status, html, _ = await ui.page("/ui/overview")
        assert status == 200 and "delivering" in html
        pause = "/ui/providers/stripe/pause"
        token = csrf_of(html, pause)
        async with ui.client.post(ui.admin(pause), allow_redirects=False,
                                  data={"reason": "app deploy"}) as resp:
            assert resp.status == 403, "no CSRF token: refused, nothing done"
        async with ui.client.post(ui.admin(pause), allow_redirects=False,
                                  data={"csrf": token, "reason": "app deploy"}) as resp:
            assert resp.status == 303 and resp.headers["Location"].endswith("notice=paused")
        status, html, _ = await ui.page("/ui/overview?notice=paused")
        assert "<strong>Paused</strong>" in html and "app deploy" in html
        assert "every replica stops delivering" in html

        tries = iter(range(1000))

        async def until_answered(wanted: int) -> str:
            """A new event per try until one is answered ``wanted`` (within 2 s): its id."""
            deadline = asyncio.get_running_loop().time() + 2
            while True:
                event_id = f"evt_try_{next(tries)}"
                if (code := await ui.deliver(event_id)) == wanted:
                    return event_id
                assert asyncio.get_running_loop().time() < deadline, code
                await asyncio.sleep(0.05)  # polling the proxy, bounded by the deadline

        held = await until_answered(503)  # obeyed within a second
        assert ui.stub.count(held) == 0

        github = "/ui/providers/github/pause"
        assert "it does not retry" in html
        async with ui.client.post(ui.admin(github), allow_redirects=False,
                                  data={"csrf": csrf_of(html, github)}) as resp:
            assert resp.status == 409 and "does not retry" in await resp.text()

        resume = "/ui/providers/stripe/resume"
        async with ui.client.post(ui.admin(resume), allow_redirects=False,
                                  data={"csrf": csrf_of(html, resume)}) as resp:
            assert resp.status == 303 and resp.headers["Location"].endswith("notice=resumed")
        delivered = await until_answered(200)
        assert ui.stub.count(delivered) == 1
