"""The app behind the proxies, recording what reached it."""

from __future__ import annotations

import asyncio
import random
import socket
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
                 close: bool, destination: str = "") -> None:
        super().__init__(listen_later=True)
        assert self._sock is not None  # its connections may outlive it (go_down binds again)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.clock = clock
        self.destination = destination  # fan-out: whose app this is, noted on each receipt
        self.delay = delay
        self.close = close  # answer Connection: close, so that a connection is one request
        self.receipts: list[Receipt] = []
        self.behaviour = self._answer
        self.failing = False  # answer 500 to everything while set (breaker-cycles)
        self._working: set[asyncio.Task[object]] = set()  # handlers not done (go_down)

    def in_flight(self) -> int:
        return sum(1 for r in self.receipts if r.answered is None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        receipt = Receipt(request.headers.get("X-Webhook-Sidecar-Event-Id", ""),
                          int(request.headers.get("X-Webhook-Sidecar-Attempt", "0")),
                          self.clock(), destination=self.destination)
        self.receipts.append(receipt)
        task = asyncio.current_task()
        assert task is not None
        self._working.add(task)
        try:
            response = await super()._handle(request)
        finally:
            self._working.discard(task)
        receipt.status, receipt.answered = response.status, self.clock()
        return response

    async def go_down(self) -> None:
        """The app dies: the requests it is working on get no answer (their handlers are
        cancelled, their connections closed) and, until :meth:`come_up`, connections are
        refused (its port bound again, not listening)."""
        assert self._runner is not None
        for task in self._working:
            task.cancel()
        await self._runner.cleanup()
        self._runner = None
        if self._sock is not None:
            self._sock.close()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its closed connections
        sock.bind(("127.0.0.1", self.port))
        self._sock = sock

    async def come_up(self) -> None:
        """Listening again, on the same port."""
        await self.start()

    async def _answer(self, seen: Seen) -> web.StreamResponse:
        await asyncio.sleep(random.uniform(*self.delay))
        if self.failing:
            return web.json_response({"error": "broken"}, status=500)
        response = web.json_response({"ok": True, "event": seen.event_id,
                                      "attempt": seen.attempt, "note": "processed " * 8})
        if self.close:
            response.force_close()
        return response
