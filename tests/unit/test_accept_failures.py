"""Failed accepts: the listener accepts by itself, on asyncio's loop and on uvloop's alike. Out
of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) it counts the failure, stops reading the socket
and tries again a second later, so the listener never closes; the failures are one
``accept_failed`` line per burst, with a count. The listening sockets here are real, on
loopback, with an ``accept`` that fails as the kernel's would; the clock is the event loop's,
with the delays shortened."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import structlog
from aiohttp import web

from sidecar.http.listener import AcceptFailures, Bounds, Listener, accept
from tests.support import until


class FlakyAccepts(socket.socket):
    """A listening socket whose next ``failing`` accepts fail with ``error``."""

    failing = 0
    error = errno.EMFILE
    failed = 0

    def accept(self) -> tuple[socket.socket, Any]:
        if self.failing:
            self.failing -= 1
            self.failed += 1
            raise OSError(self.error, "as the kernel would")
        return super().accept()


@dataclass
class Listening:
    listener: Listener
    sock: FlakyAccepts
    handled: list[asyncio.AbstractEventLoop]  # the loop each answer was made on

    async def get(self, timeout: float = 5.0) -> bytes:
        """One request on a new connection; the answer's bytes."""
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(*self.sock.getsockname()[:2])
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return await reader.read()
            finally:
                writer.close()


@pytest.fixture
async def listening() -> AsyncIterator[Listening]:
    """A real listener on loopback whose accepts fail as told, answering ``ok``."""
    handled: list[asyncio.AbstractEventLoop] = []

    async def ok(_: web.Request) -> web.Response:
        handled.append(asyncio.get_running_loop())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = Listener(runner, Bounds("listen", 5.0, 5.0, 10))
    sock = FlakyAccepts(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await listener.open([sock])
    try:
        yield Listening(listener, sock, handled)
    finally:
        listener.close()
        listener.failures.close()
        await runner.cleanup()


async def until_logged(logs: list[dict[str, Any]], count: int) -> None:
    """Until the bursts' own timers have logged ``count`` lines."""
    await until(lambda: len([e for e in logs if e["event"] == "accept_failed"]) >= count, 5.0)


@pytest.fixture
def short_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "ACCEPT_BURST_QUIET", 0.2)
    monkeypatch.setattr(accept, "REFUSALS_LOGGED_EVERY", 0.3)
    monkeypatch.setattr(accept, "ACCEPT_RETRY_DELAY", 0.05)


@pytest.mark.every_loop
async def test_a_failed_accept_is_counted_and_the_listener_serves_after_the_burst(
    short_bursts: None, listening: Listening,
) -> None:
    """Three accepts fail (out of files): each is counted, the socket is left alone until the
    retry, and the connection that waited is served by the fourth; one line for the burst.
    Nothing reaches the loop's exception handler (no traceback)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    listening.sock.failing = 3
    try:
        with structlog.testing.capture_logs() as logs:
            started = loop.time()
            answer = await listening.get()
            took = loop.time() - started
            await until_logged(logs, 1)
    finally:
        loop.set_exception_handler(previous)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok")
    assert listening.handled == [loop]  # on the loop under test
    # After each failure, no try until the retry: three failures took three delays.
    assert listening.sock.failed == 3
    assert took >= 3 * accept.ACCEPT_RETRY_DELAY
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert {(e["listener"], e["error"]) for e in lines} == {("listen", "EMFILE")}
    assert sum(e["count"] for e in lines) == 3 and not lines[-1]["ongoing"]
    assert seen == []
    assert (await listening.get()).endswith(b"ok")  # and on as before


@pytest.mark.every_loop
async def test_a_listener_out_of_files_is_not_closed(
    short_bursts: None, listening: Listening,
) -> None:
    """Accepts that fail for longer than a burst's line interval: ``ongoing`` lines while it
    lasts; once files are free again, the connections that waited are served."""
    loop = asyncio.get_running_loop()
    listening.sock.failing = 10**9
    listening.sock.error = errno.ENFILE
    with structlog.testing.capture_logs() as logs:
        started = loop.time()
        waiting = asyncio.create_task(listening.get(timeout=10.0))
        await until(lambda: any(e["event"] == "accept_failed" and e["ongoing"]
                                for e in logs), 5.0)
        listening.sock.failing = 0
        failing_for = loop.time() - started
        answer = await waiting
        await until(lambda: any(e["event"] == "accept_failed" and not e["ongoing"]
                                for e in logs), 5.0)
    assert answer.endswith(b"ok")
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert [e["ongoing"] for e in lines] == [True] * (len(lines) - 1) + [False]
    assert {e["error"] for e in lines} == {"ENFILE"}
    assert sum(e["count"] for e in lines) == listening.sock.failed
    # One try a retry, not a busy loop (which would be a hundred a wake-up).
    assert listening.sock.failed <= failing_for / accept.ACCEPT_RETRY_DELAY + 2


@pytest.mark.every_loop
async def test_a_connection_gone_before_its_accept_is_skipped(listening: Listening) -> None:
    """ECONNABORTED (reset by its peer while queued) is no lack of resources: not counted, and
    the next connection is accepted in the same wake-up."""
    listening.sock.failing = 1
    listening.sock.error = errno.ECONNABORTED
    with structlog.testing.capture_logs() as logs:
        answer = await listening.get()
        listening.listener.failures.close()
    assert answer.endswith(b"ok")
    assert listening.sock.failed == 1
    assert not [e for e in logs if e["event"] == "accept_failed"]


async def test_a_burst_is_one_line_with_its_count(short_bursts: None) -> None:
    failures = AcceptFailures()
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(500):
                failures.failed("listen", errno.EMFILE)
            await until_logged(logs, 1)
            for _ in range(3):  # a second burst, after the first ended
                failures.failed("listen", errno.ENFILE)
            failures.failed("admin_listen", errno.ENOMEM)  # another listener's own burst
            await until_logged(logs, 3)
    finally:
        failures.close()
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert sorted((e["listener"], e["count"], e["error"], e["ongoing"], e["log_level"])
                  for e in lines) \
        == [("admin_listen", 1, "ENOMEM", False, "warning"),
            ("listen", 3, "ENFILE", False, "warning"),
            ("listen", 500, "EMFILE", False, "warning")]


async def test_a_long_burst_is_logged_while_it_lasts(short_bursts: None) -> None:
    loop = asyncio.get_running_loop()
    failures = AcceptFailures()
    try:
        with structlog.testing.capture_logs() as logs:
            made = 0
            fail_until = loop.time() + 1.0
            while loop.time() < fail_until:  # a failure every 20 ms
                failures.failed("listen", errno.EMFILE)
                made += 1
                await asyncio.sleep(0.02)
            await until(lambda: any(e["event"] == "accept_failed" and not e["ongoing"]
                                    for e in logs), 5.0)
    finally:
        failures.close()
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert len(lines) >= 3  # at least every 0.3 s while it lasted, and its end
    assert [e["ongoing"] for e in lines] == [True] * (len(lines) - 1) + [False]
    assert sum(e["count"] for e in lines) == made


async def test_a_burst_in_progress_is_logged_at_close(short_bursts: None) -> None:
    failures = AcceptFailures()
    with structlog.testing.capture_logs() as logs:
        failures.failed("listen", errno.EMFILE)
        failures.close()
    assert [e["count"] for e in logs if e["event"] == "accept_failed"] == [1]
