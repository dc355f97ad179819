"""Filters and fail-open as an operator sees them: real proxy processes on PostgreSQL, deliveries
signed by the stripe SDK, the CLI as a subprocess, the admin API and the metrics; and a
PostgreSQL that really goes away (``pg_ctl stop -m immediate``) under a provider that forwards
unclaimed, next to one that refuses."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import aiohttp
import asyncpg
import yaml

from tests.acceptance.conftest import Deployment, run_cli
from tests.pgserver import ThrowawayCluster
from tests.support import (
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

STRIPE = "/webhooks/stripe"
TOKEN = "t" * 24
FILTER = {"types": {"allow": ["invoice.*", "customer.subscription.*"],
                    "drop": ["invoice.upcoming"]}}


def counted(metrics: str, result: str) -> float:
    found = re.search(rf'^webhook_events_total{{provider="stripe",result="{result}"}} (\S+)$',
                      metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_a_dropped_stripe_event_is_answered_200_listed_and_never_reaches_the_app(
    pg_deployment: Deployment,
) -> None:
    dep = pg_deployment
    dep.config["providers"]["stripe"]["filter"] = FILTER
    dep.config["admin_token"] = TOKEN
    await dep.start(2)
    client = dep.client
    assert client is not None
    dropped = stripe_event("evt_upcoming", type="invoice.upcoming")
    kept = stripe_event("evt_paid", type="invoice.paid")

    status, headers, body = await post(client, dep.url(0, STRIPE), dropped,
                                       stripe_headers(dropped))
    assert status == 200 and headers["X-Webhook-Sidecar-Filtered"] == "true"
    assert json.loads(body) == {"filtered": True, "event_id": "evt_upcoming"}
    assert (await post(client, dep.url(0, STRIPE), kept, stripe_headers(kept)))[0] == 200
    # Redelivered to the other process, freshly signed: the same answer, from the row.
    again, again_headers, again_body = await post(client, dep.url(1, STRIPE), dropped,
                                                  stripe_headers(dropped))
    assert (again, again_body) == (200, body)
    assert again_headers["X-Webhook-Sidecar-Replay"] == "true"
    await dep.stub.wait_for(lambda: dep.stub.count("evt_paid") == 1)
    assert dep.stub.count("evt_upcoming") == 0, "a filtered event never reaches the app"

    row = await dep.rows.one("stripe", "evt_upcoming")
    assert row is not None and row["state"] == "done"

    # events list: the filter on the outcome, and the label
    config_path = str(write_config(dep.tmp, dep.config))
    code, out, err = await run_cli("events", "list", "--config", config_path, "--outcome",
                                   "filtered", "--json")
    assert code == 0, err
    assert [(r["event_id"], r["state"], r["outcome"]) for r in map(json.loads,
                                                                   out.splitlines())] == [
        ("evt_upcoming", "done", "filtered")]
    code, out, err = await run_cli("events", "list", "--config", config_path)
    assert code == 0, err
    [line] = [line for line in out.splitlines() if "evt_upcoming" in line]
    assert line.split()[-1] == "filtered"
    code, out, err = await run_cli("events", "show", "--config", config_path, "stripe",
                                   "evt_upcoming")
    assert code == 0, err
    assert "outcome     filtered: HTTP 200" in out

    # the admin API
    auth = {"Authorization": "Bearer " + TOKEN}
    admin = dep.procs[0].admin_url
    async with client.get(admin + "/admin/events?outcome=filtered", headers=auth) as resp:
        listed = (await resp.json())["events"]
    assert [(e["event_id"], e["outcome"]) for e in listed] == [("evt_upcoming", "filtered")]
    async with client.get(admin + "/admin/events?outcome=nope", headers=auth) as resp:
        assert resp.status == 400
    async with client.get(admin + "/admin/events/stripe/evt_upcoming", headers=auth) as resp:
        shown = await resp.json()
    assert [(a["outcome"], a["status"], a["state"]) for a in shown["attempts"]] == [
        ("filtered", 200, "done")]

    # counted, by the process that answered each
    totals = {"filtered": 0.0, "duplicate": 0.0}
    for proc in dep.procs:
        async with client.get(proc.admin_url + "/metrics") as resp:
            text = await resp.text()
        for result in totals:
            totals[result] += counted(text, result)
    assert totals == {"filtered": 1, "duplicate": 1}


async def test_concurrent_copies_of_a_dropped_event_over_two_processes_record_it_once(
    pg_deployment: Deployment,
) -> None:
    dep = pg_deployment
    dep.config["providers"]["stripe"]["filter"] = FILTER
    await dep.start(2)
    client = dep.client
    assert client is not None
    body = stripe_event("evt_burst", type="charge.succeeded")
    results = await asyncio.gather(*(
        post(client, dep.url(i, STRIPE), body, stripe_headers(body)) for i in range(40)))
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 409}, sorted(set(statuses))
    assert statuses.count(200) >= 1
    first = [h for status, h, _ in results
             if status == 200 and "X-Webhook-Sidecar-Replay" not in h]
    assert len(first) == 1, "one delivery dropped it; the others were answered from its row"
    assert dep.stub.count() == 0
    conn = await asyncpg.connect(dep.store_url)  # plain SQL, not the store adapter
    try:
        event = await conn.fetch("SELECT state, outcome, response_status FROM webhook_event"
                                 " WHERE provider = 'stripe' AND event_id = 'evt_burst'")
        attempts = await conn.fetch("SELECT outcome, state FROM webhook_attempt"
                                    " WHERE provider = 'stripe' AND event_id = 'evt_burst'")
    finally:
        await conn.close()
    assert [tuple(r) for r in event] == [("done", "filtered", 200)]
    assert [tuple(r) for r in attempts] == [("filtered", "done")]


async def test_check_config_names_bad_filters_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("""\
upstream:
  url: http://127.0.0.1:3000
providers:
  svix:
    path: /webhooks/svix
    preset: svix
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
    filter:
      types:
        drop: [message.*]
  stripe:
    path: /webhooks/stripe
    preset: stripe
    secrets: [whsec_x]
    filter:
      when:
        - path: $.livemode
          matches: true
  github:
    path: /webhooks/github
    preset: github
    secrets: [s]
    filter:
      types:
        allow: ["pull_request", "pu[sh"]
  paddle:
    path: /webhooks/paddle
    preset: paddle
    secrets: [pdl_ntfset_x]
    mode: queue
    store_outage: forward
  linear:
    path: /webhooks/linear
    preset: linear
    secrets: [s]
    filter: {}
""")
    code, out, err = await run_cli("check-config", "--config", str(path))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines[:-1]] == [
        [f"{path}:9:7", "providers.svix.filter.types"],
        [f"{path}:18:11", "providers.stripe.filter.when[0].matches"],
        [f"{path}:25:33", "providers.github.filter.types.allow[1]"],
        [f"{path}:31:5", "providers.paddle.store_outage"],
        [f"{path}:36:5", "providers.linear.filter"],
    ]
    assert "preset svix declares no event type" in lines[0]
    assert "unknown key" in lines[1] and "equals, in, exists" in lines[1]
    assert "is not closed" in lines[2]
    assert "forward is for forward mode" in lines[3]
    assert "an empty filter drops nothing" in lines[4]
    assert lines[-1] == f"5 problems in {path}"


# -- store_outage ------------------------------------------------------------------------------

async def test_with_the_store_gone_forward_sends_unclaimed_and_refuse_answers_503(
    own_cluster: ThrowawayCluster, tmp_path: Path
) -> None:
    stub = await StubApp().start()
    config = base_config(stub.url, own_cluster.dsn)
    stripe = config["providers"]["stripe"]
    config["providers"]["open"] = {**stripe, "path": "/webhooks/open",
                                   "store_outage": "forward"}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    code, _, err = await run_cli("migrate", "--config", str(config_path))
    assert code == 0, err
    proc = await ProxyProcess(config_path).start()
    try:
        async with aiohttp.ClientSession() as client:
            before = stripe_event("evt_before")
            assert (await post(client, proc.url + "/webhooks/open", before,
                               stripe_headers(before)))[0] == 200
            assert stub.seen[-1].headers.get("X-Webhook-Sidecar-Unclaimed") is None

            await asyncio.to_thread(own_cluster.stop, "immediate")
            during = stripe_event("evt_during")
            # The default: refused, nothing reaches the app.
            status, headers, _ = await post(client, proc.url + STRIPE, during,
                                            stripe_headers(during))
            assert status == 503 and headers["Retry-After"] == "5"
            assert stub.count("evt_during") == 0
            # store_outage: forward: forwarded unclaimed, the app's answer relayed, each time.
            for expected in (1, 2):
                status, headers, _ = await post(client, proc.url + "/webhooks/open", during,
                                                stripe_headers(during))
                assert status == 200 and headers["X-Webhook-Sidecar-Unclaimed"] == "true"
                assert stub.count("evt_during") == expected, "no dedupe during the outage"
            seen = stub.seen[-1]
            assert seen.headers["X-Webhook-Sidecar-Unclaimed"] == "true"
            assert seen.headers["X-Webhook-Sidecar-Event-Id"] == "evt_during"
            assert "X-Webhook-Sidecar-Attempt" not in seen.headers
            # A bad signature is still refused: only verified deliveries go on.
            status, _, _ = await post(client, proc.url + "/webhooks/open", during,
                                      stripe_headers(during, secret="whsec_wrong"))
            assert status == 401 and stub.count("evt_during") == 2

            logged = await proc.wait_for_log("unclaimed_forward")
            assert logged["provider"] == "open" and logged["event_ids"] == ["evt_during"]
            async with client.get(proc.admin_url + "/metrics") as resp:
                metrics = await resp.text()
            assert 'webhook_unclaimed_forwards_total{provider="open"} 2.0' in metrics
            assert 'webhook_events_total{provider="open",result="unclaimed"} 2.0' in metrics
            assert 'webhook_events_total{provider="stripe",result="store_error"} 1.0' in metrics
    finally:
        await proc.terminate()
        await stub.stop()
