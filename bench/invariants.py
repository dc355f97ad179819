"""Jepsen-style checks over the history of one chaos run: pure functions of plain values.

The harness (``bench.chaos``) records what the simulated provider sent and was answered, what
the app received and answered, what the proxies logged about each forward, and the event rows
left after quiescence. :func:`check` turns that history into violations, each naming the
invariant it breaks with a few lines of evidence; :func:`tally` counts it for the report.
Nothing here does I/O, so the checker is tested on synthetic histories
(``tests/unit/test_chaos_invariants.py``) and its verdicts can be trusted on real ones.

Times are seconds on one monotonic clock (the harness's), relative to the start of the run.

Queue mode (``History.queued``): the provider's 2xx means "stored", not "the app answered", so
``no-2xx-without-app`` does not apply; everything else does, and ``lost-zero`` is then the
queue's promise: every event accepted is delivered. Replicas killed on purpose (``kills``)
excuse the deliveries they cut off and justify a repeat of an attempt they may have been
forwarding when they died.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

# A provider redelivers on these and on any 5xx or missing answer; any other non-2xx is final.
RETRYABLE_4XX = frozenset({408, 409, 425, 429})
EVIDENCE_LINES = 5  # examples quoted per violated invariant
# A request a replica wrote just before it was killed may be read by the app just after: the
# kernel still delivers what the process had sent.
KILL_SLACK = 0.25


class Kind(enum.StrEnum):
    """What the simulated provider sent under an event id."""

    NORMAL = "normal"  # a signed JSON event: must eventually be answered 2xx
    GZIP = "gzip"  # the same, Content-Encoding: gzip: 2xx (then as NORMAL) or a final refusal
    BOMB = "bomb"  # a decompression bomb: refused, never forwarded, never 2xx


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
}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One HTTP request of the simulated provider."""

    event_id: str
    kind: Kind
    replica: int
    sent: float
    elapsed: float | None  # until the answer was read, or until the error; None: not finished
    status: int | None  # None: no HTTP answer
    error: str | None = None  # why there was no answer (client exception)


@dataclass(slots=True)
class Receipt:
    """One request that reached the app (headers read), and what the app answered."""

    event_id: str
    attempt: int
    arrived: float
    status: int | None = None  # None: the app never answered (body not received, cancelled)
    answered: float | None = None  # when the app produced its answer


@dataclass(frozen=True, slots=True)
class ForwardLog:
    """What a proxy replica logged about one forward of an event, at one attempt (0 when the
    line does not say: a delivery that died with an unexpected error logs no attempt)."""

    event_id: str
    attempt: int
    replica: int
    status: int | None = None  # what the replica answered the provider for this forward
    upstream_error: str | None = None  # the forward got no HTTP answer (timeout, reset, …)
    record_error: str | None = None  # the result could not be written
    superseded: bool = False  # a newer attempt took the row over before the result was written
    error: str | None = None  # the delivery ended in an unexpected error (a 500)


@dataclass(frozen=True, slots=True)
class Kill:
    """A replica SIGKILLed by the harness at ``at``, and when its replacement listened again
    (None: not restarted). Deliveries to it in between get no answer."""

    replica: int
    at: float
    back: float | None = None

    def covers(self, start: float, end: float) -> bool:
        """Whether the replica was dead (or dying) at some time in [start, end]."""
        return self.at <= end and (self.back is None or start <= self.back)


@dataclass(frozen=True, slots=True)
class Row:
    """An event row after quiescence."""

    event_id: str
    state: str
    attempt: int
    lease_expired: bool


@dataclass(slots=True)
class History:
    """Everything one run observed. ``kinds`` names every event the provider sent."""

    kinds: Mapping[str, Kind]
    deliveries: Sequence[Delivery]
    receipts: Sequence[Receipt]
    forwards: Sequence[ForwardLog]
    rows: Sequence[Row]
    bound: float  # seconds: the longest any answer may take, derived from the config
    faults: Mapping[str, int] = field(default_factory=dict)  # what the harness injected
    expect_fault: bool = True  # False for a control run (no fault, every other check holds)
    proxy_errors: Sequence[str] = ()  # the replicas' log lines for unexpected errors
    replica_deaths: Sequence[str] = ()  # replicas that exited while the run went on
    kills: Sequence[Kill] = ()  # replicas the harness SIGKILLed (and restarted) on purpose
    queued: bool = False  # queue mode: a 2xx means stored; workers deliver it afterwards


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


@dataclass(frozen=True, slots=True)
class Repeat:
    """An event the app saw more than once; ``why`` is None when nothing justifies it."""

    event_id: str
    attempts: tuple[int, ...]
    why: str | None

    def __str__(self) -> str:
        return (f"{self.event_id} attempts {list(self.attempts)}: "
                f"{self.why or 'UNJUSTIFIED'}")


_T = TypeVar("_T", Delivery, Receipt, ForwardLog)


def is_2xx(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def retryable(status: int | None) -> bool:
    """Whether a provider redelivers after this answer (None: no answer at all)."""
    return status is None or status >= 500 or status in RETRYABLE_4XX


def _violation(invariant: Invariant, items: Sequence[str], summary: str) -> list[Violation]:
    if not items:
        return []
    return [Violation(invariant, len(items), summary.format(n=len(items)),
                      tuple(items[:EVIDENCE_LINES]))]


def _by_event(items: Iterable[_T]) -> dict[str, list[_T]]:
    grouped: dict[str, list[_T]] = defaultdict(list)
    for item in items:
        grouped[item.event_id].append(item)
    return grouped


def _first_2xx(deliveries: Sequence[Delivery]) -> Delivery | None:
    answered = [d for d in deliveries if is_2xx(d.status) and d.elapsed is not None]
    return min(answered, key=lambda d: d.sent + (d.elapsed or 0.0), default=None)


# -- the invariants -------------------------------------------------------------------------


def eventually_2xx(h: History) -> list[Violation]:
    sent = _by_event(h.deliveries)
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
    app = _by_event(h.receipts)
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
    app = _by_event(h.receipts)
    logs = _by_event(h.forwards)
    lost = []
    for event_id, tries in sorted(_by_event(h.deliveries).items()):
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


def repeats(h: History) -> list[Repeat]:
    """Every event the app saw more than once, each with what justifies the repeat (or not)."""
    logs = _by_event(h.forwards)
    found = []
    for event_id, seen in sorted(_by_event(h.receipts).items()):
        if len(seen) > 1:
            seen = sorted(seen, key=lambda r: r.arrived)
            found.append(Repeat(event_id, tuple(r.attempt for r in seen),
                                _justify(seen, logs.get(event_id, []), h.replica_deaths,
                                         h.kills)))
    return found


def _justify(seen: Sequence[Receipt], logs: Sequence[ForwardLog],
             deaths: Sequence[str], kills: Sequence[Kill] = ()) -> str | None:
    """Why each copy after the first was allowed: it carries a higher attempt number than the
    copy before it, whose outcome was unknown. None when some copy is not justified."""
    reasons = []
    for earlier, later in itertools.pairwise(seen):
        if later.attempt <= max(earlier.attempt, 1):
            return None  # attempt 1 twice, or a number that did not increase
        reason = _unknown_outcome(earlier, logs, deaths, kills, later.arrived)
        if reason is None:
            return None
        reasons.append(reason)
    return "; ".join(reasons)


def _unknown_outcome(receipt: Receipt, logs: Sequence[ForwardLog],
                     deaths: Sequence[str], kills: Sequence[Kill] = (),
                     until: float | None = None) -> str | None:
    """Why the outcome of ``receipt``'s attempt was unknown to whoever forwarded again (before
    ``until``), from the app's own answer, the proxies' logs and the harness's kills; None when
    it was known."""
    n = receipt.attempt
    if receipt.status is None:
        return f"attempt {n}: the app never answered"
    if not is_2xx(receipt.status):
        return f"attempt {n}: the app answered {receipt.status}"
    logged = logged_outcome(logs, n)
    if logged is not None:
        return logged
    if any(f.attempt == n for f in logs):
        return None  # a replica logged the outcome: whoever forwarded again knew it
    if deaths:
        return f"attempt {n}: no outcome logged; a replica died ({deaths[0]})"
    # Its forwarder may have been killed with the request at the app (or its answer on the
    # way back, or the result unwritten): a kill after the request arrived, before the repeat.
    end = until if until is not None else float("inf")
    killed = [k for k in kills if receipt.arrived - KILL_SLACK <= k.at <= end]
    if killed:
        k = killed[0]
        return (f"attempt {n}: no outcome logged; replica {k.replica} was SIGKILLed at "
                f"{k.at:.2f}s, after it reached the app at {receipt.arrived:.2f}s")
    return None


def logged_outcome(logs: Sequence[ForwardLog], attempt: int) -> str | None:
    """What the replicas logged that left ``attempt``'s outcome unrecorded, if anything."""
    mine = [f for f in logs if f.attempt == attempt]
    for f in mine:
        if f.record_error:
            return (f"attempt {attempt}: result write failed on replica {f.replica} "
                    f"({f.record_error})")
    for f in mine:
        if f.upstream_error:
            return (f"attempt {attempt}: forward got no answer on replica {f.replica} "
                    f"({f.upstream_error})")
    for f in mine:
        if f.superseded:
            return f"attempt {attempt}: lease expired before its result was written (superseded)"
    for f in logs:
        if f.error and f.attempt in (0, attempt):
            return (f"attempt {attempt}: a delivery of the event died with an internal error on "
                    f"replica {f.replica} ({f.error})")
    return None


def repeats_justified(h: History) -> list[Violation]:
    bad = [str(r) for r in repeats(h) if r.why is None]
    return _violation(Invariant.REPEATS_JUSTIFIED, bad,
                      "{n} events reached the app again although the outcome was known or "
                      "the attempt number did not increase")


def attempts_distinct(h: History) -> list[Violation]:
    bad = []
    for event_id, seen in sorted(_by_event(h.receipts).items()):
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


CHECKS = (eventually_2xx, no_2xx_without_app, lost_zero, repeats_justified, attempts_distinct,
          no_500, no_stuck_rows, within_bound, bomb_refused, fault_injected)


def check(h: History) -> list[Violation]:
    """Every violated invariant, in a fixed order."""
    return [v for each in CHECKS for v in each(h)]


# -- counts for the report ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tally:
    events: int
    deliveries: int
    ok_2xx: int
    status_409: int
    status_503: int
    other_5xx: Mapping[int, int]  # 5xx other than 503, by code
    other: Mapping[str, int]  # other 4xx by code, and "none" for no answer
    app_requests: int
    repeats: int  # events the app saw more than once
    unjustified: int
    max_latency: float

    def five_xx(self) -> str:
        return " ".join(f"{code}:{n}" for code, n in sorted(self.other_5xx.items())) or "-"

    def others(self) -> str:
        return " ".join(f"{code}:{n}" for code, n in sorted(self.other.items())) or "-"


def tally(h: History) -> Tally:
    codes = Counter(d.status for d in h.deliveries)
    found = repeats(h)
    return Tally(
        events=len(h.kinds),
        deliveries=len(h.deliveries),
        ok_2xx=sum(n for code, n in codes.items() if is_2xx(code)),
        status_409=codes[409],
        status_503=codes[503],
        other_5xx={c: n for c, n in codes.items() if c is not None and c >= 500 and c != 503},
        other={("none" if c is None else str(c)): n for c, n in codes.items()
               if c is None or (300 <= c < 500 and c != 409)},
        app_requests=len(h.receipts),
        repeats=len(found),
        unjustified=sum(1 for r in found if r.why is None),
        max_latency=max((d.elapsed for d in h.deliveries if d.elapsed is not None),
                        default=0.0),
    )


def _answer(d: Delivery | None) -> str:
    if d is None:
        return "nothing"
    if d.status is None:
        return f"no answer ({d.error or 'unfinished'})"
    return str(d.status)
