"""The app behind the proxies, recording what reached it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from aiohttp import web

from bench.chaos.history import Receipt
from tests.support import Seen, StubApp


class RecordingApp(StubApp):
    """The app: records every request as it arrives (before its body is read, so a request
    that reaches the app but is never completed still counts) and what it answered. Its port
    is bound from the start but listens only from :meth:`start`: until then connections are
    refused, as to an app that is down."""

    def __init__(self, clock: Callable[[], float], delay: tuple[float, float],
                 close: bool) -> None:
        super().__init__(listen_later=True)
        self.clock = clock
        self.delay = delay
        self.close = close  # answer Connection: close, so that a connection is one request
        self.receipts: list[Receipt] = []
        self.behaviour = self._answer
        self.failing = False  # answer 500 to everything while set (breaker-cycles)

    def in_flight(self) -> int:
        return sum(1 for r in self.receipts if r.answered is None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        receipt = Receipt(request.headers.get("X-Webhook-Sidecar-Event-Id", ""),
                          int(request.headers.get("X-Webhook-Sidecar-Attempt", "0")),
                          self.clock())
        self.receipts.append(receipt)
        response = await super()._handle(request)
        receipt.status, receipt.answered = response.status, self.clock()
        return response

    async def _answer(self, seen: Seen) -> web.StreamResponse:
        await asyncio.sleep(random.uniform(*self.delay))
        if self.failing:
            return web.json_response({"error": "broken"}, status=500)
        response = web.json_response({"ok": True, "event": seen.event_id,
                                      "attempt": seen.attempt, "note": "processed " * 8})
        if self.close:
            response.force_close()
        return response
