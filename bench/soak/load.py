"""The sender: one pattern of deliveries — new events and copies — sent to every store at the
same moments; each delivery redelivered until 2xx (bounded), as a provider does."""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from bench.wrk.deliveries import PATH, body_of, headers_of

RETRYABLE_4XX = frozenset({408, 409, 425, 429})
BACKOFF = (0.25, 0.5, 1.0, 2.0)  # the redelivery schedule; the last repeats
RECENT = 200  # a recent copy repeats one of the last RECENT events sent
# A late copy repeats an event between OLDEST_COPY and NEWEST_COPY simulated days old: always
# in an earlier partition (one a day), always inside the 3-day retention.
NEWEST_COPY, OLDEST_COPY = 1.0, 2.5


@dataclass
class Tally:
    """What one store answered, per simulated day."""

    latencies: dict[int, list[float]] = field(default_factory=dict)  # first answer, seconds
    answered: dict[int, int] = field(default_factory=dict)  # deliveries ending 2xx
    failed: dict[int, int] = field(default_factory=dict)  # deliveries given up on
    retries: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # every non-2xx answer or error
    acked: set[str] = field(default_factory=set)  # event ids answered 2xx at least once

    def count(self, table: dict[int, int], day: int) -> None:
        table[day] = table.get(day, 0) + 1


@dataclass
class Sender:
    urls: Sequence[str]  # one proxy per store
    day_seconds: float
    rng: random.Random
    duplicate_share: float
    give_up: float
    tallies: list[Tally] = field(default_factory=list)
    sent: dict[int, int] = field(default_factory=dict)  # deliveries per day
    copies: dict[str, int] = field(default_factory=dict)  # recent / late copies sent
    lag: float = 0.0  # the most the sender fell behind its schedule, seconds
    t0: float = 0.0
    _times: list[float] = field(default_factory=list)  # when each new event was first sent
    _ids: list[str] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _serial: int = 0

    def __post_init__(self) -> None:
        self.tallies = [Tally() for _ in self.urls]

    def clock(self) -> float:
        return time.monotonic() - self.t0

    def pick(self, now: float) -> tuple[str, str]:
        """The next delivery's event id and what it is: new, a recent copy or a late one."""
        if self._ids and self.rng.random() < self.duplicate_share:
            late = self.rng.random() < 0.5
            lo = bisect.bisect_left(self._times, now - OLDEST_COPY * self.day_seconds)
            hi = bisect.bisect_right(self._times, now - NEWEST_COPY * self.day_seconds)
            if late and hi > lo:
                return self._ids[self.rng.randrange(lo, hi)], "late"
            start = max(0, len(self._ids) - RECENT)
            return self._ids[self.rng.randrange(start, len(self._ids))], "recent"
        self._serial += 1
        event_id = f"{self.rng.getrandbits(64):016x}-{self._serial:09d}"
        self._times.append(now)
        self._ids.append(event_id)
        return event_id, "new"

    async def run(self, client: aiohttp.ClientSession, rate: float, seconds: float,
                  limit: int) -> None:
        """``rate`` deliveries a second for ``seconds``, each to every store; at most
        ``limit`` in flight per store (past it the sender falls behind, and says so)."""
        gates = [asyncio.Semaphore(limit) for _ in self.urls]
        total = int(rate * seconds)
        for n in range(total):
            due = n / rate
            ahead = due - self.clock()
            if ahead > 0:
                await asyncio.sleep(ahead)
            else:
                self.lag = max(self.lag, -ahead)
            now = self.clock()
            day = int(now // self.day_seconds)
            event_id, kind = self.pick(now)
            self.sent[day] = self.sent.get(day, 0) + 1
            if kind != "new":
                self.copies[kind] = self.copies.get(kind, 0) + 1
            for store, url in enumerate(self.urls):
                await gates[store].acquire()
                task = asyncio.create_task(
                    self.deliver(client, store, url, event_id, day, gates[store]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def cancel(self) -> None:
        """Interrupted: the deliveries in flight end before their client session closes."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def deliver(self, client: aiohttp.ClientSession, store: int, url: str,
                      event_id: str, day: int, gate: asyncio.Semaphore) -> None:
        tally = self.tallies[store]
        body = body_of(event_id)
        headers = headers_of(event_id, body)
        started = self.clock()
        try:
            for round_ in range(10_000):
                sent = self.clock()
                status: int | None = None
                try:
                    async with client.post(url + PATH, data=body, headers=headers) as resp:
                        await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    tally.statuses[type(exc).__name__] = tally.statuses.get(
                        type(exc).__name__, 0) + 1
                if round_ == 0:
                    tally.latencies.setdefault(day, []).append(self.clock() - sent)
                if status is not None and 200 <= status < 300:
                    tally.count(tally.answered, day)
                    tally.acked.add(event_id)
                    return
                if status is not None:
                    tally.statuses[str(status)] = tally.statuses.get(str(status), 0) + 1
                if status is not None and status < 500 and status not in RETRYABLE_4XX:
                    break
                pause = BACKOFF[min(round_, len(BACKOFF) - 1)]
                if self.clock() + pause > started + self.give_up:
                    break
                tally.retries += 1
                await asyncio.sleep(pause)
            tally.count(tally.failed, day)
        finally:
            gate.release()
