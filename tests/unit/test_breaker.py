"""The pure rules of a held provider: what a delivery may do (``check_hold``) for every state, and
each transition of the breaker and the pause, as truth tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.core.breaker import (
    MIN_RETRY_AFTER,
    PAUSED_RETRY_AFTER,
    BreakerPolicy,
    BreakerState,
    Deliver,
    Held,
    HoldCheck,
    HoldReason,
    MayProbe,
    Pause,
    ProbeEnd,
    ProviderState,
    check_hold,
    count_failure,
    counts_as_failure,
    end_probe,
    pause,
    resume,
    take_probe,
)
from sidecar.core.events import Outcome

NOW = 1_700_000_000.0
POLICY = BreakerPolicy(failures=3, window=60.0, cooldown=30.0)
CLOSED = ProviderState("p", now=NOW)
PAUSED = replace(CLOSED, paused=Pause(NOW - 5, "ops", "incident"))
OPEN_COOLING = replace(CLOSED, breaker=BreakerState.OPEN, opened_at=NOW - 10,
                       open_until=NOW + 20)
OPEN_DUE = replace(OPEN_COOLING, open_until=NOW)
PROBING = replace(CLOSED, breaker=BreakerState.HALF_OPEN, probe_owner="a",
                  probe_until=NOW + 5)
PROBE_LOST = replace(PROBING, probe_until=NOW - 1)


@pytest.mark.parametrize(("state", "policy", "expected"), [
    (CLOSED, POLICY, Deliver()),
    (CLOSED, None, Deliver()),
    (PAUSED, POLICY, Held(HoldReason.PAUSED, PAUSED_RETRY_AFTER)),
    (PAUSED, None, Held(HoldReason.PAUSED, PAUSED_RETRY_AFTER)),
    (replace(OPEN_COOLING, paused=PAUSED.paused), POLICY,
     Held(HoldReason.PAUSED, PAUSED_RETRY_AFTER)),
    (OPEN_COOLING, POLICY, Held(HoldReason.BREAKER_OPEN, 20.0)),
    (OPEN_COOLING, None, Deliver()),  # the breaker turned off in the config: not obeyed
    (replace(OPEN_COOLING, open_until=NOW + 0.2), POLICY,
     Held(HoldReason.BREAKER_OPEN, MIN_RETRY_AFTER)),
    (OPEN_DUE, POLICY, MayProbe()),
    (PROBING, POLICY, Held(HoldReason.BREAKER_OPEN, 5.0)),
    (PROBE_LOST, POLICY, MayProbe()),
])
def test_check_hold(state: ProviderState, policy: BreakerPolicy | None,
                     expected: HoldCheck) -> None:
    assert check_hold(state, NOW, policy) == expected


@pytest.mark.parametrize(("outcome", "status", "failed"), [
    (Outcome.RESPONSE, 200, False),
    (Outcome.RESPONSE, 204, False),
    (Outcome.RESPONSE, 400, False),
    (Outcome.RESPONSE, 404, False),
    (Outcome.RESPONSE, 408, True),
    (Outcome.RESPONSE, 429, True),
    (Outcome.RESPONSE, 500, True),
    (Outcome.RESPONSE, 503, True),
    (Outcome.TIMEOUT, None, True),
    (Outcome.CONNECT_ERROR, None, True),
    (Outcome.DISCONNECTED, None, True),
])
def test_what_counts_as_a_failure(outcome: Outcome, status: int | None, failed: bool) -> None:
    assert counts_as_failure(outcome, status) is failed


@pytest.mark.parametrize(("failures", "since", "counted", "opens"), [
    (0, None, 1, False),  # the first failure starts a window
    (1, NOW - 10, 2, False),
    (2, NOW - 10, 3, True),  # the third within the window opens
    (2, NOW - 61, 1, False),  # the window ran out: a new one starts
    (2, NOW - 60, 1, False),  # exactly the window ago: out
])
def test_count_failure_while_closed(failures: int, since: float | None, counted: int,
                                    opens: bool) -> None:
    state = replace(CLOSED, failures=failures, failures_since=since)
    after = count_failure(state, NOW, POLICY, "HTTP 500")
    assert after is not None
    assert after.failures == counted
    assert after.last_failure == "HTTP 500"
    assert after.failures_since == (since if counted > 1 else NOW)
    if opens:
        assert (after.breaker, after.opened_at, after.open_until) == (
            BreakerState.OPEN, NOW, NOW + POLICY.cooldown)
    else:
        assert (after.breaker, after.opened_at, after.open_until) == (
            BreakerState.CLOSED, None, None)


@pytest.mark.parametrize("state", [OPEN_COOLING, OPEN_DUE, PROBING])
def test_a_failure_is_not_counted_unless_closed(state: ProviderState) -> None:
    assert count_failure(state, NOW, POLICY, "HTTP 500") is None


def test_one_failure_opens_a_breaker_of_one() -> None:
    after = count_failure(CLOSED, NOW, replace(POLICY, failures=1), "timeout")
    assert after is not None and after.breaker is BreakerState.OPEN


@pytest.mark.parametrize(("state", "taken"), [
    (CLOSED, False),
    (OPEN_COOLING, False),
    (OPEN_DUE, True),
    (PROBING, False),  # someone holds a live probe
    (PROBE_LOST, True),  # its holder vanished: the lease ended
    (replace(OPEN_DUE, paused=PAUSED.paused), False),
])
def test_take_probe(state: ProviderState, taken: bool) -> None:
    after = take_probe(state, NOW, "b", 10.0)
    if not taken:
        assert after is None
        return
    assert after is not None
    assert (after.breaker, after.probe_owner, after.probe_until) == (
        BreakerState.HALF_OPEN, "b", NOW + 10.0)


@pytest.mark.parametrize(("end", "breaker", "open_until", "failures"), [
    (ProbeEnd.SUCCEEDED, BreakerState.CLOSED, None, 0),
    (ProbeEnd.FAILED, BreakerState.OPEN, NOW + POLICY.cooldown, 3),
    (ProbeEnd.UNUSED, BreakerState.OPEN, NOW - 1, 3),  # due for a probe again at once
])
def test_end_probe_by_its_owner(end: ProbeEnd, breaker: BreakerState, open_until: float | None,
                                failures: int) -> None:
    state = replace(PROBING, failures=3, failures_since=NOW - 40, open_until=NOW - 1,
                    opened_at=NOW - 31, last_failure="HTTP 500")
    after = end_probe(state, NOW, "a", end, POLICY.cooldown, "HTTP 502")
    assert after is not None
    assert (after.breaker, after.open_until, after.failures) == (breaker, open_until, failures)
    assert (after.probe_owner, after.probe_until) == (None, None)
    assert after.last_failure == ("HTTP 502" if end is ProbeEnd.FAILED else "HTTP 500")


@pytest.mark.parametrize("state", [CLOSED, OPEN_DUE, PROBING])
def test_end_probe_of_another_owner_or_no_probe_changes_nothing(state: ProviderState) -> None:
    assert end_probe(state, NOW, "b", ProbeEnd.SUCCEEDED, 30.0, "") is None


def test_pause_and_resume_are_guarded() -> None:
    paused = pause(CLOSED, NOW, "ops", "incident")
    assert paused is not None and paused.paused == Pause(NOW, "ops", "incident")
    assert pause(paused, NOW + 1, "other", "again") is None  # the first pause stands
    resumed = resume(paused, NOW + 2)
    assert resumed is not None and resumed.paused is None
    assert resume(resumed, NOW + 3) is None
