"""One proxy in front of several apps: each provider's ``upstream`` block sends its deliveries to
its own app — forwards, queue deliveries, take-overs and re-drives (CLI and admin API) — signed
with its upstream's secrets, checked by the ``standardwebhooks`` library an app would use. Real
proxy processes, three real apps on loopback: ``orders`` (Stripe's own upstream, its own
signing secret), ``repos`` (GitHub's own URL, every other key inherited) and the top-level
upstream, which no delivery here may reach."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.acceptance.conftest import Deployment, deploy, run_cli
from tests.acceptance.test_forward_auth import new_secret, python_verifies
from tests.acceptance.test_operations import metric_samples
from tests.support import (
    GITHUB_SECRET,
    ProxyProcess,
    Seen,
    StubApp,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

STRIPE = "/webhooks/stripe"
GITHUB = "/webhooks/github"
ORDERS_SIGNING = new_secret()  # Stripe's upstream signs with its own secret...
TOP_SIGNING = new_secret()  # ...GitHub's inherits the top level's


def github_headers(body: bytes, delivery: str) -> dict[str, str]:
    """GitHub's scheme as its docs give it: HMAC-SHA256 of the body, hex, ``sha256=``."""
    digest = hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": "push", "Content-Type": "application/json"}


def github_event(delivery: str) -> bytes:
    return f'{{"ref": "refs/heads/main", "after": "{delivery}"}}'.encode()


@dataclass
class Apps:
    dep: Deployment  # dep.stub: the top-level upstream
    orders: StubApp
    repos: StubApp

    async def stripe(self, event_id: str, proc: int = 0) -> int:
        assert self.dep.client is not None
        body = stripe_event(event_id)
        status, _, _ = await post(self.dep.client, self.dep.url(proc, STRIPE), body,
                                  stripe_headers(body))
        return status

    async def github(self, delivery: str, proc: int = 0) -> int:
        assert self.dep.client is not None
        body = github_event(delivery)
        status, _, _ = await post(self.dep.client, self.dep.url(proc, GITHUB), body,
                                  github_headers(body, delivery))
        return status


def per_provider(config: dict[str, Any], orders: StubApp, repos: StubApp) -> None:
    """Stripe to ``orders`` with its own signing secret and timeout; GitHub to ``repos`` with
    only its URL given; Slack dropped (it would use the top level)."""
    config["upstream"]["signing_secrets"] = [TOP_SIGNING]
    config["providers"]["stripe"]["upstream"] = {
        "url": orders.url, "timeout": "3s", "signing_secrets": [ORDERS_SIGNING]}
    config["providers"]["github"]["upstream"] = {"url": repos.url}
    del config["providers"]["slack"]


@contextlib.asynccontextmanager
async def apps(kind: str, tmp_path: Path, admin_dsn: str | None = None, *,
               repos: StubApp | None = None) -> AsyncIterator[Apps]:
    orders = await StubApp().start()
    repos = repos or await StubApp().start()
    try:
        async with deploy(kind, tmp_path, admin_dsn) as dep:
            per_provider(dep.config, orders, repos)
            yield Apps(dep, orders, repos)
    finally:
        await orders.stop()
        await repos.stop()


async def delivery_line(proc: ProxyProcess, event: str, event_id: str,
                        timeout: float = 10.0) -> dict[str, Any]:
    """The log line ``event`` of ``event_id`` (written once the answer is out)."""
    async def find() -> dict[str, Any]:
        while True:
            for entry in proc.logs:
                if entry.get("event") == event and entry.get("event_id") == event_id:
                    return entry
            await asyncio.sleep(0.01)  # polling our own log buffer, bounded below
    return await asyncio.wait_for(find(), timeout)


async def test_each_provider_reaches_its_own_app_signed_with_its_upstreams_secret(
        deployment: Deployment) -> None:
    orders, repos = await StubApp().start(), await StubApp().start()
    try:
        per_provider(deployment.config, orders, repos)
        await deployment.start()
        world = Apps(deployment, orders, repos)
        assert await world.stripe("evt_1") == 200
        assert await world.github("delivery-1") == 200
        assert await world.stripe("evt_1", proc=1) == 200  # a duplicate: replayed, no forward

        assert [s.event_id for s in orders.seen] == ["evt_1"]
        assert [s.event_id for s in repos.seen] == ["delivery-1"]
        assert deployment.stub.seen == []  # the top-level upstream: nobody's
        [to_orders], [to_repos] = orders.seen, repos.seen
        assert python_verifies(ORDERS_SIGNING, to_orders)
        assert not python_verifies(TOP_SIGNING, to_orders)
        assert python_verifies(TOP_SIGNING, to_repos)  # inherited from the top level

        proc = deployment.procs[0]
        assert (await delivery_line(proc, "delivery", "evt_1"))["upstream"] == orders.url
        assert (await delivery_line(proc, "delivery", "delivery-1"))["upstream"] == repos.url
        assert deployment.client is not None
        samples = await metric_samples(deployment.client, proc.admin_url)
        for provider, app in (("stripe", orders), ("github", repos)):
            labels = (("provider", provider), ("upstream", app.url))
            assert samples[("webhook_upstream_latency_seconds_count", labels)] == 1
            answers = tuple(sorted((*labels, ("status_class", "2xx"))))
            assert samples[("webhook_app_answers_total", answers)] == 1
    finally:
        await orders.stop()
        await repos.stop()


async def test_queue_mode_delivers_each_providers_events_to_its_own_app(
        tmp_path: Path) -> None:
    async with apps("sqlite", tmp_path) as world:
        for key in ("stripe", "github"):
            world.dep.config["providers"][key].update({"mode": "queue", "queue": {
                "first_retry": "200ms", "max_retry_delay": "1s", "poll_interval": "100ms"}})
        await world.dep.start(1)
        for n in range(3):
            assert await world.stripe(f"evt_{n}") == 200
            assert await world.github(f"delivery-{n}") == 200
        await world.orders.wait_for(lambda: world.orders.count() == 3, what="3 at orders")
        await world.repos.wait_for(lambda: world.repos.count() == 3, what="3 at repos")
        assert {s.event_id for s in world.orders.seen} == {"evt_0", "evt_1", "evt_2"}
        assert world.dep.stub.seen == []
        assert all(python_verifies(ORDERS_SIGNING, s) for s in world.orders.seen)
        assert all(python_verifies(TOP_SIGNING, s) for s in world.repos.seen)
        line = await delivery_line(world.dep.procs[0], "queue_delivery", "delivery-0")
        assert line["upstream"] == world.repos.url


async def test_take_overs_and_redrives_go_to_the_providers_own_app(tmp_path: Path) -> None:
    async with apps("sqlite", tmp_path) as world:
        dep, orders = world.dep, world.orders
        dep.config["providers"]["stripe"]["store_payload"] = True  # so it can be re-driven
        released = asyncio.Event()

        async def app(seen: Seen) -> web.StreamResponse:
            if seen.event_id == "evt_stuck" and seen.attempt == 1:
                await released.wait()  # in flight when its proxy dies
            status = 500 if seen.attempt == 1 and seen.event_id != "evt_stuck" else 200
            return web.json_response({"attempt": seen.attempt}, status=status)

        orders.behaviour = app
        await dep.start(1)
        for event_id in ("evt_failed", "evt_cli", "evt_api"):
            assert await world.stripe(event_id) == 500

        # A failed event taken over by the provider's retry.
        assert await world.stripe("evt_failed") == 200
        # Re-drives: the CLI (its own client to the app) and the admin API.
        config = str(write_config(dep.tmp, dep.config, "redrive.yaml"))
        code, out, err = await run_cli("events", "redrive", "stripe", "evt_cli",
                                       "--config", config)
        assert code == 0, out + err
        assert dep.client is not None
        proc = dep.procs[0]
        async with dep.client.post(f"{proc.admin_url}/admin/events/stripe/evt_api/redrive") \
                as resp:
            assert resp.status == 200, await resp.text()

        # A stuck attempt: its proxy dies while the app holds it; once the lease is over, the
        # next proxy's redelivery takes it over.
        stuck = asyncio.create_task(world.stripe("evt_stuck"))
        await orders.wait_for(lambda: orders.count("evt_stuck") == 1, what="evt_stuck")
        await proc.kill()
        await asyncio.gather(stuck, return_exceptions=True)
        await dep.start(1)
        deadline = asyncio.get_running_loop().time() + 10
        while not await dep.rows.lease_expired("stripe", "evt_stuck"):
            assert asyncio.get_running_loop().time() < deadline, "the lease never ended"
            await asyncio.sleep(0.1)  # polling the database clock, bounded above
        assert await world.stripe("evt_stuck") == 200
        released.set()

        for event_id in ("evt_failed", "evt_cli", "evt_api", "evt_stuck"):
            assert orders.attempts(event_id) == [1, 2], event_id
        assert all(python_verifies(ORDERS_SIGNING, s) for s in orders.seen)
        assert dep.stub.seen == [] and world.repos.seen == []


async def test_a_provider_upstream_down_at_start_up_is_accepted_and_reached_later(
        tmp_path: Path) -> None:
    repos = StubApp(listen_later=True)  # the port is known; nothing listens yet
    async with apps("sqlite", tmp_path, repos=repos) as world:
        await world.dep.start(1)  # starts although GitHub's app refuses connections
        assert await world.github("delivery-early") in (502, 503)
        await repos.start()
        assert await world.github("delivery-early") == 200  # the provider's retry
        assert repos.attempts("delivery-early") == [2]
        assert world.dep.stub.seen == []


def check_config_file(tmp_path: Path, config: dict[str, Any]) -> tuple[str, str]:
    """The config written as YAML: its path and its text."""
    path, text = tmp_path / "config.yaml", yaml.safe_dump(config, sort_keys=False)
    path.write_text(text)
    return str(path), text


async def test_check_config_lists_the_providers_of_each_upstream(tmp_path: Path) -> None:
    secret = {"secrets": ["whsec_test"]}
    config = {
        "upstream": {"url": "http://default:3000"},
        "providers": {
            "stripe": {"path": "/s", "preset": "stripe", **secret,
                       "upstream": {"url": "http://orders:8000"}},
            "github": {"path": "/g", "preset": "github", **secret},
            "shopify": {"path": "/sh", "preset": "shopify", **secret,
                        "upstream": {"url": "http://orders:8000", "timeout": "5s"}},
        },
    }
    code, out, err = await run_cli("check-config", "--config",
                                   check_config_file(tmp_path, config)[0])
    assert code == 0, err
    assert "upstream http://orders:8000: stripe, shopify\n" in out
    assert "upstream http://default:3000: github\n" in out


async def test_a_provider_with_no_upstream_at_all_is_named_with_its_line(
        tmp_path: Path) -> None:
    secret = {"secrets": ["whsec_test"]}
    config = {"providers": {
        "stripe": {"path": "/s", "preset": "stripe", **secret,
                   "upstream": {"url": "http://orders:8000"}},
        "github": {"path": "/g", "preset": "github", **secret},
    }}
    path, text = check_config_file(tmp_path, config)
    code, out, err = await run_cli("check-config", "--config", path)
    assert code != 0, out
    # The line of the provider's key: it has no upstream block to point at.
    line = text.splitlines().index("  github:") + 1
    assert re.search(rf"^{re.escape(path)}:{line}:\d+: providers\.github\.upstream\.url: is "
                     r"required: this provider has no upstream", err, re.MULTILINE), err
    assert "stripe" not in err
