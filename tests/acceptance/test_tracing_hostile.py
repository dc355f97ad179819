"""Tracing on, a sender's bytes never change an answer nor lose spans: a real proxy process on
SQLite exporting to a real OTLP/HTTP receiver on loopback, driven over raw sockets (the bytes
no HTTP client would send). Every wait is bounded and waits for an event."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import pytest

from tests.acceptance.test_tracing import Receiver, deliver, proxy
from tests.support import ProxyProcess, stripe_event, stripe_headers, until

STRIPE = "/webhooks/stripe"
SERVER_SPAN = f"POST {STRIPE}"


async def raw_delivery(process: ProxyProcess, event_id: str, *, host: bytes = b"proxy",
                       user_agent: bytes | None = None) -> int:
    """The status of a signed delivery of ``event_id`` sent byte for byte: ``Host`` and
    ``User-Agent`` as given, whatever bytes they are."""
    body = stripe_event(event_id)
    head = [b"POST " + STRIPE.encode() + b" HTTP/1.1", b"Host: " + host,
            b"Content-Length: " + str(len(body)).encode(), b"Connection: close"]
    head += [f"{name}: {value}".encode() for name, value in stripe_headers(body).items()]
    if user_agent is not None:
        head.append(b"User-Agent: " + user_agent)
    address, port = process.listen.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(address, int(port))
    try:
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        await writer.drain()
        async with asyncio.timeout(10):
            status_line = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return int(status_line.split()[1])


async def events_total(client: aiohttp.ClientSession, process: ProxyProcess) -> float:
    async with client.get(f"{process.admin_url}/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('webhook_events_total{provider="stripe"'))


@pytest.mark.parametrize("host", [b"a:99999", b"x:abc", b"xn--", b"", b"\xc3\xa9.example:8080",
                                  b"\xff:1"], ids=["port-out-of-range", "port-not-a-number",
                                                   "idna-refused", "empty", "non-ascii",
                                                   "not-utf-8"])
async def test_any_host_gets_the_normal_answer_one_delivery_line_and_one_count(
    tmp_path: Path, host: bytes,
) -> None:
    receiver = await Receiver().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
           "OTEL_BSP_SCHEDULE_DELAY": "50"}
    try:
        async with proxy(tmp_path, env) as (process, stub), aiohttp.ClientSession() as client:
            before = await events_total(client, process)
            assert await raw_delivery(process, "evt_host", host=host) == 200
            assert stub.count("evt_host") == 1
            await until(lambda: any(e.get("event") == "delivery" for e in process.logs), 10)
            lines = [e for e in process.logs if e.get("event") == "delivery"]
            assert [e.get("event_id") for e in lines] == ["evt_host"]
            assert lines[0]["status"] == 200
            assert await events_total(client, process) == before + 1
            await until(lambda: any(s.name == SERVER_SPAN for _, s in receiver.spans), 10)
        output = "\n".join(process.raw_logs)
        assert not any(e.get("level") == "error" for e in process.logs), output
    finally:
        await receiver.stop()


async def test_a_non_utf8_user_agent_loses_no_span_and_long_values_are_cut(
    tmp_path: Path,
) -> None:
    """One batch (nothing is exported before shutdown) holds the spans of 20 deliveries and of
    one whose User-Agent is the byte 0xFF: all 21 server spans reach the collector."""
    receiver = await Receiver().start()
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
           "OTEL_BSP_SCHEDULE_DELAY": "600000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2048"}
    try:
        async with proxy(tmp_path, env) as (process, _), aiohttp.ClientSession() as client:
            for i in range(10):
                assert await deliver(client, process, f"evt_good_{i}") == 200
            assert await raw_delivery(process, "evt_bad_agent", user_agent=b"\xff") == 200
            assert await raw_delivery(process, "evt_long_agent", user_agent=b"x" * 8000) == 200
            for i in range(10, 19):
                assert await deliver(client, process, f"evt_good_{i}") == 200
            assert receiver.exports == 0  # all in the final export
        # Stopped: the final export has been answered.
        servers = {attributes["webhook.event_id"].string_value: attributes
                   for attributes in ({a.key: a.value for a in span.attributes}
                                      for _, span in receiver.spans if span.name == SERVER_SPAN)}
        assert len(servers) == 21, sorted(servers)
        assert servers["evt_bad_agent"]["user_agent.original"].string_value == "\ufffd"
        assert len(servers["evt_long_agent"]["user_agent.original"].string_value) == 4096
        dropped = [line for line in process.raw_logs if "cannot be encoded" in line
                   or "exporting" in line]
        assert not dropped, dropped
    finally:
        await receiver.stop()
