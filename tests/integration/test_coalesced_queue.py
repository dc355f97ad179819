"""Queue mode's coalesced writes on real PostgreSQL and SQLite: enqueues and settles that arrive
while one of their kind is in flight go out together (PostgreSQL: ``enqueue_batch.sql``,
``settle_queued_batch.sql``; SQLite: one ``BEGIN IMMEDIATE`` transaction), and each caller is
answered as if its call had run alone.

- batch against single: the same calls, once one after the other (``write_batch=1``) and once
  together (the first alone, the rest as one batch), give the same answers and leave the same
  rows, queue entries and attempts timeline — new keys, one key twice in the batch, a key
  already queued, a forward-mode row, a full queue; settles done, retried, not reached, dead,
  superseded, and one settle twice;
- a batch whose answer was lost with its connection is recognised item by item when repeated
  (``enqueue_landed.sql``, ``settle_queued_landed.sql``);
- fewer commits than calls, counted by PostgreSQL (``pg_stat_database.xact_commit``).

Nothing sleeps to synchronise: a batch forms because the first call is in flight when the others
arrive (``asyncio.gather``), and the coalescer's counters say it did.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecar.core.events import (
    AttemptResult,
    Enqueued,
    EventState,
    Outcome,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlite import SQLiteStore
from tests.integration.test_coalesced_writes import _commits_of, fresh_database
from tests.pgserver import ThrowawayCluster, migrated_database
from tests.replyeater import ReplyEater

BODY = b"\x03" * 32
LEASE = 30.0
OK = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                   RecordedResponse(200, (("Content-Type", "application/json"),), b"{}"), 4.5)
FAILED = AttemptResult(EventState.FAILED, Outcome.RESPONSE,
                       RecordedResponse(500, (("X-Why", "db"),), b"boom"), 3.25)
REFUSED = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.5)

AnyStore = PostgresStore | SQLiteStore
Opener = Callable[[int], contextlib.AbstractAsyncContextManager[AnyStore]]


def _request(event_id: str, order: str | None = None) -> StoredRequest:
    body = f'{{"id": "{event_id}", "key": "{order}"}}'.encode()
    return StoredRequest(method="POST", path="/webhooks/stripe",
                         headers=(("Content-Type", "application/json"),), body=body)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a store on a database of its own (each call a fresh one), with ``write_batch``."""
    if request.param == "sqlite":
        count = iter(range(100))

        @contextlib.asynccontextmanager
        async def sqlite(write_batch: int) -> AsyncIterator[AnyStore]:
            store = await SQLiteStore.open(tmp_path / f"q{next(count)}.db",
                                           write_batch=write_batch)
            try:
                yield store
            finally:
                await store.close()

        return sqlite
    factory: Callable[[], Awaitable[str]] = request.getfixturevalue("pg_database_factory")

    @contextlib.asynccontextmanager
    async def postgres(write_batch: int) -> AsyncIterator[AnyStore]:
        async with fresh_database(factory) as dsn:
            store = await PostgresStore.connect(dsn, min_size=2, max_size=8,
                                                write_batch=write_batch)
            try:
                yield store
            finally:
                await store.close()

    return postgres


async def _in_turn_or_together(store: AnyStore, calls: Sequence[Callable[[], Awaitable[Any]]],
                               together: bool) -> list[Any]:
    if not together:
        return [await call() for call in calls]
    return list(await asyncio.gather(*(call() for call in calls)))


async def _state(store: AnyStore, keys: Sequence[tuple[str, str]]) -> list[tuple[object, ...]]:
    """Every row, entry and attempt of ``keys`` (owners as their worker, times left out)."""
    found: list[tuple[object, ...]] = []
    for provider, event_id in keys:
        row = await store.get(provider, event_id)
        entry = await store.queue_entry(provider, event_id)
        attempts = await store.attempts(provider, event_id)
        found.append((
            provider, event_id,
            None if row is None else (row.state, row.attempt, row.body_sha256, row.outcome,
                                      row.response, row.latency_ms, row.lease_until is None),
            None if entry is None else (entry.due_at is None, entry.tries, entry.order_key,
                                        entry.last_error,
                                        None if entry.due_at is None
                                        else entry.due_at - entry.now > LEASE / 2),
            [(a.attempt, a.state, a.outcome, a.error, (a.owner or "").split("#")[0])
             for a in attempts]))
    return found


def _answer(enqueued: Enqueued) -> tuple[object, ...]:
    row = enqueued.row
    return (enqueued.accepted, enqueued.full,
            None if row is None else (row.event_id, row.state, row.attempt, row.in_queue))


# == batch against single =====================================================================


async def _enqueue_story(store: AnyStore, together: bool) -> tuple[list[Any], list[Any], Any]:
    # Before: a key already queued, a forward-mode row, and a provider whose queue is full.
    assert (await store.enqueue("stripe", "evt_old", BODY, _request("evt_old"))).accepted
    assert (await store.claim("stripe", "evt_fwd", BODY, LEASE, "p")).won
    for event_id in ("full_1", "full_2"):
        assert (await store.enqueue("shopify", event_id, BODY, _request(event_id),
                                    max_depth=2)).accepted
    calls: list[tuple[str, str, str | None, int | None]] = [
        ("stripe", "evt_first", "k1", None),  # goes alone; the rest wait for it
        ("stripe", "evt_a", "k1", None),
        ("stripe", "evt_z", None, None),  # accepted before evt_b, though it sorts after it
        ("stripe", "evt_b", None, None),
        ("stripe", "evt_a", "k2", None),  # the same key twice in one batch: one accepted
        ("stripe", "evt_old", None, None),  # queued before: the existing row
        ("stripe", "evt_fwd", None, None),  # forward mode's row, not in the queue
        ("shopify", "full_new", None, 2),  # a full queue: refused, nothing written
        ("shopify", "full_1", None, 2),  # a full queue, but the key is there: existing
        ("stripe", "evt_c", "k1", 10),
    ]
    answers = await _in_turn_or_together(store, [
        (lambda p=p, e=e, k=k, d=d: store.enqueue(p, e, BODY, _request(e, k), order_key=k,
                                                   max_depth=d))
        for p, e, k, d in calls], together)
    keys = sorted({(p, e) for p, e, _, _ in calls})
    # The order of acceptance follows the arrival order: takes answer it.
    taken = await store.take_queued("stripe", 10, LEASE, "w")
    return [_answer(a) for a in answers], await _state(store, keys), \
        [(w.event_id, w.attempt, w.tries) for w in taken]


async def test_enqueues_sent_together_answer_and_write_as_one_by_one(opener: Opener) -> None:
    async with opener(1) as store:
        single = await _enqueue_story(store, together=False)
        assert (store._enqueues.singles, store._enqueues.batches) == (13, 0)
    async with opener(64) as store:
        together = await _enqueue_story(store, together=True)
        assert (store._enqueues.singles, store._enqueues.batches,
                store._enqueues.batched) == (3 + 1, 1, 9), "the first alone, the rest as one"
    assert together == single
    answers, _, taken = together
    answers = answers[:2] + answers[3:]  # evt_z's: accepted, as evt_b's
    assert [a[:2] for a in answers] == [(True, False), (True, False), (True, False),
                                        (False, False), (False, False), (False, False),
                                        (False, True), (False, False), (True, False)]
    assert answers[6][2] is None and answers[7][2] == ("full_1", EventState.QUEUED, 0, True)
    assert answers[3][2] == ("evt_a", EventState.QUEUED, 0, True)  # the sibling's new row
    assert answers[5][2] == ("evt_fwd", EventState.PROCESSING, 1, False)
    # In order of acceptance; evt_a and evt_c wait behind evt_first, their order key's first.
    assert [event_id for event_id, _, _ in taken] == ["evt_old", "evt_first", "evt_z", "evt_b"]


async def _settle_story(store: AnyStore, together: bool) -> tuple[list[bool], list[Any]]:
    ids = [f"evt_{i}" for i in range(7)]
    for event_id in ids:
        assert (await store.enqueue("stripe", event_id, BODY, _request(event_id))).accepted
    work = {w.event_id: w for w in await store.take_queued("stripe", 10, LEASE, "w")}
    assert sorted(work) == ids

    def settle(event_id: str, settlement: Settlement, stale: int = 0
               ) -> Callable[[], Awaitable[bool]]:
        return lambda: store.settle_queued("stripe", event_id, work[event_id].tries + stale,
                                           settlement)

    written = await _in_turn_or_together(store, [
        settle("evt_0", Settlement(EventState.DONE, OK)),  # goes alone
        settle("evt_1", Settlement(EventState.DONE, OK)),
        settle("evt_2", Settlement(EventState.QUEUED, FAILED, retry_in=3600.0,
                                   error="HTTP 500")),
        settle("evt_3", Settlement(EventState.QUEUED, REFUSED, retry_in=3600.0,
                                   reached=False, error="refused")),  # attempt given back
        settle("evt_4", Settlement(EventState.DEAD, FAILED, error="max_attempts")),
        settle("evt_5", Settlement(EventState.DONE, OK), stale=1),  # another take's: refused
        settle("evt_6", Settlement(EventState.DONE, OK)),
        settle("evt_6", Settlement(EventState.DEAD, FAILED, error="twice")),  # second: refused
    ], together)
    return written, await _state(store, [("stripe", event_id) for event_id in ids])


async def test_settles_sent_together_answer_and_write_as_one_by_one(opener: Opener) -> None:
    async with opener(1) as store:
        single = await _settle_story(store, together=False)
    async with opener(64) as store:
        together = await _settle_story(store, together=True)
        assert (store._settles.singles, store._settles.batches,
                store._settles.batched) == (1, 1, 7), "the first alone, the rest as one"
    assert together == single
    written, state = together
    assert written == [True, True, True, True, True, False, True, False]
    by_id = {s[1]: s for s in state}
    assert by_id["evt_3"][2][:2] == (EventState.QUEUED, 0)  # not reached: attempt given back
    assert by_id["evt_5"][2][:2] == (EventState.PROCESSING, 1) and by_id["evt_5"][4] == []
    assert by_id["evt_6"][2][0] is EventState.DONE and by_id["evt_6"][3] is None
    assert [len(s[4]) for s in state] == [1, 1, 1, 1, 1, 0, 1], "each settle recorded once"


# == a batch's answer lost ====================================================================


@pytest.fixture
async def private_dsn(cluster: ThrowawayCluster) -> AsyncIterator[str]:
    async with migrated_database(cluster, "queue") as url:
        yield url


@pytest.mark.postgres
@pytest.mark.parametrize("verb", ["enqueue", "settle_queued"])
async def test_a_queue_batch_whose_answer_was_lost_is_recognised_item_by_item(
    private_dsn: str, eater: ReplyEater, verb: str,
) -> None:
    ids = [f"evt_{i}" for i in range(10)]
    async with contextlib.AsyncExitStack() as stack:
        # Through the relay; no statement cache, so each statement's text is on the wire.
        store = await PostgresStore.connect(eater.relayed(private_dsn), min_size=1, max_size=2,
                                            statement_cache_size=0)
        stack.push_async_callback(store.close)
        if verb == "settle_queued":
            for event_id in ids:
                assert (await store.enqueue("stripe", event_id, BODY,
                                            _request(event_id))).accepted
            work = await store.take_queued("stripe", 10, LEASE, "w")
            assert len(work) == len(ids)
        # The batch's parameters (the first call, evt_0, goes alone): armed on its Bind, the
        # message sent with its Execute, so the reply swallowed is the batch's own, committed.
        eater.arm(b"evt_9")
        # A plain repeat of the batch would answer "existing" (enqueues) or "superseded"
        # (settles).
        if verb == "enqueue":
            answers = await asyncio.gather(*(store.enqueue("stripe", e, BODY, _request(e))
                                             for e in ids))
            assert [(a.accepted, a.full) for a in answers] == [(True, False)] * len(ids)
            coalescer = store._enqueues
        else:
            written = await asyncio.gather(*(
                store.settle_queued("stripe", w.event_id, w.tries,
                                    Settlement(EventState.DONE, OK)) for w in work))
            assert written == [True] * len(ids)
            coalescer = store._settles
        assert eater.fired.is_set(), "the batch committed and its answer was swallowed"
        assert (coalescer.singles, coalescer.batches) == (1, 1)
        rows = [await store.get("stripe", e) for e in ids]
        entries = [await store.queue_entry("stripe", e) for e in ids]
        timelines = [len(await store.attempts("stripe", e)) for e in ids]
    if verb == "enqueue":
        assert all(r is not None and (r.state, r.attempt) == (EventState.QUEUED, 0)
                   for r in rows)
        assert all(e is not None and e.tries == 0 for e in entries)
        assert timelines == [0] * len(ids)
    else:
        assert all(r is not None and (r.state, r.attempt) == (EventState.DONE, 1) for r in rows)
        assert entries == [None] * len(ids)
        assert timelines == [1] * len(ids), "each settle recorded once, the repeat nothing"


# == fewer commits than calls =================================================================


@pytest.mark.postgres
async def test_concurrent_enqueues_and_settles_take_fewer_commits_than_calls(
    pg_database_factory: Callable[[], Awaitable[str]],
) -> None:
    ids = [f"evt_{i}" for i in range(200)]

    async def cycle(store: PostgresStore) -> None:
        answers = await asyncio.gather(*(store.enqueue("stripe", e, BODY, _request(e))
                                         for e in ids))
        assert all(a.accepted for a in answers)
        work = await store.take_queued("stripe", len(ids), LEASE, "w")
        written = await asyncio.gather(*(
            store.settle_queued("stripe", w.event_id, w.tries, Settlement(EventState.DONE, OK))
            for w in work))
        assert written == [True] * len(ids)

    async with fresh_database(pg_database_factory) as dsn:
        alone, _ = await _commits_of(dsn, cycle, write_batch=1)
    async with fresh_database(pg_database_factory) as dsn:
        together, store = await _commits_of(dsn, cycle, write_batch=64)
    # Alone: 200 enqueues + 1 take + 200 settles. Together: 1 + ceil(199 / 64) statements
    # each (and the pool's own few).
    assert alone >= 401, alone
    assert (store._enqueues.singles, store._enqueues.batches) == (1, 4)
    assert (store._settles.singles, store._settles.batches) == (1, 4)
    assert together < 401 / 10, (together, alone)
