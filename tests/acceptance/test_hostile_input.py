"""The provider-facing listener under hostile input: compressed bombs, transfer codings, malformed
and over-long requests, slow headers, idle and surplus connections; the admin listener's bounds
under idle connections by the thousand; failed accepts when the process is out of files. A real
proxy process on SQLite, driven over raw sockets on loopback; every wait is bounded and waits
for an event (an answer, the server closing the socket), never a fixed sleep."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import (
    STRIPE_SECRET,
    ProxyProcess,
    StubApp,
    base_config,
    post,
    stripe_event,
    stripe_headers,
    until,
    write_config,
)

STRIPE = "/webhooks/stripe"


# -- raw HTTP over one TCP connection ---------------------------------------------------------

@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Raw:
    """One TCP connection to the proxy, written and read byte for byte."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, address: str) -> Raw:
        host, port = address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()

    async def answer(self, timeout: float = 5.0) -> Answer:
        async with asyncio.timeout(timeout):
            head = await self.reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {name.strip().lower(): value.strip()
                       for name, _, value in (line.partition(":") for line in lines if line)}
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return Answer(int(status_line.split()[1]), headers, body)

    async def closed_by_server(self, timeout: float) -> float:
        """Seconds until the server closes its side (EOF or reset); fails past ``timeout``."""
        started = time.monotonic()
        async with asyncio.timeout(timeout):
            with contextlib.suppress(ConnectionError):
                while await self.reader.read(65536):
                    pass
        return time.monotonic() - started

    async def still_open_after(self, seconds: float) -> bool:
        """True when the server sends nothing and keeps the connection open for ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                data = await self.reader.read(1)
        except TimeoutError:
            return True
        except ConnectionError:
            return False
        return bool(data)

    def close(self) -> None:
        self.writer.close()


def request(body: bytes, headers: dict[str, str], path: str = STRIPE,
            content_length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: sidecar.test"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if "Transfer-Encoding" not in headers:
        lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


# -- a compressed bomb, built in a fraction of a second -----------------------------------------

def gzip_bomb(unpacked: int = 1 << 30, piece: int = 1 << 24) -> bytes:
    """About 1 MB of gzip that unpacks to ``unpacked`` zero bytes. Deflate blocks ended by a
    full flush are byte-aligned and independent, so one block of ``piece`` zeros is compressed
    once and repeated."""
    zeros = bytes(piece)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    steady = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.compress(zeros) + deflate.flush()
    crc = 0
    for _ in range(unpacked // piece):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return (header + first + steady * (unpacked // piece - 2) + last
            + struct.pack("<II", crc, unpacked & 0xFFFFFFFF))


def loop_cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread (its event loop), nanosecond resolution."""
    with open(f"/proc/{pid}/schedstat") as stats:
        return int(stats.read().split()[0]) / 1e9


# -- a proxy process per test -------------------------------------------------------------------

@dataclass
class Proxies:
    """``await proxies.start(key=value…)``: a proxy on SQLite with those top-level keys set,
    forwarding to ``stub``."""

    tmp: Path
    stub: StubApp
    procs: list[ProxyProcess]

    async def start(self, open_files: int | None = None, env: dict[str, str] | None = None,
                    **overrides: Any) -> ProxyProcess:
        config = base_config(self.stub.url, f"sqlite:///{self.tmp / 'events.db'}", **overrides)
        proc = await ProxyProcess(write_config(self.tmp, config), open_files=open_files,
                                  env=env or {}).start()
        self.procs.append(proc)
        return proc


@pytest.fixture
async def proxies(tmp_path: Path) -> AsyncIterator[Proxies]:
    harness = Proxies(tmp_path, await StubApp().start(), [])
    try:
        yield harness
    finally:
        for proc in harness.procs:
            await proc.kill()
        await harness.stub.stop()


# -- 1. compressed bodies -----------------------------------------------------------------------

async def test_compressed_body_is_refused_unread_at_no_cpu_cost(proxies: Proxies) -> None:
    """A 1 MB gzip body unpacking to 1 GiB: 415 from the headers alone, the connection closed
    at once, under 10 ms of the proxy's event-loop CPU; /healthz stays under 50 ms meanwhile."""
    proc = await proxies.start()
    assert proc.proc is not None
    bomb = gzip_bomb()
    headers = {**stripe_headers(b"{}"), "Content-Encoding": "gzip"}

    async def send_bomb() -> float:
        raw = await Raw.open(proc.listen)
        try:
            raw.writer.write(request(bomb, headers))
            answer = await raw.answer()
            assert answer.status == 415 and answer.json()["reason"] == "content_encoding"
            assert answer.headers["connection"] == "close"
            return await raw.closed_by_server(timeout=2.0)
        finally:
            raw.close()

    async with aiohttp.ClientSession() as client:
        async def health() -> float:
            started = time.monotonic()
            async with client.get(proc.admin_url + "/healthz") as resp:
                assert resp.status == 200
            return time.monotonic() - started

        await health()  # connections warm
        before = loop_cpu_seconds(proc.proc.pid)
        await send_bomb()
        await health()  # one round trip through the proxy's loop: it is done with the bomb
        cpu = loop_cpu_seconds(proc.proc.pid) - before

        # /healthz, polled back to back while another bomb goes in.
        sending = asyncio.create_task(send_bomb())
        latencies = [await health()]
        while not sending.done():
            latencies.append(await health())
        await sending
        latencies.append(await health())

    print(f"gzip bomb: proxy loop CPU {cpu * 1000:.2f} ms; /healthz max "
          f"{max(latencies) * 1000:.2f} ms over {len(latencies)} probes")
    assert cpu < 0.010
    assert max(latencies) < 0.050
    assert proxies.stub.count() == 0


async def test_transfer_codings_other_than_chunked_are_refused(proxies: Proxies) -> None:
    proc = await proxies.start()
    stub = proxies.stub
    body = stripe_event("evt_te_gzip")
    packed = zlib.compress(body)
    for coding in ("gzip, chunked", "deflate,chunked", "gzip", "chunked, chunked",
                   "identity, chunked"):
        raw = await Raw.open(proc.listen)
        try:
            await raw.send(request(chunked(packed), {**stripe_headers(body),
                                                     "Transfer-Encoding": coding}))
            answer = await raw.answer()
            assert answer.status in (400, 501), coding
            assert answer.headers["connection"] == "close"
            assert answer.json()["reason"] in ("transfer_encoding", "malformed_request"), coding
            await raw.closed_by_server(timeout=2.0)
        finally:
            raw.close()
    assert stub.count() == 0

    # Plain chunked is how many senders stream a body: forwarded, byte for byte.
    raw = await Raw.open(proc.listen)
    try:
        await raw.send(request(chunked(body), {**stripe_headers(body),
                                               "Transfer-Encoding": "chunked"}))
        assert (await raw.answer()).status == 200
    finally:
        raw.close()
    assert [seen.body for seen in stub.seen] == [body]


# -- 2. logs hold their promise whatever a client sends -----------------------------------------

async def test_malformed_requests_are_one_line_each_without_request_data(
    proxies: Proxies,
) -> None:
    proc = await proxies.start(body_read_timeout="1s")
    marker = "BODY-MARKER-c0ffee"
    body = stripe_event("evt_malformed", note=marker)
    good = stripe_headers(body)["Stripe-Signature"]
    signatures = [good.split("v1=")[1]]
    long_signature = ",".join([good] * 200)  # ~20 KB: past aiohttp's 8190-byte field limit
    malformed = {
        "over-long signature header":
            request(body, {"Stripe-Signature": long_signature}),
        "over-long request line":
            f"POST {STRIPE}?sig={good.replace(',', '&')}{'x' * 9000} HTTP/1.1\r\n"
            f"Host: x\r\n\r\n".encode(),
        "control byte in the signature header":
            request(body, {"Stripe-Signature": good + "\x01"}),
        "no colon in a header line":
            f"POST {STRIPE} HTTP/1.1\r\nHost: x\r\nStripe-Signature {good}\r\n\r\n".encode(),
        "bad request line":
            f"GARBAGE {good} NOT-HTTP\r\nStripe-Signature: {good}\r\n\r\n".encode(),
        "bad chunk size":
            request(b"", {"Stripe-Signature": good, "Transfer-Encoding": "chunked"})
            + f"{len(body):x}\r\n".encode() + body + b"\r\nzz-" + good.encode() + b"\r\n",
        "two content lengths":
            request(body, {"Stripe-Signature": good, "Content-Length": "1"}),
    }
    for name, raw_request in malformed.items():
        raw = await Raw.open(proc.listen)
        try:
            await raw.send(raw_request)
            answer = await raw.answer()
            assert 400 <= answer.status < 500, name
            assert answer.headers["connection"] == "close", name
            assert set(answer.json()) == {"error", "reason"}, name
            assert good not in answer.body.decode(errors="replace"), name
            await raw.closed_by_server(timeout=3.0)
        finally:
            raw.close()

    # A bad chunk sent after the body began: if the handler was already waiting for the body,
    # the body never completes and times out (408); if both parts arrived together, 400.
    raw = await Raw.open(proc.listen)
    try:
        await raw.send(request(b"", {"Stripe-Signature": good, "Transfer-Encoding": "chunked"})
                       + f"{len(body):x}\r\n".encode() + body + b"\r\n")
        await raw.send(b"zz-" + good.encode() + b"\r\n")
        answer = await raw.answer(timeout=5.0)
        assert answer.status in (400, 408)
        await raw.closed_by_server(timeout=3.0)
    finally:
        raw.close()
    expected_rejections = len(malformed) + (answer.status == 400)

    # Requests that parse reach the pipeline: a non-UTF-8 signature, a wrong one. A delivery
    # line each, and no signature in it either.
    wrong = stripe_headers(body, secret="whsec_wrong")["Stripe-Signature"]
    signatures.append(wrong.split("v1=")[1])
    not_utf8 = request(body, {"Stripe-Signature": "x"}).replace(
        b": x\r\n", b": t=1,v1=\xff\xfe" + signatures[0].encode() + b"\r\n")
    for raw_request in (not_utf8, request(body, {"Stripe-Signature": wrong})):
        raw = await Raw.open(proc.listen)
        try:
            await raw.send(raw_request)
            assert (await raw.answer()).status in (400, 401)
        finally:
            raw.close()

    assert await proc.terminate() == 0
    output = "\n".join(proc.raw_logs)
    for forbidden in [STRIPE_SECRET, marker, *signatures, "Traceback"]:
        assert forbidden not in output, forbidden
    assert all(entry.get("level") != "error" for entry in proc.logs), output
    rejected = [entry for entry in proc.logs if entry.get("event") == "rejected"]
    assert len(rejected) == expected_rejections, output
    assert all(entry["reason"] and entry["status"] == 400 for entry in rejected)
    assert {entry["reason"] for entry in rejected} >= {"line_too_long", "bad_method"}
    assert len(proc.raw_logs) == len(proc.logs), "every line is JSON"


# -- 3. slow headers, idle and surplus connections, refused bodies -------------------------------

async def test_headers_not_sent_in_time_close_the_connection(proxies: Proxies) -> None:
    proc = await proxies.start(header_read_timeout="500ms", idle_timeout="30s")
    silent = await Raw.open(proc.listen)  # connects, sends nothing
    partial = await Raw.open(proc.listen)  # starts a request, never finishes its headers
    try:
        await partial.send(f"POST {STRIPE} HTTP/1.1\r\nHost: x\r\nStripe-Sig".encode())
        waits = await asyncio.gather(silent.closed_by_server(timeout=3.0),
                                     partial.closed_by_server(timeout=3.0))
    finally:
        silent.close()
        partial.close()
    assert all(0.4 < seconds < 3.0 for seconds in waits), waits
    closed = [entry for entry in proc.logs if entry.get("event") == "connection_closed"]
    assert [entry["reason"] for entry in closed] == ["header_timeout"] * 2


async def test_kept_alive_connection_idles_until_idle_timeout(proxies: Proxies) -> None:
    """The header timer starts with a request's first byte, so an idle kept-alive connection
    outlives header_read_timeout, until idle_timeout; then a request's headers are timed."""
    proc = await proxies.start(header_read_timeout="300ms", idle_timeout="1500ms")
    raw = await Raw.open(proc.listen)
    try:
        await raw.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await raw.answer()).status == 405  # answered, kept alive
        assert await raw.still_open_after(0.6)  # past header_read_timeout: idle is allowed
        await raw.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await raw.answer()).status == 405
        assert 1.0 < await raw.closed_by_server(timeout=4.0) < 4.0  # idle_timeout
    finally:
        raw.close()

    raw = await Raw.open(proc.listen)
    try:
        await raw.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await raw.answer()).status == 405
        await raw.send(b"GET /webhooks/stripe HTTP/1.1\r\n")  # the next request stalls
        assert await raw.closed_by_server(timeout=3.0) < 1.2  # header_read_timeout
    finally:
        raw.close()


async def test_refused_bodies_close_their_connection_at_once(proxies: Proxies) -> None:
    """413, 415, 408: the answer, then the server's side closes at once; the rest of the body
    is not waited for (aiohttp would drain it for up to 10 s)."""
    proc = await proxies.start(body_read_timeout="500ms")
    body = stripe_event("evt_refused")
    cases = {
        413: request(body[:10], stripe_headers(body), content_length=50 * 1024 * 1024),
        415: request(body[:10], {**stripe_headers(body), "Content-Encoding": "br"},
                     content_length=len(body)),
        408: request(body[:10], stripe_headers(body), content_length=len(body)),
    }
    for status, raw_request in cases.items():
        raw = await Raw.open(proc.listen)
        try:
            await raw.send(raw_request)  # the body's first bytes only; the rest never comes
            answer = await raw.answer()
            assert answer.status == status
            assert answer.headers["connection"] == "close"
            assert await raw.closed_by_server(timeout=2.0) < 0.5, status
        finally:
            raw.close()
    assert proxies.stub.count() == 0


async def test_at_max_connections_the_connection_idle_longest_gives_way(
    proxies: Proxies,
) -> None:
    """At the cap a new connection takes the place of the one idle longest (kept alive since
    its answer, or silent since it opened), which the proxy closes; while every connection is
    inside a request, a new one is closed at once instead (senders retry)."""
    proc = await proxies.start(max_connections=3)
    stub = proxies.stub
    stub.hold.clear()  # the app holds its answers: three connections inside a delivery
    busy = [await Raw.open(proc.listen) for _ in range(3)]
    try:
        for i, raw in enumerate(busy):
            body = stripe_event(f"evt_busy_{i}")
            await raw.send(request(body, stripe_headers(body)))
        await stub.wait_for(lambda: stub.count() == 3)
        surplus = await Raw.open(proc.listen)
        try:
            await surplus.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert await surplus.closed_by_server(timeout=2.0) < 1.0
        finally:
            surplus.close()
        entry = await proc.wait_for_log("connection_refused", timeout=2.0)
        assert entry["reason"] == "too_many_connections" and entry["max_connections"] == 3

        stub.hold.set()  # answered: each is kept alive, idle, in the order answered
        for raw in busy:
            assert (await raw.answer()).status == 200
        await busy[0].send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await busy[0].answer()).status == 405  # busy[0] is now the one idle least
        newcomer = await Raw.open(proc.listen)
        busy.append(newcomer)
        await newcomer.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await newcomer.answer()).status == 405
        closed = await asyncio.gather(*(raw.closed_by_server(timeout=2.0) for raw in busy[1:3]),
                                      return_exceptions=True)
        assert sum(isinstance(wait, float) for wait in closed) == 1, closed
        entry = await proc.wait_for_log("idle_connections_closed", timeout=2.0)
        assert entry["listener"] == "listen" and entry["closed"] == 1
        assert entry["max_connections"] == 3
    finally:
        for raw in busy:
            raw.close()


# -- 4. the admin listener: the same bounds, its own cap; accept failures ------------------------

def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def test_admin_connections_get_the_header_and_idle_timeouts(proxies: Proxies) -> None:
    proc = await proxies.start(header_read_timeout="500ms", idle_timeout="1500ms")
    silent = await Raw.open(proc.admin)  # connects, sends nothing
    partial = await Raw.open(proc.admin)  # starts a request, never finishes its headers
    try:
        await partial.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Sl")
        waits = await asyncio.gather(silent.closed_by_server(timeout=3.0),
                                     partial.closed_by_server(timeout=3.0))
    finally:
        silent.close()
        partial.close()
    assert all(0.4 < seconds < 3.0 for seconds in waits), waits

    kept = await Raw.open(proc.admin)
    try:
        await kept.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await kept.answer()).status == 200  # kept alive…
        assert await kept.still_open_after(0.6)  # …past header_read_timeout…
        assert 0.5 < await kept.closed_by_server(timeout=4.0) < 4.0  # …until idle_timeout
    finally:
        kept.close()
    closed = [entry for entry in proc.logs if entry.get("event") == "connection_closed"]
    assert [(entry["reason"], entry["listener"]) for entry in closed] \
        == [("header_timeout", "admin_listen")] * 2


async def test_kept_alive_admin_connections_at_the_cap_leave_room_for_a_probe(
    proxies: Proxies,
) -> None:
    """64 connections (admin_max_connections' default) each answered once and kept alive, as
    a scraper or someone holding connections keeps them: the cap is full, and the next probe
    is answered all the same, in place of the connection idle longest, which is closed; the
    provider listener (whose cap is not shared) answers throughout."""
    proc = await proxies.start()
    kept = [await Raw.open(proc.admin) for _ in range(64)]
    try:
        for raw in kept:
            await raw.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await raw.answer()).status == 200
        probe = await Raw.open(proc.admin)
        kept.append(probe)
        await probe.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await probe.answer()).status == 200
        assert await kept[0].closed_by_server(timeout=2.0) < 1.0  # idle longest: it gave way
        entry = await proc.wait_for_log("idle_connections_closed", timeout=2.0)
        assert entry["listener"] == "admin_listen" and entry["max_connections"] == 64
        provider = await Raw.open(proc.listen)
        kept.append(provider)
        await provider.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await provider.answer()).status == 405
    finally:
        for raw in kept:
            raw.close()
    assert not any(entry.get("event") == "connection_refused" for entry in proc.logs)


async def test_thousands_of_idle_admin_connections_leave_deliveries_their_answers(
    proxies: Proxies,
) -> None:
    """3000 connections opened on the admin port and held, silent, by a proxy allowed 300 open
    files: the admin listener keeps 64 (admin_max_connections' default), each newcomer in the
    place of the one silent longest, so the files are not used up and every delivery is
    answered at once."""
    upstream = {"url": proxies.stub.url, "timeout": "2s", "max_connections": 20}
    proc = await proxies.start(open_files=300, max_connections=100, upstream=upstream)
    assert proc.proc is not None
    held: list[Raw] = []

    async def hold() -> None:
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(5.0):
                held.append(await Raw.open(proc.admin))

    started = time.monotonic()
    try:
        for _ in range(15):
            await asyncio.gather(*(hold() for _ in range(200)))
        flooded = time.monotonic() - started
        files = open_files(proc.proc.pid)
        pid = proc.proc.pid
        # The admin cap and the process's own files, once the proxy has taken in the last
        # connections of the flood (on a loaded host it may be a batch or so behind).
        await until(lambda: open_files(pid) < 64 + 50, timeout=10.0)

        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            async def deliver(i: int) -> tuple[int, float]:
                body = stripe_event(f"evt_admin_flood_{i}")
                sent = time.monotonic()
                status, _, _ = await post(client, proc.url + STRIPE, body, stripe_headers(body))
                return status, time.monotonic() - sent

            answers = await asyncio.gather(*(deliver(i) for i in range(20)))
    finally:
        for raw in held:
            raw.close()
    slowest = max(seconds for _, seconds in answers)
    print(f"admin flood: {len(held)} connections opened in {flooded:.2f} s; proxy files open "
          f"{files}; 20 deliveries, slowest {slowest * 1000:.1f} ms")
    assert len(held) >= 2000  # some connects may time out on a loaded host; thousands do not
    assert [status for status, _ in answers] == [200] * 20
    assert slowest < 3.0  # ~50 ms here; without the cap, none is answered within 5 s
    closed = [entry for entry in proc.logs if entry.get("event") == "idle_connections_closed"]
    assert closed and all(entry["listener"] == "admin_listen" for entry in closed)
    assert len(closed) <= 2  # one line per 10 s at most, with a count
    assert not any("out of system resource" in line for line in proc.raw_logs)


async def test_the_open_file_check_counts_both_listeners(proxies: Proxies) -> None:
    """max_connections + upstream.max_connections + store.pool_max_size + 64 spare = 194 files
    fit a limit of 220; the admin listener's 64 more do not."""
    upstream = {"url": proxies.stub.url, "timeout": "2s", "max_connections": 20}
    proc = await proxies.start(open_files=220, max_connections=100, upstream=upstream)
    entry = await proc.wait_for_log("open_file_limit_low", timeout=5.0)
    assert entry["limit"] == 220 and entry["needed"] == 100 + 64 + 20 + 10 + 64
    assert entry["max_connections"] == 100 and entry["admin_max_connections"] == 64


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_accept_failures_are_one_line_per_burst(proxies: Proxies, loop: str) -> None:
    """Connections past the open-file limit: the accept fails (EMFILE), where asyncio would log
    each failure with a traceback, up to 100 per wakeup, and uvloop would close the listener
    for good; on either loop the proxy logs one ``accept_failed`` line for the burst, with a
    count, once accepting works again, and then serves as before."""
    limit = 64
    proc = await proxies.start(open_files=limit, header_read_timeout="60s",
                               env={"WEBHOOK_SIDECAR_LOOP": loop})
    assert next(e for e in proc.logs if e.get("event") == "listening")["loop"] \
        .startswith(loop)
    assert proc.proc is not None
    probe = await Raw.open(proc.listen)  # accepted before the flood
    held: list[Raw] = []

    async def hold() -> None:
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(3.0):
                held.append(await Raw.open(proc.listen))

    try:
        await probe.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await probe.answer()).status == 405
        await asyncio.gather(*(hold() for _ in range(3 * limit)))
        pid = proc.proc.pid
        await until(lambda: open_files(pid) >= limit, timeout=10.0)  # the files are used up…
        # …and connections wait to be accepted: the loop's next turn tries, and fails. One
        # round trip on the probe is a turn of the loop after that.
        await probe.send(f"GET {STRIPE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (await probe.answer()).status == 405
    finally:
        for raw in held:
            raw.close()
        probe.close()
    entry = await proc.wait_for_log("accept_failed", timeout=10.0)
    assert entry["listener"] == "listen" and entry["error"] == "EMFILE"
    assert entry["count"] >= 1 and entry["level"] == "warning"

    async with aiohttp.ClientSession() as client:  # accepting again
        body = stripe_event("evt_after_the_burst")
        assert (await post(client, proc.url + STRIPE, body, stripe_headers(body)))[0] == 200
    failed = [entry for entry in proc.logs if entry.get("event") == "accept_failed"]
    print(f"accept failures: {[entry['count'] for entry in failed]} in {len(failed)} line(s)")
    assert len(failed) == 1
    assert not any("out of system resource" in line for line in proc.raw_logs)


async def test_an_expect_value_that_is_not_utf8_is_a_417_on_every_route(
        proxies: Proxies) -> None:
    """aiohttp answers an Expect other than 100-continue with a 417 quoting it, before any
    route or middleware; a value that is not UTF-8 made that answer fail (a 500)."""
    proc = await proxies.start()
    body = stripe_event("evt_expect")
    cases = [(proc.listen, request(body, {"Stripe-Signature": "x"})),
             (proc.listen, b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"),
             (proc.admin, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")]
    for address, raw_request in cases:
        raw = await Raw.open(address)
        try:
            await raw.send(raw_request.replace(b"Host:", b"Expect: \xff\xfe-continue\r\nHost:", 1))
            answer = await raw.answer()
            assert answer.status == 417, answer.body
            assert answer.json()["reason"] == "unknown_expect"
        finally:
            raw.close()
    assert await proc.terminate() == 0
    assert all(entry.get("level") != "error" for entry in proc.logs), proc.raw_logs
    rejected = [e for e in proc.logs if e.get("event") == "rejected"]
    assert [e["reason"] for e in rejected] == ["unknown_expect"] * len(cases)
