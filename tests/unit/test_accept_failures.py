"""Failed accepts reported by asyncio's accept loop become one ``accept_failed`` line per burst,
with a count; every other report reaches the handler that was there before. A report is
recognised by what the listener sees (one of its sockets, an error that is a lack of
resources), not by asyncio's message: the first test has asyncio's own accept loop fail on a
real listener (it pins the shape of asyncio's report), the others make reports with another
message. The clock is the event loop's, with the burst bounds shortened."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from aiohttp import web

from sidecar.http.listener import AcceptFailures, Bounds, Listener, accept
from tests.support import until


class FailingAccepts(socket.socket):
    """A listening socket whose every accept fails as out of files (the process's limit)."""

    def accept(self) -> tuple[socket.socket, Any]:
        raise OSError(errno.EMFILE, "Too many open files")


@pytest.fixture
async def listening() -> AsyncIterator[tuple[Listener, socket.socket]]:
    """A real listener on loopback (its accepts fail), and its socket."""
    runner = web.AppRunner(web.Application())
    await runner.setup()
    listener = Listener(runner, Bounds("listen", 5.0, 5.0, 10))
    sock = FailingAccepts(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await listener.open([sock])
    try:
        yield listener, sock
    finally:
        listener.close()
        await runner.cleanup()


def accept_failed(loop: asyncio.AbstractEventLoop, sock: socket.socket | None,
                  code: int = errno.EMFILE) -> None:
    loop.call_exception_handler({
        "message": "any words at all",  # not asyncio's: the report is known by what it holds
        "exception": OSError(code, "Too many open files"),
        "socket": sock,
    })


async def until_logged(logs: list[dict[str, Any]], count: int) -> None:
    """Until the bursts' own timers have logged ``count`` lines."""
    await until(lambda: len([e for e in logs if e["event"] == "accept_failed"]) >= count, 5.0)


@pytest.fixture
def short_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "ACCEPT_BURST_QUIET", 0.2)
    monkeypatch.setattr(accept, "REFUSALS_LOGGED_EVERY", 0.3)


async def test_asyncio_s_own_failed_accept_is_counted_not_logged_with_a_traceback(
    short_bursts: None, listening: tuple[Listener, socket.socket],
) -> None:
    listener, sock = listening
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    failures = AcceptFailures([listener])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            try:
                await until_logged(logs, 1)
            finally:
                writer.close()
    finally:
        failures.close()
        loop.set_exception_handler(previous)
    line = next(e for e in logs if e["event"] == "accept_failed")
    # asyncio tries the accept again up to the backlog in that turn of the loop, each failing.
    assert (line["listener"], line["error"]) == ("listen", "EMFILE") and line["count"] >= 1
    assert seen == []  # asyncio's report went nowhere else


async def test_a_burst_is_one_line_with_its_count(
    short_bursts: None, listening: tuple[Listener, socket.socket],
) -> None:
    listener, sock = listening
    loop = asyncio.get_running_loop()
    failures = AcceptFailures([listener])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(500):
                accept_failed(loop, sock)
            await until_logged(logs, 1)
            for _ in range(3):  # a second burst, after the first ended
                accept_failed(loop, sock, errno.ENFILE)
            await until_logged(logs, 2)
    finally:
        failures.close()
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert [(e["count"], e["error"], e["ongoing"], e["log_level"]) for e in lines] \
        == [(500, "EMFILE", False, "warning"), (3, "ENFILE", False, "warning")]
    assert {e["listener"] for e in lines} == {"listen"}


async def test_a_long_burst_is_logged_while_it_lasts(
    short_bursts: None, listening: tuple[Listener, socket.socket],
) -> None:
    listener, sock = listening
    loop = asyncio.get_running_loop()
    failures = AcceptFailures([listener])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            made = 0
            fail_until = loop.time() + 1.0
            while loop.time() < fail_until:  # a failure every 20 ms, as a retrying loop does
                accept_failed(loop, sock)
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


async def test_other_reports_reach_the_previous_handler(
    listening: tuple[Listener, socket.socket],
) -> None:
    """Not a lack of resources, or not on a listener's socket: not a failed accept."""
    listener, sock = listening
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    failures = AcceptFailures([listener])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            loop.call_exception_handler({"message": "Task exception was never retrieved"})
            accept_failed(loop, None)  # out of files elsewhere (a callback's own error)
            with socket.socket() as elsewhere:
                accept_failed(loop, elsewhere)  # someone else's socket
            accept_failed(loop, sock, errno.ECONNRESET)  # not a lack of resources
            accept_failed(loop, sock)
            failures.close()
        assert [context["message"] for context in seen] \
            == ["Task exception was never retrieved"] + ["any words at all"] * 3
        assert [e["count"] for e in logs if e["event"] == "accept_failed"] == [1]  # at close
        assert loop.get_exception_handler() is not None
        accept_failed(loop, sock)  # after close, the previous handler is back
        assert len(seen) == 5
    finally:
        loop.set_exception_handler(previous)
