"""Failed accepts reported by asyncio's accept loop become one ``accept_failed`` line per burst,
with a count; every other report reaches the handler that was there before. The reports are
made as asyncio makes them (``call_exception_handler`` with its message); the clock is the
event loop's, with the burst bounds shortened."""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest
import structlog

from sidecar.http.listener import AcceptFailures, accept
from tests.support import until


def accept_failed(loop: asyncio.AbstractEventLoop, code: int = errno.EMFILE) -> None:
    loop.call_exception_handler({
        "message": "socket.accept() out of system resource",
        "exception": OSError(code, "Too many open files"),
        "socket": None,
    })


async def until_logged(logs: list[dict[str, Any]], count: int) -> None:
    """Until the bursts' own timers have logged ``count`` lines."""
    await until(lambda: len([e for e in logs if e["event"] == "accept_failed"]) >= count, 5.0)


@pytest.fixture
def short_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "ACCEPT_BURST_QUIET", 0.2)
    monkeypatch.setattr(accept, "REFUSALS_LOGGED_EVERY", 0.3)


async def test_a_burst_is_one_line_with_its_count(short_bursts: None) -> None:
    loop = asyncio.get_running_loop()
    failures = AcceptFailures([])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            for _ in range(500):
                accept_failed(loop)
            await until_logged(logs, 1)
            for _ in range(3):  # a second burst, after the first ended
                accept_failed(loop, errno.ENFILE)
            await until_logged(logs, 2)
    finally:
        failures.close()
    lines = [e for e in logs if e["event"] == "accept_failed"]
    assert [(e["count"], e["error"], e["ongoing"], e["log_level"]) for e in lines] \
        == [(500, "EMFILE", False, "warning"), (3, "ENFILE", False, "warning")]
    assert {e["listener"] for e in lines} == {"unknown"}  # no listener of ours owns it


async def test_a_long_burst_is_logged_while_it_lasts(short_bursts: None) -> None:
    loop = asyncio.get_running_loop()
    failures = AcceptFailures([])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            made = 0
            fail_until = loop.time() + 1.0
            while loop.time() < fail_until:  # a failure every 20 ms, as a retrying loop does
                accept_failed(loop)
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


async def test_other_reports_reach_the_previous_handler() -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: seen.append(context))
    failures = AcceptFailures([])
    failures.install()
    try:
        with structlog.testing.capture_logs() as logs:
            loop.call_exception_handler({"message": "Task exception was never retrieved"})
            accept_failed(loop)
            failures.close()
        assert [context["message"] for context in seen] == ["Task exception was never retrieved"]
        assert [e["count"] for e in logs if e["event"] == "accept_failed"] == [1]  # at close
        assert loop.get_exception_handler() is not None
        accept_failed(loop)  # after close, the previous handler is back
        assert len(seen) == 2
    finally:
        loop.set_exception_handler(previous)
