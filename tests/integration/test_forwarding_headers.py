"""Forwarding headers end to end: the proxy in-process on loopback with a real SQLite store, a
real HTTP client sending forged ``X-Forwarded-*``, ``Forwarded`` and ``X-Real-IP``, and the stub
app recording what it receives. The client's peer is 127.0.0.1: replaced unless trusted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.config.loader import parse_config
from sidecar.runtime.serve import start, stop
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers

FORGED = {
    "X-Forwarded-For": "6.6.6.6",
    "X-Forwarded-Proto": "gopher",
    "X-Forwarded-Host": "bank.example",
    "X-Forwarded-Port": "4443",
    "Forwarded": "for=6.6.6.6;proto=gopher",
    "X-Real-IP": "6.6.6.7",
}

Deliver = Callable[[dict[str, Any]], Awaitable[dict[str, str]]]


@pytest.fixture
async def deliver(tmp_path: Path) -> AsyncIterator[Deliver]:
    """``await deliver(top_level_keys)``: starts the proxy with those keys, posts one signed
    Stripe delivery with forged forwarding headers, and returns the headers the app got."""
    stub = await StubApp().start()
    try:
        async def run(top: dict[str, Any]) -> dict[str, str]:
            store = f"sqlite:///{tmp_path / f'events-{len(stub.seen)}.db'}"
            config = parse_config(base_config(stub.url, store, **top), env={})
            running = await start(config)
            try:
                body = stripe_event(f"evt_fwd_{len(stub.seen)}")
                headers = {**stripe_headers(body), **FORGED, "Host": "hooks.example.com"}
                async with aiohttp.ClientSession() as client:
                    status, _, _ = await post(
                        client, f"http://{running.listen}/webhooks/stripe", body, headers)
                assert status == 200
            finally:
                await stop(running)
            return {name.lower(): value for name, value in stub.seen[-1].headers.items()}

        yield run
    finally:
        await stub.stop()


def _forwarding(headers: dict[str, str]) -> dict[str, str]:
    return {n: v for n, v in headers.items()
            if n.startswith("x-forwarded-") or n in ("forwarded", "x-real-ip")}


async def test_forged_headers_from_an_untrusted_peer_are_replaced(deliver: Deliver) -> None:
    got = await deliver({})
    assert _forwarding(got) == {"x-forwarded-for": "127.0.0.1", "x-forwarded-proto": "http",
                                "x-forwarded-host": "hooks.example.com"}
    assert got["host"] != "hooks.example.com"  # the app's own Host is the upstream's


async def test_a_trusted_peer_is_appended_to(deliver: Deliver) -> None:
    got = await deliver({"trusted_proxies": ["127.0.0.1/32"]})
    assert _forwarding(got) == {
        "x-forwarded-for": "6.6.6.6, 127.0.0.1", "x-forwarded-proto": "gopher",
        "x-forwarded-host": "bank.example", "x-forwarded-port": "4443",
        "forwarded": "for=6.6.6.6;proto=gopher, for=127.0.0.1", "x-real-ip": "6.6.6.7"}
