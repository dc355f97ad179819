"""Queue mode's rules, as pure functions: when a queued event is tried again, when it is dead,
and how long a provider's delivery pauses while the app cannot be reached. The delivery
workers (``sidecar.forwarding.queueworker``) only carry these out; the store writes the
``Settlement``.

    try ─┬─ 2xx (or a final status) ─────────────────────────────── done
         ├─ could not connect ── not an attempt: due again, the provider pauses ── queued
         └─ any other failure ─┬─ budget left ── backoff or the app's Retry-After ── queued
                               └─ max_attempts reached, or max_age passed ────────── dead
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sidecar.core.events import AttemptResult, EventState, Outcome, Settlement

# While the app cannot be connected to, a provider's workers send one probe at a time, paused
# first_retry, doubling, up to this (or max_retry_delay if shorter): an app back up is
# noticed within it.
UNREACHABLE_MAX_PAUSE: Final = 30.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A provider's delivery budget and backoff (``providers.<key>.queue``)."""

    max_attempts: int
    max_age: float  # seconds from queued (or re-driven)
    first_retry: float
    max_retry_delay: float


def backoff(attempts: int, policy: RetryPolicy, rand: Callable[[], float]) -> float:
    """The delay after the ``attempts``-th failed attempt (≥ 1): ``first_retry`` doubling per
    attempt up to ``max_retry_delay``, then "equal jitter": half of it fixed, half random, so
    that events failed together do not come back together. ``rand()`` is in [0, 1)."""
    exponent = min(max(attempts - 1, 0), 62)
    ceiling = min(policy.max_retry_delay, policy.first_retry * 2.0 ** exponent)
    return ceiling / 2 + ceiling / 2 * rand()


def retry_after(value: str | None, now: float) -> float | None:
    """An HTTP ``Retry-After`` (delay-seconds or an HTTP-date) as seconds from ``now`` (epoch
    seconds), or None when absent or unreadable. A date in the past is 0."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT by definition
        return None
    return max(0.0, when.timestamp() - now)


def settlement(result: AttemptResult, *, round_attempts: int, age: float,
               retry_after_value: str | None, policy: RetryPolicy, now: float,
               rand: Callable[[], float], error: str | None = None) -> Settlement:
    """How a try ends. ``round_attempts`` counts the attempts of this round, this try
    included; ``age`` is the time since the event was queued (or re-driven), in seconds."""
    if result.state is EventState.DONE:
        return Settlement(EventState.DONE, result)
    reached = result.outcome is not Outcome.CONNECT_ERROR
    if age >= policy.max_age or (reached and round_attempts >= policy.max_attempts):
        return Settlement(EventState.DEAD, result, reached=reached, error=error)
    if not reached:  # not an attempt: due again at once; the provider's pause paces it
        return Settlement(EventState.QUEUED, result, retry_in=0.0, reached=False, error=error)
    asked = retry_after(retry_after_value, now)
    # The app's Retry-After, within [first_retry, max_retry_delay]: "0" would otherwise spend
    # the whole budget in a burst while the app sheds load.
    delay = (min(max(asked, policy.first_retry), policy.max_retry_delay) if asked is not None
             else backoff(round_attempts, policy, rand))
    return Settlement(EventState.QUEUED, result, retry_in=delay, error=error)


def ended(ends: Settlement) -> str:
    """How a try ended, in a word (the ``result`` of its metric and log line): ``done``,
    ``dead``, ``retry``, or ``unreachable`` (due again, not counted as an attempt)."""
    if ends.state is EventState.DONE:
        return "done"
    if ends.state is EventState.DEAD:
        return "dead"
    return "retry" if ends.reached else "unreachable"


def unreachable_pause(failures: int, policy: RetryPolicy) -> float:
    """How long a provider's workers wait before the next probe after ``failures`` (≥ 1)
    consecutive tries that could not connect to the app."""
    exponent = min(max(failures - 1, 0), 62)
    cap = min(policy.max_retry_delay, UNREACHABLE_MAX_PAUSE)
    return min(cap, policy.first_retry * 2.0 ** exponent)
