"""Operating fan-out per destination, end to end: real proxy processes (one on SQLite, two sharing
PostgreSQL), two real apps on loopback, the CLI as a subprocess, the admin API and the
inspector over real HTTP.

- a destination whose app failed has dead events; they are re-driven from the inspector's
  event page, the admin API (one event, and in bulk) and the CLI (one event, and in bulk with
  --dead), each reaching that app once more as attempt 2, the other destination untouched;
- the provider's event page shows each destination's timeline and links to its page, which
  links back;
- pausing one destination holds only it; resumed, it gets each held event once;
- an unknown destination is a clear error (CLI exit codes as an unknown provider's, API 404).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.acceptance.conftest import Deployment, run_cli
from tests.support import (
    ProxyProcess,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

STRIPE = "/webhooks/stripe"
OBEYED_WITHIN = 1.5  # seconds: each process reads the holds every 0.5 s
Rows = dict[tuple[str, str], tuple[str, int]]


def fan_out(config: dict[str, Any], billing_url: str) -> dict[str, Any]:
    """Stripe in queue mode with two destinations: billing (its own app) and crm (the
    top-level upstream's); one attempt each before an event is dead."""
    stripe = config["providers"]["stripe"]
    stripe["mode"] = "queue"
    stripe["queue"] = {"poll_interval": "100ms", "first_retry": "100ms",
                       "max_retry_delay": "200ms", "max_attempts": 1}
    stripe["destinations"] = [{"name": "billing", "upstream": {"url": billing_url}},
                              {"name": "crm"}]
    return config


@pytest.fixture
async def billing() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


async def failing(_: Seen) -> web.StreamResponse:
    return web.json_response({"error": "billing is down"}, status=500)


async def send(dep: Deployment, i: int, event_id: str) -> None:
    assert dep.client is not None
    body = stripe_event(event_id)
    status, _, answer = await post(dep.client, dep.url(i, STRIPE), body, stripe_headers(body))
    assert status == 200 and json.loads(answer)["accepted"] is True, answer


async def rows_until(dep: Deployment, wanted: Callable[[Rows], bool],
                     timeout: float = 10.0) -> Rows:
    """The event rows, (provider, event_id) -> (state, attempt), once ``wanted`` holds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = {(r["provider"], r["event_id"]): (r["state"], r["attempt"])
                for r in await dep.rows.all()}
        if wanted(rows):
            return rows
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"within {timeout:g} s the rows were {rows}")
        await asyncio.sleep(0.05)  # polling the store, bounded by the deadline


async def api(dep: Deployment, method: str, path: str) -> tuple[int, Any]:
    assert dep.client is not None
    async with dep.client.request(method, dep.procs[0].admin_url + path) as resp:
        return resp.status, await resp.json()


async def page(dep: Deployment, path: str) -> str:
    assert dep.client is not None
    async with dep.client.get(dep.procs[0].admin_url + path) as resp:
        assert resp.status == 200, path
        return await resp.text()


def csrf_of(html: str, action: str) -> str:
    form = re.search(rf'<form method="post" action="{re.escape(action)}"[^>]*>\s*'
                     r'<input type="hidden" name="csrf" value="([0-9a-f]+)">', html)
    assert form is not None, f"no form posting to {action}"
    return form.group(1)


def section(html: str, name: str) -> str:
    """The inspector's section of one destination on a provider's event page."""
    found = re.search(rf'<section class="destination"[^>]*>\s*<h3[^>]*><a href="[^"]*">{name}'
                      r"</a>.*?</section>", html, re.DOTALL)
    assert found is not None, f"no section for {name}"
    return found.group(0)


async def test_a_dead_destination_is_re_driven_each_way_and_the_other_is_untouched(
    deployment: Deployment, billing: StubApp,
) -> None:
    dep, crm = deployment, deployment.stub
    fan_out(dep.config, billing.url)
    config = str(write_config(dep.tmp, dep.config))
    billing.behaviour = failing
    await dep.start()
    ids = [f"evt_{i}" for i in range(1, 6)]
    for i, event_id in enumerate(ids):
        await send(dep, i, event_id)
    await rows_until(dep, lambda rows: all(
        rows.get(("stripe.billing", e)) == ("dead", 1)
        and rows.get(("stripe.crm", e)) == ("done", 1) for e in ids))
    assert sorted(s.event_id for s in crm.seen) == ids
    assert sorted(s.event_id for s in billing.seen) == ids

    # Listing and showing: by the destination's name or its key.
    code, out, err = await run_cli("events", "list", "--config", config, "--provider", "stripe",
                                   "--destination", "billing", "--state", "dead", "--json")
    assert code == 0, err
    assert sorted(json.loads(line)["event_id"] for line in out.splitlines()) == ids
    code, out, err = await run_cli("events", "list", "--config", config, "--provider",
                                   "stripe.crm", "--json")
    assert code == 0 and {json.loads(line)["state"] for line in out.splitlines()} == {"done"}
    code, out, err = await run_cli("events", "show", "stripe", "evt_1", "--config", config)
    assert code == 0, err
    assert re.search(r"billing +dead \(attempt 1\): HTTP 500", out), out
    assert re.search(r"crm +done \(attempt 1\): HTTP 200", out), out
    code, out, err = await run_cli("events", "show", "stripe", "evt_1", "--destination",
                                   "billing", "--config", config, "--json")
    shown = json.loads(out)
    assert (shown["provider"], shown["state"], shown["response_status"]) == (
        "stripe.billing", "dead", 500)
    assert shown["fanned_out_from"] == {"provider": "stripe", "destination": "billing"}

    # The inspector: the provider's event page shows each destination's timeline and links to
    # its page; the destination's page links back and re-drives it.
    html = await page(dep, "/ui/events/stripe/evt_1")
    own = section(html, "billing")
    assert 'href="/ui/events/stripe.billing/evt_1"' in own and "stripe.billing" in own
    assert "state-dead" in own and '<span class="status">500</span>' in own
    assert "<strong>Attempt 1</strong>" in own
    other = section(html, "crm")
    assert "state-done" in other and '<span class="status">200</span>' in other
    assert 'href="/ui/events/stripe.crm/evt_1"' in other
    html = await page(dep, "/ui/events/stripe.billing/evt_1")
    assert '<a href="/ui/events/stripe/evt_1">stripe' in html and "billing" in html
    overview = await page(dep, "/ui/overview")
    assert "fans out to billing, crm" in overview and ">stripe.billing</a>" in overview
    assert '<option value="stripe.crm"' in await page(dep, "/ui/")

    billing.behaviour = crm.behaviour  # the billing app is back
    action = "/ui/events/stripe.billing/evt_1/redrive"
    assert dep.client is not None
    async with dep.client.post(dep.procs[0].admin_url + action, allow_redirects=False,
                               data={"csrf": csrf_of(html, action)}) as resp:
        assert resp.status == 303, await resp.text()
        assert resp.headers["Location"].endswith("?notice=requeued")
    await billing.wait_for(lambda: billing.attempts("evt_1") == [1, 2], what="evt_1 re-driven")

    # The admin API: one event, by the destination's name.
    status, done = await api(dep, "POST", "/admin/events/stripe/evt_2/redrive?destination=billing")
    assert (status, done["action"], done["provider"]) == (200, "requeued", "stripe.billing")
    await billing.wait_for(lambda: billing.attempts("evt_2") == [1, 2], what="evt_2 re-driven")

    # The CLI: one event, by the destination's key.
    code, out, err = await run_cli("events", "redrive", "stripe.billing", "evt_3",
                                   "--config", config)
    assert code == 0 and "re-queued stripe.billing:evt_3" in out, out + err
    await billing.wait_for(lambda: billing.attempts("evt_3") == [1, 2], what="evt_3 re-driven")

    # In bulk: the CLI (one of the two left), then the admin API (the other).
    code, out, err = await run_cli("events", "redrive", "stripe", "--destination", "billing",
                                   "--dead", "--limit", "1", "--config", config)
    assert code == 0, out + err
    [first] = out.split()
    assert "re-queued 1 dead stripe.billing event" in err
    status, bulk = await api(dep, "POST", "/admin/queue/stripe/redrive-dead?destination=billing")
    assert status == 200 and bulk["provider"] == "stripe.billing"
    assert sorted([first, *bulk["requeued"]]) == ["evt_4", "evt_5"]
    await billing.wait_for(lambda: all(billing.attempts(e) == [1, 2] for e in ids),
                           what="every billing event re-driven")

    rows = await rows_until(dep, lambda rows: all(
        rows.get(("stripe.billing", e)) == ("done", 2) for e in ids))
    await dep.stop()
    assert all(rows[("stripe", e)] == ("done", 1) for e in ids), "the fan-out step ran once"
    assert all(rows[("stripe.crm", e)] == ("done", 1) for e in ids)
    assert sorted(s.event_id for s in crm.seen) == ids, "crm got each event once, no more"
    assert {s.idempotency_key for s in billing.seen if s.event_id == "evt_1"} == {
        "stripe:evt_1"}
    assert len(billing.seen) == 2 * len(ids)


async def test_pausing_one_destination_holds_only_it(
    deployment: Deployment, billing: StubApp,
) -> None:
    dep, crm = deployment, deployment.stub
    fan_out(dep.config, billing.url)
    config = str(write_config(dep.tmp, dep.config))
    await dep.start()
    assert dep.client is not None

    code, out, err = await run_cli("providers", "pause", "stripe", "--destination", "billing",
                                   "--reason", "billing deploy", "--config", config)
    assert code == 0 and "paused stripe.billing" in out, out + err
    for proc in dep.procs:  # every process obeys within a second
        deadline = asyncio.get_running_loop().time() + OBEYED_WITHIN
        while True:
            async with dep.client.get(proc.admin_url + "/healthz") as resp:
                health = (await resp.json())["providers"]
            if health["stripe.billing"]["paused"]:
                break
            assert asyncio.get_running_loop().time() < deadline, health
            await asyncio.sleep(0.02)  # polling the process, bounded by the deadline
        assert not health["stripe"]["paused"] and not health["stripe.crm"]["paused"]

    ids = ["evt_held_1", "evt_held_2", "evt_held_3"]
    for i, event_id in enumerate(ids):
        await send(dep, i, event_id)
        # crm gets each before the next is sent: the fan-out and crm's workers run.
        await crm.wait_for(lambda e=event_id: crm.count(e) == 1, what=f"crm got {event_id}")
    rows = await rows_until(dep, lambda rows: all(("stripe.billing", e) in rows for e in ids))
    assert {e: rows[("stripe.billing", e)] for e in ids} == {e: ("queued", 0) for e in ids}
    assert billing.seen == [], "nothing reached the paused destination"

    code, out, err = await run_cli("providers", "status", "--json", "--config", config)
    states = {row["provider"]: row for row in map(json.loads, out.splitlines())}
    # Each provider in the config's order (the file's keys are sorted), its destinations after it.
    assert list(states) == ["github", "slack", "stripe", "stripe.billing", "stripe.crm"]
    assert states["stripe.billing"]["paused"] and not states["stripe.billing"]["delivering"]
    assert states["stripe.billing"]["pause_reason"] == "billing deploy"
    assert states["stripe.crm"]["delivering"] and states["stripe"]["delivering"]
    code, out, err = await run_cli("providers", "status", "stripe.billing", "--config", config)
    assert code == 0 and "stripe.billing (queue mode): HELD" in out, out + err

    status, resumed = await api(dep, "POST", "/admin/providers/stripe/resume?destination=billing")
    assert (status, resumed["provider"], resumed["changed"]) == (200, "stripe.billing", True)
    await billing.wait_for(lambda: all(billing.count(e) >= 1 for e in ids),
                           what="every held event delivered")
    await rows_until(dep, lambda rows: all(
        rows.get(("stripe.billing", e)) == ("done", 1) for e in ids))
    await dep.stop()
    assert all(billing.attempts(e) == [1] for e in ids), "each once, as attempt 1"
    assert all(crm.attempts(e) == [1] for e in ids)


async def test_an_unknown_destination_is_a_clear_error(tmp_path: Path) -> None:
    """Nothing reaches the store: the names are checked against the config first."""
    config_data = fan_out(base_config("http://127.0.0.1:9",
                                      f"sqlite:///{tmp_path / 'events.db'}"),
                          "http://127.0.0.1:9")
    config = str(write_config(tmp_path, config_data))
    known = "its destinations: billing, crm"
    for args in (("events", "redrive", "stripe", "--destination", "nope", "--dead"),
                 ("events", "redrive", "stripe", "evt_1", "--destination", "nope"),
                 ("events", "show", "stripe", "evt_1", "--destination", "nope"),
                 ("events", "release", "stripe", "evt_1", "--destination", "nope"),
                 ("events", "list", "--provider", "stripe", "--destination", "nope"),
                 ("events", "redrive", "stripe.nope", "--dead")):
        code, out, err = await run_cli(*args, "--config", config)
        assert code == 1 and out == "", (args, out + err)  # as an unknown provider's
        assert "no destination 'nope'" in err and known in err, (args, err)
    for command in ("pause", "resume", "status"):
        code, out, err = await run_cli("providers", command, "stripe", "--destination", "nope",
                                       "--config", config)
        assert code == 2 and out == "", (command, out + err)  # as an unknown provider's
        assert "no destination 'nope'" in err and known in err, (command, err)
    code, _, err = await run_cli("providers", "pause", "github", "--destination", "billing",
                                 "--config", config)
    assert code == 2 and "provider 'github' has no destinations" in err, err
    code, _, err = await run_cli("providers", "pause", "stripe.billing", "--destination", "crm",
                                 "--config", config)
    assert code == 2 and "names a destination already" in err, err
    code, _, err = await run_cli("events", "list", "--destination", "billing",
                                 "--config", config)
    assert code == 2 and "--destination goes with --provider" in err, err
    code, _, err = await run_cli("providers", "status", "--destination", "billing",
                                 "--config", config)
    assert code == 2 and "--destination goes with" in err, err


async def test_the_admin_api_answers_an_unknown_destination_404(
    tmp_path: Path, billing: StubApp,
) -> None:
    config_data = fan_out(base_config(billing.url, f"sqlite:///{tmp_path / 'events.db'}"),
                          billing.url)
    proc = await ProxyProcess(write_config(tmp_path, config_data)).start()
    try:
        async with aiohttp.ClientSession() as client:
            for method, path in (
                ("GET", "/admin/events?provider=stripe&destination=nope"),
                ("GET", "/admin/events/stripe/evt_1?destination=nope"),
                ("POST", "/admin/events/stripe/evt_1/release?destination=nope"),
                ("POST", "/admin/events/stripe/evt_1/redrive?destination=nope"),
                ("POST", "/admin/queue/stripe/redrive-dead?destination=nope"),
                ("POST", "/admin/providers/stripe/pause?destination=nope"),
                ("POST", "/admin/providers/stripe/resume?destination=nope"),
                ("POST", "/admin/queue/stripe.nope/redrive-dead"),
            ):
                async with client.request(method, proc.admin_url + path) as resp:
                    assert resp.status == 404, path
                    error = (await resp.json())["error"]
                    assert "no destination 'nope'" in error, (path, error)
                    assert "billing, crm" in error, (path, error)
            async with client.get(proc.admin_url + "/admin/events?destination=billing") as resp:
                assert resp.status == 400
                assert "destination goes with provider" in (await resp.json())["error"]
            async with client.get(proc.admin_url + "/ui/?provider=stripe&destination=nope") as resp:
                assert resp.status == 404 and "billing, crm" in await resp.text()
    finally:
        await proc.terminate()
