"""The simulated provider: delivers each event to a random replica and redelivers it until
2xx (bounded), as webhook providers do; and the bodies it sends."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import random
import zlib
from collections.abc import Callable, Sequence

import aiohttp

from bench.chaos.history import Delivery, Kind, is_2xx, retryable
from bench.chaos.settings import Settings
from tests.support import stripe_event, stripe_headers

BACKOFF = (0.25, 0.5, 1.0, 2.0, 3.0)  # the provider's redelivery schedule; the last repeats

Make = Callable[[], tuple[bytes, dict[str, str]]]


class Provider:
    """Delivers events to random replicas and redelivers until 2xx (bounded), recording every
    delivery."""

    def __init__(self, client: aiohttp.ClientSession, urls: Sequence[str],
                 clock: Callable[[], float], settings: Settings, rng: random.Random) -> None:
        self.client = client
        self.urls = urls
        self.clock = clock
        self.settings = settings
        self.rng = rng
        self.kinds: dict[str, Kind] = {}
        self.deliveries: list[Delivery] = []

    async def post(self, event_id: str, kind: Kind, replica: int, body: bytes,
                   headers: dict[str, str]) -> Delivery:
        sent = self.clock()
        status: int | None = None
        error: str | None = None
        try:
            async with self.client.post(self.urls[replica] + "/webhooks/stripe", data=body,
                                        headers=headers) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = type(exc).__name__
        delivery = Delivery(event_id, kind, replica, sent, self.clock() - sent, status, error)
        self.deliveries.append(delivery)
        return delivery

    async def event(self, event_id: str, kind: Kind, make: Make,
                    duplicate: bool = False) -> None:
        self.kinds[event_id] = kind
        give_up = self.clock() + self.settings.give_up
        for round_ in range(10_000):
            body, headers = make()  # signed afresh: a redelivery carries a new timestamp
            replicas = (self.rng.sample(range(len(self.urls)), 2) if duplicate and round_ == 0
                        else [self.rng.randrange(len(self.urls))])
            got = await asyncio.gather(*(self.post(event_id, kind, r, body, headers)
                                         for r in replicas))
            if any(is_2xx(d.status) for d in got) or not any(retryable(d.status) for d in got):
                return
            pause = BACKOFF[min(round_, len(BACKOFF) - 1)]
            if kind is Kind.BOMB or self.clock() + pause > give_up:
                return
            await asyncio.sleep(pause)


def normal(event_id: str) -> Make:
    body = stripe_event(event_id)
    return lambda: (body, stripe_headers(body))


def fixed(body: bytes, headers: dict[str, str]) -> Make:
    return lambda: (body, headers)


def gzipped(event_id: str) -> Make:
    """Signed over the JSON (the payload), sent compressed with Content-Encoding: gzip."""
    body = stripe_event(event_id, data={"object": {"lines": ["item"] * 200}})
    packed = gzip.compress(body)
    return lambda: (packed, {**stripe_headers(body), "Content-Encoding": "gzip"})


@functools.cache
def gzip_bomb(event_id: str, size: int = 1_000_000) -> bytes:
    """About ``size`` bytes of gzip that inflate to about 1000 times as much: a JSON object
    followed by whitespace (still valid JSON, so a proxy that inflates it finds an event id)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip container
    parts = [squeeze.compress(json.dumps({"id": event_id, "object": "event"}).encode())]
    spaces = b" " * (1 << 20)
    total = sum(map(len, parts))
    while total < size - 2048:
        chunk = squeeze.compress(spaces)
        parts.append(chunk)
        total += len(chunk)
    parts.append(squeeze.flush())
    return b"".join(parts)
