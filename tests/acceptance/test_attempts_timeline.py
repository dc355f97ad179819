"""The attempts timeline through a real proxy: each delivery that reaches the app is recorded
as an attempt, and ``events show`` (CLI, JSON, admin API) lists them in order."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from aiohttp import web

from tests.acceptance.conftest import Deployment, run_cli
from tests.support import Seen, post, stripe_event, stripe_headers, write_config

STRIPE = "/webhooks/stripe"


async def test_show_lists_each_attempt_with_the_apps_status(deployment: Deployment) -> None:
    async def fail_first(seen: Seen) -> web.StreamResponse:
        return web.json_response({}, status=500 if seen.attempt == 1 else 200)

    deployment.stub.behaviour = fail_first
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    body = stripe_event("evt_flaky")
    # The provider's first delivery meets a 500; its retry is taken over and answered 200.
    assert (await post(client, proc.url + STRIPE, body, stripe_headers(body)))[0] == 500
    assert (await post(client, proc.url + STRIPE, body, stripe_headers(body)))[0] == 200
    config_path = str(write_config(deployment.tmp, deployment.config))

    code, out, err = await run_cli("events", "show", "stripe", "evt_flaky", "--config",
                                   config_path, "--json")
    assert code == 0, err
    attempts = json.loads(out)["attempts"]
    assert [(a["attempt"], a["status"], a["outcome"], a["state"]) for a in attempts] == [
        (1, 500, "response", "failed"), (2, 200, "response", "done")]
    for a in attempts:
        # The proxy's owner id (host:pid:token), without the store's per-call token.
        assert a["owner"] is not None and a["owner"].count(":") == 2 and "#" not in a["owner"]
        assert a["finished_at"] - a["started_at"] == \
            pytest.approx(a["duration_ms"] / 1000, abs=1e-5)
        assert a["error"] is None
        assert a["started_at_iso"].endswith("Z") and a["finished_at_iso"].endswith("Z")
    assert attempts[0]["finished_at"] <= attempts[1]["started_at"] + 0.001

    code, out, err = await run_cli("events", "show", "stripe", "evt_flaky", "--config",
                                   config_path)
    assert code == 0, err
    assert "attempts    2" in out
    assert re.search(r"#1 .* HTTP 500 -> failed by ", out), out
    assert re.search(r"#2 .* HTTP 200 -> done by ", out), out

    async with client.get(proc.admin_url + "/admin/events/stripe/evt_flaky") as resp:
        assert resp.status == 200
        shown = await resp.json()
    assert [a["status"] for a in shown["attempts"]] == [500, 200]


async def test_show_of_an_event_never_tried_lists_no_attempts(deployment: Deployment) -> None:
    # The app holds the delivery while the CLI starts, which on a loaded machine takes longer
    # than the suite's 2 s upstream timeout: the attempt would end as failed before the look.
    deployment.config["upstream"]["timeout"] = "60s"
    for provider in deployment.config["providers"].values():
        provider["lease"] = "70s"  # beyond the timeout, as the config requires
    await deployment.start(1)
    client, proc = deployment.client, deployment.procs[0]
    assert client is not None
    deployment.stub.hold.clear()  # the app holds the first delivery: nothing recorded yet
    body = stripe_event("evt_held")
    task = asyncio.create_task(post(client, proc.url + STRIPE, body, stripe_headers(body)))
    try:
        await deployment.stub.wait_for(lambda: deployment.stub.count("evt_held") == 1)
        config_path = str(write_config(deployment.tmp, deployment.config))
        code, out, err = await run_cli("events", "show", "stripe", "evt_held", "--config",
                                       config_path)
        assert code == 0, err
        assert "attempts    none recorded" in out
    finally:
        deployment.stub.hold.set()
    await task  # answered once released: not our subject
