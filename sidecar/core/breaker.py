"""A provider's deliveries held back: paused by an operator, or by its circuit breaker. The
state is one row per provider in the store (``ProviderState``); every change is one guarded
statement there, so that of several replicas exactly one makes it. This module is that state
and its rules, as plain values: what a delivery may do given the state (``check_hold``), and each
transition (``count_failure``, ``take_probe``, ``end_probe``, ``pause``, ``resume``), which the
SQL files mirror and the memory store runs as they are.

    closed ──(failures ≥ N within window)──▶ open ──(cooldown over, one probe taken)──▶ half_open
      ▲                                       ▲                                          │
      └──────────── probe succeeded ──────────┼──────────── probe failed ────────────────┘
                                              └──── probe unused (nothing to deliver) ───┘

The failure window is fixed: it starts at the first failure counted after the last reset (a
close, or a window that ran out), so the rule is one row's arithmetic, not a list of times.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from sidecar.core.events import AttemptResult, Outcome


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class HoldReason(StrEnum):
    """Why a provider's deliveries are held (the ``reason`` of forward mode's 503)."""

    PAUSED = "paused"
    BREAKER_OPEN = "breaker_open"


class ProbeEnd(StrEnum):
    """How the one probe through a half-open breaker ended."""

    SUCCEEDED = "succeeded"  # the app answered and was well: close
    FAILED = "failed"  # the app failed again: open for another cooldown
    UNUSED = "unused"  # nothing was delivered (an empty queue): open, due for a probe again


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """``delivery.breaker``: open after ``failures`` failed attempts within ``window`` seconds;
    let one probe through after ``cooldown`` seconds."""

    failures: int
    window: float
    cooldown: float


@dataclass(frozen=True, slots=True)
class Pause:
    at: float  # Unix epoch seconds (database clock)
    by: str
    reason: str


@dataclass(frozen=True, slots=True)
class ProviderState:
    """One provider's row (times: Unix epoch seconds, database clock; ``now``: when read).
    A provider without a row has the defaults: running, breaker closed."""

    provider: str
    paused: Pause | None = None
    breaker: BreakerState = BreakerState.CLOSED
    failures: int = 0  # failed attempts counted in the current window
    failures_since: float | None = None  # the window's start
    last_failure: str | None = None  # what the last counted failure was: why it opened
    opened_at: float | None = None
    open_until: float | None = None  # when a probe may be taken
    probe_owner: str | None = None  # who holds the probe (half-open), until probe_until
    probe_until: float | None = None
    now: float = 0.0


# -- what a delivery may do -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deliver:
    """Not held: deliver as usual."""


@dataclass(frozen=True, slots=True)
class Held:
    """Held: take nothing (queue mode), answer 503 (forward mode); ``retry_after`` seconds is
    when it may change (a paused provider's is a guess: resuming is a person's act)."""

    reason: HoldReason
    retry_after: float


@dataclass(frozen=True, slots=True)
class MayProbe:
    """The cooldown is over and no live probe is out: whoever takes the probe (``take_probe``,
    one statement: one winner across replicas) delivers one attempt; the others are held."""


HoldCheck = Deliver | Held | MayProbe

PAUSED_RETRY_AFTER = 60.0  # seconds a provider is told to wait while its deliveries are paused
MIN_RETRY_AFTER = 1.0


def check_hold(state: ProviderState, now: float, policy: BreakerPolicy | None) -> HoldCheck:
    """What a delivery of ``state.provider`` may do at ``now`` (database clock). A pause comes
    first; without a policy the breaker is off, whatever its row says."""
    if state.paused is not None:
        return Held(HoldReason.PAUSED, PAUSED_RETRY_AFTER)
    if policy is None:
        return Deliver()
    match state.breaker:
        case BreakerState.CLOSED:
            return Deliver()
        case BreakerState.OPEN:
            until = state.open_until if state.open_until is not None else now
        case BreakerState.HALF_OPEN:
            # a probe is out; a probe whose holder vanished (its lease ended) is taken anew
            until = state.probe_until if state.probe_until is not None else now
        case _:
            assert_never(state.breaker)
    if until > now:
        return Held(HoldReason.BREAKER_OPEN, max(MIN_RETRY_AFTER, until - now))
    return MayProbe()


def counts_as_failure(outcome: Outcome, status: int | None) -> bool:
    """Whether an attempt counts against the breaker: no answer (refused, timeout, lost), a
    5xx, 429 or 408. Any other answer (2xx, a 4xx the app chose) shows the app is up."""
    if outcome is not Outcome.RESPONSE or status is None:
        return True
    return status >= 500 or status in (408, 429)


# -- the transitions (each one guarded statement in SQL; None: the guard refused) -------------


def count_failure(state: ProviderState, now: float, policy: BreakerPolicy,
                  why: str) -> ProviderState | None:
    """A failed attempt, while closed: counted in the window (a new window if the last one ran
    out), and the breaker opened when the count reaches ``policy.failures``. Not closed: not
    counted (None) — an open breaker's failures are its probe's, ended by ``end_probe``."""
    if state.breaker is not BreakerState.CLOSED:
        return None
    in_window = state.failures_since is not None and state.failures_since > now - policy.window
    failures = state.failures + 1 if in_window else 1
    since = state.failures_since if in_window else now
    counted = dataclasses.replace(state, failures=failures, failures_since=since,
                                  last_failure=why, now=now)
    if failures < policy.failures:
        return counted
    return dataclasses.replace(counted, breaker=BreakerState.OPEN, opened_at=now,
                               open_until=now + policy.cooldown)


def take_probe(state: ProviderState, now: float, owner: str,
               lease: float) -> ProviderState | None:
    """Take the one probe: open with the cooldown over, or half-open with the probe's lease
    ended (its holder crashed). Never while paused."""
    if state.paused is not None:
        return None
    due = ((state.breaker is BreakerState.OPEN and state.open_until is not None
            and state.open_until <= now)
           or (state.breaker is BreakerState.HALF_OPEN and state.probe_until is not None
               and state.probe_until <= now))
    if not due:
        return None
    return dataclasses.replace(state, breaker=BreakerState.HALF_OPEN, probe_owner=owner,
                               probe_until=now + lease, now=now)


def end_probe(state: ProviderState, now: float, owner: str, end: ProbeEnd, cooldown: float,
              why: str) -> ProviderState | None:
    """The probe ``owner`` took ended: close, open again for ``cooldown``, or give it back
    unused. Only the probe's owner, only while half-open."""
    if state.breaker is not BreakerState.HALF_OPEN or state.probe_owner != owner:
        return None
    ended = dataclasses.replace(state, probe_owner=None, probe_until=None, now=now)
    match end:
        case ProbeEnd.SUCCEEDED:
            return dataclasses.replace(ended, breaker=BreakerState.CLOSED, failures=0,
                                       failures_since=None, opened_at=None, open_until=None)
        case ProbeEnd.FAILED:
            return dataclasses.replace(ended, breaker=BreakerState.OPEN, opened_at=now,
                                       open_until=now + cooldown, last_failure=why)
        case ProbeEnd.UNUSED:
            return dataclasses.replace(ended, breaker=BreakerState.OPEN)
        case _:
            assert_never(end)


def pause(state: ProviderState, now: float, by: str, reason: str) -> ProviderState | None:
    if state.paused is not None:
        return None
    return dataclasses.replace(state, paused=Pause(now, by, reason), now=now)


def resume(state: ProviderState, now: float) -> ProviderState | None:
    if state.paused is None:
        return None
    return dataclasses.replace(state, paused=None, now=now)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A delivery may go ahead; ``probe``: it is the breaker's one probe (the token its
    ``take_probe`` wrote), whose end decides whether the breaker closes."""

    probe: str | None = None


def policy_of(failures: int | None, window: float, cooldown: float) -> BreakerPolicy | None:
    """``delivery.breaker`` as a policy; None (no breaker) while ``failures`` is empty."""
    return None if failures is None else BreakerPolicy(failures, window, cooldown)


def describe_failure(outcome: Outcome, status: int | None) -> str:
    """A failed attempt in a few words, for why a breaker opened."""
    if outcome is Outcome.RESPONSE and status is not None:
        return f"HTTP {status}"
    return outcome.value.replace("_", " ")


def breaker_end(result: AttemptResult) -> tuple[ProbeEnd, str]:
    """How an attempt that was made ended for the breaker, and in a few words."""
    status = result.response.status if result.response is not None else None
    if counts_as_failure(result.outcome, status):
        return ProbeEnd.FAILED, describe_failure(result.outcome, status)
    return ProbeEnd.SUCCEEDED, ""
