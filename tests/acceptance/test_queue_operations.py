"""Operating queue mode: listing and showing queued and dead events, re-driving dead ones one by
one or in bulk, from the CLI (a subprocess) and the admin API (a real proxy process), on SQLite
and PostgreSQL. Queued and dead rows are put in place through the store's own verbs, as a
delivery worker leaves them; the running proxies' workers then deliver what is re-queued."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

from sidecar.core.events import (
    AttemptResult,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.core.ports import Store
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore
from tests.acceptance.conftest import Deployment, run_cli
from tests.support import stripe_event, stripe_headers, write_config

STRIPE = "/webhooks/stripe"
TOKEN = "q" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def queue_mode(dep: Deployment) -> str:
    """Stripe in queue mode (GitHub stays in forward mode); returns the config file's path."""
    dep.config["providers"]["stripe"]["mode"] = "queue"
    dep.config["providers"]["stripe"]["queue"] = {"poll_interval": "200ms"}
    dep.config["admin_token"] = TOKEN
    return str(write_config(dep.tmp, dep.config))


@contextlib.asynccontextmanager
async def real_store(dep: Deployment) -> AsyncIterator[Store]:
    store: Store
    if dep.store_url.startswith("sqlite:"):
        store = await SQLiteStore.open(dep.store_url[len("sqlite:///"):])
    else:
        store = await PostgresStore.connect(dep.store_url, min_size=1, max_size=2)
    try:
        yield store
    finally:
        await store.close()


def failure(status: int) -> AttemptResult:
    response = RecordedResponse(status, (("Content-Type", "text/plain"),), b"not now")
    return AttemptResult(EventState.FAILED, Outcome.RESPONSE, response, 12.0)


async def accept(store: Store, event_id: str, order_key: str | None = None) -> None:
    """What the proxy does with a verified delivery in queue mode."""
    body = stripe_event(event_id)
    request = StoredRequest("POST", STRIPE, tuple(stripe_headers(body).items()), body)
    accepted = await store.enqueue("stripe", event_id, hashlib.sha256(body).digest(), request,
                                   order_key=order_key)
    assert accepted.accepted


async def tried(store: Store, event_id: str, settlement: Settlement) -> None:
    """One delivery worker's try of ``event_id`` (the only due entry), ended as ``settlement``
    says."""
    taken = await store.take_queued("stripe", 1, 30.0, "test-worker")
    assert [(w.event_id, w.attempt) for w in taken] == [(event_id, 1)]
    assert await store.settle_queued("stripe", event_id, taken[0].tries, settlement)


async def dead(store: Store, event_id: str, order_key: str | None = None) -> None:
    await accept(store, event_id, order_key)
    await tried(store, event_id, Settlement(EventState.DEAD, failure(500), error="HTTP 500"))


async def waiting(store: Store, event_id: str) -> None:
    """Tried once (the app answered 503) and due again in an hour."""
    await accept(store, event_id)
    await tried(store, event_id, Settlement(EventState.QUEUED, failure(503), retry_in=3600.0,
                                            error="HTTP 503"))


async def cli_json(*args: str) -> Any:
    code, out, err = await run_cli(*args)
    assert code == 0, out + err
    return [json.loads(line) for line in out.splitlines()] if "list" in args else json.loads(out)


async def test_list_and_show_queued_and_dead_events(deployment: Deployment) -> None:
    config = queue_mode(deployment)
    async with real_store(deployment) as store:
        await dead(store, "evt_dead", order_key="cus_1")
        await waiting(store, "evt_waiting")
        await accept(store, "evt_new")
        body = b'{"forward": "mode"}'
        claim = await store.claim("github", "gh_done", hashlib.sha256(body).digest(), 30.0, "t")
        assert claim.won
        assert await store.complete("github", "gh_done", 1, AttemptResult(
            EventState.DONE, Outcome.RESPONSE, RecordedResponse(200, (), b"ok"), 5.0))

    listed = await cli_json("events", "list", "--config", config, "--state", "dead", "--json")
    assert [(e["event_id"], e["state"], e["attempt"], e["response_status"])
            for e in listed] == [("evt_dead", "dead", 1, 500)]
    listed = await cli_json("events", "list", "--config", config, "--state", "queued", "--json")
    assert {(e["event_id"], e["attempt"]) for e in listed} == {("evt_waiting", 1), ("evt_new", 0)}
    code, _, err = await run_cli("events", "list", "--config", config, "--state", "gone")
    assert code == 2 and "dead" in err and "queued" in err

    shown = await cli_json("events", "show", "stripe", "evt_dead", "--config", config, "--json")
    assert (shown["state"], shown["attempt"], shown["response_status"]) == ("dead", 1, 500)
    assert shown["payload_stored"] is True  # queue mode keeps the request it delivers
    queue = shown["queue"]
    assert (queue["dead"], queue["due_at"], queue["due_at_iso"], queue["tries"]) == (
        True, None, None, 1)
    assert (queue["order_key"], queue["last_error"]) == ("cus_1", "HTTP 500")
    assert queue["queued_at_iso"].endswith("Z") and queue["queued_at"] <= shown["updated_at"]

    shown = await cli_json("events", "show", "stripe", "evt_waiting", "--config", config,
                           "--json")
    queue = shown["queue"]
    assert (shown["state"], queue["dead"], queue["tries"], queue["last_error"]) == (
        "queued", False, 1, "HTTP 503")
    assert 3500 < queue["due_in_seconds"] <= 3600 and queue["due_at_iso"].endswith("Z")

    shown = await cli_json("events", "show", "stripe", "evt_new", "--config", config, "--json")
    queue = shown["queue"]
    assert (shown["state"], shown["attempt"], queue["tries"], queue["order_key"]) == (
        "queued", 0, 0, None)
    assert queue["due_in_seconds"] <= 0.5  # due at once

    shown = await cli_json("events", "show", "github", "gh_done", "--config", config, "--json")
    assert (shown["state"], shown["queue"]) == ("done", None)  # forward mode: no queue entry

    code, out, err = await run_cli("events", "show", "stripe", "evt_dead", "--config", config)
    assert code == 0, err
    assert "state       dead (attempt 1)" in out
    assert "queue       dead: no more tries until re-driven" in out
    assert "order key   cus_1" in out and "last error  HTTP 500" in out
    code, out, err = await run_cli("events", "show", "stripe", "evt_waiting", "--config", config)
    assert code == 0, err
    assert "queue       due " in out and "taken 1 time" in out

    # A queued event belongs to the workers: release refuses it, naming why.
    code, out, err = await run_cli("events", "release", "stripe", "evt_dead", "--config", config)
    assert code == 1 and "queue" in err and "redrive" in err, out + err


async def test_cli_redrives_a_dead_event_and_a_running_proxy_delivers_it(
        deployment: Deployment) -> None:
    config = queue_mode(deployment)
    async with real_store(deployment) as store:
        await dead(store, "evt_dead")
        await waiting(store, "evt_waiting")

    code, out, err = await run_cli("events", "redrive", "stripe", "evt_waiting",
                                   "--config", config)
    assert code == 1 and "is queued" in err, out + err
    code, out, err = await run_cli("events", "redrive", "stripe", "evt_nope", "--config", config)
    assert code == 1 and "no event stripe:evt_nope" in err, out + err

    # Under a config where the provider forwards, its queue is not delivered: refused.
    stripe = {k: v for k, v in deployment.config["providers"]["stripe"].items()
              if k not in ("mode", "queue")}
    forward = dict(deployment.config, providers={**deployment.config["providers"],
                                                  "stripe": stripe})
    forward_config = str(write_config(deployment.tmp, forward, name="forward.yaml"))
    code, out, err = await run_cli("events", "redrive", "stripe", "evt_dead",
                                   "--config", forward_config)
    assert code == 1 and "forward mode" in err, out + err
    assert (await deployment.rows.one("stripe", "evt_dead"))["state"] == "dead"  # type: ignore[index]

    code, out, err = await run_cli("events", "redrive", "stripe", "evt_dead", "--config", config)
    assert code == 0, out + err
    assert "re-queued stripe:evt_dead" in out and "workers deliver it" in out
    shown = await cli_json("events", "show", "stripe", "evt_dead", "--config", config, "--json")
    assert (shown["state"], shown["queue"]["dead"]) == ("queued", False)
    assert shown["queue"]["due_in_seconds"] <= 0.5  # due now
    code, out, err = await run_cli("events", "redrive", "stripe", "evt_dead", "--config", config)
    assert code == 1 and "is queued" in err, out + err  # once is enough
    assert deployment.stub.seen == []  # the CLI only wrote the row

    await deployment.start()
    await deployment.stub.wait_for(lambda: deployment.stub.count("evt_dead") >= 1)
    seen = deployment.stub.seen[0]
    assert (seen.event_id, seen.attempt, seen.body) == ("evt_dead", 2, stripe_event("evt_dead"))
    assert seen.idempotency_key == "stripe:evt_dead"
    await deployment.stop()
    assert deployment.stub.attempts("evt_dead") == [2]
    assert deployment.stub.count("evt_waiting") == 0  # not due for an hour
    assert (await deployment.rows.one("stripe", "evt_dead"))["state"] == "done"  # type: ignore[index]


async def test_cli_bulk_redrive_of_dead_events(deployment: Deployment) -> None:
    config = queue_mode(deployment)
    async with real_store(deployment) as store:
        for event_id in ("evt_d1", "evt_d2", "evt_d3"):
            await dead(store, event_id)
        await waiting(store, "evt_waiting")

    for usage in (("stripe",), ("stripe", "evt_d1", "--dead"), ("stripe", "--older-than", "1h"),
                  ("stripe", "--limit", "2")):
        code, out, err = await run_cli("events", "redrive", *usage, "--config", config)
        assert code == 2 and "--dead" in err and out == "", (usage, out + err)
    code, out, err = await run_cli("events", "redrive", "nope", "--dead", "--config", config)
    assert code == 1 and "unknown provider 'nope'" in err, out + err
    code, out, err = await run_cli("events", "redrive", "github", "--dead", "--config", config)
    assert code == 1 and "forward mode" in err, out + err
    code, out, err = await run_cli("events", "redrive", "stripe", "--dead", "--limit", "0",
                                   "--config", config)
    assert code == 1 and "limit" in err, out + err

    code, out, err = await run_cli("events", "redrive", "stripe", "--dead", "--older-than", "1h",
                                   "--config", config)
    assert (code, out) == (0, ""), out + err  # they died seconds ago
    assert "re-queued 0 dead stripe events" in err

    code, out, err = await run_cli("events", "redrive", "stripe", "--dead", "--limit", "2",
                                   "--config", config)
    assert code == 0, out + err
    first = out.split()
    assert len(first) == 2 and set(first) < {"evt_d1", "evt_d2", "evt_d3"}
    assert "re-queued 2 dead stripe events" in err and "workers deliver them" in err
    code, out, err = await run_cli("events", "redrive", "stripe", "--dead", "--config", config)
    assert code == 0, out + err
    assert set(first + out.split()) == {"evt_d1", "evt_d2", "evt_d3"} and len(out.split()) == 1
    assert "re-queued 1 dead stripe event:" in err

    assert await cli_json("events", "list", "--config", config, "--state", "dead",
                          "--json") == []
    listed = await cli_json("events", "list", "--config", config, "--state", "queued", "--json")
    assert {e["event_id"] for e in listed} == {"evt_d1", "evt_d2", "evt_d3", "evt_waiting"}


async def test_admin_api_shows_and_redrives_dead_events(deployment: Deployment) -> None:
    queue_mode(deployment)
    async with real_store(deployment) as store:
        for event_id in ("evt_d1", "evt_d2", "evt_d3"):
            await dead(store, event_id)
        await waiting(store, "evt_waiting")
    await deployment.start()
    client, admin = deployment.client, deployment.procs[0].admin_url
    assert client is not None

    async def call(method: str, path: str) -> tuple[int, Any]:
        async with client.request(method, admin + path, headers=AUTH) as resp:
            return resp.status, await resp.json()

    status, listed = await call("GET", "/admin/events?provider=stripe&state=dead")
    assert status == 200
    assert {e["event_id"] for e in listed["events"]} == {"evt_d1", "evt_d2", "evt_d3"}
    status, error = await call("GET", "/admin/events?state=gone")
    assert status == 400 and "dead" in error["error"]
    status, shown = await call("GET", "/admin/events/stripe/evt_d1")
    assert status == 200 and shown["state"] == "dead"
    assert (shown["queue"]["dead"], shown["queue"]["last_error"]) == (True, "HTTP 500")

    status, error = await call("POST", "/admin/events/stripe/evt_waiting/redrive")
    assert status == 409 and "is queued" in error["error"]
    assert (await call("POST", "/admin/events/stripe/evt_nope/redrive"))[0] == 404
    status, done = await call("POST", "/admin/events/stripe/evt_d1/redrive")
    assert status == 200, done
    assert done == {"action": "requeued", "state": "queued", "provider": "stripe",
                    "requeued": ["evt_d1"], "count": 1}

    bulk = "/admin/queue/{}/redrive-dead"
    assert (await call("POST", bulk.format("stripe") + "?older_than=soon"))[0] == 400
    assert (await call("POST", bulk.format("stripe") + "?limit=0"))[0] == 400
    assert (await call("POST", bulk.format("nope")))[0] == 404
    status, error = await call("POST", bulk.format("github"))
    assert status == 409 and "forward mode" in error["error"]
    async with client.post(admin + bulk.format("stripe")) as resp:
        assert resp.status == 401  # the token is required
    assert await call("POST", bulk.format("stripe") + "?older_than=1h") == (
        200, {"provider": "stripe", "requeued": [], "count": 0})
    status, done = await call("POST", bulk.format("stripe") + "?limit=10")
    assert status == 200 and done["count"] == 2
    assert sorted(done["requeued"]) == ["evt_d2", "evt_d3"]

    # The running proxies' workers deliver what was re-queued: once each, as attempt 2.
    stub = deployment.stub
    await stub.wait_for(lambda: all(stub.count(e) for e in ("evt_d1", "evt_d2", "evt_d3")))
    await deployment.stop()
    assert {s.event_id: s.attempt for s in stub.seen} == {"evt_d1": 2, "evt_d2": 2, "evt_d3": 2}
    assert len(stub.seen) == 3
    states = {r["event_id"]: r["state"] for r in await deployment.rows.all()}
    assert states == {"evt_d1": "done", "evt_d2": "done", "evt_d3": "done",
                      "evt_waiting": "queued"}
