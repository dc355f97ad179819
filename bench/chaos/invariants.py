"""Jepsen-style checks over the history of one chaos run: pure functions of plain values.

The harness (``bench.chaos``) records a :class:`~bench.chaos.history.History`; :func:`check`
turns it into violations, each naming the invariant it breaks with a few lines of evidence.
Nothing here does I/O, so the checker is tested on synthetic histories
(``tests/unit/test_chaos_invariants.py``) and its verdicts can be trusted on real ones.

Queue mode (``History.queued``): the provider's 2xx means "stored", not "the app answered", so
``no-2xx-without-app`` does not apply; everything else does, and ``lost-zero`` is then the
queue's promise: every event accepted is delivered. Replicas killed on purpose (``kills``)
excuse the deliveries they cut off and justify a repeat of an attempt they may have been
forwarding when they died.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.chaos.history import (
    RETRYABLE_4XX,
    Delivery,
    History,
    Kill,
    Kind,
    Receipt,
    by_event,
    is_2xx,
)
from bench.chaos.repeats import logged_outcome, repeats

EVIDENCE_LINES = 5  # examples quoted per violated invariant


class Invariant(enum.StrEnum):
    """The invariants, by the name a failing run reports."""

    EVENTUALLY_2XX = "eventually-2xx"
    NO_2XX_WITHOUT_APP = "no-2xx-without-app"
    LOST_ZERO = "lost-zero"
    REPEATS_JUSTIFIED = "repeats-justified"
    ATTEMPTS_DISTINCT = "attempts-distinct"
    NO_500 = "no-500"
    NO_STUCK_ROWS = "no-stuck-rows"
    WITHIN_BOUND = "within-bound"
    BOMB_REFUSED = "bomb-refused"
    FAULT_INJECTED = "fault-injected"
    WITHIN_CONCURRENCY = "within-concurrency"
    FULL_AGAIN = "full-concurrency-again"


MEANING: Mapping[Invariant, str] = {
    Invariant.EVENTUALLY_2XX: "every event is eventually answered 2xx (the provider keeps "
                              "redelivering, within its bound)",
    Invariant.NO_2XX_WITHOUT_APP: "the provider gets a 2xx for an event only after the app "
                                  "answered 2xx for it (forward mode)",
    Invariant.LOST_ZERO: "every event the provider was told 2xx for is `done` and reached the "
                         "app (in queue mode: every accepted event is delivered)",
    Invariant.REPEATS_JUSTIFIED: "the app sees an event again only with a higher attempt number, "
                                 "and only after an attempt whose outcome was unknown",
    Invariant.ATTEMPTS_DISTINCT: "the app never sees two requests of an event with the same "
                                 "attempt number",
    Invariant.NO_500: "no delivery is answered 500",
    Invariant.NO_STUCK_ROWS: "after quiescence no row is left `processing` with an expired lease",
    Invariant.WITHIN_BOUND: "every delivery is answered, within the bound derived from the "
                            "config",
    Invariant.BOMB_REFUSED: "a decompression bomb is refused with a 4xx and never reaches the app",
    Invariant.FAULT_INJECTED: "the harness really injected the scenario's fault (else the run "
                              "proves nothing)",
    Invariant.WITHIN_CONCURRENCY: "with delivery.concurrency, the app never has more requests "
                                  "in flight at once, killed replicas' included",
    Invariant.FULL_AGAIN: "with delivery.concurrency, once the last killed replica's permits' "
                          "lease has ended, the survivors deliver at the full concurrency again",
}


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: Invariant
    count: int
    summary: str
    evidence: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"{self.invariant} violated: {self.summary}"]
        lines += [f"    {line}" for line in self.evidence]
        return "\n".join(lines)


def _violation(invariant: Invariant, items: Sequence[str], summary: str) -> list[Violation]:
    if not items:
        return []
    return [Violation(invariant, len(items), summary.format(n=len(items)),
                      tuple(items[:EVIDENCE_LINES]))]


def _first_2xx(deliveries: Sequence[Delivery]) -> Delivery | None:
    answered = [d for d in deliveries if is_2xx(d.status) and d.elapsed is not None]
    return min(answered, key=lambda d: d.sent + (d.elapsed or 0.0), default=None)


# -- the invariants -------------------------------------------------------------------------


def eventually_2xx(h: History) -> list[Violation]:
    sent = by_event(h.deliveries)
    missing = []
    for event_id, kind in sorted(h.kinds.items()):
        if kind is not Kind.NORMAL:
            continue
        tries = sent.get(event_id, [])
        if not any(is_2xx(d.status) for d in tries):
            last = tries[-1] if tries else None
            what = (f"last {_answer(last)}" if last else "never sent")
            missing.append(f"{event_id}: {len(tries)} deliveries, none 2xx; {what}")
    return _violation(Invariant.EVENTUALLY_2XX, missing,
                      "{n} events were never answered 2xx")


def no_2xx_without_app(h: History) -> list[Violation]:
    if h.queued:  # the 2xx acknowledges the stored event; lost-zero holds the delivery
        return []
    app = by_event(h.receipts)
    bad = []
    for d in h.deliveries:
        if not is_2xx(d.status) or d.elapsed is None:
            continue
        answered_at = d.sent + d.elapsed
        if not any(is_2xx(r.status) and r.answered is not None and r.answered <= answered_at
                   for r in app.get(d.event_id, [])):
            seen = [f"attempt {r.attempt} → {r.status}" for r in app.get(d.event_id, [])]
            bad.append(f"{d.event_id}: {d.status} at {answered_at:.2f}s from replica "
                       f"{d.replica}; the app had {', '.join(seen) or 'seen nothing'}")
    return _violation(Invariant.NO_2XX_WITHOUT_APP, bad,
                      "{n} 2xx answers without the app's 2xx for the event")


def lost_zero(h: History) -> list[Violation]:
    rows = {r.event_id: r for r in h.rows}
    app = by_event(h.receipts)
    logs = by_event(h.forwards)
    lost = []
    for event_id, tries in sorted(by_event(h.deliveries).items()):
        first = _first_2xx(tries)
        if first is None:
            continue
        row = rows.get(event_id)
        reached = any(is_2xx(r.status) for r in app.get(event_id, []))
        if row is not None and row.state == "done" and reached:
            continue
        state = ("no row" if row is None else
                 f"row {row.state} at attempt {row.attempt}"
                 + (" (lease expired)" if row.state == "processing" and row.lease_expired
                    else ""))
        why = logged_outcome(logs.get(event_id, []), row.attempt) if row is not None else None
        lost.append(f"{event_id}: told {first.status} at {first.sent + (first.elapsed or 0):.2f}s"
                    f"; {state}; app 2xx: {'yes' if reached else 'no'}"
                    + (f"; {why}" if why else ""))
    return _violation(Invariant.LOST_ZERO, lost,
                      "{n} events told 2xx are not both done and received by the app")


def repeats_justified(h: History) -> list[Violation]:
    bad = [str(r) for r in repeats(h) if r.why is None]
    return _violation(Invariant.REPEATS_JUSTIFIED, bad,
                      "{n} events reached the app again although the outcome was known or "
                      "the attempt number did not increase")


def attempts_distinct(h: History) -> list[Violation]:
    bad = []
    for event_id, seen in sorted(by_event(h.receipts).items()):
        twice = sorted(n for n, count in Counter(r.attempt for r in seen).items() if count > 1)
        if twice:
            bad.append(f"{event_id}: attempt {', '.join(map(str, twice))} reached the app more "
                       f"than once (attempts in arrival order: "
                       f"{[r.attempt for r in sorted(seen, key=lambda r: r.arrived)]})")
    return _violation(Invariant.ATTEMPTS_DISTINCT, bad,
                      "{n} events reached the app twice with the same attempt number")


def no_500(h: History) -> list[Violation]:
    bad = [f"{d.event_id}: 500 after {d.elapsed or 0:.2f}s from replica {d.replica}"
           for d in h.deliveries if d.status == 500]
    found = _violation(Invariant.NO_500, bad, "{n} deliveries were answered 500")
    if found and h.proxy_errors:
        v = found[0]
        logged = tuple(f"log: {line}" for line in h.proxy_errors[:EVIDENCE_LINES])
        found = [Violation(v.invariant, v.count, v.summary, v.evidence + logged)]
    return found


def no_stuck_rows(h: History) -> list[Violation]:
    stuck = [f"{r.event_id}: processing at attempt {r.attempt}, lease expired"
             for r in h.rows if r.state == "processing" and r.lease_expired]
    return _violation(Invariant.NO_STUCK_ROWS, stuck,
                      "{n} rows left processing with an expired lease")


def within_bound(h: History) -> list[Violation]:
    slow = []
    for d in h.deliveries:
        if d.status is None and _cut_by_kill(d, h.kills):
            continue  # its replica was killed (or not yet back) while it was outstanding
        if d.status is None:
            slow.append(f"{d.event_id}: no answer from replica {d.replica} "
                        f"({d.error or 'unfinished'}) after {d.elapsed or 0:.2f}s")
        elif d.elapsed is not None and d.elapsed > h.bound:
            slow.append(f"{d.event_id}: {d.status} after {d.elapsed:.2f}s from replica "
                        f"{d.replica}")
    return _violation(Invariant.WITHIN_BOUND, slow,
                      f"{{n}} deliveries unanswered or answered after the {h.bound:g}s bound")


def _cut_by_kill(d: Delivery, kills: Sequence[Kill]) -> bool:
    end = d.sent + (d.elapsed if d.elapsed is not None else 0.0)
    return any(k.replica == d.replica and k.covers(d.sent, end) for k in kills)


def bomb_refused(h: History) -> list[Violation]:
    bombs = {e for e, k in h.kinds.items() if k is Kind.BOMB}
    bad = [f"{d.event_id}: answered {_answer(d)}" for d in h.deliveries
           if d.event_id in bombs and d.status is not None
           and not (400 <= d.status < 500 and d.status not in RETRYABLE_4XX)]
    bad += [f"{r.event_id}: reached the app as attempt {r.attempt}" for r in h.receipts
            if r.event_id in bombs]
    return _violation(Invariant.BOMB_REFUSED, bad, "{n} bomb deliveries not refused cleanly")


def fault_injected(h: History) -> list[Violation]:
    if not h.expect_fault or (h.faults and any(count > 0 for count in h.faults.values())):
        return []
    what = ", ".join(f"{k}={v}" for k, v in h.faults.items()) or "nothing recorded"
    return _violation(Invariant.FAULT_INJECTED, [what],
                      "the scenario's fault was not injected")


def most_in_flight(receipts: Sequence[Receipt], lease: float, after: float = 0.0) -> int:
    """The most requests the app had in flight at one instant at or after ``after``: each from
    its arrival until the app answered it (a request never answered: until its lease ended)."""
    edges = sorted(
        [(r.arrived, 1) for r in receipts]
        + [(r.answered if r.answered is not None else r.arrived + lease, -1) for r in receipts],
        key=lambda edge: (edge[0], edge[1]))  # an answer before an arrival at the same instant
    now = most = 0
    for at, step in edges:
        now += step
        if at >= after:
            most = max(most, now)
    return most


def within_concurrency(h: History) -> list[Violation]:
    if h.concurrency is None:
        return []
    most = most_in_flight(h.receipts, h.lease)
    over = [f"{most} in flight at once, limit {h.concurrency}"] if most > h.concurrency else []
    return _violation(Invariant.WITHIN_CONCURRENCY, over, "the app had more requests in "
                      "flight than delivery.concurrency")


def full_again(h: History) -> list[Violation]:
    if h.concurrency is None or not h.kills:
        return []
    freed = max(max(k.at, k.back or k.at) for k in h.kills) + h.lease + 1.0
    most = most_in_flight(h.receipts, h.lease, after=freed)
    low = ([f"after {freed:.1f} s (the last kill's lease ended) at most {most} in flight, "
            f"limit {h.concurrency}"] if most < h.concurrency else [])
    return _violation(Invariant.FULL_AGAIN, low, "permits of killed replicas were not freed "
                      "after their lease")


CHECKS = (eventually_2xx, no_2xx_without_app, lost_zero, repeats_justified, attempts_distinct,
          no_500, no_stuck_rows, within_bound, bomb_refused, fault_injected, within_concurrency,
          full_again)


def check(h: History) -> list[Violation]:
    """Every violated invariant, in a fixed order."""
    return [v for each in CHECKS for v in each(h)]


def _answer(d: Delivery | None) -> str:
    if d is None:
        return "nothing"
    if d.status is None:
        return f"no answer ({d.error or 'unfinished'})"
    return str(d.status)
