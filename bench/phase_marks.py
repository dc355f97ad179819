"""Phase boundaries for callgrind: runs webhook-sidecar (or the pass-through) with a call to
libc's ``getsid`` — which nothing else in the process calls — at each boundary between the
phases of a delivery, so that ``valgrind --tool=callgrind --dump-before=getsid`` cuts its
counts there. The launcher records which boundary each cut was; ``bench.instructions
--phases`` adds up each cut's instructions by the phase it ended (:func:`attribute`).

Run by path, from this checkout, with the proxy's own tree on ``PYTHONPATH`` (the tree
measured need not have this file)::

    python bench/phase_marks.py asyncio|uvloop sidecar run --config FILE
    python bench/phase_marks.py asyncio|uvloop passthrough --upstream URL

webhook-sidecar's provider states, read every 0.5 s by a background task, are read every hour
instead (:func:`quiet_background`). Environment: ``PHASE_MARKS_PLAIN=1`` (the same launch,
refresh stretched, cut only where the marked run's window starts and ends: the reference the
marked run is compared with),
``PHASE_MARKS_ARM`` (a path: cutting starts at the first byte of the first request
to arrive once that file exists), ``PHASE_MARKS_REQUESTS`` (N: it stops at the first byte of
request N + 1, so N whole requests with their event-loop turns are cut), ``PHASE_MARKS_OUT``
(where the boundaries are written, as JSON, when it stops). For one connection, one request
at a time (bench.instructions' lone variant).

Plain or marked, arming runs ``gc.collect(); gc.freeze()``: what was allocated before is
never scanned again, so no full collection of the warm-up's objects lands in one phase of
one run and not the other. The hooks are plain function wrappers at a few points, and a
boundary cuts only when the phase changes (a second call of the delivery's log line right
after the first is one cut): each cut costs a Python call of ``os.getsid``, and the hooks
are the only difference from the plain run.

Boundaries, each named by what just ended:

- ``L``: the first byte of the next request (aiohttp's ``RequestHandler.data_received``):
  the event-loop turns between two requests end;
- ``m:NAME``: ``sidecar.core.phases.mark(NAME)`` (marks taken without the debug line),
  ``m:headers`` when the handler starts (``sidecar.http.proxy._phase_marks``);
  ``m:background:NAME`` for a mark outside any delivery (a background task's statement,
  e.g. the provider states read every 0.5 s: time-driven, so valgrind's slowness inflates
  it per request; shown as its own "background" phase); for the
  pass-through ``m:read`` (``BaseRequest.read`` returned) and ``m:forward``
  (``ClientResponse.read`` returned);
- ``b:observe``/``e:observe``: around the delivery's log line and count
  (``sidecar.http.proxy._observe``), the one place a delivery logs and counts itself; other
  prometheus_client calls (e.g. the upstream's latency) stay in the phase they happen in;
- ``A``: aiohttp's ``finish_response`` returned: the answer is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

# Phases of a delivery, in order, and the marks (sidecar.core.phases names) that end each.
PHASES = ("parse", "verify", "claim", "forward", "record", "answer", "observe", "loop",
          "background")


def phase_of(mark: str) -> str:
    """The phase a ``phases.mark`` name ends (unknown names are shown as themselves)."""
    if mark in ("headers", "read"):
        return "parse"
    if mark == "verify":
        return "verify"
    if mark.startswith(("claim", "bind", "guard", "enqueue")):
        return "claim"
    if mark.startswith("forward"):
        return "forward"
    if mark.startswith(("complete", "record", "result")):
        return "record"
    if mark == "answer":
        return "answer"
    if mark.startswith("background:"):
        return "background"
    return mark


def attribute(events: Sequence[str], costs: Sequence[int]) -> dict[str, int]:
    """Instructions by phase: ``costs[i]`` is the cut that ``events[i]`` ended (the first,
    ``arm``, ends what came before the first measured request and is left out)."""
    if len(costs) != len(events):
        raise ValueError(f"{len(costs)} cuts for {len(events)} boundaries")
    totals: dict[str, int] = {}
    for index in range(1, len(events)):
        label = _label(events, index)
        totals[label] = totals.get(label, 0) + costs[index]
    return totals


def _label(events: Sequence[str], index: int) -> str:
    event = events[index]
    if event.startswith("e:"):
        return event[2:]
    if event.startswith("m:"):
        return phase_of(event[2:])
    if event == "A":
        return "answer"
    if event == "L":
        return "loop"
    # b:X: the phase the call interrupted, i.e. the one the next boundary outside it ends.
    depth = 0
    for later in events[index + 1:]:
        if later.startswith("b:"):
            depth += 1
        elif later.startswith("e:"):
            depth -= 1
        elif depth <= 0:
            return _label([later], 0)
    return "loop"


def callgrind_parts(path: str) -> list[int]:
    """Each dump's total instructions, in order, from a ``--combine-dumps=yes`` file."""
    totals: list[int] = []
    with open(path, errors="replace") as handle:
        for line in handle:
            if line.startswith("totals:"):
                totals.append(int(line.split()[1]))
    return totals


# -- the launcher (runs inside the measured process) -------------------------------------------

class Cuts:
    """The boundaries taken so far, and whether cutting is on (when ``plain``, only where the
    marked run's window starts and ends: ``arm`` and the last ``L``)."""

    def __init__(self, arm: str, requests: int, out: str, *, plain: bool = False) -> None:
        self.arm_path, self.requests, self.out, self.plain = arm, requests, out, plain
        self.armed = False
        self.done = False
        self.between = True  # the next byte received starts a request
        self.count = 0
        self.depth = 0
        self.events: list[str] = []
        self.hooks: list[str] = []
        self._getsid = os.getsid

    def cut(self, event: str) -> None:
        self._getsid(0)  # callgrind dumps before this call
        self.events.append(event)

    def request_starts(self) -> None:
        if self.done:
            return
        if not self.armed:
            if not os.path.exists(self.arm_path):
                return
            gc.collect()
            gc.freeze()  # the warm-up's objects: never scanned again, in either run
            self.armed, self.count = True, 1
            self.cut("arm")
            return
        self.count += 1
        last = self.count > self.requests
        if last or not self.plain:
            self.cut("L")
        if last:
            self.armed, self.done = False, True
            loop = type(asyncio.get_running_loop())
            with open(self.out + ".tmp", "w") as handle:
                json.dump({"events": self.events, "hooks": self.hooks,
                           "loop": f"{loop.__module__}.{loop.__qualname__}"}, handle)
            os.replace(self.out + ".tmp", self.out)

    def mark(self, name: str) -> None:
        if self.armed and self.depth == 0:
            self.cut("m:" + name)

    def begin(self, kind: str) -> None:
        if self.armed:
            # Right after the same kind of call ended: one cut for both (only a return and a
            # call between them).
            if self.depth == 0 and self.events[-1] != "e:" + kind:
                self.cut("b:" + kind)
            self.depth += 1

    def end(self, kind: str) -> None:
        if self.armed and self.depth > 0:
            self.depth -= 1
            if self.depth == 0:
                self.cut("e:" + kind)


def _around(cuts: Cuts, kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
    begin, end = cuts.begin, cuts.end

    def call(*args: Any, **kwargs: Any) -> Any:
        begin(kind)
        try:
            return function(*args, **kwargs)
        finally:
            end(kind)

    return call


def _after(cuts: Cuts, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """An async ``function`` that marks ``name`` once it returns."""

    @functools.wraps(function)
    async def call(*args: Any, **kwargs: Any) -> Any:
        result = await function(*args, **kwargs)
        cuts.mark(name)
        return result

    return call


def _hook_common(cuts: Cuts) -> None:
    from aiohttp import web_protocol

    handler = web_protocol.RequestHandler
    received = handler.data_received

    def data_received(self: Any, data: bytes) -> None:
        if cuts.between and data:
            cuts.between = False
            cuts.request_starts()
        received(self, data)

    finish = handler.finish_response

    async def finish_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await finish(self, *args, **kwargs)
        finally:
            if cuts.armed and not cuts.plain:
                cuts.cut("A")
            cuts.between = True

    handler.data_received = data_received  # type: ignore[method-assign]
    handler.finish_response = finish_response  # type: ignore[method-assign]
    cuts.hooks += ["aiohttp data_received", "aiohttp finish_response"]


def _hook_sidecar(cuts: Cuts) -> None:
    with contextlib.suppress(ImportError):
        from sidecar.core import phases

        current = getattr(phases, "_current", None)

        def mark(name: str, part: str = "") -> None:
            if current is None or current.get() is not None:
                cuts.mark(name + part)
            else:  # a background task's statement (the provider states' refresh)
                cuts.mark("background:" + name + part)

        phases.mark = mark
        cuts.hooks.append("sidecar.core.phases.mark"
                          + (" (in a delivery or not)" if current is not None else ""))
    with contextlib.suppress(ImportError):
        from sidecar.http import proxy

        if hasattr(proxy, "_phase_marks"):
            def phase_marks(request: Any) -> None:
                phases.start(0)  # the delivery's context, for mark() to tell
                cuts.mark("headers")

            proxy._phase_marks = phase_marks
            cuts.hooks.append("sidecar.http.proxy._phase_marks")
    with contextlib.suppress(ImportError):
        from sidecar.http import proxy

        if hasattr(proxy, "_observe"):
            proxy._observe = _around(cuts, "observe", proxy._observe)
            cuts.hooks.append("sidecar.http.proxy._observe")


QUIET_REFRESH = 3600.0


def quiet_background() -> list[str]:
    """Time-driven background work (under valgrind, tens of times slower, it would weigh tens
    of times more per request, and more in the slower marked run) stretched to an hour: the
    provider states' refresh (every 0.5 s) and the overview page's counter sample (every
    10 s, some 3.3 M instructions)."""
    quiet = []
    with contextlib.suppress(ImportError):
        from sidecar.http.ui import overview

        if hasattr(overview, "SAMPLE_EVERY"):
            overview.SAMPLE_EVERY = QUIET_REFRESH  # read at each turn of the sampler
            quiet.append(f"overview sampled every {QUIET_REFRESH:.0f} s")
    try:
        from sidecar.forwarding import holds
    except ImportError:
        return quiet
    init = holds.Holds.__init__

    @functools.wraps(init)
    def quiet_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["refresh"] = QUIET_REFRESH
        init(self, *args, **kwargs)

    holds.Holds.__init__ = quiet_init  # type: ignore[method-assign]
    return [*quiet, f"provider states read every {QUIET_REFRESH:.0f} s"]


def _hook_passthrough(cuts: Cuts) -> None:
    from aiohttp import client_reqrep, web_request

    web_request.BaseRequest.read = _after(  # type: ignore[method-assign]
        cuts, "read", web_request.BaseRequest.read)
    client_reqrep.ClientResponse.read = _after(  # type: ignore[method-assign]
        cuts, "forward", client_reqrep.ClientResponse.read)
    cuts.hooks += ["aiohttp BaseRequest.read", "aiohttp ClientResponse.read"]


def launch(argv: Sequence[str]) -> None:
    loop, target, *rest = argv
    plain = os.environ.get("PHASE_MARKS_PLAIN") == "1"  # no boundaries: the reference run
    cuts = Cuts(os.environ["PHASE_MARKS_ARM"], int(os.environ["PHASE_MARKS_REQUESTS"]),
                os.environ["PHASE_MARKS_OUT"], plain=plain)
    _hook_common(cuts)  # plain too: the same two calls per request, and arming
    if target == "sidecar":
        if loop == "uvloop":  # for trees that do not read WEBHOOK_SIDECAR_LOOP themselves
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        cuts.hooks += quiet_background()
        if not plain:
            _hook_sidecar(cuts)
        from sidecar.cli import main as sidecar_main

        raise SystemExit(sidecar_main(list(rest)))
    if target == "passthrough":
        if not plain:
            _hook_passthrough(cuts)
        from bench import passthrough

        sys.argv = ["passthrough", *rest, "--loop", loop]
        passthrough.main()
        return
    raise SystemExit(f"phase_marks: unknown target {target!r}")


if __name__ == "__main__":
    # Run by path: this directory is first on sys.path; the trees' packages must win.
    sys.path.pop(0)
    launch(sys.argv[1:])
