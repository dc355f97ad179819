"""The chaos suite's invariant checker (bench/chaos/invariants.py) on synthetic histories:
each invariant holds on a clean history and is violated, by name and with evidence, by the
smallest history that breaks it. Pure and fast: no process, socket or database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from bench.chaos.fanout import fan_out_note, for_destination
from bench.chaos.history import (
    Delivery,
    ForwardLog,
    History,
    Kill,
    Kind,
    Receipt,
    Row,
    retryable,
)
from bench.chaos.invariants import Invariant, check
from bench.chaos.logs import from_logs
from bench.chaos.repeats import repeats
from bench.chaos.report import tally
from tests.support import ProxyProcess

BOUND = 10.0


def ok(event_id: str, sent: float = 0.0, status: int = 200, elapsed: float = 0.1,
       replica: int = 0, kind: Kind = Kind.NORMAL) -> Delivery:
    return Delivery(event_id, kind, replica, sent, elapsed, status)


def app(event_id: str, attempt: int = 1, at: float = 0.05, status: int | None = 200
        ) -> Receipt:
    return Receipt(event_id, attempt, at, status, at + 0.01 if status is not None else None)


def done(event_id: str, attempt: int = 1) -> Row:
    return Row(event_id, "done", attempt, lease_expired=True)


def history(deliveries: Sequence[Delivery], receipts: Sequence[Receipt] = (),
            rows: Sequence[Row] = (), forwards: Sequence[ForwardLog] = (),
            kinds: dict[str, Kind] | None = None, faults: dict[str, int] | None = None,
            proxy_errors: Sequence[str] = (), replica_deaths: Sequence[str] = ()) -> History:
    """A history with a fault recorded; ``kinds`` default to those of the deliveries."""
    if kinds is None:
        kinds = {d.event_id: d.kind for d in deliveries}
    return History(kinds=kinds, deliveries=deliveries, receipts=receipts, forwards=forwards,
                   rows=rows, bound=BOUND, faults={"crashes": 1} if faults is None else faults,
                   proxy_errors=proxy_errors, replica_deaths=replica_deaths)


def clean(event_id: str = "evt_1") -> History:
    return history([ok(event_id)], [app(event_id)], [done(event_id)])


def violated(h: History) -> set[Invariant]:
    return {v.invariant for v in check(h)}


# -- a clean history, and each invariant on its own ----------------------------------------


def test_clean_history_violates_nothing() -> None:
    h = history(
        [ok("evt_1", status=503, elapsed=0.5), ok("evt_1", sent=1.0, elapsed=0.2),
         ok("evt_2", status=409), ok("evt_2", sent=0.5, replica=1)],
        [app("evt_1", at=1.05), app("evt_2", at=0.02)],
        [done("evt_1"), done("evt_2")])
    assert check(h) == []


def test_an_event_never_answered_2xx() -> None:
    h = history([ok("evt_1", status=503), ok("evt_1", sent=1, status=503)])
    [v] = [v for v in check(h) if v.invariant is Invariant.EVENTUALLY_2XX]
    assert v.count == 1 and "evt_1: 2 deliveries, none 2xx; last 503" in v.evidence[0]


def test_an_event_the_provider_never_sent_counts_as_unanswered() -> None:
    h = history([ok("evt_1")], [app("evt_1")], [done("evt_1")],
                kinds={"evt_1": Kind.NORMAL, "evt_2": Kind.NORMAL})
    assert violated(h) == {Invariant.EVENTUALLY_2XX}


def test_a_refused_gzip_body_need_not_succeed_but_a_normal_one_must() -> None:
    gz = ok("gz_1", status=415, kind=Kind.GZIP)
    assert check(history([gz], faults={"gzip events": 1})) == []
    plain = replace(gz, kind=Kind.NORMAL)
    assert violated(history([plain])) == {Invariant.EVENTUALLY_2XX}


def test_2xx_without_the_app_is_caught() -> None:
    h = history([ok("evt_1")], rows=[done("evt_1")])
    assert Invariant.NO_2XX_WITHOUT_APP in violated(h)


def test_2xx_before_the_app_answered_is_caught() -> None:
    # The app's 2xx exists, but came after the provider had its 2xx.
    h = history([ok("evt_1", elapsed=0.1)], [app("evt_1", at=0.5)], [done("evt_1")])
    assert violated(h) == {Invariant.NO_2XX_WITHOUT_APP}


def test_2xx_when_the_app_answered_500_is_caught() -> None:
    h = history([ok("evt_1")], [app("evt_1", status=500)], [done("evt_1")])
    v = {v.invariant: v for v in check(h)}
    assert "attempt 1 → 500" in v[Invariant.NO_2XX_WITHOUT_APP].evidence[0]


def test_told_2xx_but_row_left_processing_is_lost_with_the_logged_cause() -> None:
    h = history([ok("evt_1")], [app("evt_1")],
                [Row("evt_1", "processing", 1, lease_expired=True)],
                [ForwardLog("evt_1", 1, 0, 200, record_error="lock timeout")])
    found = {v.invariant: v for v in check(h)}
    assert set(found) == {Invariant.LOST_ZERO, Invariant.NO_STUCK_ROWS}
    evidence = found[Invariant.LOST_ZERO].evidence[0]
    assert "row processing at attempt 1 (lease expired)" in evidence
    assert "result write failed on replica 0 (lock timeout)" in evidence


def test_told_2xx_but_no_row_is_lost() -> None:
    h = history([ok("evt_1")], [app("evt_1")])
    found = {v.invariant: v for v in check(h)}
    assert set(found) == {Invariant.LOST_ZERO}
    assert "no row" in found[Invariant.LOST_ZERO].evidence[0]


def test_a_500_is_caught_with_the_replicas_error_line() -> None:
    h = history([ok("evt_1", status=500), ok("evt_1", sent=1)], [app("evt_1", at=1.05)],
                [done("evt_1")], proxy_errors=["replica 0: delivery evt_1 InterfaceError"])
    [v] = check(h)
    assert v.invariant is Invariant.NO_500
    assert "log: replica 0: delivery evt_1 InterfaceError" in v.evidence
    assert "no-500 violated" in str(v)


@pytest.mark.parametrize(("state", "expired", "stuck"), [
    ("processing", True, True), ("processing", False, False), ("failed", True, False),
    ("done", True, False)])
def test_stuck_rows_are_processing_rows_with_an_expired_lease(
        state: str, expired: bool, stuck: bool) -> None:
    h = replace(clean(), rows=[done("evt_1"), Row("evt_9", state, 2, expired)])
    assert (Invariant.NO_STUCK_ROWS in violated(h)) is stuck


@pytest.mark.parametrize(("elapsed", "status", "late"), [
    (BOUND, 200, False), (BOUND + 0.01, 200, True), (3.0, None, True)])
def test_answers_beyond_the_bound_or_missing(elapsed: float, status: int | None,
                                             late: bool) -> None:
    extra = Delivery("evt_1", Kind.NORMAL, 1, 0.0, elapsed, status,
                     None if status else "ServerDisconnectedError")
    h = replace(clean(), deliveries=[ok("evt_1"), extra])
    assert (Invariant.WITHIN_BOUND in violated(h)) is late


@pytest.mark.parametrize(("status", "found"), [
    (413, set()), (415, set()), (400, set()), (503, {Invariant.BOMB_REFUSED}),
    (409, {Invariant.BOMB_REFUSED}), (200, {Invariant.BOMB_REFUSED,
                                            Invariant.NO_2XX_WITHOUT_APP, Invariant.LOST_ZERO}),
    (None, {Invariant.WITHIN_BOUND})])  # no answer at all is counted once, as unanswered
def test_a_bomb_must_get_a_final_4xx(status: int | None, found: set[Invariant]) -> None:
    bomb = Delivery("bomb", Kind.BOMB, 0, 0.0, 0.2, status, None if status else "reset")
    h = replace(clean(), deliveries=[ok("evt_1"), bomb],
                kinds={"evt_1": Kind.NORMAL, "bomb": Kind.BOMB})
    assert violated(h) == found


def test_a_bomb_that_reaches_the_app_is_caught_even_if_refused() -> None:
    bomb = Delivery("bomb", Kind.BOMB, 0, 0.0, 0.2, 413)
    h = replace(clean(), deliveries=[ok("evt_1"), bomb],
                kinds={"evt_1": Kind.NORMAL, "bomb": Kind.BOMB},
                receipts=[app("evt_1"), app("bomb", status=None)])
    found = {v.invariant: v for v in check(h)}
    assert "bomb: reached the app as attempt 1" in found[Invariant.BOMB_REFUSED].evidence


@pytest.mark.parametrize("faults", [{}, {"backends terminated": 0}])
def test_a_run_whose_fault_never_happened_proves_nothing(faults: dict[str, int]) -> None:
    assert violated(replace(clean(), faults=faults)) == {Invariant.FAULT_INJECTED}


def test_a_control_run_needs_no_fault() -> None:
    assert check(replace(clean(), faults={}, expect_fault=False)) == []


# -- repeats at the app --------------------------------------------------------------------


def repeated(attempts: Sequence[int], forwards: Sequence[ForwardLog] = (),
             first_status: int | None = 200, deaths: Sequence[str] = ()) -> History:
    receipts = [app("evt_1", attempt, at=0.05 + i, status=first_status if i == 0 else 200)
                for i, attempt in enumerate(attempts)]
    last = len(attempts) - 1
    return history([ok("evt_1", sent=last, elapsed=0.2)], receipts,
                   [done("evt_1", max(attempts))], forwards, replica_deaths=deaths)


@pytest.mark.parametrize(("log", "why"), [
    (ForwardLog("evt_1", 1, 0, 200, record_error="lock timeout"),
     "attempt 1: result write failed on replica 0 (lock timeout)"),
    (ForwardLog("evt_1", 1, 1, 504, upstream_error="no answer within 2s"),
     "attempt 1: forward got no answer on replica 1 (no answer within 2s)"),
    (ForwardLog("evt_1", 1, 0, superseded=True),
     "attempt 1: lease expired before its result was written (superseded)"),
    (ForwardLog("evt_1", 0, 1, 500, error="InterfaceError"),
     "attempt 1: a delivery of the event died with an internal error on replica 1 "
     "(InterfaceError)"),
])
def test_a_repeat_after_an_unknown_outcome_is_justified_by_the_log(
        log: ForwardLog, why: str) -> None:
    h = repeated([1, 2], [log])
    assert [r.why for r in repeats(h)] == [why]
    assert Invariant.REPEATS_JUSTIFIED not in violated(h)


def test_a_repeat_after_the_app_failed_is_justified() -> None:
    h = repeated([1, 2], first_status=503)
    assert [r.why for r in repeats(h)] == ["attempt 1: the app answered 503"]
    h = repeated([1, 2], first_status=None)
    assert [r.why for r in repeats(h)] == ["attempt 1: the app never answered"]


def test_a_repeat_after_a_replica_died_without_logging_is_justified() -> None:
    h = repeated([1, 2], deaths=["replica 0 exited -9"])
    assert "a replica died (replica 0 exited -9)" in (repeats(h)[0].why or "")


def test_a_repeat_after_a_known_success_is_not_justified() -> None:
    h = repeated([1, 2], [ForwardLog("evt_1", 1, 0, 200)])
    [v] = check(h)
    assert v.invariant is Invariant.REPEATS_JUSTIFIED
    assert v.evidence == ("evt_1 attempts [1, 2]: UNJUSTIFIED",)


def test_a_repeat_without_any_log_and_no_death_is_not_justified() -> None:
    assert violated(repeated([1, 2])) == {Invariant.REPEATS_JUSTIFIED}


def test_an_error_logged_for_another_attempt_justifies_nothing() -> None:
    h = repeated([1, 2, 3], [ForwardLog("evt_1", 1, 0, record_error="x"),
                             ForwardLog("evt_1", 3, 0, 500, error="boom")])
    assert violated(h) == {Invariant.REPEATS_JUSTIFIED}


@pytest.mark.parametrize("attempts", [[1, 1], [2, 1], [1, 3, 2], [0, 1]])
def test_attempt_numbers_must_increase_at_the_app(attempts: list[int]) -> None:
    logs = [ForwardLog("evt_1", n, 0, record_error="x") for n in set(attempts)]
    assert Invariant.REPEATS_JUSTIFIED in violated(repeated(attempts, logs))


def test_several_repeats_each_need_a_justification() -> None:
    logs = [ForwardLog("evt_1", 1, 0, record_error="lock timeout"),
            ForwardLog("evt_1", 2, 1, upstream_error="ClientOSError")]
    [r] = repeats(repeated([1, 2, 4], logs))
    assert r.attempts == (1, 2, 4)
    assert r.why == ("attempt 1: result write failed on replica 0 (lock timeout); "
                     "attempt 2: forward got no answer on replica 1 (ClientOSError)")
    assert violated(repeated([1, 2, 4], logs[:1])) == {Invariant.REPEATS_JUSTIFIED}


# -- retries and counts ----------------------------------------------------------------------


@pytest.mark.parametrize(("status", "again"), [
    (None, True), (500, True), (503, True), (409, True), (429, True), (408, True),
    (400, False), (401, False), (413, False), (415, False), (200, False)])
def test_what_the_provider_redelivers(status: int | None, again: bool) -> None:
    assert retryable(status) is again


def test_tally_counts_by_code() -> None:
    h = history(
        [ok("evt_1", status=503), ok("evt_1", sent=1, status=500, elapsed=2.5),
         ok("evt_1", sent=4, status=502), ok("evt_1", sent=5, status=409),
         Delivery("evt_1", Kind.NORMAL, 0, 6, 1.0, None, "reset"),
         ok("evt_1", sent=8), ok("gz_1", status=415, kind=Kind.GZIP)],
        [app("evt_1", 1, at=4.05), app("evt_1", 2, at=8.05)], [done("evt_1", 2)],
        [ForwardLog("evt_1", 1, 0, 502, upstream_error="ClientOSError")])
    t = tally(h)
    assert (t.events, t.deliveries, t.ok_2xx, t.status_409, t.status_503) == (2, 7, 1, 1, 1)
    assert t.five_xx() == "500:1 502:1" and t.others() == "415:1 none:1"
    assert (t.app_requests, t.repeats, t.unjustified, t.max_latency) == (2, 1, 0, 2.5)


# -- queue mode and killed replicas ----------------------------------------------------------


def queued(h: History, kills: Sequence[Kill] = ()) -> History:
    return replace(h, queued=True, kills=kills)


def test_queue_mode_answers_2xx_before_the_app_and_that_is_no_violation() -> None:
    # Accepted at 0.1 s; the app got it at 5 s (it was down): stored first, delivered later.
    h = history([ok("evt_1", elapsed=0.01)], [app("evt_1", at=5.0)], [done("evt_1")])
    assert violated(h) == {Invariant.NO_2XX_WITHOUT_APP}
    assert check(queued(h)) == []


@pytest.mark.parametrize(("rows", "receipts", "evidence"), [
    ([Row("evt_1", "queued", 0, lease_expired=True)], [],
     "row queued at attempt 0; app 2xx: no"),
    ([], [], "no row; app 2xx: no"),
    ([Row("evt_1", "dead", 3, lease_expired=True)], [app("evt_1", 3, status=500)],
     "row dead at attempt 3; app 2xx: no"),
])
def test_an_accepted_event_not_delivered_is_lost_in_queue_mode(
        rows: list[Row], receipts: list[Receipt], evidence: str) -> None:
    h = queued(history([ok("evt_1", elapsed=0.01)], receipts, rows))
    found = {v.invariant: v for v in check(h)}
    assert set(found) == {Invariant.LOST_ZERO}
    assert evidence in found[Invariant.LOST_ZERO].evidence[0]


@pytest.mark.parametrize("attempts", [[1, 1], [2, 1, 2], [1, 2, 2]])
def test_the_same_attempt_number_twice_at_the_app_is_named(attempts: list[int]) -> None:
    logs = [ForwardLog("evt_1", n, 0, record_error="x") for n in set(attempts)]
    found = {v.invariant: v for v in check(repeated(attempts, logs))}
    assert Invariant.ATTEMPTS_DISTINCT in found
    assert "reached the app more than once" in found[Invariant.ATTEMPTS_DISTINCT].evidence[0]


def test_distinct_attempt_numbers_pass() -> None:
    logs = [ForwardLog("evt_1", 1, 0, upstream_error="timeout")]
    assert check(repeated([1, 2], logs)) == []


# ``repeated([1, 2])``: attempt 1 arrives at 0.05 s (answered 200), attempt 2 at 1.05 s.
@pytest.mark.parametrize(("kill_at", "justified"), [
    (0.5, True),  # killed while attempt 1 was at the app or unrecorded
    (0.05, True),  # killed as it arrived
    (-0.1, True),  # just before the app read it (within KILL_SLACK): the kernel delivered it
    (-0.5, False),  # killed well before attempt 1 arrived: it cannot have sent it
    (1.5, False),  # killed after the repeat arrived: justifies nothing
])
def test_a_repeat_after_a_replica_was_killed_is_justified_only_by_a_kill_in_between(
        kill_at: float, justified: bool) -> None:
    h = queued(repeated([1, 2]), kills=[Kill(0, kill_at, kill_at + 1.0)])
    [r] = repeats(h)
    assert (r.why is not None) is justified, r.why
    if justified:
        assert r.why is not None and "replica 0 was SIGKILLed" in r.why
    assert (Invariant.REPEATS_JUSTIFIED in violated(h)) is not justified


def test_a_kill_does_not_excuse_a_repeat_of_an_attempt_whose_success_was_logged() -> None:
    # The surviving replica logged attempt 1's outcome: whoever forwarded again knew it.
    h = queued(repeated([1, 2], [ForwardLog("evt_1", 1, 1)]), kills=[Kill(0, 0.5, 1.5)])
    assert violated(h) == {Invariant.REPEATS_JUSTIFIED}


def test_a_kill_does_not_excuse_attempt_1_twice() -> None:
    h = queued(repeated([1, 1]), kills=[Kill(0, 0.5, 1.5)])
    assert violated(h) == {Invariant.REPEATS_JUSTIFIED, Invariant.ATTEMPTS_DISTINCT}


@pytest.mark.parametrize(("replica", "sent", "elapsed", "excused"), [
    (0, 1.0, 0.5, True),  # cut off by the kill at 1.2 s
    (0, 2.0, 0.01, True),  # refused while the replica was down (back at 3 s)
    (0, 3.5, 0.01, False),  # refused after it was back: the replacement failed to answer
    (0, 0.2, 0.5, False),  # finished unanswered before the kill
    (1, 1.0, 0.5, False),  # the other replica was not killed
])
def test_a_delivery_unanswered_because_its_replica_was_killed_is_excused(
        replica: int, sent: float, elapsed: float, excused: bool) -> None:
    cut = Delivery("evt_1", Kind.NORMAL, replica, sent, elapsed, None, "ServerDisconnectedError")
    h = queued(replace(clean(), deliveries=[ok("evt_1"), cut]), kills=[Kill(0, 1.2, 3.0)])
    assert (Invariant.WITHIN_BOUND in violated(h)) is not excused


def test_a_kill_never_restarted_covers_the_rest_of_the_run() -> None:
    assert Kill(0, 5.0).covers(100.0, 101.0)
    assert not Kill(0, 5.0).covers(1.0, 4.9)
    assert Kill(0, 5.0, 6.0).covers(4.0, 5.0) and not Kill(0, 5.0, 6.0).covers(6.1, 7.0)


def test_a_killed_replica_counts_as_a_fault() -> None:
    assert check(replace(clean(), faults={"replicas killed": 3})) == []


def test_queue_workers_log_lines_become_forwards() -> None:
    """``bench.chaos.logs.from_logs`` on the queue workers' lines
    (``sidecar/forwarding/queueworker.py``):
    an unreachable try is no attempt; a try without an answer, a superseded one and an unwritten
    settlement are unknown outcomes; a replaced replica keeps its index."""
    def line(event: str, attempt: int, result: str, status_class: str = "2xx",
             **extra: object) -> dict[str, object]:
        return {"event": event, "event_id": "evt_1", "attempt": attempt, "result": result,
                "app_status_class": status_class, "upstream_ms": 1.0, **extra}

    killed = ProxyProcess(Path("unused"), logs=[
        line("queue_delivery", 1, "unreachable", "none", upstream_error="connect refused"),
        line("queue_delivery", 1, "retry", "5xx", upstream_error="the app answered 500"),
    ])
    replacement = ProxyProcess(Path("unused"), logs=[
        line("queue_delivery", 2, "retry", "none", upstream_error="timeout"),
        line("queue_delivery", 3, "superseded"),
        {**line("queue_record_failed", 4, "done"), "level": "error"},
        line("queue_dead", 5, "dead", "5xx"),
        line("queue_delivery", 6, "done"),
    ])
    forwards, errors, _ = from_logs([(0, killed), (0, replacement)])
    assert errors == []
    assert forwards == [
        ForwardLog("evt_1", 1, 0),  # the app answered: the error is its status, not unknown
        ForwardLog("evt_1", 2, 0, upstream_error="timeout"),
        ForwardLog("evt_1", 3, 0, superseded=True),
        ForwardLog("evt_1", 4, 0, record_error="settlement not written"),
        ForwardLog("evt_1", 5, 0),
        ForwardLog("evt_1", 6, 0),
    ]


# -- fan-out: each destination checked on its own ----------------------------------------------


def reached(destination: str, attempt: int = 1, at: float = 0.05) -> Receipt:
    return replace(app("evt_1", attempt, at), destination=destination)


def row(queue: str, state: str = "done", attempt: int = 1) -> Row:
    return Row("evt_1", state, attempt, lease_expired=True, provider=queue)


def fanned_out() -> History:
    """One accepted event fanned out to billing (delivered once), crm (never delivered) and
    analytics (attempt 1 answered and its success logged, then attempt 2), while billing's
    attempt 1 got no answer on its replica's log."""
    return queued(history(
        [ok("evt_1", elapsed=0.01)],
        [reached("billing"), reached("analytics"), reached("analytics", 2, at=1.05)],
        [row("stripe"), row("stripe.billing"), row("stripe.crm", "queued", 0),
         row("stripe.analytics", attempt=2)],
        [ForwardLog("evt_1", 1, 0, upstream_error="timeout", provider="stripe.billing"),
         ForwardLog("evt_1", 1, 1, provider="stripe.analytics")]))


def test_a_fan_out_history_is_checked_per_destination() -> None:
    h = fanned_out()
    assert check(for_destination(h, "billing")) == []
    crm = check(for_destination(h, "crm"))
    assert {v.invariant for v in crm} == {Invariant.LOST_ZERO}
    assert "row queued at attempt 0; app 2xx: no" in crm[0].evidence[0]
    # analytics' attempt 1 succeeded on its own log: its repeat is unjustified, though billing's
    # attempt 1 (another queue's) had no answer.
    assert violated(for_destination(h, "analytics")) == {Invariant.REPEATS_JUSTIFIED}
    assert fan_out_note(h) == "the provider's own queue: done 1; fanned out again: 0"


def test_from_logs_keeps_the_queue_each_line_is_about() -> None:
    line = {"event": "queue_delivery", "event_id": "evt_1", "attempt": 1, "result": "done",
            "app_status_class": "2xx", "upstream_ms": 1.0}
    replica = ProxyProcess(Path("unused"), logs=[{**line, "provider": "stripe.crm"},
                                                 {**line, "provider": "stripe"}])
    forwards, _, _ = from_logs([(0, replica)])
    assert [f.provider for f in forwards] == ["stripe.crm", "stripe"]
