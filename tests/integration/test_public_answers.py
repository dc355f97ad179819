"""What the provider listener tells the world besides the answer itself: no ``Server`` header
(no Python or aiohttp version for a scanner), and a store outage logged as a warning."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import structlog

from sidecar.config.loader import parse_config
from sidecar.core.errors import StoreError
from sidecar.obs.metrics import Metrics
from sidecar.runtime.serve import Running, start, stop
from sidecar.store.sqlite import SQLiteStore
from tests.support import ClaimFails, StubApp, base_config, post, stripe_event, stripe_headers

STRIPE = "/webhooks/stripe"


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[Running]:
    stub = await StubApp().start()
    config = parse_config(base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}"), env={})
    proxy = await start(config)
    try:
        yield proxy
    finally:
        await stop(proxy)
        await stub.stop()


async def test_no_answer_on_the_provider_listener_names_the_server(running: Running) -> None:
    url = f"http://{running.listen}"
    body = stripe_event("evt_server")
    async with aiohttp.ClientSession() as client:
        answers = [
            await post(client, url + STRIPE, body, stripe_headers(body)),  # forwarded: 200
            await post(client, url + STRIPE, body, stripe_headers(body)),  # replayed
            await post(client, url + STRIPE, body, stripe_headers(body, secret="whsec_x")),
            await post(client, url + "/nowhere", body, {}),  # unknown path: 404
        ]
        async with client.get(url + STRIPE) as resp:  # wrong method: 405
            answers.append((resp.status, resp.headers, await resp.read()))
    assert [status for status, _, _ in answers] == [200, 200, 401, 404, 405]
    for status, headers, _ in answers:
        assert "Server" not in headers, (status, headers)
        assert "Date" in headers  # the other headers aiohttp adds are still there

    # A request aiohttp's parser refuses is answered by the connection, not the app.
    host, port = running.listen.host, running.listen.port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GARBAGE / NOT-HTTP\r\nHost: x\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5.0)
    finally:
        writer.close()
    head = raw.split(b"\r\n\r\n", 1)[0].decode().lower()
    assert head.startswith("http/1.") and " 400 " in head.split("\r\n")[0], head
    assert "\r\nserver:" not in head and "aiohttp" not in head, head


async def test_a_store_error_delivery_is_logged_as_a_warning(tmp_path: Path) -> None:
    stub = await StubApp().start()
    data = base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}")
    inner = await SQLiteStore.open(str(tmp_path / "events.db"))
    metrics = Metrics()
    down = ClaimFails(inner, StoreError("connection refused"))  # the database is unreachable
    proxy = await start(parse_config(data, env={}), store=down, metrics=metrics)
    try:
        body = stripe_event("evt_down")
        with structlog.testing.capture_logs() as logs:
            async with aiohttp.ClientSession() as client:
                status, headers, _ = await post(client, f"http://{proxy.listen}{STRIPE}", body,
                                                stripe_headers(body))
        assert status == 503 and "Retry-After" in headers
        line = next(e for e in logs if e["event"] == "delivery")
        assert (line["log_level"], line["result"]) == ("warning", "store_error")
        assert stub.count() == 0
    finally:
        await stop(proxy)
        await stub.stop()
        await inner.close()
