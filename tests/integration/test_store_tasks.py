"""What a PostgreSQL store call costs the event loop: on a pool with an idle connection, a call
runs in its caller's task, from the acquire to the connection given back, under one deadline
timer (bench.lone measures what each task, timer and loop turn costs a lone delivery)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sidecar.store.postgres import PostgresStore
from tests.integration.test_store_contract import DONE_200

pytestmark = pytest.mark.postgres

BODY = hashlib.sha256(b'{"id": "evt_tasks"}').digest()


@contextmanager
def tasks_started() -> Iterator[list[str]]:
    """The names of the coroutines the running loop starts as tasks meanwhile."""
    loop = asyncio.get_running_loop()
    started: list[str] = []
    previous = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                 **kwargs: Any) -> asyncio.Task[Any]:
        started.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        yield started
    finally:
        loop.set_task_factory(previous)


def timeout_scopes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds of each ``asyncio.timeout`` scope with a deadline entered from now on (the
    store's own: asyncpg binds the function at import)."""
    scopes: list[float] = []
    real = asyncio.timeout

    def counting(delay: float | None) -> asyncio.Timeout:
        if delay is not None:
            scopes.append(delay)
        return real(delay)

    monkeypatch.setattr(asyncio, "timeout", counting)
    return scopes


@pytest.mark.parametrize("result_commit_waits", [True, False])
async def test_a_delivery_s_store_calls_start_no_task_and_one_timer_each(
    pg_dsn: str, result_commit_waits: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await PostgresStore.connect(pg_dsn, min_size=1, max_size=4,
                                        result_commit_waits=result_commit_waits)
    try:
        await store.ping()
        # The result writes' pool (no_wait) has its connection already: open it first too.
        await store.complete("stripe", "evt_absent", 1, DONE_200)
        event_id = f"evt_tasks_{result_commit_waits}"
        scopes = timeout_scopes(monkeypatch)
        with tasks_started() as started:
            claim = await store.claim("stripe", event_id, BODY, 30.0, "tasks")
            assert claim.won and claim.row is not None
            assert await store.complete("stripe", event_id, claim.row.attempt, DONE_200)
            row = await store.get("stripe", event_id)
        assert row is not None and row.state == "done"
        # Before: asyncpg's Pool.release, a shielded task per call.
        assert started == []
        # One deadline per call (the claim's insert race shares its own with its statements);
        # none for an acquire that finds an idle connection. Before: 3 + 2 + 2.
        assert scopes == [5.0, 5.0, 5.0]
    finally:
        await store.close()
