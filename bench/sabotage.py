"""Deliberately broken builds, to show that the chaos suite catches them.

``python -m bench.chaos --break NAME`` starts every proxy replica with one of the patches below
applied at interpreter start-up (a ``sitecustomize`` module written into the run's temporary
directory and put first on ``PYTHONPATH``), so nothing under ``sidecar/`` is edited. Each patch
wraps a name the current code has; if the code moves on and the name is gone, the replica
refuses to start with a message saying so, rather than run unbroken.

- ``store-error-500``: a store failure is answered 500 instead of 503 + ``Retry-After``
  (caught by ``no-500`` in db-hang and db-crash);
- ``double-forward``: a claim that finds the event in flight treats it as its own, so a
  concurrent duplicate is forwarded again as attempt 1 (caught by ``repeats-justified``
  wherever the provider sends concurrent duplicates — every scenario);
- ``drop-results``: every 10th result write is skipped but reported as written (caught by
  ``lost-zero`` and ``no-stuck-rows`` in every scenario);
- ``relay-unrecorded``: when the app's answer could not be recorded, the pipeline is not
  told, and relays it (a 2xx) instead of answering 503 (caught by ``lost-zero`` and
  ``no-stuck-rows`` in db-hang, db-crash and row-locks);
- ``no-record-retry``: a result write that failed once fails again at once on any retry of
  the same (event, attempt): a build without a result-write retry, whatever shape the retry
  takes. On its own it is not an invariant violation while failed writes are answered 503 (the
  event is taken over later: more repeats at the app, each justified, visible in the table);
  with ``relay-unrecorded`` too (``--break no-record-retry,relay-unrecorded``, the build
  before both fixes) it loses events even in ``row-locks --lock-hold 1.5``.

- ``drop-settles``: queue mode: every 10th settle of a worker's try is skipped but reported as
  written (caught by ``repeats-justified`` in queue-kill-accept and queue-kill-forward: the
  event is taken again after its lease and reaches the app a second time although its outcome
  was known).

- ``fanout-skip``: fan-out: every 10th fan-out leaves the event's last destination out, and
  the provider's entry is done all the same (caught by ``lost-zero`` for that destination
  alone in fanout-kill).

Several breaks combine: ``--break a,b``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "CHAOS_BREAK"
REPO = Path(__file__).resolve().parent.parent


def _original(owner: Any, name: str) -> Any:
    try:
        return getattr(owner, name)
    except AttributeError:
        raise SystemExit(f"sabotage: {owner.__name__}.{name} no longer exists; "
                         "update bench/sabotage.py for this build") from None


def _store_error_500() -> None:
    # The modules of the pipeline that answer a store failure (``refuse("store_error")``).
    from sidecar.delivery import forward, pipeline

    for module in (pipeline, forward):
        refuse = _original(module, "refuse")

        def broken(rule_name: str, *args: Any, _refuse: Any = refuse, **kwargs: Any) -> Any:
            return _refuse("internal_error" if rule_name == "store_error" else rule_name,
                           *args, **kwargs)

        module.refuse = broken  # type: ignore[attr-defined]


def _double_forward() -> None:
    import dataclasses

    from sidecar.core.events import EventState
    from sidecar.delivery.forward import ForwardMode

    claim = _original(ForwardMode, "_claim")

    async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        claimed = await claim(self, *args, **kwargs)
        if claimed.row.state is EventState.PROCESSING:
            return dataclasses.replace(claimed, won=True)
        return claimed

    ForwardMode._claim = broken  # type: ignore[method-assign]


def _relay_unrecorded() -> None:
    import dataclasses

    from sidecar.core.events import Recorded
    from sidecar.forwarding.forwarder import Forwarder

    forward = _original(Forwarder, "forward")

    async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        done = await forward(self, *args, **kwargs)
        # The pipeline no longer learns that the result write failed: it relays the app's
        # answer (the forwarder still logs record_failed, as before the fix).
        if done.recorded is Recorded.FAILED:
            return dataclasses.replace(done, recorded=Recorded.WRITTEN, record_error=None)
        return done

    Forwarder.forward = broken  # type: ignore[method-assign]


def _wrap_complete(wrap: Callable[[Any], Any]) -> None:
    """Replace the PostgreSQL store's ``complete`` verb (the fenced result write)."""
    from sidecar.store.postgres import PostgresStore

    PostgresStore.complete = wrap(_original(PostgresStore, "complete"))  # type: ignore[method-assign]


def _drop_results() -> None:
    calls = 0

    def wrap(complete: Any) -> Any:
        async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls % 10 == 0:
                return True  # "written"
            return await complete(self, *args, **kwargs)
        return broken

    _wrap_complete(wrap)


def _no_record_retry() -> None:
    from sidecar.core.errors import StoreError

    failed: set[tuple[object, ...]] = set()

    def wrap(complete: Any) -> Any:
        async def broken(self: Any, provider: str, event_id: str, attempt: int,
                         result: Any) -> Any:
            key = (provider, event_id, attempt)
            if key in failed:
                raise StoreError("sabotage: a failed result write is not retried")
            try:
                return await complete(self, provider, event_id, attempt, result)
            except StoreError:
                failed.add(key)
                raise
        return broken

    _wrap_complete(wrap)


def _drop_settles() -> None:
    """Queue mode: every 10th settle of a delivery worker's try is skipped but reported as
    written, so a delivered event stays in flight until its lease ends and is taken again."""
    from sidecar.store.postgres import PostgresStore

    settle = _original(PostgresStore, "settle_queued")
    calls = 0

    async def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls % 10 == 0:
            return True  # "written"
        return await settle(self, *args, **kwargs)

    PostgresStore.settle_queued = broken  # type: ignore[method-assign]


def _fanout_skip() -> None:
    """Fan-out: every 10th fan-out queues the event for all its destinations but the last; the
    provider's entry is done all the same."""
    import dataclasses

    from sidecar.forwarding.fanout import FanOut

    send = _original(FanOut, "send")
    calls = 0

    async def broken(self: Any, provider: Any, ids: Any, attempt: int, request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls % 10 == 0 and request.destinations:
            request = dataclasses.replace(request, destinations=request.destinations[:-1])
        return await send(self, provider, ids, attempt, request)

    FanOut.send = broken  # type: ignore[method-assign]


BREAKS: dict[str, Callable[[], None]] = {
    "store-error-500": _store_error_500,
    "double-forward": _double_forward,
    "drop-results": _drop_results,
    "no-record-retry": _no_record_retry,
    "relay-unrecorded": _relay_unrecorded,
    "drop-settles": _drop_settles,
    "fanout-skip": _fanout_skip,
}


def names(spec: str) -> list[str]:
    """The breaks named in ``spec`` (comma-separated); ValueError for an unknown one."""
    chosen = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BREAKS]
    if unknown or not chosen:
        raise ValueError(f"unknown break {', '.join(unknown) or spec!r}; known: "
                         f"{', '.join(BREAKS)}")
    return chosen


def apply_from_env() -> None:
    """Called by the generated ``sitecustomize``: apply ``$CHAOS_BREAK`` (comma-separated
    names) and say so on stderr (one JSON line, which the harness's log reader keeps)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for name in names(spec):
        BREAKS[name]()
    print(json.dumps({"event": "sabotage", "name": spec}), file=sys.stderr, flush=True)


def install(directory: Path, spec: str) -> dict[str, str]:
    """Write the ``sitecustomize`` into ``directory``; the environment that activates the
    breaks named in ``spec``."""
    names(spec)
    (directory / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from bench.sabotage import apply_from_env\napply_from_env()\n")
    path = os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, ENV: spec}
