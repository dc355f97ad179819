"""The shutdown schedule in-process, at its worst: a delivery whose result write never finishes.
The stop still returns on time — the delivery cancelled at shutdown_timeout, the write abandoned
WRITES_GRACE later — and says so in the logs."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from structlog.testing import capture_logs

from sidecar.config.loader import parse_config
from sidecar.core.events import AttemptResult
from sidecar.runtime.serve import start, stop
from sidecar.runtime.wiring import CLOSE_GRACE, WRITES_GRACE
from sidecar.store.memory import MemoryStore
from tests.support import StubApp, base_config, post, stripe_event, stripe_headers

SHUTDOWN_TIMEOUT = 0.5


class WriteHangs(MemoryStore):
    """Claims work; a result write hangs until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, provider: str, event_id: str, attempt: int,
                       result: AttemptResult) -> bool:
        self.writing.set()
        await self.release.wait()
        return await super().complete(provider, event_id, attempt, result)


async def test_a_hung_result_write_does_not_hold_the_stop_past_its_schedule() -> None:
    stub = await StubApp().start()
    store = WriteHangs()
    config = parse_config(base_config(stub.url, "sqlite:///unused.db",
                                      shutdown_timeout=f"{SHUTDOWN_TIMEOUT}s"), env={})
    running = await start(config, store=store)
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession() as client:
            body = stripe_event("evt_write_hangs")
            delivery = asyncio.create_task(post(
                client, f"http://{running.listen}/webhooks/stripe", body, stripe_headers(body)))
            await asyncio.wait_for(store.writing.wait(), 10)  # the app answered; writing
            with capture_logs() as logs:
                started = loop.time()
                await stop(running)
                took = loop.time() - started
            with contextlib.suppress(aiohttp.ClientError):
                await delivery  # cut off: the connection closed unanswered
    finally:
        store.release.set()
        await stub.stop()
    print(f"stop with a hung result write: {took:.3f} s (shutdown_timeout {SHUTDOWN_TIMEOUT} s)")
    assert SHUTDOWN_TIMEOUT + WRITES_GRACE - 0.05 <= took <= SHUTDOWN_TIMEOUT + CLOSE_GRACE + 0.5
    events = {entry["event"]: entry for entry in logs}
    assert events["deliveries_cancelled"]["count"] == 1
    assert events["result_writes_abandoned"]["count"] == 1
    assert all(entry["log_level"] != "error" for entry in logs)
    assert stub.count("evt_write_hangs") == 1
