"""What a PostgreSQL store call costs the event loop: on a pool with an idle connection, a call
runs in its caller's task, from the acquire to the connection given back (bench.lone measures
what each task and loop turn costs a lone delivery)."""

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


@pytest.mark.parametrize("result_commit_waits", [True, False])
async def test_a_delivery_s_store_calls_start_no_task(
    pg_dsn: str, result_commit_waits: bool) -> None:
    store = await PostgresStore.connect(pg_dsn, min_size=1, max_size=4,
                                        result_commit_waits=result_commit_waits)
    try:
        await store.ping()
        # The result writes' pool (no_wait) has its connection already: open it first too.
        await store.complete("stripe", "evt_absent", 1, DONE_200)
        event_id = f"evt_tasks_{result_commit_waits}"
        with tasks_started() as started:
            claim = await store.claim("stripe", event_id, BODY, 30.0, "tasks")
            assert claim.won and claim.row is not None
            assert await store.complete("stripe", event_id, claim.row.attempt, DONE_200)
            row = await store.get("stripe", event_id)
        assert row is not None and row.state == "done"
        # Before: asyncpg's Pool.release, a shielded task per call.
        assert started == []
    finally:
        await store.close()
