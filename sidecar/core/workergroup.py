"""What a worker group (``workers`` > 1) says about itself over the channel between the
supervisor and each worker (``sidecar.runtime.workers``, ``sidecar.runtime.serve``), what
``/healthz`` makes of it, and the group's clock: heartbeats, the start deadline, the pace of
new tries. Pure data: the clock is passed in, nothing here does I/O.

A worker says ``ready`` once it listens, and ``beat`` every ``worker_timeout`` /
``BEATS_PER_TIMEOUT`` seconds from its event loop, so a worker whose loop is blocked, or whose
process is stopped, falls silent. The supervisor tells the worker serving the admin listener how
the group is — the seats *down* (a worker missed its heartbeat; its socket holds the
connections queued for its successor, which does not listen yet), the seats *vacant* (no
socket takes connections for them: their worker is starting, or could not start and is tried
again), and how many workers it has replaced — whenever that changes and at every heartbeat,
so a silent supervisor shows too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

READY: Final = b"ready\n"
BEAT: Final = b"beat\n"
BEATS_PER_TIMEOUT: Final = 5
# A worker has this many worker_timeouts from its start to say ready (config, store, listener).
TIMEOUTS_TO_START: Final = 10
FIRST_RETRY: Final = 1.0  # seconds before a vacant seat is tried again the first time


def beat_interval(worker_timeout: float) -> float:
    """Seconds between two heartbeats of a worker (and two messages of the supervisor)."""
    return worker_timeout / BEATS_PER_TIMEOUT


def start_deadline(worker_timeout: float) -> float:
    """Seconds a worker may take from its start to ``ready`` before it is given up on: loading
    the config, opening the store (the PostgreSQL adapter gives up connecting after 6 s, then
    checks the schema within statement_timeout) and listening take a second or two as a rule,
    far longer only when something is wrong."""
    return TIMEOUTS_TO_START * worker_timeout


def retry_delay(failures: int, worker_timeout: float) -> float:
    """Seconds before a seat whose worker could not start ``failures`` times in a row is tried
    again: doubling from ``FIRST_RETRY``, at most twice worker_timeout (10 s by default), so the
    seat is back soon after its cause (the store, say) is, at a cost of one process start per
    try."""
    doublings = min(max(failures - 1, 0), 30)  # past the cap long before; no overflow
    return min(FIRST_RETRY * (1 << doublings), max(FIRST_RETRY, 2 * worker_timeout))


def group_message(down: list[int], vacant: list[int], replaced: int) -> bytes:
    """The supervisor's word on the group, one line."""
    return json.dumps({"down": sorted(down), "vacant": sorted(vacant),
                       "replaced": replaced}).encode() + b"\n"


@dataclass(slots=True)
class GroupHealth:
    """The group as the worker serving the admin listener last heard it from its supervisor.
    ``heard_at`` is on the same clock as the ``now`` given to :meth:`problem`."""

    timeout: float  # worker_timeout
    heard_at: float
    down: tuple[int, ...] = ()
    vacant: tuple[int, ...] = ()
    replaced: int = 0  # workers the supervisor killed and replaced since the group started

    def heard(self, line: bytes, now: float) -> None:
        try:
            message = json.loads(line)
            down = tuple(int(seat) for seat in message["down"])
            vacant = tuple(int(seat) for seat in message["vacant"])
            replaced = int(message["replaced"])
        except (ValueError, TypeError, KeyError):
            return  # not the supervisor's word: ignored, so it counts as silence
        self.down, self.vacant, self.replaced, self.heard_at = down, vacant, replaced, now

    def problem(self, now: float) -> dict[str, object] | None:
        """Why the group is not healthy now (the fields of /healthz's 503), or None. A vacant
        seat is no problem of the group's: its connections go to the other workers, and a
        restart would not help what keeps it vacant (``details``)."""
        silent = now - self.heard_at
        if silent > self.timeout:
            return {"reason": "supervisor_silent", "silent_s": round(silent, 3)}
        if self.down:
            return {"reason": "workers_down", "workers_down": list(self.down)}
        return None

    def details(self) -> dict[str, object]:
        """What a healthy group's /healthz adds: the vacant seats, if any."""
        return {"workers_vacant": list(self.vacant)} if self.vacant else {}
