"""Every request to the inspector and the admin API gets a page (or a JSON answer), never a
500: odd query strings, stored bytes that are not UTF-8, any event id, a bug in a page. And
what they refuse from another website's page, and what they log of a read. In-process proxies
on a real store (SQLite, and PostgreSQL where the store's answer differs), over real HTTP on
loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
import structlog
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.core.ports import Store
from sidecar.http.ui import viewmodels
from sidecar.http.ui.auth import Authenticator
from sidecar.ops import listing
from sidecar.runtime.serve import start, stop
from tests.acceptance.conftest import run_cli
from tests.integration.test_inspector import TOKEN, Inspected, csrf_of, failing
from tests.support import StubApp, base_config, stripe_event, stripe_headers, write_config

STRIPE = "/webhooks/stripe"


@contextlib.asynccontextmanager
async def inspector(store: Store, **overrides: Any) -> AsyncIterator[Inspected]:
    """The proxy on ``store`` (a fixture's: it is emptied and closed there)."""
    stub = await StubApp().start()
    config = base_config(stub.url, "sqlite:///unused.db", **overrides)
    config["providers"]["stripe"]["store_payload"] = True
    running = await start(parse_config(config, env={}), store=store)
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
            yield Inspected(running, stub, client)
    finally:
        await stop(running)
        await stub.stop()


async def raw_delivery(ui: Inspected, body: bytes, extra: bytes = b"") -> int:
    """A signed stripe delivery written to the socket as bytes, ``extra`` header lines
    included as they are (aiohttp's client refuses what is not Latin-1 text)."""
    assert ui.running.listen is not None
    host, port = ui.running.listen.host, ui.running.listen.port
    signed = "".join(f"{name}: {value}\r\n" for name, value in stripe_headers(body).items())
    head = (f"POST {STRIPE} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n{signed}").encode() + extra + b"\r\n"
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + body)
        status_line = await asyncio.wait_for(reader.readline(), 10)
        return int(status_line.split()[1])
    finally:
        writer.close()
        await writer.wait_closed()


# --- notices ---------------------------------------------------------------------------------

@pytest.mark.parametrize("count", ["%C2%B2", "%D9%A1", "9" * 5000, "-1", "1e3", ""])
async def test_a_notice_whose_count_is_not_a_plain_number_is_still_a_page(
    sqlite_store: Store, count: str,
) -> None:
    async with inspector(sqlite_store) as ui:
        for path in ("/ui/", "/ui/overview", "/ui/events/stripe/nothing"):
            status, html, _ = await ui.page(f"{path}?notice=bulk&count={count}")
            assert status in (200, 404), (path, html)
            assert "Dead events re-queued: ?." in html, path
        status, html, _ = await ui.page("/ui/?notice=bulk&count=12")
        assert status == 200 and "Dead events re-queued: 12." in html
    async with inspector(sqlite_store, admin_token=TOKEN) as ui:  # the login page: no session
        status, html, _ = await ui.page(f"/ui/login?notice=bulk&count={count}")
        assert status == 200 and "Dead events re-queued: ?." in html


# --- stored bytes ----------------------------------------------------------------------------

async def test_an_event_with_bytes_that_are_not_utf8_is_shown_escaped_and_can_be_redriven(
    store: Store,
) -> None:
    async with inspector(store) as ui:
        ui.stub.behaviour = failing
        body = stripe_event("evt_latin1")
        assert await raw_delivery(ui, body, b"X-Note: caf\xe9 \xff\r\n") == 500
        # A JSON body whose text escapes a lone surrogate is JSON too.
        odd = b'{"id": "evt_surrogate", "object": "event", "note": "\\ud800 \\udce9"}'
        assert await raw_delivery(ui, odd) == 500
        status, html, _ = await ui.page("/ui/events/stripe/evt_latin1")
        assert status == 200, html
        assert "caf\\xe9 \\xff" in html
        status, html, _ = await ui.page("/ui/events/stripe/evt_surrogate")
        assert status == 200, html
        assert "\\ud800 \\xe9" in html

        ui.stub.behaviour = _ok
        action = "/ui/events/stripe/evt_latin1/redrive"
        _, html, _ = await ui.page("/ui/events/stripe/evt_latin1")
        async with ui.client.post(ui.admin(action), data={"csrf": csrf_of(html, action)},
                                  allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
        assert ui.stub.attempts("evt_latin1") == [1, 2]
        status, html, _ = await ui.page("/ui/events/stripe/evt_latin1?notice=forwarded")
        assert status == 200 and "Re-driven" in html


async def _ok(_: Any) -> web.StreamResponse:
    return web.json_response({"ok": True})


async def _text_answer(_: Any) -> web.StreamResponse:
    return web.Response(text="session=SECRET-IN-TEXT-BODY", status=500,
                        headers={"Ocp-Apim-Subscription-Key": "HEADER-KEY-VALUE"})


async def test_a_response_body_that_is_not_json_is_shown_by_size_like_a_request_body(
    sqlite_store: Store,
) -> None:
    async with inspector(sqlite_store) as ui:
        ui.stub.behaviour = _text_answer
        assert await raw_delivery(ui, stripe_event("evt_text_answer")) == 500
        status, html, _ = await ui.page("/ui/events/stripe/evt_text_answer")
        assert status == 200, html
        assert "SECRET-IN-TEXT-BODY" not in html and "HEADER-KEY-VALUE" not in html
        assert "27 bytes of text/plain" in html


# --- any event id ----------------------------------------------------------------------------

IDS = ["evt/slash", "evt%2Fencoded", "evt with spaces", "évt-ünïcode-事件", "e" * 2000, "evt..",
       "evt%FF", "evt?q=1#f", "evt\\back", "%"]


@pytest.mark.parametrize("event_id", IDS)
async def test_any_event_id_gets_a_page_or_a_clean_404(store: Store, event_id: str) -> None:
    async with inspector(store) as ui:
        delivered = await raw_delivery(ui, stripe_event(event_id))
        for known, name in ((delivered == 200, event_id), (False, event_id + "-unknown")):
            part = quote(name, safe="")
            for path in (f"/ui/events/stripe/{part}", f"/admin/events/stripe/{part}"):
                status, text, _ = await ui.page(path)
                assert status == (200 if known else 404), (path, text[:300])
            # The spellings a person might type reach a page or a clean 404 too.
            for path in (f"/ui/events/stripe/{name}", f"/admin/events/stripe/{name}"):
                async with ui.client.get(ui.admin("") + quote(path, safe="/%?#")) as resp:
                    assert resp.status < 500, (path, await resp.text())


# --- a bug is a bug --------------------------------------------------------------------------

async def test_a_bug_in_a_page_is_a_500_page_and_a_log_line_never_starting(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with inspector(sqlite_store) as ui:
        assert await raw_delivery(ui, stripe_event("evt_bug")) == 200

        def broken(_: Any) -> Any:
            raise KeyError("a page's own bug")

        monkeypatch.setattr(viewmodels, "timeline", broken)
        with structlog.testing.capture_logs() as logs:
            status, html, resp = await ui.page("/ui/events/stripe/evt_bug")
        assert status == 500 and "Starting" not in html and "went wrong" in html
        assert "Retry-After" not in resp.headers
        assert resp.headers["Content-Security-Policy"].startswith("default-src")
        [failed] = [e for e in logs if e["event"] == "ui_failed"]
        assert failed["path"] == "/ui/events/stripe/evt_bug" and failed["exc_info"]


# --- reads are logged ------------------------------------------------------------------------

async def test_reading_a_stored_payload_is_logged_with_who_and_which_event(
    sqlite_store: Store,
) -> None:
    async with inspector(sqlite_store, admin_token=TOKEN) as ui:
        assert await raw_delivery(ui, stripe_event("evt_read")) == 200
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        with structlog.testing.capture_logs() as logs:
            assert (await ui.page("/ui/events/stripe/evt_read", headers=bearer))[0] == 200
            async with ui.client.get(ui.admin("/admin/events/stripe/evt_read"),
                                     headers=bearer) as resp:
                assert resp.status == 200
            async with ui.client.get(ui.admin("/admin/events"), headers=bearer) as resp:
                assert resp.status == 200  # a listing shows no payload: not logged
        reads = [(e["event"], e["provider"], e["event_id"], e["token"], e["peer"])
                 for e in logs if e["event"] in ("ui_read", "admin_read")]
        fingerprint = Authenticator(TOKEN).fingerprint
        assert reads == [("ui_read", "stripe", "evt_read", fingerprint, "127.0.0.1"),
                         ("admin_read", "stripe", "evt_read", fingerprint, "127.0.0.1")]
        assert TOKEN not in json.dumps(logs, default=str)


# --- another site's page ---------------------------------------------------------------------

async def test_without_a_token_another_sites_page_cannot_make_the_browser_list(
    sqlite_store: Store,
) -> None:
    async with inspector(sqlite_store) as ui:
        assert await raw_delivery(ui, stripe_event("evt_site")) == 200
        paths = ("/ui/", "/ui/?state=failed&status=5xx", "/ui/overview",
                 "/ui/events/stripe/evt_site", "/admin/events?status=5xx&limit=500",
                 "/admin/events/stripe/evt_site")
        with structlog.testing.capture_logs() as logs:
            for path in paths:
                for site in ("cross-site", "same-site"):
                    status, text, _ = await ui.page(path, headers={"Sec-Fetch-Site": site})
                    assert status == 403 and "another website" in text, (path, site)
        refused = [e for e in logs if e["event"] in ("ui_refused", "admin_refused")]
        assert {e["reason"] for e in refused} == {"cross_site"}
        assert len(refused) == 2 * len(paths)
        # Typed or bookmarked (none), the inspector's own links (same-origin), curl (neither).
        for path in paths:
            for headers in ({"Sec-Fetch-Site": "none"}, {"Sec-Fetch-Site": "same-origin"}, {}):
                status, text, _ = await ui.page(path, headers=headers)
                assert status == 200, (path, headers, text[:200])
    async with inspector(sqlite_store, admin_token=TOKEN) as ui:
        # With a token, a link from elsewhere (chat, an alert) leads to the login.
        status, _, resp = await ui.page("/ui/events/stripe/evt_site",
                                        headers={"Sec-Fetch-Site": "cross-site"})
        assert status == 303 and resp.headers["Location"].startswith("/ui/login")


async def test_the_cli_logs_reading_a_stored_payload_too(sqlite_store: Store,
                                                         tmp_path: Path) -> None:
    async with inspector(sqlite_store) as ui:
        assert await raw_delivery(ui, stripe_event("evt_cli_read")) == 200
        config = base_config(ui.stub.url, f"sqlite:///{tmp_path / 'events.db'}")
        code, out, err = await run_cli("events", "show", "stripe", "evt_cli_read", "--json",
                                       "--config", str(write_config(tmp_path, config)))
    assert code == 0, err
    assert json.loads(out)["event_id"] == "evt_cli_read"
    [line] = [json.loads(text) for text in err.splitlines() if '"cli_read"' in text]
    assert (line["provider"], line["event_id"], line["payload_stored"]) == (
        "stripe", "evt_cli_read", True)
    assert line["user"] and line["host"] and line["pid"] > 0


async def test_the_page_size_placeholder_is_the_servers_default(sqlite_store: Store) -> None:
    async with inspector(sqlite_store) as ui:
        status, html, _ = await ui.page("/ui/")
        assert status == 200
        assert f'name="limit" value="" inputmode="numeric" size="4" ' \
               f'placeholder="{listing.PAGE_LIMIT}"' in html
