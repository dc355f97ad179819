"""The overview's numbers, kept cheap: counter samples taken every few seconds into a short
bounded history (rates per minute come from two samples, no query), and the store's counts
(``stuck_counts`` scans the processing rows) cached for a few seconds however often the page
is viewed."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sidecar.obs.metrics import Metrics

SAMPLE_EVERY = 10.0  # seconds between counter samples
WINDOW = 60.0  # the rates' window: "per minute"
HISTORY = int(WINDOW / SAMPLE_EVERY) + 2  # enough samples to span the window, no more
STORE_CACHE_SECONDS = 5.0

_EVENTS = "webhook_events_total"
_ANSWERS = "webhook_app_answers_total"
_IN_FLIGHT = "webhook_forwards_in_flight"
_NAMES = frozenset({_EVENTS, _ANSWERS, _IN_FLIGHT})

# webhook_events results that are a redelivery answered without the app.
DUPLICATE_RESULTS = frozenset({"duplicate", "in_flight", "mirrored_failure",
                               "payload_mismatch"})


@dataclass(frozen=True, slots=True)
class Counts:
    """One provider's counters at one moment (totals since the process group started)."""

    deliveries: float = 0.0
    duplicates: float = 0.0
    non_2xx: float = 0.0  # forwards the app answered other than 2xx, or not at all
    in_flight: float = 0.0  # a gauge: forwards waiting for the app now


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # monotonic seconds
    counts: dict[str, Counts]


@dataclass(frozen=True, slots=True)
class Rates:
    """Per provider: ``per_minute`` True when the numbers are a rate over the last minute,
    False when less than a minute of samples exists and they are totals since start."""

    per_minute: bool
    counts: dict[str, Counts]


def read_counts(metrics: Metrics) -> dict[str, Counts]:
    """Every provider's counters now (summed over the worker group as /metrics does)."""
    totals: dict[str, dict[str, float]] = {}
    for name, labels, value in metrics.samples(_NAMES):
        provider = labels.get("provider", "")
        slot = totals.setdefault(provider, {"deliveries": 0.0, "duplicates": 0.0,
                                            "non_2xx": 0.0, "in_flight": 0.0})
        if name == _EVENTS:
            slot["deliveries"] += value
            if labels.get("result") in DUPLICATE_RESULTS:
                slot["duplicates"] += value
        elif name == _ANSWERS:
            if labels.get("status_class") != "2xx":
                slot["non_2xx"] += value
        else:
            slot["in_flight"] += value
    return {provider: Counts(**slot) for provider, slot in totals.items()}


@dataclass
class CounterHistory:
    """The last minute or so of counter samples (``HISTORY`` at most)."""

    metrics: Metrics
    clock: Callable[[], float] = time.monotonic
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def sample(self) -> Sample:
        taken = Sample(self.clock(), read_counts(self.metrics))
        self.samples.append(taken)
        return taken

    async def run(self) -> None:
        """Sample every ``SAMPLE_EVERY`` seconds until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_EVERY)  # a period, not synchronisation

    def rates(self) -> Rates:
        """Now against the newest sample at least a minute old; without one, totals since
        start (the page says which)."""
        now = Sample(self.clock(), read_counts(self.metrics))
        base = next((s for s in reversed(self.samples) if now.at - s.at >= WINDOW), None)
        if base is None:
            return Rates(False, now.counts)
        scale = WINDOW / (now.at - base.at)
        rates = {}
        for provider, counts in now.counts.items():
            before = base.counts.get(provider, Counts())
            rates[provider] = Counts(
                deliveries=(counts.deliveries - before.deliveries) * scale,
                duplicates=(counts.duplicates - before.duplicates) * scale,
                non_2xx=(counts.non_2xx - before.non_2xx) * scale,
                in_flight=counts.in_flight)
        return Rates(True, rates)


T = TypeVar("T")


class Cached(Generic[T]):
    """The answer of ``fetch`` reused for ``seconds``; concurrent viewers share one call."""

    def __init__(self, fetch: Callable[[], Awaitable[T]], seconds: float = STORE_CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._seconds = seconds
        self._clock = clock
        self._value: tuple[float, T] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> T:
        async with self._lock:
            if self._value is None or self._clock() - self._value[0] >= self._seconds:
                self._value = (self._clock(), await self._fetch())
            return self._value[1]
