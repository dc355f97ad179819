"""Fan-out runs (``Scenario.destinations``): the provider fans each accepted event out to
several apps, each through a queue of its own (``stripe.<name>``), and each destination must get
it as the one app of a queue-mode run does. So the run's history is split per destination —
its app's requests, the replicas' log lines about its queue, its rows — and every invariant is
checked on each part; the provider's deliveries, the faults and the kills are shared."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from bench.chaos.history import History

PROVIDER = "stripe"


def queue_of(destination: str) -> str:
    """A destination's queue (its rows' and log lines' provider key)."""
    return f"{PROVIDER}.{destination}"


def for_destination(h: History, destination: str) -> History:
    """What one destination saw: its app's requests, its queue's log lines and rows."""
    key = queue_of(destination)
    return replace(h, receipts=[r for r in h.receipts if r.destination == destination],
                   forwards=[f for f in h.forwards if f.provider == key],
                   rows=[r for r in h.rows if r.provider == key])


def fan_out_note(h: History) -> str:
    """The provider's own queue after the run: its rows' states, and how many fan-outs were
    tried more than once (taken again after a replica died with them)."""
    own = [r for r in h.rows if r.provider == PROVIDER]
    states = ", ".join(f"{state} {n}" for state, n in sorted(Counter(r.state for r in own).items()))
    again = sum(1 for r in own if r.attempt > 1)
    return f"the provider's own queue: {states or 'no rows'}; fanned out again: {again}"
