"""What to do with a delivery, given the row found for its event id: a pure function of plain
values. The delivery pipeline only executes these decisions; ``core.answers`` says what each
one answers the provider."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import assert_never

from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    RecordedResponse,
)

# Waiting on another delivery's attempt polls its row: the row is the truth, and polling needs
# no connection of its own. The first poll comes soon (most forwards are fast), then they
# space out so a long forward costs few reads.
FIRST_POLL = 0.02
MAX_POLL = 0.25
QUEUE_ROW_RETRY_AFTER = 60


@dataclass(frozen=True, slots=True)
class AnswerRecorded:
    """The event is done: answer with the recorded response, without reaching the app."""

    row: EventRow


@dataclass(frozen=True, slots=True)
class TakeOver:
    """The event failed, or its attempt crashed (lease expired): try to take it over."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Another attempt is in flight with a live lease: sleep ``pause`` seconds, then read the
    row again."""

    pause: float


@dataclass(frozen=True, slots=True)
class Busy:
    """Still in flight after the bounded wait: answer 409 with ``Retry-After``."""

    retry_after: int


@dataclass(frozen=True, slots=True)
class MirrorFailure:
    """The attempt this delivery waited for failed: answer its failure (non-2xx)."""

    row: EventRow


@dataclass(frozen=True, slots=True)
class QueueOwned:
    """A queue-mode row whose worker's attempt ended without a result (its lease expired),
    met under a provider now in forward mode: the delivery workers take it again, this
    delivery never takes it over. Answer 409 with ``Retry-After``."""

    retry_after: int = QUEUE_ROW_RETRY_AFTER


Decision = AnswerRecorded | TakeOver | Wait | Busy | MirrorFailure | QueueOwned


def decide(row: EventRow, *, waits: int, wait_left: float) -> Decision:
    """Decide for a delivery that did not win the claim.

    ``waits`` counts how often this delivery has already waited on an in-flight attempt. Once
    it has, it mirrors that attempt's failure instead of taking the event over itself, so a
    burst of concurrent duplicates cannot turn one failure into a burst of retries. ``wait_left``
    is what remains of the provider's ``inflight_wait`` budget, in seconds.
    """
    match row.state:
        case EventState.DONE:
            return AnswerRecorded(row)
        case EventState.FAILED:
            return MirrorFailure(row) if waits else TakeOver()
        case EventState.QUEUED | EventState.DEAD:
            # A queue-mode row under a provider now in forward mode: its delivery workers own
            # it (docs/operations.md: switch modes once the queue is drained). Never taken over.
            return Busy(retry_after=QUEUE_ROW_RETRY_AFTER)
        case EventState.PROCESSING:
            if not row.lease_live:
                # A crashed attempt: forward mode's is taken over; a delivery worker's is not
                # (the store's take_over leaves queue rows alone, so asking would only loop).
                return QueueOwned() if row.in_queue else TakeOver()
            remaining = (row.lease_until or row.now) - row.now
            if wait_left <= 0:
                return Busy(retry_after=max(1, math.ceil(min(remaining, 60.0))))
            backoff = min(FIRST_POLL * 2 ** min(waits, 16), MAX_POLL)
            return Wait(pause=min(backoff, wait_left, remaining))
        case _:
            assert_never(row.state)


def finishes_in_forward_mode(row: EventRow) -> bool:
    """Queue mode found the event's row already there: whether forward mode wrote it and has
    not finished it (failed, or an attempt in flight or crashed). Forward mode's rules then
    finish it, so a provider is never told "accepted" for an event no worker would deliver.
    A done row is answered "accepted" whichever mode wrote it."""
    return row.state is not EventState.DONE and not row.in_queue


def rejects_other_body(seen_sha256: bytes, body_sha256: bytes, policy: str) -> bool | None:
    """A claim (or an enqueue) found the event already seen, with the body hash
    ``seen_sha256``: ``None`` when with the same body; else whether the provider's
    ``on_payload_mismatch`` policy refuses this delivery (``reject``: 422) rather than treating
    it as the duplicate it claims to be (``duplicate``)."""
    if seen_sha256 == body_sha256:
        return None
    return policy == "reject"


def classify(status: int, final: frozenset[int]) -> EventState:
    """An app's HTTP answer ends the attempt ``done`` when it is a 2xx, or one of the provider's
    ``final_statuses`` (a rejection the app wants recorded and replayed); any other answer
    leaves it ``failed``, so the provider's own retry policy reaches the app again."""
    if 200 <= status < 300 or status in final:
        return EventState.DONE
    return EventState.FAILED


def result_of(outcome: Outcome, response: RecordedResponse | None, latency_ms: float,
              final: frozenset[int]) -> AttemptResult:
    state = (classify(response.status, final)
             if outcome is Outcome.RESPONSE and response is not None else EventState.FAILED)
    return AttemptResult(state=state, outcome=outcome, response=response, latency_ms=latency_ms)


def status_class(response: RecordedResponse | None) -> str:
    """The app's answer as a metric label: ``2xx``…``5xx``, or ``none`` when it gave none."""
    return f"{response.status // 100}xx" if response is not None else "none"
