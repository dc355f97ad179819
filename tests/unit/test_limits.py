"""The limits' arithmetic (``core.limits``) as truth tables: the bucket's size, its refill and
grant, the wait for the next token, Retry-After, the permit retry, and what a take may fetch."""

from __future__ import annotations

import pytest

from sidecar.core.limits import (
    Allowance,
    Limit,
    RateLimit,
    allowance,
    granted,
    next_token_in,
    permit_retry,
    rate_limit,
    refilled,
    retry_after,
)
from sidecar.core.rates import Rate, parse_rate


@pytest.mark.parametrize(("rate", "burst", "expected"), [
    ("100/s", None, RateLimit(100.0, 100)),   # one second's worth
    ("600/m", None, RateLimit(10.0, 10)),
    ("90/m", None, RateLimit(1.5, 1)),        # whole tokens: rounded down
    ("20/h", None, RateLimit(20 / 3600, 1)),  # at least 1
    ("100/s", 7, RateLimit(100.0, 7)),        # as given
    ("1/d", 3, RateLimit(1 / 86400, 3)),
])
def test_the_bucket_of_a_rate_and_burst(rate: str, burst: int | None,
                                        expected: RateLimit) -> None:
    assert rate_limit(parse_rate(rate, "rate"), burst) == expected


def test_no_rate_no_bucket() -> None:
    assert rate_limit(None, 5) is None


LIMIT = RateLimit(per_second=10.0, burst=5)


@pytest.mark.parametrize(("tokens", "elapsed", "expected"), [
    (0.0, 0.0, 0.0),
    (0.0, 0.1, 1.0),     # 10/s for 0.1 s
    (2.5, 0.05, 3.0),
    (4.0, 10.0, 5.0),    # never above the burst
    (5.0, 0.0, 5.0),
    (3.0, -2.0, 3.0),    # a clock that went back adds nothing, takes nothing
])
def test_refill(tokens: float, elapsed: float, expected: float) -> None:
    assert refilled(tokens, elapsed, LIMIT) == pytest.approx(expected)


@pytest.mark.parametrize(("tokens", "want", "expected"), [
    (5.0, 3, 3),
    (2.9, 3, 2),   # whole tokens only
    (0.99, 1, 0),
    (0.0, 4, 0),
    (5.0, 0, 0),
    (-0.5, 1, 0),
])
def test_grant(tokens: float, want: int, expected: int) -> None:
    assert granted(tokens, want) == expected


@pytest.mark.parametrize(("left", "expected"), [
    (1.0, 0.0),
    (3.2, 0.0),
    (0.0, 0.1),     # a whole token at 10/s
    (0.75, 0.025),
    (-0.2, 0.1),    # never more than one token's time
])
def test_next_token_in(left: float, expected: float) -> None:
    assert next_token_in(left, LIMIT) == pytest.approx(expected)


@pytest.mark.parametrize(("wait", "expected"), [
    (0.0, 1), (0.001, 1), (1.0, 1), (1.2, 2), (59.5, 60),
])
def test_retry_after_is_whole_seconds_rounded_up_at_least_one(wait: float,
                                                              expected: int) -> None:
    assert retry_after(wait) == expected


@pytest.mark.parametrize(("waits", "expected"), [
    (1, 0.01), (2, 0.02), (3, 0.04), (4, 0.08), (5, 0.1), (50, 0.1), (0, 0.01),
])
def test_permit_retry_backs_off_to_a_bound(waits: int, expected: float) -> None:
    assert permit_retry(waits) == pytest.approx(expected)


@pytest.mark.parametrize(("want", "permits", "tokens", "expected"), [
    (5, None, None, Allowance(5, None)),              # no limit
    (5, 5, 5, Allowance(5, None)),                    # enough of both
    (5, 2, None, Allowance(2, Limit.CONCURRENCY)),
    (5, None, 3, Allowance(3, Limit.RATE)),
    (5, 4, 1, Allowance(1, Limit.RATE)),              # the tighter one names the limit
    (5, 0, None, Allowance(0, Limit.CONCURRENCY)),
    (5, 3, 0, Allowance(0, Limit.RATE)),
    (1, 3, 3, Allowance(1, None)),
])
def test_allowance(want: int, permits: int | None, tokens: int | None,
                   expected: Allowance) -> None:
    assert allowance(want, permits, tokens) == expected


def test_a_rate_states_its_tokens_per_second() -> None:
    assert Rate(600, 60.0).per_second == 10.0
