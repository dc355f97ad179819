"""Concurrency and crash claims on PostgreSQL, with real processes, real SIGKILL and a real
`pg_ctl stop -m immediate`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from tests.acceptance.conftest import Deployment, run_cli
from tests.pgserver import ThrowawayCluster
from tests.support import (
    ProxyProcess,
    Rows,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
)

STRIPE = "/webhooks/stripe"


async def test_200_concurrent_deliveries_over_two_processes(pg_deployment: Deployment) -> None:
    dep = pg_deployment
    await dep.start(2)
    assert dep.client is not None
    body = stripe_event("evt_thundering")
    # Each copy is signed separately by the stripe SDK, as real redeliveries are.
    results = await asyncio.gather(*(
        post(dep.client, dep.url(i, STRIPE), body, stripe_headers(body)) for i in range(200)
    ))
    statuses = [status for status, _, _ in results]
    assert set(statuses) <= {200, 409, 503}, sorted(set(statuses))
    assert dep.stub.count("evt_thundering") == 1
    rows = await dep.rows.all()
    assert [(r["event_id"], r["state"], r["attempt"]) for r in rows] == [
        ("evt_thundering", "done", 1)]

    status, headers, _ = await post(dep.client, dep.url(1, STRIPE), body, stripe_headers(body))
    assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"

    # Both processes restart: the answer comes from the database, not from memory.
    await dep.stop()
    await dep.start(2)
    for i in range(2):
        status, headers, _ = await post(dep.client, dep.url(i, STRIPE), body,
                                        stripe_headers(body))
        assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
    assert dep.stub.count("evt_thundering") == 1


async def test_sigkill_after_claim_then_takeover_by_exactly_one(pg_deployment: Deployment) -> None:
    dep = pg_deployment
    dep.config["providers"]["stripe"]["inflight_wait"] = "200ms"
    await dep.start(2)
    assert dep.client is not None
    victim, survivor = dep.procs
    body = stripe_event("evt_crash")
    dep.stub.hold.clear()  # the app keeps attempt 1 in flight

    first = asyncio.create_task(post(dep.client, victim.url + STRIPE, body, stripe_headers(body)))
    await dep.stub.wait_for(lambda: dep.stub.count("evt_crash") == 1)
    await victim.kill()  # SIGKILL: claimed and forwarded, result never recorded
    with pytest.raises(aiohttp.ClientError):
        await first
    row = await dep.rows.one("stripe", "evt_crash")
    assert row is not None and row["state"] == "processing" and row["attempt"] == 1

    # Lease still live: the redelivery must not be answered 2xx nor forwarded.
    status, headers, _ = await post(dep.client, survivor.url + STRIPE, body, stripe_headers(body))
    assert status == 409 and "Retry-After" in headers
    assert dep.stub.count("evt_crash") == 1

    # Wait on the database clock (not a sleep) until the crashed attempt's lease expires.
    for _ in range(200):
        if await dep.rows.lease_expired("stripe", "evt_crash"):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the crashed attempt's lease never expired")

    dep.stub.hold.set()
    results = await asyncio.gather(*(
        post(dep.client, survivor.url + STRIPE, body, stripe_headers(body)) for _ in range(10)
    ))
    statuses = [status for status, _, _ in results]
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 409}, statuses
    assert dep.stub.attempts("evt_crash") == [1, 2]  # exactly one takeover, marked attempt 2
    row = await dep.rows.one("stripe", "evt_crash")
    assert row is not None and row["state"] == "done" and row["attempt"] == 2


async def test_postgres_stopped_mid_run_gives_503_then_recovers(
    own_cluster: ThrowawayCluster, tmp_path: Path
) -> None:
    stub = await StubApp().start()
    config = base_config(stub.url, own_cluster.dsn)
    config_path = tmp_path / "config.yaml"
    import yaml
    config_path.write_text(yaml.safe_dump(config))
    code, _, err = await run_cli("migrate", "--config", str(config_path))
    assert code == 0, err
    proc = await ProxyProcess(config_path).start()
    try:
        async with aiohttp.ClientSession() as client:
            url = proc.url + STRIPE
            before = stripe_event("evt_before")
            assert (await post(client, url, before, stripe_headers(before)))[0] == 200

            await asyncio.to_thread(own_cluster.stop, "immediate")
            during = stripe_event("evt_during")
            for _ in range(3):
                status, headers, _ = await post(client, url, during, stripe_headers(during))
                assert status == 503 and "Retry-After" in headers
            async with client.get(proc.admin_url + "/readyz") as resp:
                assert resp.status == 503
            async with client.get(proc.admin_url + "/healthz") as resp:
                assert resp.status == 200
            assert stub.count("evt_during") == 0
            # The outage is logged once by the store (its observer, wired by the app).
            down = await proc.wait_for_log("store_unavailable")
            assert down["level"] == "error" and down["error"], down

            await asyncio.to_thread(own_cluster.start)
            # Same process, no restart: broken pooled connections are replaced on use.
            statuses = []
            for _ in range(50):
                status, _, _ = await post(client, url, during, stripe_headers(during))
                statuses.append(status)
                if status == 200:
                    break
                assert status == 503
                await asyncio.sleep(0.1)
            assert statuses[-1] == 200, statuses
            assert stub.count("evt_during") == 1
            up = await proc.wait_for_log("store_recovered")
            assert up["level"] == "info" and up["failed_calls"] >= 3 and up["outage_s"] > 0, up
            rows = await Rows(own_cluster.dsn).all()
            assert {r["event_id"]: r["state"] for r in rows} == {
                "evt_before": "done", "evt_during": "done"}
    finally:
        await proc.terminate()
        await stub.stop()


async def test_crash_between_the_apps_answer_and_the_record_is_retried_once(
    pg_deployment: Deployment,
) -> None:
    """The documented at-least-once window: the app answered, the proxy died before recording
    it. The provider never got a 2xx; after the lease expires the redelivery is forwarded again,
    marked attempt 2, and nothing after that reaches the app."""
    dep = pg_deployment
    dep.config["providers"]["stripe"]["inflight_wait"] = "200ms"
    await dep.start(2)
    assert dep.client is not None
    victim, survivor = dep.procs
    locker = await asyncpg.connect(dep.store_url)
    # Watches the proxies' backends from outside the locker's transaction (whose snapshot of
    # pg_stat_activity would not move), in this test's own database only: on a shared server,
    # never someone else's backend.
    watcher = await asyncpg.connect(dep.store_url)
    lock = locker.transaction()

    async def answer_then_block_the_record(seen: Seen) -> web.StreamResponse:
        if seen.attempt == 1:
            # Hold the event's row so the proxy's result write cannot land (it gives up on the
            # lock and tries again, until its lease ends), then answer: the app has done its
            # work; the proxy has not recorded it.
            await lock.start()
            await locker.execute("SELECT 1 FROM webhook_event WHERE event_id = $1 FOR UPDATE",
                                 seen.event_id)
        return web.json_response({"ok": True})

    async def proxy_backends(query: str) -> list[int]:
        rows = await watcher.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'webhook-sidecar' AND query LIKE $1", query)
        return [r["pid"] for r in rows]

    dep.stub.behaviour = answer_then_block_the_record
    body = stripe_event("evt_window")
    first = asyncio.create_task(post(dep.client, victim.url + STRIPE, body, stripe_headers(body)))
    try:
        for _ in range(300):  # until the proxy tries to write the result
            writing = await proxy_backends("%UPDATE webhook_event%")
            if writing:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the proxy never tried to record the result")
        # The host dies: the process and its connections. (A killed process alone leaves its
        # backends to notice the closed socket on their own.)
        await victim.kill()
        for pid in writing:
            await watcher.execute("SELECT pg_terminate_backend($1)", pid)
        for _ in range(300):  # gone before the lock goes, so no write of theirs can land
            if not set(writing) & set(await proxy_backends("%")):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail(f"the terminated backends {writing} did not go away")
        await lock.rollback()
    finally:
        # Closing ends the transaction too, if the test failed before its rollback; neither
        # close raises over the test's own error.
        await locker.close()
        await watcher.close()
    with pytest.raises(aiohttp.ClientError):
        await first  # the provider saw no answer, certainly no 2xx
    row = await dep.rows.one("stripe", "evt_window")
    assert row is not None and (row["state"], row["attempt"]) == ("processing", 1)

    for _ in range(200):
        if await dep.rows.lease_expired("stripe", "evt_window"):
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the lease never expired")
    status, headers, _ = await post(dep.client, survivor.url + STRIPE, body, stripe_headers(body))
    assert status == 200 and headers["X-Webhook-Sidecar-Attempt"] == "2"
    status, headers, _ = await post(dep.client, survivor.url + STRIPE, body, stripe_headers(body))
    assert status == 200 and headers["X-Webhook-Sidecar-Replay"] == "true"
    assert dep.stub.attempts("evt_window") == [1, 2]  # the window, pinned: twice, marked
