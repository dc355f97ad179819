"""Pausing a provider and its circuit breaker, end to end: real proxy processes sharing one
PostgreSQL database (SQLite for one process), the CLI as a subprocess, a real app on loopback,
real clocks with short durations.

- queue mode: a pause through the CLI stops every process within a second; events are still
  accepted and none reaches the app; resumed, each arrives once;
- forward mode: 503 + Retry-After while paused, a done event's redelivery still replayed, the
  pause outliving a restart;
- the breaker: an app answering 500 opens it after N failures (once, in one process), one probe
  per cooldown across both processes, closed when the app recovers; every event arrives;
- bad input: an unknown provider (exit 2), a provider that does not retry (needs --force).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.acceptance.conftest import (
    Deployment,
    create_database,
    deploy,
    drop_database,
    run_cli,
)
from tests.support import (
    ProxyProcess,
    Rows,
    Seen,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    until,
    write_config,
)

STRIPE = "/webhooks/stripe"
OTHER = "/webhooks/other"  # a second queue-mode provider, never paused: shows workers run
OBEYED_WITHIN = 1.5  # seconds: the states are read every 0.5 s; a second, plus slack


def queue_providers(config: dict[str, Any], **delivery: Any) -> dict[str, Any]:
    stripe = config["providers"]["stripe"]
    stripe.update({"mode": "queue",
                   "queue": {"first_retry": "100ms", "max_retry_delay": "200ms",
                             "poll_interval": "100ms", "max_attempts": 1000,
                             "concurrency": 1}})
    if delivery:
        stripe["delivery"] = delivery
    config["providers"]["other"] = {**stripe, "path": OTHER, "delivery": None}
    return config


async def cli(config_path: Path, *args: str) -> tuple[int, str, str]:
    return await run_cli("providers", *args, "--config", str(config_path))


async def healthz(client: aiohttp.ClientSession, proc: ProxyProcess) -> dict[str, Any]:
    async with client.get(proc.admin_url + "/healthz") as resp:
        body: dict[str, Any] = await resp.json()
        return body


async def until_all(client: aiohttp.ClientSession, procs: list[ProxyProcess],
                    wanted: Callable[[dict[str, Any]], bool], timeout: float) -> float:
    """Seconds until every process's /healthz satisfies ``wanted`` (polled every 20 ms)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        states = [await healthz(client, p) for p in procs]
        if all(wanted(s) for s in states):
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"within {timeout:g} s, /healthz said {states}")
        await asyncio.sleep(0.02)  # polling the processes, bounded by the deadline


def paused(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda health: bool(health["providers"][name]["paused"])


def running(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda health: not health["providers"][name]["paused"]


async def send(client: aiohttp.ClientSession, url: str,
               event_id: str) -> tuple[int, dict[str, str], bytes]:
    body = stripe_event(event_id)
    return await post(client, url, body, stripe_headers(body))


@pytest.fixture
async def pg_queue(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    async with deploy("postgres", tmp_path, pg_dsn) as dep:
        queue_providers(dep.config)
        yield dep


# == pause and resume ========================================================================


async def test_a_cli_pause_stops_two_processes_within_a_second_and_resume_delivers_each_once(
    pg_queue: Deployment,
) -> None:
    dep, app = pg_queue, pg_queue.stub
    assert dep.client is not None
    await dep.start(2)
    config_path = write_config(dep.tmp, dep.config)

    code, out, err = await cli(config_path, "pause", "stripe", "--reason", "app deploy")
    assert code == 0, out + err
    assert "paused stripe" in out
    obeyed = await until_all(dep.client, dep.procs, paused("stripe"), OBEYED_WITHIN)

    ids = [f"evt_held_{i}" for i in range(10)]
    for i, event_id in enumerate(ids):  # accepted by both processes while paused
        status, _, body = await send(dep.client, dep.url(i, STRIPE), event_id)
        assert status == 200 and json.loads(body)["accepted"] is True
    # Another provider's event, accepted after them, reaches the app: the workers run and have
    # been woken since; none of the paused provider's events went with it.
    status, _, _ = await send(dep.client, dep.url(0, OTHER), "evt_other")
    assert status == 200
    await app.wait_for(lambda: app.count("evt_other") == 1, what="the other provider's event")
    assert [s.event_id for s in app.seen] == ["evt_other"]
    rows = {r["event_id"]: (r["state"], r["attempt"]) for r in await dep.rows.all()
            if r["provider"] == "stripe"}
    assert rows == {event_id: ("queued", 0) for event_id in ids}, "no attempt spent"

    code, out, err = await cli(config_path, "status", "--json")
    shown = {row["provider"]: row for row in map(json.loads, out.splitlines())}
    assert shown["stripe"]["paused"] and shown["stripe"]["pause_reason"] == "app deploy"
    assert shown["other"]["delivering"]

    code, out, err = await cli(config_path, "resume", "stripe")
    assert code == 0 and "resumed stripe" in out, out + err
    await app.wait_for(lambda: all(app.count(e) >= 1 for e in ids), timeout=10,
                       what="every held event delivered")
    assert all(app.count(e) == 1 and app.attempts(e) == [1] for e in ids), "each once"
    print(f"pause obeyed by both processes within {obeyed:.3f} s")
    assert obeyed < OBEYED_WITHIN


async def test_forward_mode_answers_503_while_paused_replays_done_and_survives_a_restart(
    deployment: Deployment,
) -> None:
    dep, app = deployment, deployment.stub
    assert dep.client is not None
    await dep.start()
    status, _, _ = await send(dep.client, dep.url(0, STRIPE), "evt_done")
    assert status == 200 and app.count("evt_done") == 1

    async with dep.client.post(dep.procs[0].admin_url + "/admin/providers/stripe/pause",
                               json={"reason": "incident"}) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["changed"] is True
    await until_all(dep.client, dep.procs, paused("stripe"), OBEYED_WITHIN)

    for i in range(len(dep.procs)):
        status, headers, body = await send(dep.client, dep.url(i, STRIPE), "evt_new")
        assert status == 503, body
        assert headers["Retry-After"] == "60"
        assert json.loads(body)["reason"] == "paused"
        status, headers, _ = await send(dep.client, dep.url(i, STRIPE), "evt_done")
        assert status == 200 and headers.get("X-Webhook-Sidecar-Replay") == "true"
    assert app.count("evt_new") == 0 and app.count("evt_done") == 1
    assert await dep.rows.one("stripe", "evt_new") is None, "nothing claimed while paused"

    await dep.stop()  # the pause is in the store: it outlives every process
    await dep.start()
    await until_all(dep.client, dep.procs, paused("stripe"), OBEYED_WITHIN)
    status, headers, _ = await send(dep.client, dep.url(0, STRIPE), "evt_new")
    assert status == 503 and headers["Retry-After"] == "60"

    code, out, err = await cli(write_config(dep.tmp, dep.config), "resume", "stripe")
    assert code == 0, out + err
    await until_all(dep.client, dep.procs, running("stripe"), OBEYED_WITHIN)
    status, _, _ = await send(dep.client, dep.url(0, STRIPE), "evt_new")
    assert status == 200 and app.count("evt_new") == 1


async def test_bad_input_an_unknown_provider_and_one_that_does_not_retry(
    tmp_path: Path,
) -> None:
    store_url = f"sqlite:///{tmp_path / 'events.db'}"
    config_path = write_config(tmp_path, base_config("http://127.0.0.1:9", store_url))
    code, out, err = await cli(config_path, "pause", "strpe")
    assert code == 2 and out == ""
    assert "unknown provider 'strpe'" in err and "stripe" in err, err
    code, _, err = await cli(config_path, "resume", "nobody")
    assert code == 2 and "unknown provider" in err

    code, out, err = await cli(config_path, "pause", "github")  # forward mode, never retries
    assert code == 1 and out == ""
    assert "does not retry" in err and "--force" in err, err
    code, out, err = await cli(config_path, "status", "github", "--json")
    assert json.loads(out)["paused"] is False, "the refused pause wrote nothing"
    code, out, err = await cli(config_path, "pause", "github", "--force")
    assert code == 0 and "paused github" in out, out + err


# == the circuit breaker =====================================================================


async def test_the_breaker_opens_once_probes_once_per_cooldown_and_closes_when_the_app_recovers(
    pg_dsn: str, tmp_path: Path,
) -> None:
    app = await StubApp().start()
    store_url = await create_database(pg_dsn)
    recovered: list[float] = []

    async def failing_until_recovered(seen: Seen) -> web.StreamResponse:
        if not recovered:
            return web.json_response({"error": "down"}, status=500)
        return web.json_response({"ok": True})

    app.behaviour = failing_until_recovered
    config = queue_providers(base_config(app.url, store_url),
                             breaker={"failures": 3, "window": "10s", "cooldown": "1s"})
    config_path = write_config(tmp_path, config)
    procs: list[ProxyProcess] = []
    try:
        code, _, err = await run_cli("migrate", "--config", str(config_path))
        assert code == 0, err
        procs = list(await asyncio.gather(*(ProxyProcess(config_path).start()
                                            for _ in range(2))))
        async with aiohttp.ClientSession() as client:
            ids = [f"evt_b_{i}" for i in range(6)]
            for i, event_id in enumerate(ids):
                status, _, _ = await send(client, procs[i % 2].url + STRIPE, event_id)
                assert status == 200

            def lines(event: str) -> list[dict[str, Any]]:
                return [e for p in procs for e in p.logs if e.get("event") == event]

            await until(lambda: len(lines("provider_breaker_opened")) == 1, 10)
            opened_at = time.monotonic()
            await until_all(client, procs,
                            lambda h: h["providers"]["stripe"]["breaker"] != "closed", 2)
            # Three failed probes, each reopening it for another cooldown.
            await until(lambda: len(lines("provider_breaker_reopened")) >= 3, 10)
            recovered.append(time.monotonic())
            await app.wait_for(lambda: all(any(s.event_id == e and s.status == 200
                                               for s in app.seen) for e in ids),
                               timeout=15, what="every event delivered once the app recovered")
            await until(lambda: len(lines("provider_breaker_closed")) == 1, 5)
            await until_all(client, procs,
                            lambda h: h["providers"]["stripe"]["breaker"] == "closed",
                            OBEYED_WITHIN)

        assert len(lines("provider_breaker_opened")) == 1, "opened by one process, once"
        [opened] = lines("provider_breaker_opened")
        assert opened["failures"] == 3 and opened["last_failure"] == "HTTP 500"
        # While open: the probes only, one per cooldown across both processes (after a
        # second for the other process to hear of it and its attempt in flight to end).
        probes = [s.at for s in app.seen if opened_at + 1.0 < s.at < recovered[0]]
        gaps = [b - a for a, b in itertools.pairwise(probes)]
        print(f"breaker: {len(probes)} probes while open, gaps {[round(g, 3) for g in gaps]}")
        assert len(probes) >= 2 and all(g > 0.8 for g in gaps), gaps
        delivered = [s.event_id for s in app.seen if s.status == 200]
        assert sorted(delivered) == sorted(ids), "each event delivered once"
        states = {r["event_id"]: r["state"] for r in await Rows(store_url).all()
                  if r["provider"] == "stripe"}
        assert states == {e: "done" for e in ids}, "nothing went dead while it was open"
    finally:
        for proc in procs:
            await proc.kill()
        await app.stop()
        await drop_database(pg_dsn, store_url)


async def test_forward_mode_answers_503_while_the_breaker_is_open_sqlite(tmp_path: Path) -> None:
    """One process on SQLite, forward mode: two 500s open it; the next delivery is answered
    503 with the cooldown left as Retry-After, without reaching the app; after the cooldown one
    delivery is the probe, and the app's 200 closes it."""
    app = await StubApp().start()
    app.behaviour = lambda seen: _status(500)
    config = base_config(app.url, f"sqlite:///{tmp_path / 'events.db'}")
    config["providers"]["stripe"]["delivery"] = {
        "breaker": {"failures": 2, "window": "10s", "cooldown": "2s"}}
    proc = await ProxyProcess(write_config(tmp_path, config)).start()
    try:
        async with aiohttp.ClientSession() as client:
            for event_id in ("evt_f1", "evt_f2"):
                status, _, _ = await send(client, proc.url + STRIPE, event_id)
                assert status == 500
            status, headers, body = await send(client, proc.url + STRIPE, "evt_f3")
            assert status == 503 and json.loads(body)["reason"] == "breaker_open", body
            assert 1 <= int(headers["Retry-After"]) <= 2
            assert app.count("evt_f3") == 0
            app.behaviour = lambda seen: _status(200)
            wait = int(headers["Retry-After"])
            deadline = time.monotonic() + wait + 3
            while True:  # the provider's retries, as it would make them
                status, headers, _ = await send(client, proc.url + STRIPE, "evt_f3")
                if status == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)  # a retrying provider's pause, bounded by the deadline
            assert status == 200 and app.count("evt_f3") == 1
            await proc.wait_for_log("provider_breaker_closed", timeout=2)
    finally:
        await proc.kill()
        await app.stop()


async def _status(status: int) -> web.StreamResponse:
    return web.json_response({"status": status}, status=status)
