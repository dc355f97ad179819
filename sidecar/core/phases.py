"""Where one delivery's time goes: named marks taken along its path, for the ``delivery_phases``
debug line (``log.level: debug``) and ``python -m bench.lone --phases``.

The HTTP shell starts the marks of a delivery (:func:`start`) only when the line is wanted; each
step then calls :func:`mark` with the name of the phase that just ended. Off, a mark is one
context-variable read. The marks live in the delivery's context: tasks it starts (the shielded
result write) mark into it too. A statement sent for several deliveries at once (a coalesced
batch) marks the delivery whose call started it.

Times are ``time.monotonic_ns()``: the clock of the listener's note of the request's first
byte, so a mark compares with it.
"""

from __future__ import annotations

import time
from contextvars import ContextVar


class Marks:
    """One delivery's marks, in the order taken, from ``origin`` (ns, the request's first
    byte)."""

    __slots__ = ("marks", "origin")

    def __init__(self, origin: int) -> None:
        self.origin = origin
        self.marks: list[tuple[str, int]] = []

    def add(self, name: str) -> None:
        self.marks.append((name, time.monotonic_ns()))

    def phases_ms(self) -> dict[str, float]:
        """Each phase's length in ms, named by the mark that ended it, in order; a name marked
        twice (a statement repeated) adds up."""
        phases: dict[str, float] = {}
        previous = self.origin
        for name, at in self.marks:
            phases[name] = round(phases.get(name, 0.0) + (at - previous) / 1e6, 3)
            previous = at
        return phases


_current: ContextVar[Marks | None] = ContextVar("sidecar_phase_marks", default=None)


def start(origin: int) -> Marks:
    """Marks for the delivery running in this context (call in its own task)."""
    marks = Marks(origin)
    _current.set(marks)
    return marks


def mark(name: str, part: str = "") -> None:
    """The phase ``name + part`` of the current delivery ends now (nothing when no marks run:
    the name is put together only when they do)."""
    marks = _current.get()
    if marks is not None:
        marks.add(name + part)
