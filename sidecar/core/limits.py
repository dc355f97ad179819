"""Delivery limits: a provider's rate (a token bucket) and its concurrency (permits), as plain
arithmetic. The store keeps the bucket and the permits, shared by every process
(``core.ports.LimitStore``); the queue workers and forward mode ask these rules how many
events may go and how long to wait (docs/design.md, "Rate and concurrency limits").
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from sidecar.core.rates import Rate


class Limit(enum.StrEnum):
    """Which limit held a delivery back: the ``limit`` label of
    ``webhook_delivery_limited_total``."""

    RATE = "rate"
    CONCURRENCY = "concurrency"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket: ``per_second`` tokens added continuously, at most ``burst`` kept."""

    per_second: float
    burst: int


def rate_limit(rate: Rate | None, burst: int | None) -> RateLimit | None:
    """The bucket of ``delivery.rate`` / ``delivery.burst``; None without a rate. An empty
    burst is one second's worth of the rate, at least 1 (``600/m``: 10; ``20/h``: 1)."""
    if rate is None:
        return None
    return RateLimit(rate.per_second, burst if burst is not None else
                     max(1, math.floor(rate.per_second)))


def refilled(tokens: float, elapsed: float, limit: RateLimit) -> float:
    """The tokens in a bucket that held ``tokens`` ``elapsed`` seconds ago. A clock that went
    back counts as no time at all; the bucket never holds more than ``burst``."""
    return min(float(limit.burst), tokens + max(0.0, elapsed) * limit.per_second)


def granted(tokens: float, want: int) -> int:
    """How many of ``want`` tokens a bucket holding ``tokens`` gives: whole tokens only."""
    return max(0, min(want, math.floor(tokens)))


@dataclass(frozen=True, slots=True)
class Tokens:
    """What a take of tokens answered: ``granted`` of those asked, and ``left`` in the bucket
    after it."""

    granted: int
    left: float


def next_token_in(left: float, limit: RateLimit) -> float:
    """Seconds until a bucket holding ``left`` tokens holds a whole one (0: it does)."""
    if left >= 1.0:
        return 0.0
    return (1.0 - max(0.0, left)) / limit.per_second


def retry_after(wait: float) -> int:
    """The ``Retry-After`` (whole seconds, at least 1) for a delivery that must wait ``wait``
    seconds for a token: rounded up, so a provider that obeys it finds one."""
    return max(1, math.ceil(wait - 1e-9))


@dataclass(frozen=True, slots=True)
class Permit:
    """One of a provider's ``delivery.concurrency`` slots, held by ``owner`` (a call's token)
    until released or until its lease ends."""

    provider: str
    slot: int
    owner: str


PERMIT_RETRY_FIRST = 0.01
PERMIT_RETRY_MAX = 0.1


def permit_retry(waits: int) -> float:
    """Seconds a worker waits before asking again for a permit that every slot's holder still
    has (``waits``: how many times in a row it asked in vain, from 1): 10 ms doubling to 100 ms.
    A release wakes the workers (in every process on PostgreSQL, by notification; in its own
    process on SQLite): this is the look a worker takes when no wake-up comes."""
    return min(PERMIT_RETRY_MAX, PERMIT_RETRY_FIRST * 2.0 ** max(0, waits - 1))


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many events a take may fetch given the limits (``count``), and which limit cut it
    (None: none did)."""

    count: int
    limited_by: Limit | None


def allowance(want: int, permits: int | None, tokens: int | None) -> Allowance:
    """The events a worker may take when it wanted ``want``: no more than the permits it holds
    and the tokens it was granted (None: that limit is off). The limit named is the one that
    cut the number; the rate when both did alike (its tokens were the fewer to begin with)."""
    count = want
    limited_by: Limit | None = None
    if permits is not None and permits < count:
        count, limited_by = permits, Limit.CONCURRENCY
    if tokens is not None and tokens < count:
        count, limited_by = tokens, Limit.RATE
    return Allowance(max(0, count), limited_by)
