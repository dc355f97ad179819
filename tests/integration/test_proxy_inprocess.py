"""The proxy in-process on a real PostgreSQL store: the hot path's store calls, and that no
pooled connection is held while the app works."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import structlog
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from sidecar.config.loader import parse_config
from sidecar.core.errors import StoreError
from sidecar.core.events import AttemptResult, Claim, EventState
from sidecar.obs.metrics import Metrics
from sidecar.runtime.serve import Running, start, stop
from sidecar.store.postgres import PostgresStore, migrate_postgres
from sidecar.store.sqlite import SQLiteStore
from tests.support import ClaimFails, StubApp, base_config, post, stripe_event, stripe_headers


class CountingStore:
    """Delegates to a real store and records which verbs each delivery used."""

    def __init__(self, inner: PostgresStore) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def claim(self, *args: Any) -> Claim:
        self.calls.append("claim")
        return await self.inner.claim(*args)

    async def complete(self, provider: str, event_id: str, attempt: int,
                       result: AttemptResult) -> bool:
        self.calls.append("complete")
        return await self.inner.complete(provider, event_id, attempt, result)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        # The maintenance loop's verbs (purge, stuck_counts) are not on the request path.
        if name in ("get", "take_over", "get_payload", "release"):
            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return await attr(*args, **kwargs)
            return counted
        return attr


@pytest.fixture
async def proxy(
    pg_database_factory: Callable[[], Awaitable[str]],
) -> AsyncIterator[tuple[Running, CountingStore, StubApp]]:
    dsn = await pg_database_factory()
    await migrate_postgres(dsn)
    # One pooled connection: if any delivery kept it across the upstream call, every other
    # delivery would time out acquiring it and answer 503.
    inner = await PostgresStore.connect(dsn, min_size=1, max_size=1, acquire_timeout=1.0)
    store = CountingStore(inner)
    stub = await StubApp().start()
    config = parse_config(base_config(stub.url, dsn), env={})
    running = await start(config, store=store)
    try:
        yield running, store, stub
    finally:
        await stop(running)
        await stub.stop()
        await inner.close()


async def test_store_round_trips_per_delivery(
    proxy: tuple[Running, CountingStore, StubApp],
) -> None:
    running, store, _ = proxy
    url = f"http://{running.listen}/webhooks/stripe"
    body = stripe_event("evt_trips")
    async with aiohttp.ClientSession() as client:
        assert (await post(client, url, body, stripe_headers(body)))[0] == 200
        assert store.calls == ["claim", "complete"]  # a new event: claim, record
        store.calls.clear()
        assert (await post(client, url, body, stripe_headers(body)))[0] == 200
        # A duplicate of a done event this process recorded: answered from memory.
        assert store.calls == []


async def test_no_connection_is_held_across_the_upstream_call(
    proxy: tuple[Running, CountingStore, StubApp],
) -> None:
    running, _, stub = proxy
    url = f"http://{running.listen}/webhooks/stripe"
    stub.hold.clear()
    async with aiohttp.ClientSession() as client:
        slow = [stripe_event(f"evt_held_{i}") for i in range(5)]
        inflight = [asyncio.create_task(post(client, url, b, stripe_headers(b))) for b in slow]
        # All five reach the app while each is still waiting for its answer: with a pool of
        # one connection that is only possible if none is held during the forward.
        await stub.wait_for(lambda: stub.count() == 5)
        stub.hold.set()
        assert [r[0] for r in await asyncio.gather(*inflight)] == [200] * 5


async def test_a_store_failure_mid_batch_frees_the_items_already_claimed(tmp_path: Any) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = base64.b64encode(key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    stub = await StubApp().start()
    data = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}")
    data["providers"] = {"sendgrid": {"path": "/sg", "preset": "sendgrid", "secrets": [public],
                                      "lease": "60s", "inflight_wait": "1s"}}
    inner = await SQLiteStore.open(str(tmp_path / "events.db"))
    lost = ClaimFails(inner, StoreError("connection lost"), nth=2)  # mid-batch
    running = await start(parse_config(data, env={}), store=lost)
    try:
        body = json.dumps([{"sg_event_id": "a"}, {"sg_event_id": "b"}]).encode()
        ts = str(int(time.time()))
        signature = key.sign(ts.encode() + body, ec.ECDSA(hashes.SHA256()))
        headers = {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
                   "X-Twilio-Email-Event-Webhook-Timestamp": ts}
        async with aiohttp.ClientSession() as client:
            status, _, _ = await post(client, f"http://{running.listen}/sg", body, headers)
        assert status == 503 and stub.count() == 0
        row = await inner.get("sendgrid", "a")
        # Not left leased for a minute: failed, so the provider's retry takes it over at once.
        assert row is not None and row.state is EventState.FAILED and not row.lease_live
    finally:
        await stop(running)
        await stub.stop()
        await inner.close()


async def test_an_unexpected_error_is_500_logged_with_its_traceback_and_counted(
    tmp_path: Any,
) -> None:
    stub = await StubApp().start()
    data = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}")
    inner = await SQLiteStore.open(str(tmp_path / "events.db"))
    metrics = Metrics()
    buggy = ClaimFails(inner, ZeroDivisionError("a bug in the claim"))  # not a StoreError
    running = await start(parse_config(data, env={}), store=buggy, metrics=metrics)
    try:
        body = stripe_event("evt_bug")
        with structlog.testing.capture_logs() as logs:
            async with aiohttp.ClientSession() as client:
                status, _, payload = await post(client, f"http://{running.listen}/webhooks/stripe",
                                                body, stripe_headers(body))
        assert status == 500 and json.loads(payload)["reason"] == "internal_error"
        assert b"a bug" not in payload, "the error's text stays in the log"
        line = next(e for e in logs if e["event"] == "delivery")
        assert line["log_level"] == "error" and line["result"] == "error"
        assert isinstance(line["exc_info"], ZeroDivisionError)
        assert line["event_id"] == "evt_bug"
        counted = metrics.registry.get_sample_value(
            "webhook_events_total", {"provider": "stripe", "result": "error"})
        assert counted == 1 and stub.count() == 0
    finally:
        await stop(running)
        await stub.stop()
        await inner.close()
