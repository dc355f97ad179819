"""What a worker group (``workers`` > 1) says about itself over the channel between the
supervisor and each worker (``sidecar.workers``, ``sidecar.serve``), and what ``/healthz``
makes of it. Pure data: the clock is passed in, nothing here does I/O.

A worker says ``ready`` once it listens, and ``beat`` every ``worker_timeout`` /
``BEATS_PER_TIMEOUT`` seconds from its event loop, so a worker whose loop is blocked, or whose
process is stopped, falls silent. The supervisor tells the worker serving the admin listener how
the group is — the seats whose worker missed its heartbeat and whose successor does not listen
yet, and how many workers it has replaced — whenever that changes and at every heartbeat, so a
silent supervisor shows too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

READY: Final = b"ready\n"
BEAT: Final = b"beat\n"
BEATS_PER_TIMEOUT: Final = 5


def beat_interval(worker_timeout: float) -> float:
    """Seconds between two heartbeats of a worker (and two messages of the supervisor)."""
    return worker_timeout / BEATS_PER_TIMEOUT


def group_message(down: list[int], replaced: int) -> bytes:
    """The supervisor's word on the group, one line."""
    return json.dumps({"down": sorted(down), "replaced": replaced}).encode() + b"\n"


@dataclass(slots=True)
class GroupHealth:
    """The group as the worker serving the admin listener last heard it from its supervisor.
    ``heard_at`` is on the same clock as the ``now`` given to :meth:`problem`."""

    timeout: float  # worker_timeout
    heard_at: float
    down: tuple[int, ...] = ()
    replaced: int = 0  # workers the supervisor killed and replaced since the group started

    def heard(self, line: bytes, now: float) -> None:
        try:
            message = json.loads(line)
            down = tuple(int(seat) for seat in message["down"])
            replaced = int(message["replaced"])
        except (ValueError, TypeError, KeyError):
            return  # not the supervisor's word: ignored, so it counts as silence
        self.down, self.replaced, self.heard_at = down, replaced, now

    def problem(self, now: float) -> dict[str, object] | None:
        """Why the group is not healthy now (the fields of /healthz's 503), or None."""
        silent = now - self.heard_at
        if silent > self.timeout:
            return {"reason": "supervisor_silent", "silent_s": round(silent, 3)}
        if self.down:
            return {"reason": "workers_down", "workers_down": list(self.down)}
        return None
