"""A known duplicate's answer written as bytes made once (``http.listener.PreparedResponse``):
byte for byte what aiohttp writes for the same answer, ``Date`` aside; the connection kept open;
the log line, the counts and the duration as before; and aiohttp's general path still taken
where it decides more (``Connection: close``, HTTP/1.0).

Two proxies in this process share one SQLite file: ``cached`` remembers done rows
(``answer_cache``), ``bare`` does not and answers every duplicate from the row, through
aiohttp's response machinery. The memory may save work, never change an answer."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web

from sidecar.config.loader import parse_config
from sidecar.core.answers import Encoded
from sidecar.http.appkeys import METRICS
from sidecar.http.listener import ProviderResponse, prepared
from sidecar.http.listener.response import MAX_PREPARED_BYTES
from sidecar.runtime.serve import Running, start, stop
from tests.support import Seen, StubApp, base_config, stripe_event, stripe_headers

STRIPE = "/webhooks/stripe"
DATE = re.compile(rb"\r\nDate: [^\r]*\r\n")


@dataclass
class Pair:
    cached: Running
    bare: Running
    stub: StubApp


async def app_answer(seen: Seen) -> web.StreamResponse:
    """An answer with headers of the app's own, a repeated one among them."""
    response = web.json_response({"event": seen.event_id, "attempt": seen.attempt},
                                 headers={"X-App": "one"})
    response.headers.add("X-Many", "a")
    response.headers.add("X-Many", "b")
    return response


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    stub = await StubApp().start()
    stub.behaviour = app_answer
    store = f"sqlite:///{tmp_path / 'events.db'}"
    cached = await start(parse_config(base_config(stub.url, store), env={}))
    try:
        bare = await start(parse_config(base_config(stub.url, store, answer_cache=0), env={}))
        try:
            yield Pair(cached, bare, stub)
        finally:
            await stop(bare)
    finally:
        await stop(cached)
        await stub.stop()


class Connection:
    """One raw keep-alive connection: the exact bytes of each answer."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Connection:
        listen = self.running.listen
        self.reader, self.writer = await asyncio.open_connection(listen.host, listen.port)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self.writer is not None
        self.writer.close()

    async def post(self, body: bytes, *, version: str = "1.1",
                   extra: dict[str, str] | None = None) -> bytes:
        assert self.reader is not None and self.writer is not None
        headers = {**stripe_headers(body), **(extra or {})}
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.writer.write(f"POST {STRIPE} HTTP/{version}\r\nHost: x\r\n{head}"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        answer = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", answer)
        assert length is not None, answer
        return answer + await asyncio.wait_for(self.reader.readexactly(int(length[1])), 10)

    async def closed(self) -> bool:
        assert self.reader is not None
        return await asyncio.wait_for(self.reader.read(), 10) == b""


def undated(answer: bytes) -> bytes:
    assert len(DATE.findall(answer)) == 1, answer
    return DATE.sub(b"\r\nDate: -\r\n", answer)


def built_by_aiohttp(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses of the answers aiohttp builds from here on (``ProviderResponse``)."""
    built: list[int] = []
    prepare = ProviderResponse._prepare_headers

    async def counted(self: ProviderResponse) -> None:
        built.append(self.status)
        await prepare(self)

    monkeypatch.setattr(ProviderResponse, "_prepare_headers", counted)
    return built


async def test_a_known_duplicate_is_written_from_bytes_made_once_as_aiohttp_would_write_it(
    pair: Pair, monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = stripe_event("evt_wire")
    async with Connection(pair.cached) as cached, Connection(pair.bare) as bare:
        first = await cached.post(body)  # forwarded: the row is done, and remembered
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        built = built_by_aiohttp(monkeypatch)
        known = [await cached.post(body) for _ in range(3)]  # one connection, kept open
        assert built == [], "a known duplicate's answer is not built by aiohttp"
        from_row = [await bare.post(body) for _ in range(3)]
        assert built == [200] * 3, "the proxy without the memory answers the general way"
    assert pair.stub.count("evt_wire") == 1
    assert {undated(a) for a in known} == {undated(a) for a in from_row}
    assert len({undated(a) for a in known}) == 1
    answer = known[0]
    assert b"\r\nX-Webhook-Sidecar-Replay: true\r\n" in answer
    assert b"\r\nX-App: one\r\n" in answer
    assert b"\r\nX-Many: a\r\nX-Many: b\r\n" in answer
    assert b"\r\nServer:" not in answer and b"\r\nConnection:" not in answer


async def test_what_aiohttp_decides_more_for_goes_the_general_way(
    pair: Pair, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Connection: close`` and HTTP/1.0: aiohttp's answer (its ``Connection`` header, the
    connection closed after it), also for a known duplicate."""
    body = stripe_event("evt_close")
    async with Connection(pair.cached) as first:
        await first.post(body)
    built = built_by_aiohttp(monkeypatch)
    for running in (pair.cached, pair.bare):
        async with Connection(running) as closing:
            answer = await closing.post(body, extra={"Connection": "close"})
            assert b"\r\nConnection: close\r\n" in answer and b"Replay: true" in answer
            assert await closing.closed()
        async with Connection(running) as old:
            answer = await old.post(body, version="1.0", extra={"Connection": "keep-alive"})
            assert answer.startswith(b"HTTP/1.0 200 OK\r\n"), answer
            assert b"\r\nConnection: keep-alive\r\n" in answer and b"Replay: true" in answer
    assert built == [200] * 4


async def test_a_known_duplicate_is_logged_counted_and_timed_as_before(pair: Pair) -> None:
    body = stripe_event("evt_seen")
    metrics = pair.cached.apps.proxy[METRICS]

    def count(name: str) -> float:
        value = metrics.registry.get_sample_value(
            name, {"provider": "stripe", "result": "duplicate"})
        return value or 0.0

    async with Connection(pair.cached) as cached:
        await cached.post(body)
        with structlog.testing.capture_logs() as logs:
            await cached.post(body)
            await cached.post(body)
    lines = [line for line in logs if line["event"] == "delivery"]
    assert [(line["result"], line["status"], line.get("known")) for line in lines] == \
        [("duplicate", 200, True)] * 2
    assert count("webhook_events_total") == 2
    assert count("webhook_delivery_duration_seconds_count") == 2


def test_bytes_are_made_once_and_only_where_aiohttp_decides_nothing_more() -> None:
    encoded = Encoded()
    first = prepared(200, (("Content-Type", "application/json"),), b"{}", encoded)
    again = prepared(200, (("Content-Type", "application/json"),), b"{}", encoded)
    assert first is not None and again is not None
    assert isinstance(encoded.parts, tuple) and again._parts is first._parts is encoded.parts

    refused = [
        (204, (), b""),  # no body: aiohttp drops Content-Length
        (200, (("X-Bad", "a\nb"),), b""),  # aiohttp refuses it (a 500)
        (200, (("Date", "then"),), b""),  # a header aiohttp sets itself
        (200, (), b"x" * (MAX_PREPARED_BYTES + 1)),  # written with a drain
    ]
    for status, headers, body in refused:
        slot = Encoded()
        assert prepared(status, headers, body, slot) is None, (status, headers)
        assert slot.parts is False  # not tried again at the next duplicate


async def test_a_prepared_answer_waits_while_the_peer_reads_nothing() -> None:
    """A sender that pipelines copies of a done event and reads no answers must not pile them
    up in the transport's buffer: once the transport says its buffer is past the high-water
    mark (writing paused), the answer waits for it to drain, as aiohttp's writer does."""
    drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    class Transport:
        written: list[bytes] = []

        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes) -> None:
            self.written.append(data)

    class Protocol:
        writing_paused = True

        async def _drain_helper(self) -> None:
            await drained

    request: Any = type("Request", (), {"transport": Transport(), "protocol": Protocol()})()
    answer = prepared(200, (("Content-Type", "application/json"),), b"{}", Encoded())
    assert answer is not None
    writing = asyncio.ensure_future(answer.prepare(request))
    await asyncio.sleep(0)  # one loop turn: the write is made, then the drain awaited
    assert Transport.written and not writing.done(), "it waits for the peer to read"
    drained.set_result(None)
    await asyncio.wait_for(writing, 5)
