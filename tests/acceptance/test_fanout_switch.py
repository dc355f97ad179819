"""A provider switched between one app and destinations while events wait in its queue: each
accepted event keeps the set it was accepted with. Real proxy processes on one SQLite store,
real apps on loopback, the CLI as a subprocess.

- one app → destinations: events accepted for the provider's app, still queued, go to every
  destination the provider has now (its app is gone from the config);
- destinations → one app: events accepted for destinations are queued for those destinations
  (under ``stripe.<name>``), never sent to the provider's new app.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.acceptance.conftest import run_cli
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
IDS = [f"evt_switch_{i}" for i in range(5)]


def queue_config(tmp_path: Path, app: StubApp, **stripe: Any) -> Path:
    config = base_config(app.url, f"sqlite:///{tmp_path}/store.db")
    provider = config["providers"]["stripe"]
    provider.update(mode="queue", queue={"first_retry": "100ms", "max_retry_delay": "200ms",
                                         "poll_interval": "100ms"}, **stripe)
    return write_config(tmp_path, config)


async def accept_all(proxy: ProxyProcess) -> None:
    async with aiohttp.ClientSession() as client:
        for event_id in IDS:
            body = stripe_event(event_id)
            status, _, _ = await post(client, proxy.url + "/webhooks/stripe", body,
                                      stripe_headers(body))
            assert status == 200


async def paused_proxy(config: Path) -> ProxyProcess:
    """A proxy whose stripe queue takes nothing (paused in the store before it starts)."""
    code, out, err = await run_cli("providers", "pause", "stripe", "--config", str(config))
    assert code == 0, out + err
    return await ProxyProcess(config).start()


async def resume(config: Path) -> None:
    code, out, err = await run_cli("providers", "resume", "stripe", "--config", str(config))
    assert code == 0, out + err


async def test_events_queued_for_the_app_go_to_the_destinations_that_replace_it(
        tmp_path: Path) -> None:
    old, billing, crm = StubApp(), StubApp(), StubApp()
    for app in (old, billing, crm):
        await app.start()
    try:
        proxy = await paused_proxy(queue_config(tmp_path, old))
        await accept_all(proxy)
        await proxy.terminate()
        config = queue_config(tmp_path, old, destinations=[
            {"name": "billing", "upstream": {"url": billing.url}},
            {"name": "crm", "upstream": {"url": crm.url}}])
        await resume(config)
        proxy = await ProxyProcess(config).start()
        for app in (billing, crm):
            await app.wait_for(lambda app=app: app.count() == len(IDS))
        await proxy.terminate()
        assert old.count() == 0
        for app in (billing, crm):
            assert sorted(s.event_id for s in app.seen) == IDS  # each once
            assert {s.idempotency_key for s in app.seen} == {f"stripe:{i}" for i in IDS}
    finally:
        for app in (old, billing, crm):
            await app.stop()


async def test_events_accepted_for_destinations_never_reach_the_app_that_replaces_them(
        tmp_path: Path) -> None:
    billing, app = StubApp(), StubApp()
    for stub in (billing, app):
        await stub.start()
    try:
        fanning = queue_config(tmp_path, app, destinations=[
            {"name": "billing", "upstream": {"url": billing.url}}])
        proxy = await paused_proxy(fanning)
        await accept_all(proxy)
        await proxy.terminate()
        single = queue_config(tmp_path, app)
        await resume(single)
        proxy = await ProxyProcess(single).start()
        rows = Rows(f"sqlite:///{tmp_path}/store.db")

        async def fanned_out() -> bool:
            states = {(r["provider"], r["event_id"]): r["state"] for r in await rows.all()}
            return all(states.get(("stripe", i)) == "done"
                       and states.get(("stripe.billing", i)) == "queued" for i in IDS)

        await until_true(fanned_out)
        await proxy.terminate()
        assert app.count() == 0 and billing.count() == 0  # waiting for billing to be back
    finally:
        for stub in (billing, app):
            await stub.stop()


async def until_true(check: Any, timeout: float = 20.0) -> None:
    async def poll() -> None:
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)  # polling the database, bounded below
    await asyncio.wait_for(poll(), timeout)
