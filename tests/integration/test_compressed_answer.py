"""An app's compressed answer reaches the provider as the app sent it, Content-Encoding
included, and is recorded so: a duplicate answered from the row and one answered from the
process's memory get the same bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.runtime.serve import start, stop
from sidecar.store.sqlite import SQLiteStore
from tests.support import Seen, StubApp, base_config, stripe_event, stripe_headers

ANSWER = json.dumps({"received": True, "note": "ünïcödé " * 40}).encode()
GZIPPED = gzip.compress(ANSWER)


async def gzipped(seen: Seen) -> web.StreamResponse:
    return web.Response(body=GZIPPED, headers={"Content-Encoding": "gzip",
                                               "Content-Type": "application/json"})


async def test_a_gzip_answer_is_relayed_and_recorded_as_sent(tmp_path: Path) -> None:
    stub = await StubApp().start()
    stub.behaviour = gzipped
    db = tmp_path / "events.db"
    for answer_cache in ("16MiB", 0):  # a duplicate from memory, then from the row
        running = await start(parse_config(base_config(stub.url, f"sqlite:///{db}",
                                                       answer_cache=answer_cache), env={}))
        try:
            url = f"http://{running.listen}/webhooks/stripe"
            body = stripe_event("evt_gzip")
            # The client decodes nothing: what it reads is what the proxy wrote.
            async with aiohttp.ClientSession(auto_decompress=False) as client:
                for _ in range(3):
                    async with client.post(url, data=body, headers=stripe_headers(body)) as resp:
                        assert resp.status == 200
                        assert resp.headers["Content-Encoding"] == "gzip"
                        assert resp.headers["Content-Type"] == "application/json"
                        assert await resp.read() == GZIPPED
        finally:
            await stop(running)
    assert stub.count("evt_gzip") == 1
    # The app was asked as before (aiohttp's Accept-Encoding where the sender sent none).
    assert "gzip" in stub.seen[0].headers["Accept-Encoding"]
    await stub.stop()

    store = await SQLiteStore.open(db)
    try:
        row = await store.get("stripe", "evt_gzip")
    finally:
        await store.close()
    assert row is not None and row.response is not None
    assert row.response.body == GZIPPED
    assert ("Content-Encoding", "gzip") in row.response.headers
    assert gzip.decompress(row.response.body) == ANSWER
