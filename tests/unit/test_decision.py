"""The pure core: what a delivery that lost the claim does, for every row state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.core.answers import failure_status
from sidecar.core.decision import (
    FIRST_POLL,
    MAX_POLL,
    QUEUE_ROW_RETRY_AFTER,
    AnswerRecorded,
    Busy,
    MirrorFailure,
    QueueOwned,
    TakeOver,
    Wait,
    classify,
    decide,
    finishes_in_forward_mode,
    rejects_other_body,
    result_of,
)
from sidecar.core.events import EventRow, EventState, Outcome, RecordedResponse

NOW = 1_700_000_000.0
OK = RecordedResponse(200, (("Content-Type", "application/json"),), b"{}")
FINAL = frozenset({400, 422})  # a provider whose app wants these rejections recorded


def row(state: EventState, lease_until: float | None = None, **kw: object) -> EventRow:
    base = EventRow(provider="p", event_id="e", state=state, attempt=1, body_sha256=b"h",
                    received_at=NOW - 5, updated_at=NOW - 1, lease_until=lease_until,
                    outcome=None, response=None, latency_ms=None, now=NOW, in_queue=False)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_done_is_answered_from_the_row() -> None:
    done = row(EventState.DONE, response=OK)
    assert decide(done, waits=0, wait_left=1) == AnswerRecorded(done)


def test_failed_is_taken_over_on_arrival_but_mirrored_after_waiting() -> None:
    failed = row(EventState.FAILED, outcome=Outcome.TIMEOUT)
    assert decide(failed, waits=0, wait_left=1) == TakeOver()
    assert decide(failed, waits=1, wait_left=1) == MirrorFailure(failed)


@pytest.mark.parametrize("state", [EventState.QUEUED, EventState.DEAD])
def test_a_queue_row_under_forward_mode_is_busy_never_taken_over(state: EventState) -> None:
    """A provider switched back to forward mode before its queue drained: the row belongs to
    the delivery workers (or an operator's re-drive), so the provider is told to come back."""
    queued = row(state, attempt=0, in_queue=True)
    assert decide(queued, waits=0, wait_left=1) == Busy(retry_after=QUEUE_ROW_RETRY_AFTER)
    assert decide(queued, waits=3, wait_left=0) == Busy(retry_after=QUEUE_ROW_RETRY_AFTER)


@pytest.mark.parametrize(("waits", "wait_left"), [(0, 1.0), (1, 1.0), (3, 0.0)])
def test_a_queue_row_whose_worker_crashed_is_left_to_the_workers(waits: int,
                                                                  wait_left: float) -> None:
    """Processing with an expired lease: a forward-mode attempt that crashed is taken over;
    a delivery worker's is not (the workers take it again), however long this one waited."""
    crashed = row(EventState.PROCESSING, lease_until=NOW - 0.001)
    assert decide(crashed, waits=waits, wait_left=wait_left) == TakeOver()
    in_queue = replace(crashed, in_queue=True)
    assert decide(in_queue, waits=waits, wait_left=wait_left) == QueueOwned(
        retry_after=QUEUE_ROW_RETRY_AFTER)


def test_a_queue_row_in_flight_with_a_worker_is_waited_on_like_any_attempt() -> None:
    live = row(EventState.PROCESSING, lease_until=NOW + 30, in_queue=True)
    assert decide(live, waits=0, wait_left=0.5) == Wait(pause=FIRST_POLL)
    assert decide(live, waits=1, wait_left=0) == Busy(retry_after=30)


@pytest.mark.parametrize(("state", "in_queue", "forward"), [
    (EventState.DONE, False, False),  # answered "accepted", whichever mode wrote it
    (EventState.QUEUED, True, False),  # the queue's: accepted again
    (EventState.DEAD, True, False),
    (EventState.PROCESSING, True, False),  # a worker's attempt, live or crashed
    (EventState.PROCESSING, False, True),  # forward mode's attempt, live or crashed
    (EventState.FAILED, False, True),  # forward mode's failure: taken over there
])
def test_queue_mode_leaves_to_forward_mode_only_what_forward_mode_has_not_finished(
        state: EventState, in_queue: bool, forward: bool) -> None:
    for lease_until in (NOW + 30, NOW - 1, None):
        found = row(state, lease_until=lease_until, in_queue=in_queue)
        assert finishes_in_forward_mode(found) is forward


def test_live_lease_waits_then_is_busy() -> None:
    live = row(EventState.PROCESSING, lease_until=NOW + 30)
    assert decide(live, waits=0, wait_left=0.5) == Wait(pause=FIRST_POLL)
    assert decide(live, waits=1, wait_left=0) == Busy(retry_after=30)
    short = row(EventState.PROCESSING, lease_until=NOW + 0.2)
    assert decide(short, waits=1, wait_left=0) == Busy(retry_after=1)


@pytest.mark.parametrize(("waits", "wait_left", "lease_left", "pause"), [
    (0, 5.0, 30.0, FIRST_POLL),  # the first poll comes soon
    (1, 5.0, 30.0, FIRST_POLL * 2),  # then the polls space out, doubling
    (3, 5.0, 30.0, FIRST_POLL * 8),
    (10, 5.0, 30.0, MAX_POLL),  # up to a ceiling
    (10_000, 5.0, 30.0, MAX_POLL),  # however long it has waited
    (10, 0.05, 30.0, 0.05),  # never past the wait budget
    (10, 5.0, 0.01, 0.01),  # nor past the lease (then the attempt may be taken over)
])
def test_waiting_backs_off_within_budget_and_lease(waits: int, wait_left: float,
                                                   lease_left: float, pause: float) -> None:
    live = row(EventState.PROCESSING, lease_until=NOW + lease_left)
    decision = decide(live, waits=waits, wait_left=wait_left)
    assert isinstance(decision, Wait) and decision.pause == pytest.approx(pause)


def test_expired_lease_is_taken_over_even_after_waiting() -> None:
    crashed = row(EventState.PROCESSING, lease_until=NOW - 0.001)
    assert decide(crashed, waits=1, wait_left=0) == TakeOver()


@pytest.mark.parametrize(("seen_body", "policy", "verdict"), [
    (b"h", "duplicate", None),  # the same body: no mismatch at all
    (b"h", "reject", None),
    (b"other", "duplicate", False),  # counted, then answered as the duplicate it claims to be
    (b"other", "reject", True),  # counted and refused (422)
])
def test_payload_mismatch_policy(seen_body: bytes, policy: str, verdict: bool | None) -> None:
    assert rejects_other_body(row(EventState.DONE).body_sha256, seen_body, policy) is verdict


@pytest.mark.parametrize(("status", "final", "state"), [
    (200, frozenset(), EventState.DONE), (204, frozenset(), EventState.DONE),
    # by default anything but a 2xx leaves the event failed: the provider's retry reaches the
    # app again (a 404 from a misdeployed app must not become permanent)
    (404, frozenset(), EventState.FAILED), (401, frozenset(), EventState.FAILED),
    (400, frozenset(), EventState.FAILED), (301, frozenset(), EventState.FAILED),
    (429, frozenset(), EventState.FAILED), (500, frozenset(), EventState.FAILED),
    # final_statuses opts chosen rejections in to being recorded and replayed
    (400, FINAL, EventState.DONE), (422, FINAL, EventState.DONE),
    (404, FINAL, EventState.FAILED), (503, FINAL, EventState.FAILED),
])
def test_only_2xx_or_a_final_status_ends_an_event_done(status: int, final: frozenset[int],
                                                       state: EventState) -> None:
    assert classify(status, final) is state


def test_failure_status_is_never_2xx() -> None:
    assert failure_status(Outcome.TIMEOUT, None) == 504
    assert failure_status(Outcome.CONNECT_ERROR, None) == 502
    assert failure_status(Outcome.DISCONNECTED, None) == 502
    assert failure_status(Outcome.RESPONSE, RecordedResponse(503, (), b"")) == 503


def test_result_of_without_a_response_is_failed() -> None:
    assert result_of(Outcome.TIMEOUT, None, 10.0, FINAL).state is EventState.FAILED
    assert result_of(Outcome.RESPONSE, OK, 1.0, FINAL).state is EventState.DONE
