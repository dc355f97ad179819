"""A notification target on loopback for the tests: every message is checked with the official
``standardwebhooks`` package (an independent verifier, not our signer), recorded, and answered
as the test scripts it: a list of statuses to give first, or held until released."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.support import serve_on_loopback

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks docs' example key


@dataclass
class Received:
    """One request the target got: its headers, body, and whether it verified."""

    headers: dict[str, str]
    body: bytes
    verified: bool
    status: int = 0

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def message_id(self) -> str:
        return self.headers.get("webhook-id", "")


@dataclass
class Receiver:
    secret: str | None = SECRET  # None: a Slack-style target, nothing to verify
    statuses: list[int] = field(default_factory=list)  # answered first, in turn; then 200
    hold: asyncio.Event = field(default_factory=asyncio.Event)  # answers wait for it
    received: list[Received] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    port: int = 0
    _runner: web.AppRunner | None = None

    def __post_init__(self) -> None:
        self.hold.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/notify"

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_post("/hooks/notify", self._handle)
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=0.2)
        return self

    async def stop(self) -> None:
        self.hold.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = False
        if self.secret is not None:
            try:
                Webhook(self.secret).verify(body, headers)
                verified = True
            except WebhookVerificationError:
                pass
        seen = Received(headers, body, verified)
        self.received.append(seen)
        await self._changed()
        await self.hold.wait()
        seen.status = self.statuses.pop(0) if self.statuses else 200
        await self._changed()
        return web.json_response({"status": seen.status}, status=seen.status)

    async def _changed(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def answered(self, status: int = 200) -> list[Received]:
        return [r for r in self.received if r.status == status]

    async def wait_for(self, count: int, status: int = 200, timeout: float = 15.0) -> None:
        """Until ``count`` requests were answered ``status``; fails past ``timeout``."""
        try:
            async with self.changed:
                await asyncio.wait_for(self.changed.wait_for(
                    lambda: len(self.answered(status)) >= count), timeout)
        except TimeoutError:
            raise AssertionError(f"within {timeout:g} s: {count} messages answered {status}; "
                                 f"got {[r.status for r in self.received]}") from None

    async def wait_arrived(self, count: int, timeout: float = 15.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(
                lambda: len(self.received) >= count), timeout)
