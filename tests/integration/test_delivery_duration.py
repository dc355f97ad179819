"""``webhook_delivery_duration_seconds{provider,result}`` on a real loopback listener: a delivery
is timed from the first byte of its request received to the last byte of its answer written.

A slow sender pauses inside its headers and inside its body, and the app answers only when the
test lets it: the observed duration holds those known gaps (the pause in the headers is before
aiohttp knows of the request at all), and no more than the sender saw. A second request on the
kept-alive connection is timed from its own first byte, not from the connection's idle time
before it. One observation per delivery, labelled like ``webhook_events_total``; the store's
coalesced writes reach the same metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from sidecar.config.loader import parse_config
from sidecar.obs.metrics import Metrics
from sidecar.runtime.serve import Running, start, stop
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers, until

GAP = 0.25  # each pause the sender or the app makes, in seconds


@pytest.fixture
async def proxy(tmp_path: Path) -> AsyncIterator[tuple[Running, StubApp, Metrics]]:
    stub = await StubApp().start()
    metrics = Metrics()
    config = parse_config(base_config(stub.url, f"sqlite:///{tmp_path / 'events.db'}"), env={})
    running = await start(config, metrics=metrics)
    try:
        yield running, stub, metrics
    finally:
        await stop(running)
        await stub.stop()


def request_bytes(host: str, body: bytes) -> bytes:
    headers = {"Host": host, "Content-Length": str(len(body)), **stripe_headers(body)}
    return ("POST /webhooks/stripe HTTP/1.1\r\n"
            + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            + "\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines
                  if line.lower().startswith("content-length:"))
    return int(lines[0].split()[1]), await reader.readexactly(length)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def observed(metrics: Metrics, result: str, count: int) -> float:
    """The summed duration of ``result``'s deliveries, once ``count`` of them are observed
    (a bounded poll: the observation follows the answer's write)."""
    labels = {"provider": "stripe", "result": result}
    await until(lambda: sample(metrics, "webhook_delivery_duration_seconds_count",
                               **labels) >= count, timeout=5)
    assert sample(metrics, "webhook_delivery_duration_seconds_count", **labels) == count
    return sample(metrics, "webhook_delivery_duration_seconds_sum", **labels)


async def test_a_delivery_is_timed_from_its_first_byte_to_its_answers_last(
    proxy: tuple[Running, StubApp, Metrics],
) -> None:
    running, stub, metrics = proxy
    host = f"{running.listen.host}:{running.listen.port}"
    raw = request_bytes(host, stripe_event("evt_slow"))
    headers_end = raw.index(b"\r\n\r\n")
    # Paused inside the headers, then inside the body.
    parts = [raw[:30], raw[30:headers_end + 4 + 10], raw[headers_end + 4 + 10:]]
    stub.hold.clear()
    reader, writer = await asyncio.open_connection(running.listen.host, running.listen.port)
    try:
        first_sent = time.monotonic()
        gaps = 0.0
        for n, part in enumerate(parts):
            if n:
                paused = time.monotonic()
                await asyncio.sleep(GAP)  # the sender's pause, measured: not a synchronisation
                gaps += time.monotonic() - paused
            writer.write(part)
            await writer.drain()
        await stub.wait_for(lambda: stub.count("evt_slow") == 1, what="the forward")
        held = time.monotonic()
        await asyncio.sleep(GAP)  # the app's time to answer, measured
        gaps += time.monotonic() - held
        stub.hold.set()
        status, _ = await read_answer(reader)
        seen_by_sender = time.monotonic() - first_sent
        assert status == 200

        duration = await observed(metrics, "new", 1)
        print(f"known gaps {gaps:.4f} s <= observed {duration:.4f} s "
              f"<= seen by the sender {seen_by_sender:.4f} s")
        assert gaps <= duration <= seen_by_sender

        # The same event again on the kept-alive connection, after it sat idle: timed from
        # its own first byte.
        await asyncio.sleep(GAP)  # idle, measured as not counted
        again = request_bytes(host, stripe_event("evt_slow"))
        sent = time.monotonic()
        writer.write(again)
        await writer.drain()
        status, _ = await read_answer(reader)
        seen_by_sender = time.monotonic() - sent
        assert status == 200
        duplicate = await observed(metrics, "duplicate", 1)
        assert 0 < duplicate <= seen_by_sender < GAP
    finally:
        writer.close()
        await writer.wait_closed()

    # A refusal is a delivery too, under its own result.
    async with aiohttp.ClientSession() as client:
        body = stripe_event("evt_forged")
        status, _, _ = await post(client, f"http://{host}/webhooks/stripe", body,
                                  stripe_headers(body, secret="whsec_not_the_one"))
    assert status == 401
    await observed(metrics, "invalid_signature", 1)

    # One observation per delivery, under the labels webhook_events_total counts it by.
    for result in ("new", "duplicate", "invalid_signature"):
        labels = {"provider": "stripe", "result": result}
        assert sample(metrics, "webhook_events_total", **labels) == 1, result
    assert stub.count() == 1
    # The store the proxy opened reports its coalesced writes to the same metrics.
    claims = sample(metrics, "webhook_store_batch_size_sum", verb="claim")
    completes = sample(metrics, "webhook_store_batch_size_sum", verb="complete")
    # (The duplicate may be answered from the memory of known answers, without a claim.)
    assert claims in (1, 2) and completes == 1
    assert sample(metrics, "webhook_store_singles_total", verb="claim") == claims
