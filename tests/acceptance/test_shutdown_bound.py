"""How long a SIGTERM takes: at most shutdown_timeout + SHUTDOWN_OVERRUN, whatever is in flight
(the chart's grace-period check relies on that bound)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp

from sidecar.runtime.wiring import SHUTDOWN_OVERRUN
from tests.acceptance.conftest import Deployment
from tests.support import post, stripe_event, stripe_headers

SHUTDOWN_TIMEOUT = 1.0


async def test_sigterm_with_a_forward_held_past_the_timeout_exits_within_the_bound(
    deployment: Deployment,
) -> None:
    deployment.config["shutdown_timeout"] = f"{SHUTDOWN_TIMEOUT}s"
    deployment.config["upstream"]["timeout"] = "30s"
    for provider in deployment.config["providers"].values():
        provider["lease"] = "60s"
    await deployment.start(1)
    assert deployment.client is not None
    deployment.stub.hold.clear()  # the app never answers while the proxy shuts down
    proc = deployment.procs[0]
    body = stripe_event("evt_held")
    inflight = asyncio.create_task(post(deployment.client, proc.url + "/webhooks/stripe", body,
                                        stripe_headers(body)))
    # A second connection, idle and kept alive: it must not hold the shutdown up either.
    async with deployment.client.get(proc.url + "/webhooks/stripe") as resp:
        assert resp.status == 405
    await deployment.stub.wait_for(lambda: deployment.stub.count() == 1)
    assert proc.proc is not None

    started = time.monotonic()
    proc.proc.terminate()
    assert await proc.wait(timeout=SHUTDOWN_TIMEOUT + SHUTDOWN_OVERRUN + 10) == 0
    took = time.monotonic() - started
    deployment.procs = []
    print(f"[{deployment.kind}] SIGTERM to exit: {took:.3f} s (shutdown_timeout "
          f"{SHUTDOWN_TIMEOUT} s, bound {SHUTDOWN_TIMEOUT + SHUTDOWN_OVERRUN} s)")
    assert SHUTDOWN_TIMEOUT <= took <= SHUTDOWN_TIMEOUT + SHUTDOWN_OVERRUN

    with contextlib.suppress(aiohttp.ClientError):
        status, _, _ = await inflight
        assert status >= 500  # never a 2xx for a forward that was cut off
    cancelled = [e for e in proc.logs if e.get("event") == "deliveries_cancelled"]
    assert [e["count"] for e in cancelled] == [1]
    assert all(e.get("level") != "error" for e in proc.logs)
    row = await deployment.rows.one("stripe", "evt_held")
    assert row is not None and row["state"] == "processing"  # taken over after the lease
    deployment.stub.hold.set()


async def test_sigterm_with_nothing_in_flight_exits_at_once(deployment: Deployment) -> None:
    await deployment.start(1)  # shutdown_timeout 10 s
    assert deployment.client is not None
    proc = deployment.procs[0]
    body = stripe_event("evt_before_stop")
    assert (await post(deployment.client, proc.url + "/webhooks/stripe", body,
                       stripe_headers(body)))[0] == 200  # leaves a kept-alive connection
    assert proc.proc is not None
    started = time.monotonic()
    proc.proc.terminate()
    assert await proc.wait(timeout=10) == 0
    took = time.monotonic() - started
    deployment.procs = []
    print(f"[{deployment.kind}] SIGTERM to exit, idle: {took:.3f} s")
    assert took < SHUTDOWN_OVERRUN
