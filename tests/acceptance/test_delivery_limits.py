"""Delivery limits end to end (``providers.<key>.delivery``): real proxy processes sharing one
PostgreSQL database, real HTTP on loopback, an app that records when each request arrived and
how many were in flight, real clocks.

- queue mode, three processes, a backlog (accepted while the app was down): the app sees at
  most ``delivery.rate`` (the bucket's burst plus the rate over any window, within 10 %) and at
  most ``delivery.concurrency`` at once, and every event exactly once, as attempt 1;
- the same on SQLite, one process, at a smaller size;
- forward mode, two processes: over the shared rate a delivery is answered 429 with
  ``Retry-After``, nothing claimed; its retry after that time is forwarded; a duplicate of a
  done event is still answered from its row; the 429 is counted.

The full-size measurement (3,000 events) is ``python -m bench.limits`` (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from bench.limits import InFlight, most_in_window
from tests.acceptance.conftest import create_database, drop_database, run_cli
from tests.acceptance.test_queue_mode import all_in, queued
from tests.support import (
    ProxyProcess,
    Rows,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    write_config,
)

pytestmark = pytest.mark.timeout(120)

STRIPE = "/webhooks/stripe"


RATE = 40  # events a second (delivery.rate: 40/s)
BURST = 4
CONCURRENCY = 3
EVENTS = 300  # ~7.5 s at the rate
WINDOW = 5.0
APP_SECONDS = 0.05  # 3 at a time at 50 ms: 60/s, so the rate is what binds


@pytest.mark.postgres
async def test_queue_mode_three_processes_hold_the_rate_and_concurrency_each_event_once(
        pg_dsn: str, tmp_path: Path) -> None:
    async with queued("postgres", tmp_path, pg_dsn, concurrency=8) as dep:
        dep.config["providers"]["stripe"]["delivery"] = {
            "rate": f"{RATE}/s", "burst": BURST, "concurrency": CONCURRENCY}
        gauge = InFlight(APP_SECONDS)
        dep.app.behaviour = gauge
        await dep.start(3)
        ids = [f"evt_lim_{i:04d}" for i in range(EVENTS)]
        sem = asyncio.Semaphore(30)

        async def send(i: int, event_id: str) -> int:
            async with sem:
                status, _, _ = await dep.send(i, stripe_event(event_id))
                return status

        statuses = await asyncio.gather(*(send(i, e) for i, e in enumerate(ids)))
        assert Counter(statuses) == {200: EVENTS}
        # The app comes up: the backlog drains at the rate.
        await dep.app.start()
        up = time.monotonic()
        await dep.until_states(all_in(ids, "done"), timeout=60, what="every event done")
        took = time.monotonic() - up
        arrivals = [s.at for s in dep.app.seen]
        busiest = most_in_window(arrivals, WINDOW)
        print(f"\n{EVENTS} events, 3 processes, rate {RATE}/s burst {BURST}, concurrency "
              f"{CONCURRENCY}: drained in {took:.1f} s; most in a {WINDOW:g} s window "
              f"{busiest} (bound {BURST + RATE * WINDOW:g}); most in flight {gauge.most}")
        seen = Counter(s.event_id for s in dep.app.seen)
        assert sorted(seen) == ids and set(seen.values()) == {1}
        assert Counter(s.attempt for s in dep.app.seen) == {1: EVENTS}
        assert busiest <= (BURST + RATE * WINDOW) * 1.10
        assert gauge.most <= CONCURRENCY
        # Not merely slow: the backlog went at the rate, give or take the machine.
        assert EVENTS / took >= RATE * 0.5, f"{EVENTS / took:.1f}/s"
        assert await dep.metric("webhook_delivery_limited_total", provider="stripe",
                                limit="rate") > 0
        assert await dep.metric("webhook_queue_attempts_total", result="dead") == 0


async def test_sqlite_one_process_holds_the_rate_and_concurrency(tmp_path: Path) -> None:
    rate, burst, concurrency, events, window = 20, 2, 2, 80, 2.0
    async with queued("sqlite", tmp_path, None) as dep:
        dep.config["providers"]["stripe"]["delivery"] = {
            "rate": f"{rate}/s", "burst": burst, "concurrency": concurrency}
        gauge = InFlight(APP_SECONDS)
        dep.app.behaviour = gauge
        await dep.start(1)
        ids = [f"evt_sq_{i:03d}" for i in range(events)]
        statuses = [(await dep.send(0, stripe_event(e)))[0] for e in ids]
        assert Counter(statuses) == {200: events}
        await dep.app.start()
        await dep.until_states(all_in(ids, "done"), timeout=40, what="every event done")
        busiest = most_in_window([s.at for s in dep.app.seen], window)
        print(f"\nSQLite: most in a {window:g} s window {busiest} (bound "
              f"{burst + rate * window:g}); most in flight {gauge.most}")
        seen = Counter(s.event_id for s in dep.app.seen)
        assert sorted(seen) == ids and set(seen.values()) == {1}
        assert busiest <= (burst + rate * window) * 1.10
        assert gauge.most <= concurrency


@pytest.mark.postgres
async def test_forward_mode_over_the_shared_rate_429_with_retry_after_then_forwarded(
        pg_dsn: str, tmp_path: Path) -> None:
    app = await StubApp().start()
    store_url = await create_database(pg_dsn)
    config = base_config(app.url, store_url)
    # 1 a second, burst 2: two deliveries go at once, the third waits about a second.
    config["providers"]["stripe"]["delivery"] = {"rate": "60/m", "burst": 2}
    path = write_config(tmp_path, config)
    procs: list[ProxyProcess] = []
    try:
        code, _, err = await run_cli("migrate", "--config", str(path))
        assert code == 0, err
        procs = list(await asyncio.gather(ProxyProcess(path).start(),
                                          ProxyProcess(path).start()))
        async with aiohttp.ClientSession() as client:
            async def send(proc: int, event_id: str) -> tuple[int, dict[str, str], bytes]:
                body = stripe_event(event_id)
                return await post(client, procs[proc].url + STRIPE, body, stripe_headers(body))

            first = await send(0, "evt_a")
            second = await send(1, "evt_b")
            assert (first[0], second[0]) == (200, 200)
            refused_at = time.monotonic()
            status, headers, body = await send(0, "evt_c")  # the other process spent a token
            assert status == 429, body
            wait = int(headers["Retry-After"])
            assert 1 <= wait <= 2
            assert json.loads(body)["reason"] == "rate_limited"
            assert app.count("evt_c") == 0
            assert "evt_c" not in {r["event_id"] for r in await _rows(store_url)}
            # A duplicate of a done event is answered from its row: no token needed.
            replay = await send(0, "evt_a")
            assert replay[0] == 200 and replay[1].get("X-Webhook-Sidecar-Replay") == "true"
            # The provider's retry after Retry-After is forwarded, once.
            await asyncio.sleep(max(0.0, refused_at + wait - time.monotonic()))  # as told
            retried = await send(1, "evt_c")
            assert retried[0] == 200, retried[2]
            assert app.count("evt_c") == 1 and app.attempts("evt_c") == [1]
            assert [app.count(e) for e in ("evt_a", "evt_b")] == [1, 1]
            limited = events = 0.0
            for proc in procs:
                async with client.get(proc.admin_url + "/metrics") as resp:
                    text = await resp.text()
                limited += _sample(text, 'webhook_delivery_limited_total{limit="rate",'
                                         'provider="stripe"}')
                events += _sample(text, 'webhook_events_total{provider="stripe",'
                                        'result="rate_limited"}')
            assert (limited, events) == (1.0, 1.0)
    finally:
        for proc in procs:
            await proc.kill()
        await app.stop()
        await drop_database(pg_dsn, store_url)


def _sample(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


async def _rows(store_url: str) -> list[dict[str, object]]:
    return list(await Rows(store_url).all())
