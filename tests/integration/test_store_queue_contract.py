"""Queue mode's store verbs, one contract for every ``Store``: real SQLite, real PostgreSQL and
the in-memory store (``[sqlite]``, ``[postgres]``, ``[memory]``), as in ``test_store_contract``.

An event is queued (``enqueue``), taken by delivery workers (``take_queued``), settled fenced by
its take counter (``settle_queued``), dead-lettered and re-driven (``requeue_dead``); the
forward-mode verbs leave it alone, and retention keeps it until it is delivered or dead. A few
adapter-specific tests follow: PostgreSQL's LISTEN connection (woken by another store, and
reconnected after its backend is terminated) and its calls repeated after a lost answer.

Nothing here sleeps to synchronise: concurrency is real (``asyncio.gather`` over two stores on
one database), an expired lease is made with ``lease_seconds=0``, and where time must pass the
test polls the store's own clock, bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest
from structlog.testing import capture_logs

from sidecar.core.events import (
    AttemptResult,
    EventRow,
    EventState,
    Outcome,
    QueuedWork,
    RecordedResponse,
    Settlement,
    StoredRequest,
)
from sidecar.core.ports import Store
from sidecar.store.memory import MemoryStore
from sidecar.store.mysql import MySQLStore
from sidecar.store.postgres import PostgresStore
from sidecar.store.sqlfiles import statement
from sidecar.store.sqlite import SQLiteStore
from tests.backdoor import Backdoor, SqliteBackdoor, pg_backdoor
from tests.integration.test_store_contract import BODY, LEASE, MemoryBackdoor
from tests.replyeater import ReplyEater

REQUEST = StoredRequest(method="POST", path="/webhooks/stripe?x=1",
                        headers=(("Content-Type", "application/json"), ("X-A", "1")),
                        body=b'{"id": "evt_1"}')

OK_200 = AttemptResult(EventState.DONE, Outcome.RESPONSE,
                       RecordedResponse(200, (("Content-Type", "application/json"),),
                                        b'{"ok": true}'), 12.5)
FAILED_500 = AttemptResult(EventState.FAILED, Outcome.RESPONSE,
                           RecordedResponse(500, (("X-Why", "db"),), b"boom"), 3.25)
REFUSED = AttemptResult(EventState.FAILED, Outcome.CONNECT_ERROR, None, 0.5)

DONE = Settlement(EventState.DONE, OK_200)
RETRY_NOW = Settlement(EventState.QUEUED, FAILED_500, retry_in=0.0, error="HTTP 500")
RETRY_LATER = Settlement(EventState.QUEUED, FAILED_500, retry_in=3600.0, error="HTTP 500")
DEAD = Settlement(EventState.DEAD, FAILED_500, error="max_attempts")


# == the stores under contract ===============================================================


@pytest.fixture
def store(every_store: Store) -> Store:
    return every_store


@pytest.fixture
def backdoor(store: Store, request: pytest.FixtureRequest) -> Backdoor:
    if isinstance(store, MemoryStore):
        return MemoryBackdoor(store)
    if isinstance(store, SQLiteStore):
        return SqliteBackdoor(store.path)
    return pg_backdoor(request)


@pytest.fixture
async def second(store: Store, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Another handle on the same database, as a second proxy process has: another pool
    (PostgreSQL), another connection to the file (SQLite), the same store (memory)."""
    other: Store
    if isinstance(store, MemoryStore):
        yield store
        return
    if isinstance(store, SQLiteStore):
        other = await SQLiteStore.open(store.path)
    elif isinstance(store, MySQLStore):
        other = await MySQLStore.connect(request.getfixturevalue("mariadb_dsn"), min_size=2,
                                         max_size=8)
    else:
        door = pg_backdoor(request)
        other = await PostgresStore.connect(door.dsn, min_size=2, max_size=8,
                                            partition_interval=door.partition_interval)
    try:
        yield other
    finally:
        await other.close()


async def _row(store: Store, provider: str, event_id: str) -> EventRow:
    row = await store.get(provider, event_id)
    assert row is not None, f"{provider}:{event_id} missing"
    return row


async def _queued(store: Store, *event_ids: str, provider: str = "stripe",
                  order_key: str | None = None) -> None:
    for event_id in event_ids:
        answer = await store.enqueue(provider, event_id, BODY, REQUEST, order_key=order_key)
        assert answer.accepted, event_id


async def _take(store: Store, limit: int = 10, lease: float = LEASE,
                provider: str = "stripe") -> list[QueuedWork]:
    return await store.take_queued(provider, limit, lease, "worker")


def _ids(work: list[QueuedWork]) -> list[str]:
    return [w.event_id for w in work]


async def _one(store: Store, event_id: str, provider: str = "stripe") -> QueuedWork:
    """Take exactly ``event_id`` (it must be the only entry due)."""
    work = await _take(store, provider=provider)
    assert _ids(work) == [event_id]
    return work[0]


async def _until(condition: Callable[[], Awaitable[bool]], what: str, tries: int = 500) -> None:
    """A bounded poll on a condition (≤ 5 s), not a sleep used as a barrier."""
    for _ in range(tries):
        if await condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never: {what}")


# == enqueue =================================================================================


async def test_enqueue_stores_a_queued_row_at_attempt_zero_due_now(store: Store) -> None:
    answer = await store.enqueue("stripe", "evt_1", BODY, REQUEST, order_key="cus_1")

    assert (answer.accepted, answer.row, answer.full) == (True, None, False)
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.body_sha256) == (EventState.QUEUED, 0, BODY)
    assert (row.lease_until, row.outcome, row.response, row.latency_ms) == (None,) * 4
    assert row.updated_at == row.received_at <= row.now
    assert await store.get_payload("stripe", "evt_1") == REQUEST
    entry = await store.queue_entry("stripe", "evt_1")
    assert entry is not None
    assert (entry.provider, entry.event_id, entry.tries) == ("stripe", "evt_1", 0)
    assert (entry.order_key, entry.last_error) == ("cus_1", None)
    assert entry.queued_at == pytest.approx(row.received_at, abs=0.002)
    assert entry.due_at is not None and entry.due_at <= entry.now, "due at once"
    assert await store.queue_entry("stripe", "missing") is None


async def test_enqueue_of_an_existing_event_answers_its_row_and_changes_nothing(
    store: Store,
) -> None:
    await _queued(store, "evt_1")
    other = StoredRequest("POST", "/other", (), b"other")

    again = await store.enqueue("stripe", "evt_1", b"x" * 32, other, order_key="k")

    assert (again.accepted, again.full) == (False, False)
    assert again.row is not None
    assert (again.row.state, again.row.attempt, again.row.body_sha256) == (
        EventState.QUEUED, 0, BODY)
    assert await store.get_payload("stripe", "evt_1") == REQUEST, "the first request is kept"
    entry = await store.queue_entry("stripe", "evt_1")
    assert entry is not None and entry.order_key is None
    # An event claimed in forward mode is answered as it is, and gets no entry.
    assert (await store.claim("stripe", "evt_fwd", BODY, LEASE, "proxy")).won
    forwarded = await store.enqueue("stripe", "evt_fwd", BODY, REQUEST)
    assert forwarded.row is not None and forwarded.row.state is EventState.PROCESSING
    assert await store.queue_entry("stripe", "evt_fwd") is None
    # The provider is part of the key.
    assert (await store.enqueue("github", "evt_1", BODY, REQUEST)).accepted


async def test_fifty_concurrent_enqueues_of_one_key_accept_exactly_one(
    store: Store, second: Store,
) -> None:
    answers = await asyncio.gather(*(
        (store if i % 2 else second).enqueue("stripe", "evt_race", BODY, REQUEST)
        for i in range(50)))

    assert sum(a.accepted for a in answers) == 1
    assert all(a.row is not None and a.row.state is EventState.QUEUED
               for a in answers if not a.accepted)
    assert not any(a.full for a in answers)
    assert _ids(await _take(store)) == ["evt_race"], "one entry"


async def test_a_full_queue_refuses_new_events_and_still_answers_known_ones(
    store: Store,
) -> None:
    for event_id in ("evt_1", "evt_2"):
        assert (await store.enqueue("stripe", event_id, BODY, REQUEST, max_depth=2)).accepted

    full = await store.enqueue("stripe", "evt_3", BODY, REQUEST, max_depth=2)

    assert (full.accepted, full.row, full.full) == (False, None, True)
    assert await store.get("stripe", "evt_3") is None, "nothing written"
    assert await store.queue_entry("stripe", "evt_3") is None
    known = await store.enqueue("stripe", "evt_1", BODY, REQUEST, max_depth=2)
    assert (known.accepted, known.full) == (False, False), "a redelivery is never refused"
    assert known.row is not None and known.row.event_id == "evt_1"
    assert (await store.enqueue("github", "evt_3", BODY, REQUEST, max_depth=2)).accepted
    assert (await store.enqueue("stripe", "evt_3", BODY, REQUEST)).accepted, "no max_depth"
    assert (await store.enqueue("stripe", "evt_4", BODY, REQUEST, max_depth=1000)).accepted

    # In flight still counts; dead does not.
    assert len(await _take(store, limit=10)) == 4
    assert (await store.enqueue("stripe", "evt_5", BODY, REQUEST, max_depth=4)).full
    assert await store.settle_queued("stripe", "evt_1", 1, DEAD)
    assert (await store.enqueue("stripe", "evt_5", BODY, REQUEST, max_depth=4)).accepted


async def test_the_stored_request_round_trips_byte_exact(store: Store) -> None:
    odd = b'attachment; filename="caf\xe9"'.decode("utf-8", "surrogateescape")  # not UTF-8
    request = StoredRequest(
        method="PUT", path="/hooks/ü?x=1&y=%00",
        headers=(("X-Name", odd), ("X-Ünicode", "välue ✓"), ("Empty", ""), ("X-Dup", "1"),
                 ("X-Dup", "2")),
        body=bytes(range(256)) * 4)
    event_id = "évt_😀_" + "x" * 200
    assert (await store.enqueue("acme", event_id, BODY, request)).accepted

    (work,) = await _take(store, provider="acme")

    assert work.request == request
    assert (work.provider, work.event_id) == ("acme", event_id)
    assert await store.get_payload("acme", event_id) == request


async def test_every_row_read_tells_whether_the_event_is_in_a_queue(store: Store) -> None:
    """``EventRow.in_queue``: the row has a queue entry (waiting, in flight with a worker, or
    dead), from every verb that answers rows, and in the same read as the row. A forward-mode
    row never has one, nor does a queued event once done (its entry goes)."""
    await _queued(store, "evt_q", "evt_dead", "evt_done")
    assert (await store.claim("stripe", "evt_fwd", BODY, LEASE, "proxy")).row.in_queue is False

    async def facts(event_id: str) -> set[bool]:
        """``in_queue`` as each row-answering verb reads it."""
        read = [await _row(store, "stripe", event_id)]
        read += [r for r in await store.list_events(provider="stripe", limit=100)
                 if r.event_id == event_id]
        enqueued = await store.enqueue("stripe", event_id, BODY, REQUEST)
        claims = await asyncio.gather(*(store.claim("stripe", event_id, BODY, LEASE, f"p{n}")
                                        for n in range(8)))  # together: a batch, too
        assert enqueued.row is not None and not any(c.won for c in claims)
        read += [enqueued.row, *(c.row for c in claims)]
        assert len(read) == 11 and {r.event_id for r in read} == {event_id}
        return {r.in_queue for r in read}

    assert await facts("evt_q") == {True}, "waiting"
    assert await facts("evt_fwd") == {False}, "claimed in forward mode"
    taken = {w.event_id: w for w in await _take(store, limit=3)}
    assert await facts("evt_q") == {True}, "in flight with a worker"
    assert await store.settle_queued("stripe", "evt_dead", taken["evt_dead"].tries, DEAD)
    assert await facts("evt_dead") == {True}, "dead"
    assert await store.settle_queued("stripe", "evt_done", taken["evt_done"].tries, DONE)
    assert await facts("evt_done") == {False}, "done: the entry is gone"
    assert await store.requeue_dead("stripe", "evt_dead") == ["evt_dead"]
    assert await facts("evt_dead") == {True}, "re-driven"
    assert await store.complete("stripe", "evt_fwd", 1, FAILED_500)
    assert await facts("evt_fwd") == {False}, "failed in forward mode"


# == take ====================================================================================


async def test_take_hands_out_due_entries_in_order_of_acceptance_up_to_the_limit(
    store: Store,
) -> None:
    await _queued(store, *(f"evt_{i}" for i in range(5)))
    await _queued(store, "evt_other", provider="github")

    first = await _take(store, limit=2)
    rest = await _take(store, limit=10)

    assert _ids(first) == ["evt_0", "evt_1"]
    assert _ids(rest) == ["evt_2", "evt_3", "evt_4"]
    assert await _take(store) == [], "all in flight under live leases"
    for work in first + rest:
        assert (work.provider, work.attempt, work.tries, work.round_attempts) == (
            "stripe", 1, 1, 1)
        row = await _row(store, "stripe", work.event_id)
        assert (row.state, row.attempt, row.lease_live) == (EventState.PROCESSING, 1, True)
        assert row.lease_until == pytest.approx(work.now + LEASE, abs=0.01)
        assert work.queued_at == pytest.approx(row.received_at, abs=0.002)
        assert work.queued_at <= work.now
    assert await store.take_queued("stripe", 0, LEASE, "w") == []
    assert _ids(await _take(store, provider="github")) == ["evt_other"]


async def test_take_hands_out_the_earliest_due_first_then_by_acceptance(store: Store) -> None:
    await _queued(store, "evt_a", "evt_b", "evt_c")
    await _take(store)
    # evt_c, accepted last, is due first: settled first, and the clock has moved on since.
    assert await store.settle_queued("stripe", "evt_c", 1, RETRY_NOW)
    c = await store.queue_entry("stripe", "evt_c")
    assert c is not None and c.due_at is not None
    due_c = c.due_at

    async def later() -> bool:
        entry = await store.queue_entry("stripe", "evt_c")
        return entry is not None and entry.now > due_c

    await _until(later, "the store's clock passes evt_c's due time")
    assert await store.settle_queued("stripe", "evt_a", 1, RETRY_NOW)
    assert await store.settle_queued("stripe", "evt_b", 1, RETRY_NOW)

    assert _ids(await _take(store, limit=1)) == ["evt_c"]
    assert _ids(await _take(store)) == ["evt_a", "evt_b"]


async def test_take_never_hands_out_an_entry_not_yet_due(store: Store) -> None:
    await _queued(store, "evt_1")
    await _one(store, "evt_1")
    assert await store.settle_queued("stripe", "evt_1", 1, RETRY_LATER)

    assert await _take(store) == []
    entry = await store.queue_entry("stripe", "evt_1")
    assert entry is not None and entry.due_at is not None
    assert entry.due_at == pytest.approx(entry.now + 3600, abs=5)


async def test_concurrent_takers_on_two_stores_share_out_every_entry_once(
    store: Store, second: Store,
) -> None:
    for round_ in range(4):
        provider = f"race_{round_}"
        for i in range(20):
            assert (await store.enqueue(provider, f"evt_{i}", BODY, REQUEST)).accepted

        batches = await asyncio.gather(*(
            (store if i % 2 else second).take_queued(provider, 5, LEASE, f"worker-{i}")
            for i in range(8)))

        taken = [w.event_id for batch in batches for w in batch]
        assert len(taken) == len(set(taken)), f"an entry was taken twice: {sorted(taken)}"
        assert set(taken) == {f"evt_{i}" for i in range(20)}
        assert all(w.tries == 1 and w.attempt == 1 for batch in batches for w in batch)
        assert await store.take_queued(provider, 20, LEASE, "late") == []


async def test_an_expired_lease_makes_the_entry_due_again_and_fences_the_old_take(
    store: Store,
) -> None:
    await _queued(store, "evt_1")
    crashed = await _take(store, lease=0)  # its worker crashed: the lease ends at once
    assert [(w.attempt, w.tries) for w in crashed] == [(1, 1)]
    assert await store.stuck_counts() == {}, "a take picks it up, not an operator"

    (again,) = await _take(store)

    assert (again.event_id, again.attempt, again.tries, again.round_attempts) == (
        "evt_1", 2, 2, 2)
    assert await store.settle_queued("stripe", "evt_1", 1, DONE) is False, "superseded"
    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_live) == (EventState.PROCESSING, 2, True)
    assert await store.settle_queued("stripe", "evt_1", 2, DONE) is True
    assert await store.settle_queued("stripe", "evt_1", 2, DONE) is False, "written once"
    assert await store.settle_queued("stripe", "evt_1", 1, DEAD) is False
    assert (await _row(store, "stripe", "evt_1")).state is EventState.DONE


async def test_a_lease_that_runs_out_while_waiting_is_taken_again(store: Store) -> None:
    await _queued(store, "evt_1")
    await _take(store, lease=0.2)
    assert await _take(store) == [], "the lease is live"

    taken: list[QueuedWork] = []

    async def due_again() -> bool:
        taken.extend(await _take(store))
        return bool(taken)

    await _until(due_again, "the 0.2 s lease runs out")
    assert [(w.event_id, w.tries, w.attempt) for w in taken] == [("evt_1", 2, 2)]


# == settle ==================================================================================


async def test_settle_done_records_the_result_and_removes_the_entry(store: Store) -> None:
    await _queued(store, "evt_1")
    work = await _one(store, "evt_1")

    assert await store.settle_queued("stripe", "evt_1", work.tries, DONE) is True

    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_until) == (EventState.DONE, 1, None)
    assert (row.outcome, row.response, row.latency_ms) == (
        Outcome.RESPONSE, OK_200.response, 12.5)
    assert await store.queue_entry("stripe", "evt_1") is None
    assert await store.get_payload("stripe", "evt_1") == REQUEST
    assert await _take(store) == []
    again = await store.enqueue("stripe", "evt_1", BODY, REQUEST)
    assert again.row is not None and again.row.state is EventState.DONE, "done stays done"


async def test_settle_queued_writes_the_try_and_makes_the_entry_due_after_retry_in(
    store: Store,
) -> None:
    await _queued(store, "evt_now", "evt_later")
    await _take(store)

    assert await store.settle_queued("stripe", "evt_later", 1, RETRY_LATER)
    assert await store.settle_queued("stripe", "evt_now", 1, RETRY_NOW)

    for event_id in ("evt_now", "evt_later"):
        row = await _row(store, "stripe", event_id)
        assert (row.state, row.attempt, row.lease_until) == (EventState.QUEUED, 1, None)
        assert (row.outcome, row.response, row.latency_ms) == (
            Outcome.RESPONSE, FAILED_500.response, 3.25), "operators see the last try"
        entry = await store.queue_entry("stripe", event_id)
        assert entry is not None and (entry.tries, entry.last_error) == (1, "HTTP 500")
    (work,) = await _take(store)
    assert (work.event_id, work.attempt, work.tries, work.round_attempts) == (
        "evt_now", 2, 2, 2)
    row = await _row(store, "stripe", "evt_now")
    assert (row.outcome, row.response) == (None, None), "a new try clears the last one"


async def test_a_try_that_could_not_reach_the_app_gives_its_attempt_back(store: Store) -> None:
    await _queued(store, "evt_1", "evt_2")
    await _take(store)

    unreachable = Settlement(EventState.QUEUED, REFUSED, retry_in=0.0, reached=False,
                             error="connect refused")
    assert await store.settle_queued("stripe", "evt_1", 1, unreachable)
    gave_up = Settlement(EventState.DEAD, REFUSED, reached=False, error="max_age")
    assert await store.settle_queued("stripe", "evt_2", 1, gave_up)

    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.outcome) == (
        EventState.QUEUED, 0, Outcome.CONNECT_ERROR)
    assert (await _row(store, "stripe", "evt_2")).attempt == 0
    work = await _one(store, "evt_1")
    assert (work.attempt, work.tries, work.round_attempts) == (1, 2, 1), "the same number"


async def test_settle_dead_keeps_a_dead_entry_and_the_row_dead(store: Store) -> None:
    await _queued(store, "evt_1")
    await _one(store, "evt_1")

    assert await store.settle_queued("stripe", "evt_1", 1, DEAD) is True

    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt, row.lease_until) == (EventState.DEAD, 1, None)
    assert row.response == FAILED_500.response
    entry = await store.queue_entry("stripe", "evt_1")
    assert entry is not None
    assert (entry.due_at, entry.tries, entry.last_error) == (None, 1, "max_attempts")
    assert await _take(store) == []
    assert await store.settle_queued("stripe", "evt_1", 1, DONE) is False, "not in flight"
    assert [r.event_id for r in await store.list_events(state=EventState.DEAD)] == ["evt_1"]


async def test_settle_needs_the_take_in_flight(store: Store) -> None:
    await _queued(store, "evt_1")
    assert await store.settle_queued("stripe", "evt_1", 0, DONE) is False, "never taken"
    assert await store.settle_queued("stripe", "missing", 1, DONE) is False
    await _one(store, "evt_1")
    assert await store.settle_queued("stripe", "evt_1", 2, DONE) is False, "no such take"
    with pytest.raises(ValueError):
        await store.settle_queued("stripe", "evt_1", 1,
                                  Settlement(EventState.PROCESSING, OK_200))
    assert (await _row(store, "stripe", "evt_1")).state is EventState.PROCESSING
    assert await store.settle_queued("stripe", "evt_1", 1, DONE) is True


# == ordering ================================================================================


async def test_an_order_key_holds_later_events_back_while_an_earlier_one_is_pending(
    store: Store,
) -> None:
    await _queued(store, "a1", "a2", order_key="cus_a")
    await _queued(store, "b1", order_key="cus_b")
    await _queued(store, "free")
    await _queued(store, "a3", order_key="cus_a")

    assert _ids(await _take(store)) == ["a1", "b1", "free"], "one per key, unkeyed in parallel"
    assert await _take(store) == [], "a2 waits while a1 is in flight"

    assert await store.settle_queued("stripe", "a1", 1, RETRY_NOW)
    assert _ids(await _take(store)) == ["a1"], "a2 waits while a1 waits for its retry"
    assert await store.settle_queued("stripe", "a1", 2, DONE)
    assert _ids(await _take(store)) == ["a2"]
    assert await store.settle_queued("stripe", "a2", 1, DONE)
    assert _ids(await _take(store)) == ["a3"]


async def test_a_dead_event_no_longer_holds_its_key_back_until_re_driven(store: Store) -> None:
    await _queued(store, "a1", "a2", "a3", order_key="cus_a")
    await _one(store, "a1")
    assert await store.settle_queued("stripe", "a1", 1, DEAD)

    work = await _one(store, "a2")

    # Re-driven while a2 is in flight: a1 keeps its place (before a3), but does not overtake
    # a2, which is being delivered: one event of a key at a time.
    assert await store.requeue_dead("stripe", "a1") == ["a1"]
    assert await _take(store) == []
    assert await store.settle_queued("stripe", "a2", work.tries, DONE)
    assert _ids(await _take(store)) == ["a1"]
    assert await store.settle_queued("stripe", "a1", 2, DONE)
    assert _ids(await _take(store)) == ["a3"]


# == re-drive ================================================================================


async def _dead(store: Store, *event_ids: str, provider: str = "stripe") -> None:
    await _queued(store, *event_ids, provider=provider)
    work = await _take(store, provider=provider, limit=100)
    assert sorted(_ids(work)) == sorted(event_ids)
    for w in work:
        assert await store.settle_queued(provider, w.event_id, w.tries, DEAD)


async def test_requeue_dead_re_drives_one_event_with_a_fresh_budget(store: Store) -> None:
    await _dead(store, "evt_1", "evt_2")
    await _dead(store, "evt_1", provider="github")
    before = await store.queue_entry("stripe", "evt_1")
    assert before is not None

    assert await store.requeue_dead("stripe", "evt_1") == ["evt_1"]

    row = await _row(store, "stripe", "evt_1")
    assert (row.state, row.attempt) == (EventState.QUEUED, 1)
    entry = await store.queue_entry("stripe", "evt_1")
    assert entry is not None and entry.due_at is not None and entry.due_at <= entry.now
    assert entry.queued_at > before.queued_at, "max_age counts from the re-drive"
    assert (entry.tries, entry.last_error) == (1, "max_attempts")
    assert (await _row(store, "stripe", "evt_2")).state is EventState.DEAD
    assert (await _row(store, "github", "evt_1")).state is EventState.DEAD
    assert await store.requeue_dead("stripe", "evt_1") == [], "no longer dead"
    assert await store.requeue_dead("stripe", "missing") == []

    work = await _one(store, "evt_1")
    assert (work.attempt, work.tries, work.round_attempts) == (2, 2, 1)
    assert work.queued_at == pytest.approx(entry.queued_at)


async def test_requeue_dead_in_bulk_oldest_accepted_first_within_the_limit_and_age(
    store: Store, backdoor: Backdoor,
) -> None:
    await _dead(store, "evt_0", "evt_1", "evt_2", "evt_3")
    await _queued(store, "evt_waiting")
    await backdoor.backdate("stripe", "evt_3", 100)

    assert await store.requeue_dead("stripe", older_than_seconds=1000) == []
    assert await store.requeue_dead("stripe", older_than_seconds=50) == ["evt_3"]
    assert await store.requeue_dead("stripe", limit=2) == ["evt_0", "evt_1"]
    assert await store.requeue_dead("stripe", limit=0) == []
    assert await store.requeue_dead("github") == []
    assert await store.requeue_dead("stripe") == ["evt_2"]
    assert await store.requeue_dead("stripe") == []
    work = await _take(store, limit=100)
    assert sorted(_ids(work)) == ["evt_0", "evt_1", "evt_2", "evt_3", "evt_waiting"]
    assert {w.round_attempts for w in work} == {1}


# == the forward-mode verbs and retention leave queued events alone =========================


async def test_take_over_release_and_complete_never_touch_a_queued_event(
    store: Store,
) -> None:
    await _queued(store, "evt_waiting", "evt_crashed")
    await _take(store, limit=1)  # evt_waiting, live lease
    assert await store.settle_queued("stripe", "evt_waiting", 1, RETRY_LATER)
    await _take(store, lease=0)  # evt_crashed: processing, lease expired
    rows = {e: await _row(store, "stripe", e) for e in ("evt_waiting", "evt_crashed")}

    for event_id in rows:
        assert await store.take_over("stripe", event_id, LEASE, "proxy") is None
        assert await store.release("stripe", event_id) is False
        assert await store.release("stripe", event_id, force=True) is False
        for attempt in (0, 1, 2):
            assert await store.complete("stripe", event_id, attempt, OK_200) is False
            assert await store.complete("stripe", event_id, attempt, FAILED_500) is False
    assert await store.stuck_counts() == {}

    for event_id, before in rows.items():
        after = await _row(store, "stripe", event_id)
        assert (after.state, after.attempt, after.lease_until, after.response) == (
            before.state, before.attempt, before.lease_until, before.response)
    assert _ids(await _take(store)) == ["evt_crashed"]


async def test_purge_keeps_queued_events_until_delivered_or_dead(
    store: Store, backdoor: Backdoor,
) -> None:
    await _queued(store, "retrying", "in_flight", "crashed", "dead", "done")
    assert len(await _take(store, limit=100)) == 5
    assert await store.settle_queued("stripe", "retrying", 1, RETRY_LATER)
    assert await store.settle_queued("stripe", "dead", 1, DEAD)
    assert await store.settle_queued("stripe", "done", 1, DONE)
    assert await store.settle_queued("stripe", "crashed", 1, RETRY_NOW)
    assert _ids(await _take(store, lease=0)) == ["crashed"]  # and its worker crashed
    await _queued(store, "waiting")
    for event_id in ("waiting", "retrying", "in_flight", "crashed", "dead", "done"):
        await backdoor.backdate("stripe", event_id, 1000)

    assert await store.purge("stripe", 100, 100) == 2

    left = {r.event_id for r in await store.list_events(provider="stripe")}
    assert left == {"waiting", "retrying", "in_flight", "crashed"}
    assert await store.queue_entry("stripe", "dead") is None, "deleted with its row"
    stats = (await store.queue_stats())["stripe"]
    assert (stats.pending, stats.dead) == (4, 0)
    assert await store.requeue_dead("stripe") == []
    assert await store.purge("stripe", 100, 100) == 0


# == reading the queue =======================================================================


async def test_queue_stats_counts_waiting_in_flight_and_dead_per_provider(
    store: Store,
) -> None:
    assert await store.queue_stats() == {}
    await _queued(store, "evt_1", "evt_2", "evt_3", "evt_4")
    await _queued(store, "evt_1", provider="github")
    await _take(store, limit=3)
    assert await store.settle_queued("stripe", "evt_1", 1, DEAD)
    assert await store.settle_queued("stripe", "evt_2", 1, DONE)

    stats = await store.queue_stats()

    assert set(stats) == {"stripe", "github"}
    assert (stats["stripe"].pending, stats["stripe"].dead) == (2, 1), "evt_3 and evt_4"
    assert (stats["github"].pending, stats["github"].dead) == (1, 0)
    for each in stats.values():
        assert 0 <= each.oldest_pending_seconds < 60
    assert _ids(await _take(store, provider="github")) == ["evt_1"]
    assert await store.settle_queued("github", "evt_1", 1, DONE)
    assert set(await store.queue_stats()) == {"stripe"}
    assert await store.requeue_dead("stripe") == ["evt_1"]
    assert (await store.queue_stats())["stripe"].dead == 0


async def test_list_events_filters_by_the_queue_states(store: Store) -> None:
    await _queued(store, "evt_dead", "evt_queued")
    await _take(store, limit=1)
    assert await store.settle_queued("stripe", "evt_dead", 1, DEAD)

    assert [r.event_id for r in await store.list_events(state=EventState.QUEUED)] == [
        "evt_queued"]
    assert [r.event_id for r in await store.list_events(state=EventState.DEAD)] == ["evt_dead"]


@pytest.fixture(params=["sqlite", "memory", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def unnotified_store(request: pytest.FixtureRequest) -> Store:
    backend: Store = request.getfixturevalue(f"{request.param}_store")
    return backend


async def test_stores_without_notifications_listen_until_cancelled(
    unnotified_store: Store,
) -> None:
    store = unnotified_store
    woken: list[str] = []
    listening = asyncio.create_task(store.listen_queue(woken.append))
    for _ in range(10):
        await asyncio.sleep(0)  # let it run: it must not return
    assert not listening.done()
    listening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await listening


# == PostgreSQL: LISTEN/NOTIFY ===============================================================

LISTEN_APP = "webhook-sidecar listen"  # the listening connection's application_name


async def _listen_backends(conn: asyncpg.Connection) -> list[int]:
    """The pids of this database's listening connections whose LISTEN has run."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name = $1 AND query LIKE 'LISTEN %'", LISTEN_APP)
    return [r["pid"] for r in rows]


@pytest.mark.postgres
async def test_postgres_listen_is_woken_by_another_store_and_survives_a_killed_backend(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    woken: asyncio.Queue[str] = asyncio.Queue()
    other = await PostgresStore.connect(pg_dsn, min_size=1, max_size=2)
    admin = await asyncpg.connect(pg_dsn)
    listening = asyncio.create_task(pg_store.listen_queue(woken.put_nowait))
    try:
        with capture_logs() as logs:
            pids: list[int] = []

            async def listens() -> bool:
                pids[:] = await _listen_backends(admin)
                return len(pids) == 1

            await _until(listens, "the store listens")
            first = pids[0]
            assert (await other.enqueue("stripe", "evt_1", BODY, REQUEST)).accepted
            assert await asyncio.wait_for(woken.get(), 5) == "stripe"
            assert not (await other.enqueue("stripe", "evt_1", BODY, REQUEST)).accepted
            assert (await other.enqueue("github", "evt_1", BODY, REQUEST)).accepted
            assert await asyncio.wait_for(woken.get(), 5) == "github", "only inserts wake"

            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)

            async def listens_again() -> bool:
                return await listens() and pids[0] != first

            await _until(listens_again, "the store listens on a new connection")
            assert (await other.enqueue("stripe", "evt_2", BODY, REQUEST)).accepted
            assert await asyncio.wait_for(woken.get(), 5) == "stripe"
            work = await other.take_queued("stripe", 1, LEASE, "w")
            assert await other.settle_queued("stripe", "evt_1", work[0].tries, DEAD)
            assert await other.requeue_dead("stripe") == ["evt_1"]
            assert await asyncio.wait_for(woken.get(), 5) == "stripe", "a re-drive wakes"
        events = [line["event"] for line in logs]
        assert events.count("queue_listen_lost") == 1
        assert events.count("queue_listen_restored") == 1
        assert woken.empty()
    finally:
        listening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await listening
        await other.close()

        async def closed() -> bool:
            return await _listen_backends(admin) == []

        try:
            await _until(closed, "the listening connection is closed when cancelled")
        finally:
            await admin.close()


# == PostgreSQL: a call whose answer was lost is recognised when repeated ====================


@pytest.fixture
async def eater(pg_dsn: str) -> AsyncIterator[ReplyEater]:
    port = urlsplit(pg_dsn).port
    assert port is not None
    async with ReplyEater(port) as relay:  # before the session's server, where the contract runs
        yield relay


@pytest.mark.postgres
@pytest.mark.parametrize("verb", ["enqueue", "take_queued", "settle_queued"])
async def test_postgres_a_queue_write_whose_answer_was_lost_is_recognised_when_repeated(
    pg_store: PostgresStore, pg_dsn: str, eater: ReplyEater, verb: str,
) -> None:
    store = await PostgresStore.connect(eater.relayed(pg_dsn), min_size=1, max_size=2,
                                        statement_cache_size=0)
    try:
        if verb != "enqueue":
            await _queued(store, "evt_1")
        if verb == "settle_queued":
            await _one(store, "evt_1")
        eater.arm({"enqueue": b"pg_notify('webhook_sidecar_queue', entry.provider)",
                   "take_queued": b"tries = q.tries + 1",
                   "settle_queued": b"THEN e.attempt ELSE e.attempt - 1"}[verb])
        # A plain repeat would answer "existing" / take nothing / "superseded".
        if verb == "enqueue":
            assert (await store.enqueue("stripe", "evt_1", BODY, REQUEST)).accepted
        elif verb == "take_queued":
            (work,) = await _take(store)
            assert (work.event_id, work.attempt, work.tries) == ("evt_1", 1, 1)
            assert work.request == REQUEST
        else:
            assert await store.settle_queued("stripe", "evt_1", 1, RETRY_LATER) is True
        assert eater.fired.is_set(), "the first run's answer was swallowed"
    finally:
        await store.close()
    row = await _row(pg_store, "stripe", "evt_1")
    entry = await pg_store.queue_entry("stripe", "evt_1")
    assert entry is not None
    expected = {"enqueue": (EventState.QUEUED, 0, 0), "take_queued": (EventState.PROCESSING, 1, 1),
                "settle_queued": (EventState.QUEUED, 1, 1)}[verb]
    assert (row.state, row.attempt, entry.tries) == expected
    # The repeated settle records its try once (the first run's record).
    timeline = [(a.attempt, a.state, a.error) for a in await pg_store.attempts("stripe",
                                                                                 "evt_1")]
    assert timeline == ([(1, EventState.QUEUED, "HTTP 500")] if verb == "settle_queued"
                        else [])


@pytest.mark.postgres
async def test_postgres_take_skips_rows_another_session_holds(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    await _queued(pg_store, "evt_1", "evt_2")
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM webhook_event WHERE provider = 'stripe'"
                               " AND event_id = 'evt_1' FOR UPDATE")
            assert _ids(await _take(pg_store)) == ["evt_2"], "never waits"
        assert _ids(await _take(pg_store)) == ["evt_1"]
    finally:
        await conn.close()


async def test_sqlite_queue_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    store = await SQLiteStore.open(path)
    try:
        await _dead(store, "evt_2")
        await _queued(store, "evt_1", order_key="k")
    finally:
        await store.close()
    store = await SQLiteStore.open(path)
    try:
        stats = (await store.queue_stats())["stripe"]
        assert (stats.pending, stats.dead) == (1, 1)
        assert (await _one(store, "evt_1")).request == REQUEST
    finally:
        await store.close()


@pytest.mark.postgres
async def test_ordered_takes_see_a_concurrent_take_of_the_same_key(
    pg_store: PostgresStore, pg_dsn: str,
) -> None:
    """A re-driven dead event must not overtake a later event of its key whose take (in
    another process) has not committed yet: ordered takes of a provider run one at a time, so
    the second sees the first's lease. Without the lock, it takes A beside B."""
    await _queued(pg_store, "A", "B", order_key="k")
    (first,) = await _take(pg_store)
    assert first.event_id == "A"
    assert await pg_store.settle_queued("stripe", "A", first.tries, DEAD)
    other = await asyncpg.connect(pg_dsn)  # another process, mid-take of B
    try:
        async with other.transaction():
            lock = statement("postgres", "advisory_lock")
            await other.execute(lock.sql, *lock.positional(
                {"lock_name": "webhook_sidecar_queue:stripe"}))
            take = statement("postgres", "take_queued")
            taken = await other.fetch(take.sql, *take.positional(
                {"provider": "stripe", "limit": 10, "lease_seconds": LEASE, "owner": "P2#1"}))
            assert [r["event_id"] for r in taken] == ["B"]
            assert await pg_store.requeue_dead("stripe", "A") == ["A"]
            ours = asyncio.create_task(pg_store.take_queued("stripe", 10, LEASE, "P1",
                                                            ordered=True))
            await _until_waiting_on_a_lock(other, urlsplit(pg_dsn).path.lstrip("/"))
            assert not ours.done()
        assert _ids(await asyncio.wait_for(ours, 10)) == []  # B is in flight: A waits
    finally:
        await other.close()
    assert (await _row(pg_store, "stripe", "A")).state is EventState.QUEUED


async def _until_waiting_on_a_lock(conn: asyncpg.Connection, database: str) -> None:
    """Until another session of ``database`` waits for a lock (bounded)."""
    for _ in range(500):
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> "
            "pg_backend_pid() AND wait_event_type = 'Lock'", database)
        if waiting:
            return
        await asyncio.sleep(0.01)
    pytest.fail("no session of the test database came to wait for the advisory lock")
