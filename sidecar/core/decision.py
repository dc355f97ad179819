"""What to do with a delivery, given the row found for its event id: a pure function of plain
values. The HTTP shell only executes these decisions."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
)


@dataclass(frozen=True, slots=True)
class Replay:
    """The event is done: answer with the recorded response, without reaching the app."""

    response: RecordedResponse | None


@dataclass(frozen=True, slots=True)
class TakeOver:
    """The event failed, or its attempt crashed (lease expired): try to take it over."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Another attempt is in flight with a live lease: wait and read the row again."""

    lease_remaining: float


@dataclass(frozen=True, slots=True)
class Busy:
    """Still in flight after the bounded wait: answer 409 with ``Retry-After``."""

    retry_after: int


@dataclass(frozen=True, slots=True)
class MirrorFailure:
    """The attempt this delivery waited for failed: answer its failure (non-2xx)."""

    row: EventRow


Decision = Replay | TakeOver | Wait | Busy | MirrorFailure


def decide(row: EventRow, *, waited: bool, wait_left: float) -> Decision:
    """Decide for a delivery that did not win the claim.

    ``waited`` is True once this delivery has waited on an in-flight attempt: it then mirrors
    that attempt's failure instead of taking the event over itself, so a burst of concurrent
    duplicates cannot turn one failure into a burst of retries. ``wait_left`` is what remains of
    the provider's ``inflight_wait`` budget, in seconds.
    """
    if row.state is EventState.DONE:
        return Replay(row.response)
    if row.state is EventState.FAILED:
        return MirrorFailure(row) if waited else TakeOver()
    # processing
    if not row.lease_live:
        return TakeOver()
    remaining = (row.lease_until or row.now) - row.now
    if wait_left <= 0:
        return Busy(retry_after=max(1, math.ceil(min(remaining, 60.0))))
    return Wait(lease_remaining=remaining)


def classify(status: int, retryable: frozenset[int]) -> EventState:
    """An upstream HTTP answer ends the attempt ``done`` (2xx, or a final 4xx) or ``failed``."""
    if 200 <= status < 300:
        return EventState.DONE
    return EventState.FAILED if status in retryable else EventState.DONE


def failure_status(outcome: Outcome, response: RecordedResponse | None) -> int:
    """The status a provider gets for a failed attempt: never a 2xx."""
    if outcome is Outcome.RESPONSE and response is not None and response.status >= 300:
        return response.status
    if outcome is Outcome.TIMEOUT:
        return 504
    if outcome is Outcome.CONNECT_ERROR:
        return 502
    return 502  # disconnected before an answer


def result_of(outcome: Outcome, response: RecordedResponse | None, latency_ms: float,
              retryable: frozenset[int]) -> AttemptResult:
    state = (classify(response.status, retryable)
             if outcome is Outcome.RESPONSE and response is not None else EventState.FAILED)
    return AttemptResult(state=state, outcome=outcome, response=response, latency_ms=latency_ms)
