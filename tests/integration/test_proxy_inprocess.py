"""The proxy in-process on a real PostgreSQL store: the hot path's store calls, and that no
pooled connection is held while the app works."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from sidecar.config.loader import parse_config
from sidecar.core.events import AttemptResult, Claim
from sidecar.serve import Running, start, stop
from sidecar.store.postgres import PostgresStore, migrate_postgres
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers


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
        assert store.calls == ["claim"]  # a duplicate of a done event: the claim answers it


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
