"""Why the app saw an event more than once: each copy after the first must carry a higher
attempt number than the one before it, whose outcome was unknown to whoever forwarded again —
from the app's own answer, the proxies' logs, or a replica the harness killed (its forward may
have reached the app with its outcome dying with it)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from bench.chaos.history import ForwardLog, History, Kill, Receipt, by_event, is_2xx

# A request a replica wrote just before it was killed may be read by the app just after: the
# kernel still delivers what the process had sent.
KILL_SLACK = 0.25


@dataclass(frozen=True, slots=True)
class Repeat:
    """An event the app saw more than once; ``why`` is None when nothing justifies it."""

    event_id: str
    attempts: tuple[int, ...]
    why: str | None

    def __str__(self) -> str:
        return (f"{self.event_id} attempts {list(self.attempts)}: "
                f"{self.why or 'UNJUSTIFIED'}")


def repeats(h: History) -> list[Repeat]:
    """Every event the app saw more than once, each with what justifies the repeat (or not)."""
    logs = by_event(h.forwards)
    found = []
    for event_id, seen in sorted(by_event(h.receipts).items()):
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
