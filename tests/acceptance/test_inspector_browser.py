"""The events inspector in a real browser (headless Debian chromium, driven by Playwright)
against a real proxy process on PostgreSQL: log in, list, filter, open a dead event, re-drive
it and see its new attempt; no console error on any page; a POST without its CSRF token
refused; and, without a token, its own links served while another site's images are refused.
Screenshots of the pages go to a temporary folder, or to the folder named by
SIDECAR_SCREENSHOTS: `SIDECAR_SCREENSHOTS=docs/images scripts/test
tests/acceptance/test_inspector_browser.py` refreshes the ones docs/ and the README show."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.acceptance.conftest import Deployment, deploy
from tests.support import GITHUB_SECRET, post, stripe_event, stripe_headers

TOKEN = "browser-admin-token-0123456789"
VIEWPORT = {"width": 1280, "height": 800}


async def failing(_: Any) -> web.StreamResponse:
    return web.json_response({"error": "the app is down"}, status=500)


def github_headers(body: bytes, delivery: str) -> dict[str, str]:
    digest = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": "push", "Content-Type": "application/json"}


async def until(condition: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"within {timeout:g} s: {what}")
        await asyncio.sleep(0.1)  # polling the database, bounded by the deadline


async def test_inspect_filter_and_redrive_a_dead_event_in_a_browser(
    pg_deployment: Deployment, chromium: str, tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright

    images = Path(os.environ.get("SIDECAR_SCREENSHOTS") or tmp_path)

    dep = pg_deployment
    stripe = dep.config["providers"]["stripe"]
    stripe["mode"] = "queue"
    stripe["queue"] = {"max_attempts": 2, "first_retry": "100ms", "max_retry_delay": "200ms",
                       "poll_interval": "100ms"}
    dep.config["providers"]["github"]["store_payload"] = True
    dep.config["admin_token"] = TOKEN
    dep.stub.behaviour = failing
    await dep.start(1)
    assert dep.client is not None
    dead_id = "evt_browser_dead"
    for event_id in (dead_id, "evt_browser_other"):
        body = stripe_event(event_id)
        status, _, _ = await post(dep.client, dep.url(0, "/webhooks/stripe"), body,
                                  stripe_headers(body))
        assert status == 200  # queue mode: accepted
    body = json.dumps({"ref": "refs/heads/main", "commits": []}).encode()
    status, _, _ = await post(dep.client, dep.url(0, "/webhooks/github"), body,
                              github_headers(body, "gh-delivery-1"))
    assert status == 500  # forward mode: the app's answer

    async def dead() -> bool:
        row = await dep.rows.one("stripe", dead_id)
        return row is not None and row["state"] == "dead"

    await until(dead, 30, f"{dead_id} dead after its 2 attempts")
    admin = dep.procs[0].admin_url
    problems: list[str] = []

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium,
                                                   args=["--no-sandbox"], headless=True)
        page = await browser.new_page(viewport=VIEWPORT)
        page.on("console", lambda message: problems.append(f"console {message.type}: "
                                                           f"{message.text}")
                if message.type in ("error", "warning") else None)
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

        # Logged out: the login form, by its label; then the events list.
        await page.goto(admin + "/ui/")
        assert "/ui/login" in page.url
        await page.get_by_label("Admin token").fill(TOKEN)
        await page.get_by_role("button", name="Log in").click()
        await page.wait_for_url(admin + "/ui/")
        assert await page.get_by_role("link", name=dead_id).count() == 1
        assert await page.get_by_role("link", name="gh-delivery-1").count() == 1
        await page.screenshot(path=str(images / "inspector-events.png"))

        # Filter: stripe's dead events only.
        await page.get_by_label("Provider").select_option("stripe")
        await page.get_by_label("State").select_option("dead")
        await page.get_by_role("button", name="Filter").click()
        await page.wait_for_url("**/ui/?*state=dead*")
        assert await page.get_by_role("link", name=dead_id).count() == 1
        assert await page.get_by_role("link", name="evt_browser_other").count() == 0 or \
            await dead_other(dep)
        assert await page.get_by_role("link", name="gh-delivery-1").count() == 0

        # One event: two attempts, both answered 500; the queue entry dead.
        await page.get_by_role("link", name=dead_id).click()
        await page.wait_for_url(f"**/ui/events/stripe/{dead_id}")
        text = await page.inner_text("main")
        assert "Attempt 1" in text and "Attempt 2" in text and "dead" in text
        await page.screenshot(path=str(images / "inspector-event.png"), full_page=False)

        # A POST without the CSRF token (the session cookie sent along): refused, nothing done.
        refused = await page.request.post(admin + f"/ui/events/stripe/{dead_id}/redrive",
                                          form={}, max_redirects=0)
        assert refused.status == 403
        assert (await dep.rows.one("stripe", dead_id) or {})["state"] == "dead"

        # Re-drive it (the app is back): the new attempt appears.
        dep.stub.behaviour = _ok
        await page.get_by_role("button", name="Re-queue (re-drive)").click()
        await page.wait_for_url("**notice=requeued")
        deadline = time.monotonic() + 20
        while "Attempt 3" not in await page.inner_text("main"):
            assert time.monotonic() < deadline, "the re-driven attempt never appeared"
            await asyncio.sleep(0.2)  # polling the page, bounded by the deadline
            await page.reload()
        assert (await dep.rows.one("stripe", dead_id) or {})["state"] == "done"

        await page.get_by_role("link", name="Overview").click()
        await page.wait_for_url("**/ui/overview")
        assert await page.get_by_role("rowheader", name="stripe").count() == 1
        await page.screenshot(path=str(images / "inspector-overview.png"))
        await browser.close()

    assert problems == []
    logged = [e for e in dep.procs[0].logs if e.get("event") == "ui_action"]
    assert [(e["action"], e["token"]) for e in logged] == [
        ("redrive", hashlib.sha256(TOKEN.encode()).hexdigest()[:12])]


async def dead_other(dep: Deployment) -> bool:
    """The second stripe event died too (same failing app): then it is listed as well."""
    row = await dep.rows.one("stripe", "evt_browser_other")
    return row is not None and row["state"] == "dead"


async def _ok(_: Any) -> web.StreamResponse:
    return web.json_response({"ok": True})


async def test_without_a_token_the_inspectors_own_links_work_and_another_sites_images_do_not(
    chromium: str, tmp_path: Path,
) -> None:
    """Tokenless (loopback) inspector: typed addresses (Sec-Fetch-Site: none) and the pages'
    own links (same-origin) are served; a page on another origin whose images point at a
    listing and an event page makes the browser send requests that are refused."""
    from playwright.async_api import async_playwright

    async with deploy("sqlite", tmp_path, None) as dep:
        dep.stub.behaviour = failing
        await dep.start(1)
        assert dep.client is not None
        body = stripe_event("evt_tokenless")
        status, _, _ = await post(dep.client, dep.url(0, "/webhooks/stripe"), body,
                                  stripe_headers(body))
        assert status == 500
        admin = dep.procs[0].admin_url
        targets = [admin + "/admin/events?status=5xx&limit=500",
                   admin + "/ui/?state=failed&status=5xx", admin + "/ui/events/stripe/evt_x"]
        images = "".join(f'<img src="{target}" alt="">' for target in targets)

        async def elsewhere_page(_: web.Request) -> web.Response:
            return web.Response(text=f"<!doctype html><title>elsewhere</title>{images}",
                                content_type="text/html")

        foreign = web.Application()
        foreign.router.add_get("/", elsewhere_page)
        runner = web.AppRunner(foreign)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        elsewhere = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        try:
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=chromium,
                                                           args=["--no-sandbox"], headless=True)
                page = await browser.new_page(viewport=VIEWPORT)
                answer = await page.goto(admin + "/ui/")
                assert answer is not None and answer.status == 200
                await page.get_by_role("link", name="evt_tokenless").click()
                await page.wait_for_url("**/ui/events/stripe/evt_tokenless")
                assert "Attempt 1" in await page.inner_text("main")
                await page.get_by_role("link", name="Overview").click()
                await page.wait_for_url("**/ui/overview")
                assert await page.get_by_role("rowheader", name="stripe").count() == 1

                await page.goto(elsewhere, wait_until="load")
                await browser.close()
            refused = await dep.procs[0].wait_for_log("admin_refused")
            assert refused["reason"] == "cross_site"
            assert refused["fetch_site"] in ("cross-site", "same-site")
            await dep.procs[0].wait_for_log("ui_refused")
            reasons = {e["reason"] for e in dep.procs[0].logs
                       if e.get("event") in ("ui_refused", "admin_refused")}
            assert reasons == {"cross_site"}
        finally:
            await runner.cleanup()

