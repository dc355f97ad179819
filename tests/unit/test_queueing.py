"""Queue mode's rules (``core.queueing``) as a truth table: how each try ends, the backoff
schedule, the app's Retry-After, and the pause while the app cannot be reached."""

from __future__ import annotations

import email.utils

import pytest

from sidecar.core.events import AttemptResult, EventState, Outcome, RecordedResponse
from sidecar.core.queueing import (
    UNREACHABLE_MAX_PAUSE,
    RetryPolicy,
    backoff,
    ended,
    retry_after,
    settlement,
    unreachable_pause,
)

POLICY = RetryPolicy(max_attempts=5, max_age=3600.0, first_retry=2.0, max_retry_delay=60.0)
NOW = 1_800_000_000.0


def result(state: EventState, outcome: Outcome = Outcome.RESPONSE,
           status: int | None = 500) -> AttemptResult:
    response = (RecordedResponse(status, (), b"") if outcome is Outcome.RESPONSE
                and status is not None else None)
    return AttemptResult(state, outcome, response, 12.0)


def ends(res: AttemptResult, *, attempts: int = 1, age: float = 0.0,
         retry_after_value: str | None = None, rand: float = 0.5) -> tuple[object, ...]:
    s = settlement(res, round_attempts=attempts, age=age, retry_after_value=retry_after_value,
                   policy=POLICY, now=NOW, rand=lambda: rand)
    return s.state, s.retry_in, s.reached


# (result, round attempts incl. this one, age, Retry-After) → (state, retry_in, reached)
CASES = [
    # a 2xx (or a final status, classified DONE by the forwarder): done, whatever the budget
    ("done first try", result(EventState.DONE, status=200), 1, 0.0, None,
     (EventState.DONE, None, True)),
    ("done at the last attempt", result(EventState.DONE, status=200), 5, 0.0, None,
     (EventState.DONE, None, True)),
    ("done past max_age", result(EventState.DONE, status=200), 1, 99999.0, None,
     (EventState.DONE, None, True)),
    # a failure with budget left: backoff (rand 0.5 → three quarters of the ceiling)
    ("500, first attempt", result(EventState.FAILED), 1, 0.0, None,
     (EventState.QUEUED, 1.5, True)),
    ("500, second attempt", result(EventState.FAILED), 2, 0.0, None,
     (EventState.QUEUED, 3.0, True)),
    ("timeout counts as an attempt", result(EventState.FAILED, Outcome.TIMEOUT), 1, 0.0, None,
     (EventState.QUEUED, 1.5, True)),
    ("disconnected counts as an attempt", result(EventState.FAILED, Outcome.DISCONNECTED), 1,
     0.0, None, (EventState.QUEUED, 1.5, True)),
    # the app's Retry-After replaces the backoff, bounded by max_retry_delay
    ("Retry-After seconds", result(EventState.FAILED, status=503), 1, 0.0, "7",
     (EventState.QUEUED, 7.0, True)),
    ("Retry-After past max_retry_delay", result(EventState.FAILED, status=503), 1, 0.0, "600",
     (EventState.QUEUED, 60.0, True)),
    ("Retry-After 0: not sooner than first_retry", result(EventState.FAILED, status=503), 1,
     0.0, "0", (EventState.QUEUED, 2.0, True)),
    ("unreadable Retry-After: backoff", result(EventState.FAILED, status=503), 1, 0.0, "soon",
     (EventState.QUEUED, 1.5, True)),
    # the budget
    ("max_attempts reached", result(EventState.FAILED), 5, 0.0, None,
     (EventState.DEAD, None, True)),
    ("max_age passed", result(EventState.FAILED), 1, 3600.0, None,
     (EventState.DEAD, None, True)),
    # could not connect: not an attempt, never dead by attempts; due again at once
    ("unreachable", result(EventState.FAILED, Outcome.CONNECT_ERROR), 1, 0.0, None,
     (EventState.QUEUED, 0.0, False)),
    ("unreachable at max_attempts", result(EventState.FAILED, Outcome.CONNECT_ERROR), 5, 0.0,
     None, (EventState.QUEUED, 0.0, False)),
    ("unreachable past max_age", result(EventState.FAILED, Outcome.CONNECT_ERROR), 1, 3600.0,
     None, (EventState.DEAD, None, False)),
]


@pytest.mark.parametrize(("name", "res", "attempts", "age", "retry", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_settlement_truth_table(name: str, res: AttemptResult, attempts: int, age: float,
                                retry: str | None, expected: tuple[object, ...]) -> None:
    assert ends(res, attempts=attempts, age=age, retry_after_value=retry) == expected


@pytest.mark.parametrize(("res", "word"), [
    (result(EventState.DONE, status=200), "done"),
    (result(EventState.FAILED), "retry"),
    (result(EventState.FAILED, Outcome.CONNECT_ERROR), "unreachable"),
])
def test_how_a_try_ended_in_a_word(res: AttemptResult, word: str) -> None:
    assert ended(settlement(res, round_attempts=1, age=0.0, retry_after_value=None,
                            policy=POLICY, now=NOW, rand=lambda: 0.5)) == word
    dead = settlement(res, round_attempts=1, age=POLICY.max_age, retry_after_value=None,
                      policy=POLICY, now=NOW, rand=lambda: 0.5)
    assert ended(dead) == ("done" if word == "done" else "dead")


def test_backoff_doubles_to_the_ceiling_with_equal_jitter() -> None:
    lowest = [backoff(n, POLICY, lambda: 0.0) for n in range(1, 9)]
    highest = [backoff(n, POLICY, lambda: 0.999999) for n in range(1, 9)]
    assert lowest == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert [round(h, 3) for h in highest] == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_backoff_of_a_huge_attempt_count_stays_bounded() -> None:
    assert backoff(10_000, POLICY, lambda: 0.5) == 45.0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after(None, NOW) is None
    assert retry_after(" 30 ", NOW) == 30.0
    assert retry_after(email.utils.formatdate(NOW + 90, usegmt=True), NOW) == 90.0
    assert retry_after(email.utils.formatdate(NOW - 90, usegmt=True), NOW) == 0.0
    assert retry_after("-5", NOW) is None
    assert retry_after("tomorrow", NOW) is None


def test_unreachable_pause_doubles_up_to_its_cap() -> None:
    pauses = [unreachable_pause(n, POLICY) for n in range(1, 8)]
    assert pauses == [2.0, 4.0, 8.0, 16.0, UNREACHABLE_MAX_PAUSE, UNREACHABLE_MAX_PAUSE,
                      UNREACHABLE_MAX_PAUSE]
    short = RetryPolicy(5, 3600.0, 0.2, 1.0)
    assert [unreachable_pause(n, short) for n in (1, 2, 3, 4)] == [0.2, 0.4, 0.8, 1.0]
