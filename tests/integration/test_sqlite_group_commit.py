"""SQLite's group commit across kinds (``transactions.together``): claims, result writes and
nonce binds that wait while the worker thread is busy go out in one transaction, whatever
their kinds, on a real SQLite file with real concurrency.

- a mixed group answers each caller as alone: one winner per id, stale result writes write
  nothing, binds of one nonce agree; and its claims and result writes share a COMMIT;
- a write that fails inside a group is rolled back alone (its attempt record too), its caller
  gets StoreError, and the others in the group commit;
- the deadline bounds every call, alone or waiting, of every kind, while the worker thread is
  stuck.

Groups form deterministically: calls started in one loop turn find the first in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sidecar.core.errors import StoreError
from sidecar.core.events import AttemptResult, Claim, EventState, Outcome, RecordedResponse
from sidecar.store.sqlite import SQLiteStore

BODY = b"\x05" * 32
LEASE = 30.0
DONE = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                     RecordedResponse(200, (("Content-Type", "text/plain"),), b"ok"), 2.0)


class _Transactions:
    """Each transaction's statements, from the connection's trace (on the worker thread)."""

    def __init__(self) -> None:
        self.done: list[list[str]] = []
        self._open: list[str] | None = None

    def __call__(self, sql: str) -> None:
        word = sql.split(None, 1)[0].upper()
        if word == "BEGIN":
            self._open = []
        elif word == "COMMIT" and self._open is not None:
            self.done.append(self._open)
            self._open = None
        elif self._open is not None:
            self._open.append(sql)


@contextlib.asynccontextmanager
async def _traced(store: SQLiteStore) -> Any:
    counter = _Transactions()
    await store._call("trace", store._con.set_trace_callback, counter)
    try:
        yield counter
    finally:
        await store._call("trace", store._con.set_trace_callback, None)


def _poison(path: Path, sql: str) -> None:
    """A trigger, made on a connection of its own, that refuses one event's write."""
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute(sql)
        con.commit()


async def test_a_mixed_group_answers_each_call_as_alone_and_commits_once(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "events.db")
    try:
        written = [f"evt_w{i}" for i in range(10)]
        for event_id in written:
            assert (await store.claim("stripe", event_id, BODY, LEASE, "p")).won
        fresh_ids = [f"evt_n{i}" for i in range(8)]
        digests = [hashlib.sha256(f"b{i}".encode()).digest() for i in range(6)]
        async with _traced(store) as trace:
            # One loop turn: the first claim goes alone, everything else waits for it and
            # goes out in one group: claims (each id 3 times), fresh and stale result writes
            # (attempt 2 is stale), binds of one nonce with different bodies.
            calls: list[Any] = [store.claim("stripe", "evt_first", BODY, LEASE, "p")]
            calls += [store.claim("stripe", e, BODY, LEASE, f"p{n}")
                      for n, e in enumerate(fresh_ids * 3)]
            calls += [store.complete("stripe", e, 1 if n % 2 == 0 else 2, DONE)
                      for n, e in enumerate(written)]
            calls += [store.bind_nonce("mailgun", "tok", d) for d in digests]
            answers = await asyncio.gather(*calls)
        first, claims = answers[0], answers[1:25]
        completes, binds = answers[25:35], answers[35:]
        assert first.won
        for event_id in fresh_ids:
            mine = [c for e, c in zip(fresh_ids * 3, claims, strict=True) if e == event_id]
            assert [c.won for c in mine] == [True, False, False], event_id
            assert len({(c.row.received_at, c.row.lease_until) for c in mine}) == 1, "one row"
        assert completes == [n % 2 == 0 for n in range(10)], "a stale attempt writes nothing"
        assert {b.digest for b in binds} == {digests[0]}, "the first bind in order wins"
        for n, event_id in enumerate(written):
            row = await store.get("stripe", event_id)
            assert row is not None
            assert row.state is (EventState.DONE if n % 2 == 0 else EventState.PROCESSING)
            assert len(await store.attempts("stripe", event_id)) == (1 if n % 2 == 0 else 0)
        # Everything but the first went in one transaction: one commit, one WAL fsync.
        assert len(trace.done) == 2, [len(t) for t in trace.done]
        group = " ".join(trace.done[1])
        assert "INSERT INTO webhook_event" in group and "UPDATE webhook_event" in group
        assert "INSERT INTO webhook_nonce" in group
        # (The ten set-up claims and the first went alone.)
        assert (store._claims.singles, store._claims.batches, store._claims.batched) == (11, 1, 24)
        assert (store._completes.batches, store._completes.batched) == (1, 10)
        assert (store._binds.batches, store._binds.batched) == (1, 6)
    finally:
        await store.close()


async def test_many_concurrent_deliveries_through_two_handles_keep_one_winner_each(
    tmp_path: Path,
) -> None:
    # Real concurrency: two stores on one file (two worker threads, SQLite's lock between
    # them), each delivery claiming then writing its result, as the proxy does.
    path = tmp_path / "shared.db"
    a, b = await asyncio.gather(SQLiteStore.open(path), SQLiteStore.open(path))
    ids = [f"evt_{i}" for i in range(40)]

    async def deliver(store: SQLiteStore, event_id: str) -> tuple[str, Claim, bool | None]:
        claim = await store.claim("stripe", event_id, BODY, LEASE, f"{id(store)}")
        if not claim.won:
            return event_id, claim, None
        return event_id, claim, await store.complete("stripe", event_id, 1, DONE)

    try:
        results = await asyncio.gather(*(deliver(s, e) for e in ids * 3 for s in (a, b)))
        for event_id in ids:
            mine = [(c, w) for e, c, w in results if e == event_id]
            assert sum(c.won for c, _ in mine) == 1, event_id
            assert [w for c, w in mine if c.won] == [True]
            row = await a.get("stripe", event_id)
            assert row is not None and row.state is EventState.DONE and row.attempt == 1
            assert len(await a.attempts("stripe", event_id)) == 1
        # Started in one loop turn, the claims went out in groups on each handle.
        assert a._claims.batches >= 1 and b._claims.batches >= 1
    finally:
        await a.close()
        await b.close()


async def test_a_write_that_fails_in_a_group_is_rolled_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = await SQLiteStore.open(path)
    try:
        for event_id in ("evt_ok", "evt_bad_write"):
            assert (await store.claim("stripe", event_id, BODY, LEASE, "p")).won
        _poison(path, "CREATE TRIGGER refuse_claim BEFORE INSERT ON webhook_event"
                      " WHEN NEW.event_id = 'evt_bad_claim'"
                      " BEGIN SELECT RAISE(ABORT, 'refused claim'); END")
        # The result write's attempt record (its first statement) lands before the row's
        # update is refused: the savepoint must take the record back too.
        _poison(path, "CREATE TRIGGER refuse_write BEFORE UPDATE ON webhook_event"
                      " WHEN NEW.event_id = 'evt_bad_write'"
                      " BEGIN SELECT RAISE(ABORT, 'refused write'); END")
        answers = await asyncio.gather(
            store.claim("stripe", "evt_a", BODY, LEASE, "p"),  # alone
            store.claim("stripe", "evt_b", BODY, LEASE, "p"),  # the group from here
            store.claim("stripe", "evt_bad_claim", BODY, LEASE, "p"),
            store.complete("stripe", "evt_bad_write", 1, DONE),
            store.complete("stripe", "evt_ok", 1, DONE),
            store.claim("stripe", "evt_c", BODY, LEASE, "p"),
            return_exceptions=True)
        assert store._claims.batches == 1 and store._completes.batches == 1
        bad_claim, bad_write = answers[2], answers[3]
        assert isinstance(bad_claim, StoreError) and "refused claim" in str(bad_claim)
        assert str(bad_claim).startswith("claim: ")
        assert isinstance(bad_write, StoreError) and "refused write" in str(bad_write)
        assert str(bad_write).startswith("complete: ")
        others = [answers[0], answers[1], answers[4], answers[5]]
        assert not any(isinstance(a, BaseException) for a in others), answers
        assert answers[1].won and answers[5].won and answers[4] is True
        for event_id in ("evt_a", "evt_b", "evt_c"):
            assert await store.get("stripe", event_id) is not None
        assert await store.get("stripe", "evt_bad_claim") is None
        bad = await store.get("stripe", "evt_bad_write")
        assert bad is not None and bad.state is EventState.PROCESSING
        assert await store.attempts("stripe", "evt_bad_write") == [], "rolled back alone"
        assert len(await store.attempts("stripe", "evt_ok")) == 1
    finally:
        await store.close()


@contextlib.contextmanager
def _worker_stuck(store: SQLiteStore) -> Iterator[asyncio.Future[Any]]:
    """The store's worker thread busy (submitted now) on a job that waits for a gate, opened
    on leaving."""
    gate = threading.Event()
    stuck = asyncio.get_running_loop().run_in_executor(store._executor, gate.wait, 30.0)
    try:
        yield stuck
    finally:
        gate.set()


async def test_the_deadline_bounds_every_call_while_the_worker_is_stuck(
    tmp_path: Path,
) -> None:
    store = await SQLiteStore.open(tmp_path / "events.db", busy_timeout=0.2)
    deadline = store._deadline  # 0.7 s
    try:
        assert (await store.claim("stripe", "evt_old", BODY, LEASE, "p")).won
        with _worker_stuck(store) as stuck:
            started = time.monotonic()
            calls = [store.claim("stripe", f"evt_{i}", BODY, LEASE, "p") for i in range(5)]
            calls += [store.complete("stripe", "evt_old", 1, DONE),
                      store.bind_nonce("mailgun", "tok", BODY)]
            # Bounded here too, so that a call the deadline misses fails the test, not hangs it.
            answers = await asyncio.wait_for(
                asyncio.gather(*calls, return_exceptions=True), timeout=4 * deadline)
            elapsed = time.monotonic() - started
            assert all(isinstance(a, StoreError) for a in answers), answers
            assert elapsed < deadline + 0.5, elapsed
        assert await stuck is True
        assert (await store.claim("stripe", "evt_after", BODY, LEASE, "p")).won
    finally:
        await store.close()
