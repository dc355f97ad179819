"""The ``delivery_phases`` debug line (``core.phases``; ``bench.lone --phases`` reads it), on a
real loopback listener, PostgreSQL and an app on loopback.

The sender pauses inside the body and the app answers only when the test lets it: those known
gaps land in the ``read`` and ``forward`` phases and nowhere else; the phases come in the path's
order and add up to the delivery's duration end to end (the listener's metric). At
``log.level: info`` no such line is written.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.config.loader import parse_config
from sidecar.obs.metrics import Metrics
from sidecar.runtime.serve import Running, start, stop
from tests.integration.test_delivery_duration import observed, read_answer, request_bytes
from tests.support import StubApp, base_config, stripe_event

pytestmark = pytest.mark.postgres

GAP = 0.2  # the sender's pause inside the body, and the app's before it answers (seconds)
EARLY_MS = 25  # how much later than the sender's write the listener may note the first byte

PHASES = ["headers", "read", "verify", "claim_wait", "claim_statement", "claim_return",
          "forward_prepare", "forward", "complete_wait", "complete_statement",
          "complete_return", "answer", "written"]




async def proxy(pg_dsn: str, level: str, stub: StubApp, metrics: Metrics) -> Running:
    config = base_config(stub.url, pg_dsn, log={"level": level, "format": "json"})
    return await start(parse_config(config, env={}), metrics=metrics)


def lines(stream: io.StringIO, event: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [entry for entry in found if entry.get("event") == event]


@pytest.fixture
async def stub() -> AsyncIterator[StubApp]:
    app = await StubApp().start()
    try:
        yield app
    finally:
        await app.stop()


async def test_phases_hold_the_known_gaps_in_order_and_add_up(
    pg_dsn: str, stub: StubApp, output: io.StringIO, tmp_path: Path,
) -> None:
    metrics = Metrics()
    running = await proxy(pg_dsn, "debug", stub, metrics)
    event_id = f"evt_phases_{time.time_ns()}"
    try:
        raw = request_bytes(f"{running.listen.host}:{running.listen.port}",
                            stripe_event(event_id))
        body_at = raw.index(b"\r\n\r\n") + 4 + 5
        stub.hold.clear()
        reader, writer = await asyncio.open_connection(running.listen.host,
                                                       running.listen.port)
        try:
            writer.write(raw[:body_at])
            await writer.drain()
            await asyncio.sleep(GAP)  # the sender's pause inside the body: a known gap
            writer.write(raw[body_at:])
            await writer.drain()
            await stub.wait_for(lambda: stub.count(event_id) == 1, what="the forward")
            await asyncio.sleep(GAP)  # the app's time to answer: a known gap
            stub.hold.set()
            status, _ = await read_answer(reader)
            assert status == 200
        finally:
            writer.close()
            await writer.wait_closed()
        duration_ms = await observed(metrics, "new", 1) * 1000
    finally:
        await stop(running)

    [line] = lines(output, "delivery_phases")
    phases: dict[str, float] = line["phases_ms"]
    print(phases)
    assert list(phases) == PHASES
    assert all(ms >= 0 for ms in phases.values())
    # The listener notes the first byte when its loop turn reads it, a few ms after the sender
    # wrote it and began its pause on a busy machine: the read phase holds the pause, less that.
    assert phases["read"] >= GAP * 1000 - EARLY_MS
    assert phases["forward"] >= GAP * 1000
    others = sum(ms for name, ms in phases.items() if name not in ("read", "forward"))
    assert others < GAP * 1000  # the gaps are in their own phases, not spread over others
    # From the first byte to the last byte written, as the listener times it (the last mark
    # is taken just after it).
    assert duration_ms <= sum(phases.values()) <= duration_ms + 5


async def test_no_phases_line_at_info(pg_dsn: str, stub: StubApp, output: io.StringIO) -> None:
    metrics = Metrics()
    running = await proxy(pg_dsn, "info", stub, metrics)
    try:
        raw = request_bytes(f"{running.listen.host}:{running.listen.port}",
                            stripe_event(f"evt_phases_{time.time_ns()}"))
        reader, writer = await asyncio.open_connection(running.listen.host,
                                                       running.listen.port)
        try:
            writer.write(raw)
            await writer.drain()
            status, _ = await read_answer(reader)
            assert status == 200
        finally:
            writer.close()
            await writer.wait_closed()
        await observed(metrics, "new", 1)
    finally:
        await stop(running)
    assert lines(output, "delivery") and not lines(output, "delivery_phases")
